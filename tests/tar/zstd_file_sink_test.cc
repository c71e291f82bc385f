// Tests for ZstdFileSink: one checksummed frame whatever the calls, levels,
// and errors as the system reports them.
#include "tar/zstd_file_sink.h"

#include <unistd.h>
#include <zstd.h>

#include <cerrno>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"

namespace wds {
namespace {

using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;

// Data is `n` bytes, half repetitive text and half noise.
std::string Data(size_t n) {
  std::string out;
  uint32_t x = 1;
  while (out.size() < n) {
    out += "sample " + std::to_string(out.size() % 977) + "\n";
    for (int i = 0; i < 16; ++i) out += static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
  }
  out.resize(n);
  return out;
}

// WriteFrame writes `data` to `path` in pieces of the given sizes (cycled).
void WriteFrame(const std::string& path, const std::string& data, int level,
                const std::vector<size_t>& pieces) {
  absl::StatusOr<std::unique_ptr<ZstdFileSink>> sink = ZstdFileSink::Create(path, level);
  ASSERT_TRUE(sink.ok()) << sink.status();
  size_t done = 0;
  for (size_t i = 0; done < data.size(); ++i) {
    const size_t n = std::min(pieces[i % pieces.size()], data.size() - done);
    ASSERT_TRUE((*sink)->Write(std::string_view(data).substr(done, n))) << (*sink)->error_message();
    done += n;
  }
  ASSERT_TRUE((*sink)->Finish()) << (*sink)->error_message();
}

// Decompress decodes one whole frame of at most `capacity` bytes.
std::string Decompress(const std::string& frame, size_t capacity) {
  std::string out(capacity, '\0');
  const size_t n = ZSTD_decompress(out.data(), out.size(), frame.data(), frame.size());
  EXPECT_FALSE(ZSTD_isError(n)) << ZSTD_getErrorName(n);
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

TEST(ZstdFileSinkTest, WritesOneFrameWithAChecksumWhateverThePieces) {
  TempDir dir;
  const std::string data = Data(1 << 20);
  for (const std::vector<size_t>& pieces :
       {std::vector<size_t>{1 << 20}, {1, 7, 512, 10240, 200000}}) {
    const std::string path = dir.path() + "/a.zst";
    WriteFrame(path, data, -1, pieces);
    const std::string frame = ReadFile(path);
    ASSERT_GT(frame.size(), 5u);
    EXPECT_EQ(ZSTD_findFrameCompressedSize(frame.data(), frame.size()), frame.size());
    EXPECT_EQ(frame[4] & 0x04, 0x04);  // Content_Checksum_flag (RFC 8878, 3.1.1.1.1)
    EXPECT_LT(frame.size(), data.size());
    EXPECT_TRUE(Decompress(frame, data.size()) == data) << pieces.size() << " piece sizes";
  }
}

TEST(ZstdFileSinkTest, NothingWrittenIsAnEmptyFrame) {
  TempDir dir;
  const std::string path = dir.path() + "/empty.zst";
  WriteFrame(path, "", -1, {1});
  const std::string frame = ReadFile(path);
  EXPECT_EQ(frame.substr(0, 4), "\x28\xb5\x2f\xfd");
  EXPECT_EQ(Decompress(frame, 1), "");
}

TEST(ZstdFileSinkTest, SameBytesGiveTheSameFrameAndNegativeLevelsAreLevelThree) {
  TempDir dir;
  const std::string data = Data(300000);
  WriteFrame(dir.path() + "/default.zst", data, -1, {4096});
  WriteFrame(dir.path() + "/again.zst", data, -1, {4096});
  WriteFrame(dir.path() + "/three.zst", data, 3, {4096});
  WriteFrame(dir.path() + "/nineteen.zst", data, 19, {4096});
  const std::string frame = ReadFile(dir.path() + "/default.zst");
  EXPECT_EQ(frame, ReadFile(dir.path() + "/again.zst"));
  EXPECT_EQ(frame, ReadFile(dir.path() + "/three.zst"));
  EXPECT_NE(frame, ReadFile(dir.path() + "/nineteen.zst"));
  EXPECT_TRUE(Decompress(ReadFile(dir.path() + "/nineteen.zst"), data.size()) == data);
}

TEST(ZstdFileSinkTest, LevelAboveTheMaximumIsInvalidArgumentAndCreatesNothing) {
  TempDir dir;
  const std::string path = dir.path() + "/a.zst";
  absl::StatusOr<std::unique_ptr<ZstdFileSink>> sink = ZstdFileSink::Create(path, 23);
  EXPECT_EQ(sink.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sink.status().message(), path + ": compression level 23 is out of range");
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_TRUE(ZstdFileSink::Create(path, 22).ok());
}

TEST(ZstdFileSinkTest, UncreatablePathIsTheSystemsErrorNamingIt) {
  absl::StatusOr<std::unique_ptr<ZstdFileSink>> sink =
      ZstdFileSink::Create("/nonexistent-dir/a.zst", 3);
  EXPECT_EQ(sink.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(sink.status().message()),
              HasSubstr("/nonexistent-dir/a.zst: cannot create"));
  EXPECT_THAT(std::string(sink.status().message()), HasSubstr("No such file or directory"));
}

TEST(ZstdFileSinkTest, FailedWriteIsReportedByFinishOrWriteAndIsFinal) {
  // /dev/full fails every write with ENOSPC. A little data stays in zstd's
  // block buffer until Finish writes it.
  absl::StatusOr<std::unique_ptr<ZstdFileSink>> small = ZstdFileSink::Create("/dev/full", 3);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_TRUE((*small)->Write("a few bytes"));
  EXPECT_FALSE((*small)->Finish());
  EXPECT_EQ((*small)->error_number(), ENOSPC);
  EXPECT_EQ((*small)->error_message(), "Write error");

  // More than a block (128 KiB) is written out, and fails, in Write.
  absl::StatusOr<std::unique_ptr<ZstdFileSink>> large = ZstdFileSink::Create("/dev/full", 3);
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_FALSE((*large)->Write(Data(1 << 20)));
  EXPECT_EQ((*large)->error_number(), ENOSPC);
  EXPECT_EQ((*large)->error_message(), "Write error");
  EXPECT_FALSE((*large)->Write("x"));
  EXPECT_FALSE((*large)->Finish());
  EXPECT_EQ((*large)->error_number(), ENOSPC);
}

}  // namespace
}  // namespace wds
