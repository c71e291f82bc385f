// Tests for the compressing sinks of TarWriter: ZstdFileSink (one
// checksummed frame whatever the calls, levels and threads) and GzipFileSink
// (one gzip member, the same bytes whatever the calls and threads), and
// errors as the system reports them.
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tar/gzip_file_sink.h"
#include "tar/zstd_file_sink.h"
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

// WriteAll writes `data` to `sink` in pieces of the given sizes (cycled),
// then finishes it.
void WriteAll(absl::StatusOr<std::unique_ptr<FileSink>> sink, const std::string& data,
              const std::vector<size_t>& pieces) {
  ASSERT_TRUE(sink.ok()) << sink.status();
  size_t done = 0;
  for (size_t i = 0; done < data.size(); ++i) {
    const size_t n = std::min(pieces[i % pieces.size()], data.size() - done);
    ASSERT_TRUE((*sink)->Write(std::string_view(data).substr(done, n))) << (*sink)->error_message();
    done += n;
  }
  ASSERT_TRUE((*sink)->Finish()) << (*sink)->error_message();
}

// WriteFrame writes `data` to `path` as a zstd frame, in pieces.
void WriteFrame(const std::string& path, const std::string& data, int level,
                const std::vector<size_t>& pieces, int threads = 1) {
  WriteAll(ZstdFileSink::Create(path, level, threads), data, pieces);
}

// WriteGzip writes `data` to `path` as a gzip member, in pieces.
void WriteGzip(const std::string& path, const std::string& data, int level, int threads,
               const std::vector<size_t>& pieces = {GzipFileSink::kBlockSize}) {
  WriteAll(GzipFileSink::Create(path, level, threads), data, pieces);
}

// Gunzip inflates the single gzip member `file` must be (nothing after it).
std::string Gunzip(const std::string& file) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 16 + MAX_WBITS), Z_OK);  // gzip only
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(file.data()));
  z.avail_in = static_cast<uInt>(file.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    char chunk[65536];
    z.next_out = reinterpret_cast<Bytef*>(chunk);
    z.avail_out = sizeof(chunk);
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(chunk, sizeof(chunk) - z.avail_out);
  }
  EXPECT_EQ(rc, Z_STREAM_END) << (z.msg ? z.msg : "");
  EXPECT_EQ(z.avail_in, 0u) << "bytes after the member";
  inflateEnd(&z);
  return out;
}

// OneStreamGzip is zlib's gzip of `data` as one deflate stream, at `level`.
std::string OneStreamGzip(const std::string& data, int level) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
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

TEST(ZstdFileSinkTest, ThreadsFromTwoOnGiveOneFrame) {
  TempDir dir;
  const std::string data = Data(3 << 20);
  for (int threads : {2, 3, 8}) {
    WriteFrame(dir.path() + "/t" + std::to_string(threads) + ".zst", data, -1, {100000}, threads);
  }
  const std::string frame = ReadFile(dir.path() + "/t2.zst");
  EXPECT_TRUE(Decompress(frame, data.size()) == data);
  // zstd(1) on two threads writes the same frame from a pipe (no size known).
  dir.Write("data", data);
  ASSERT_EQ(testing::RunShell("cd " + dir.path() + " && zstd -q -T2 -c < data > cli.zst"), 0);
  EXPECT_TRUE(ReadFile(dir.path() + "/cli.zst") == frame);
  EXPECT_EQ(ReadFile(dir.path() + "/t3.zst"), frame);
  EXPECT_EQ(ReadFile(dir.path() + "/t8.zst"), frame);
  absl::StatusOr<std::unique_ptr<ZstdFileSink>> twice =
      ZstdFileSink::Create(dir.path() + "/twice.zst", 3, 2);
  ASSERT_TRUE(twice.ok()) << twice.status();
  ASSERT_TRUE((*twice)->Write(data));
  ASSERT_TRUE((*twice)->Finish());
  EXPECT_TRUE((*twice)->Finish());
  EXPECT_EQ(ReadFile(dir.path() + "/twice.zst"), frame);
  for (int threads : {0, 257}) {
    absl::Status bad = ZstdFileSink::Create(dir.path() + "/bad.zst", 3, threads).status();
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.message(), dir.path() +
                                 "/bad.zst: compression threads must be from 1 to 256, "
                                 "got " +
                                 std::to_string(threads));
  }
}

constexpr size_t kBlock = GzipFileSink::kBlockSize;

TEST(GzipFileSinkTest, OneMemberOfTheDataWhateverTheSizePiecesAndThreads) {
  TempDir dir;
  const std::string path = dir.path() + "/a.gz";
  for (size_t size : {size_t{0}, size_t{1}, kBlock - 1, kBlock, kBlock + 1, 3 * kBlock + 17,
                      size_t{(1 << 20) + 5}}) {
    const std::string data = Data(size);
    std::string first;
    for (int threads : {1, 2, 3, 8}) {
      for (const std::vector<size_t>& pieces :
           {std::vector<size_t>{kBlock}, {1, 7, 512, 10240, 200000}, {size + 1}}) {
        WriteGzip(path, data, -1, threads, pieces);
        const std::string file = ReadFile(path);
        EXPECT_TRUE(Gunzip(file) == data) << size << " bytes, " << threads << " threads";
        if (first.empty()) first = file;
        EXPECT_TRUE(file == first) << size << " bytes, " << threads << " threads";
      }
    }
  }
}

TEST(GzipFileSinkTest, EveryLevelGivesOneMemberTheSameForAnyThreads) {
  TempDir dir;
  const std::string data = Data(3 * kBlock + 5);
  for (int level : {0, 1, 5, 9}) {
    WriteGzip(dir.path() + "/one.gz", data, level, 1);
    WriteGzip(dir.path() + "/four.gz", data, level, 4);
    const std::string file = ReadFile(dir.path() + "/one.gz");
    EXPECT_TRUE(Gunzip(file) == data) << "level " << level;
    EXPECT_TRUE(file == ReadFile(dir.path() + "/four.gz")) << "level " << level;
    if (level == 0) EXPECT_GT(file.size(), data.size());  // stored blocks
  }
}

TEST(GzipFileSinkTest, FinishTwiceWritesNothingMoreAndDroppingAnUnfinishedSinkStopsItsThreads) {
  TempDir dir;
  const std::string path = dir.path() + "/a.gz";
  const std::string data = Data(2 * kBlock);
  absl::StatusOr<std::unique_ptr<GzipFileSink>> sink = GzipFileSink::Create(path, 6, 3);
  ASSERT_TRUE(sink.ok()) << sink.status();
  ASSERT_TRUE((*sink)->Write(data));
  ASSERT_TRUE((*sink)->Finish());
  const std::string file = ReadFile(path);
  EXPECT_TRUE((*sink)->Finish());
  EXPECT_EQ(ReadFile(path), file);
  EXPECT_TRUE(Gunzip(file) == data);
  // Blocks queued and being compressed when the sink goes: its threads stop.
  for (int threads : {2, 8}) {
    absl::StatusOr<std::unique_ptr<GzipFileSink>> dropped =
        GzipFileSink::Create(dir.path() + "/dropped.gz", 9, threads);
    ASSERT_TRUE(dropped.ok()) << dropped.status();
    ASSERT_TRUE((*dropped)->Write(Data(2 * threads * kBlock - 1)));
    dropped->reset();
  }
}

TEST(GzipFileSinkTest, TheHeaderIsGzipNsAndTheTrailerHoldsTheCrcAndSize) {
  TempDir dir;
  const std::string data = Data(2 * kBlock + 99);
  WriteGzip(dir.path() + "/six.gz", data, -1, 2);
  WriteGzip(dir.path() + "/nine.gz", data, 9, 2);
  WriteGzip(dir.path() + "/one.gz", data, 1, 2);
  const std::string file = ReadFile(dir.path() + "/six.gz");
  // ID1 ID2 deflate, no flags, time 0, XFL 0, OS Unix.
  EXPECT_EQ(file.substr(0, 10), std::string("\x1f\x8b\x08\0\0\0\0\0\0\x03", 10));
  EXPECT_EQ(ReadFile(dir.path() + "/nine.gz")[8], 2);  // the slowest compression
  EXPECT_EQ(ReadFile(dir.path() + "/one.gz")[8], 4);   // the fastest
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
  std::string trailer;
  for (uint32_t v : {crc, static_cast<uint32_t>(data.size())}) {
    for (int i = 0; i < 4; ++i) trailer += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  EXPECT_EQ(file.substr(file.size() - 8), trailer);
  EXPECT_TRUE(Gunzip(ReadFile(dir.path() + "/nine.gz")) == data);
}

TEST(GzipFileSinkTest, BlocksPrimedWithTheDataBeforeThemCompressAsOneStreamDoes) {
  TempDir dir;
  // 20 KB that repeat: each block starts with matches that reach back
  // into the block before, which an unprimed block would lose (it would
  // hold the 20 KB again: 16 blocks, some 300 KB more).
  const std::string chunk = Data(20000);
  std::string data;
  while (data.size() < 2 << 20) data += chunk;
  for (int level : {1, 6, 9}) {
    WriteGzip(dir.path() + "/a.gz", data, level, 4);
    const size_t ours = ReadFile(dir.path() + "/a.gz").size();
    const size_t one_stream = OneStreamGzip(data, level).size();
    // What the blocks cost: a sync flush marker and new code tables each.
    EXPECT_LE(ours, one_stream + 16 * 200) << "level " << level << ": " << one_stream;
  }
  WriteGzip(dir.path() + "/default.gz", data, -1, 3);
  WriteGzip(dir.path() + "/six.gz", data, 6, 3);
  EXPECT_EQ(ReadFile(dir.path() + "/default.gz"), ReadFile(dir.path() + "/six.gz"));
}

TEST(GzipFileSinkTest, ALevelOrThreadsOutOfRangeIsInvalidArgumentAndCreatesNothing) {
  TempDir dir;
  const std::string path = dir.path() + "/a.gz";
  absl::Status level = GzipFileSink::Create(path, 10, 1).status();
  EXPECT_EQ(level.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(level.message(), path + ": compression level 10 is out of range");
  for (int threads : {0, -2, 257}) {
    absl::Status bad = GzipFileSink::Create(path, 6, threads).status();
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.message(),
              path + ": compression threads must be from 1 to 256, got " + std::to_string(threads));
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  absl::Status missing = GzipFileSink::Create("/nonexistent-dir/a.gz", 6, 2).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("/nonexistent-dir/a.gz: cannot create"));
}

TEST(GzipFileSinkTest, FailedWriteIsReportedByFinishOrWriteAndIsFinal) {
  for (int threads : {1, 4}) {
    // Less than a block is written out, and fails, in Finish.
    absl::StatusOr<std::unique_ptr<GzipFileSink>> small =
        GzipFileSink::Create("/dev/full", 6, threads);
    ASSERT_TRUE(small.ok()) << small.status();
    EXPECT_TRUE((*small)->Write("a few bytes"));
    EXPECT_FALSE((*small)->Finish());
    EXPECT_EQ((*small)->error_number(), ENOSPC);
    EXPECT_EQ((*small)->error_message(), "Write error");

    // More blocks than are kept in flight are written out, and fail, in Write.
    absl::StatusOr<std::unique_ptr<GzipFileSink>> large =
        GzipFileSink::Create("/dev/full", 6, threads);
    ASSERT_TRUE(large.ok()) << large.status();
    EXPECT_FALSE((*large)->Write(Data(2 * threads * kBlock + 1)));
    EXPECT_EQ((*large)->error_number(), ENOSPC);
    EXPECT_EQ((*large)->error_message(), "Write error");
    EXPECT_FALSE((*large)->Write("x"));
    EXPECT_FALSE((*large)->Finish());
    EXPECT_EQ((*large)->error_number(), ENOSPC);
  }
}

}  // namespace
}  // namespace wds
