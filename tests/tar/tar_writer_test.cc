// Tests for TarWriter: member layout, reproducibility, compression, errors, and
// independent readers (GNU tar, Python's tarfile, zstd(1)).
#include "wds/tar/tar_writer.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/internal/base/strings.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/tar/tar_reader.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::RunCaptured;
using testing::RunShell;
using testing::TempDir;
using testing::ToolRun;

struct ReadMember {
  std::string name;
  std::string data;
  int mode;
  int64_t mtime;
  std::string uname;
  bool operator==(const ReadMember& o) const {
    return name == o.name && data == o.data && mode == o.mode && mtime == o.mtime &&
           uname == o.uname;
  }
};

// ReadAll lists a tar's members with libarchive, independently of TarReader.
std::vector<ReadMember> ReadAll(const std::string& path) {
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  archive_read_support_filter_all(a);
  EXPECT_EQ(archive_read_open_filename(a, path.c_str(), 65536), ARCHIVE_OK);
  std::vector<ReadMember> out;
  archive_entry* e;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    std::string data(static_cast<size_t>(archive_entry_size(e)), '\0');
    archive_read_data(a, data.data(), data.size());
    out.push_back({archive_entry_pathname(e), data, static_cast<int>(archive_entry_perm(e)),
                   archive_entry_mtime(e), archive_entry_uname(e)});
  }
  archive_read_free(a);
  return out;
}

Sample MakeSample(std::string key) {
  Sample s;
  s.Set("__key__", std::move(key));
  s.Set("__url__", std::string("ignored"));
  s.Set("txt", std::string("hello"));
  s.Set("cls", int64_t{7});
  s.Set("jpg", Buffer::Copy(std::string("\xff\xd8\x00\x01", 4)));
  return s;
}

TEST(TarWriterTest, WritesFieldsSortedAsKeyDotFieldWithFixedAttributes) {
  TempDir dir;
  std::string path = dir.path() + "/a.tar";
  auto w = TarWriter::Create(path, {.mtime = 1234});
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Write(MakeSample("dir/s1")).ok());
  ASSERT_TRUE((*w)->WriteMember("extra.bin", "xyz").ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->bytes_written(), 5 + 1 + 4 + 3);
  EXPECT_THAT(ReadAll(path),
              ElementsAre(ReadMember{"dir/s1.cls", "7", 0444, 1234, "bigdata"},
                          ReadMember{"dir/s1.jpg", std::string("\xff\xd8\x00\x01", 4), 0444, 1234,
                                     "bigdata"},
                          ReadMember{"dir/s1.txt", "hello", 0444, 1234, "bigdata"},
                          ReadMember{"extra.bin", "xyz", 0444, 1234, "bigdata"}));
}

TEST(TarWriterTest, SameSamplesGiveIdenticalBytes) {
  TempDir dir;
  for (const char* name : {"/a.tar", "/b.tar"}) {
    auto w = TarWriter::Create(dir.path() + name);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*w)->Write(MakeSample(std::to_string(i))).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  std::string a = ReadFile(dir.path() + "/a.tar");
  EXPECT_EQ(a, ReadFile(dir.path() + "/b.tar"));
  EXPECT_EQ(a.size() % 512, 0u);
}

TEST(TarWriterTest, GzipAndZstdOutputIsCompressedAndReadable) {
  TempDir dir;
  struct Case {
    TarCompression compression;
    std::string magic;
  };
  for (const Case& c :
       {Case{TarCompression::kGzip, "\x1f\x8b"}, Case{TarCompression::kZstd, "\x28\xb5\x2f\xfd"}}) {
    std::string path = dir.path() + "/c.tar";
    auto w = TarWriter::Create(path, {.compression = c.compression, .level = 3});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Write(MakeSample("k")).ok());
    ASSERT_TRUE((*w)->Close().ok());
    EXPECT_EQ(ReadFile(path).substr(0, c.magic.size()), c.magic);
    EXPECT_EQ(ReadAll(path).size(), 3u);
  }
}

// RandomBytes is `n` bytes that no compressor can shrink, the same for the same seed.
std::string RandomBytes(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>((seed = seed * 1664525u + 1013904223u) >> 24);
  return out;
}

// ZstdSamples are three samples of ~250 KB together: more than one zstd block
// (128 KiB), with text that compresses and random bytes that do not.
std::vector<Sample> ZstdSamples() {
  std::vector<Sample> samples;
  for (int i = 0; i < 3; ++i) {
    Sample s;
    s.Set("__key__", "s" + std::to_string(i));
    s.Set("bin", Buffer::Copy(RandomBytes(50000 + 7919 * i, i + 1)));
    std::string text;
    for (int line = 0; line < 1000; ++line) text += "line " + std::to_string(line * i) + "\n";
    s.Set("txt", text);
    samples.push_back(std::move(s));
  }
  return samples;
}

// WriteShard writes `samples` to `path`, expecting success.
void WriteShard(const std::string& path, const std::vector<Sample>& samples,
                TarWriterOptions options) {
  auto w = TarWriter::Create(path, options);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const Sample& s : samples) ASSERT_TRUE((*w)->Write(s).ok());
  ASSERT_TRUE((*w)->Close().ok());
}

// LibraryMembers reads a shard's members with TarReader: name=bytes, in order.
std::vector<std::pair<std::string, std::string>> LibraryMembers(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl(path);
  EXPECT_TRUE(stream.ok()) << stream.status();
  if (!stream.ok()) return out;
  absl::StatusOr<std::unique_ptr<TarReader>> reader = TarReader::Open(*std::move(stream));
  EXPECT_TRUE(reader.ok()) << reader.status();
  while (reader.ok()) {
    absl::StatusOr<std::optional<TarMember>> m = (*reader)->Next();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok() || !m->has_value()) break;
    out.emplace_back((*m)->name, std::string((*m)->data.view()));
  }
  return out;
}

TEST(TarWriterTest, ZstdFrameCarriesAContentChecksum) {
  TempDir dir;
  const std::string path = dir.path() + "/a.tar.zst";
  WriteShard(path, ZstdSamples(), {.compression = TarCompression::kZstd});
  const std::string bytes = ReadFile(path);
  ASSERT_GT(bytes.size(), 5u);
  EXPECT_EQ(bytes.substr(0, 4), "\x28\xb5\x2f\xfd");
  // One frame, whose Frame_Header_Descriptor (RFC 8878, 3.1.1.1.1; the byte
  // after the magic number) has bit 2, Content_Checksum_flag, set.
  EXPECT_EQ(ZSTD_findFrameCompressedSize(bytes.data(), bytes.size()), bytes.size());
  EXPECT_EQ(bytes[4] & 0x04, 0x04);
  // zstd(1) sees the checksum and checks the frame against it.
  ToolRun list = RunCaptured(dir.path(), "zstd -lv a.tar.zst");
  ASSERT_EQ(list.status, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("# Zstandard Frames: 1"));
  EXPECT_THAT(list.out, HasSubstr("Check: XXH64"));
  ToolRun test = RunCaptured(dir.path(), "zstd -t a.tar.zst");
  EXPECT_EQ(test.status, 0) << test.err;
}

TEST(TarWriterTest, ZstdShardReadsBackThroughTheLibraryGnuTarAndPythonTarfile) {
  TempDir dir;
  WriteShard(dir.path() + "/plain.tar", ZstdSamples(), {});
  WriteShard(dir.path() + "/a.tar.zst", ZstdSamples(), {.compression = TarCompression::kZstd});
  // The frame holds exactly the tar the uncompressed writer writes.
  ASSERT_EQ(RunShell("zstd -q -d -c " + dir.path() + "/a.tar.zst > " + dir.path() + "/a.tar"), 0);
  EXPECT_EQ(ReadFile(dir.path() + "/a.tar"), ReadFile(dir.path() + "/plain.tar"));
  const std::vector<std::pair<std::string, std::string>> members =
      LibraryMembers(dir.path() + "/a.tar.zst");
  EXPECT_EQ(members, LibraryMembers(dir.path() + "/plain.tar"));
  ASSERT_EQ(members.size(), 6u);
  ToolRun tar = RunCaptured(dir.path(), "mkdir x && tar --zstd -xf a.tar.zst -C x");
  ASSERT_EQ(tar.status, 0) << tar.err;
  for (const auto& [name, data] : members) {
    EXPECT_EQ(ReadFile(dir.path() + "/x/" + name), data) << name;
  }
  // Python's tarfile reads the stream zstd(1) decompresses: "name bytes\n" per member.
  ToolRun python = RunCaptured(
      dir.path(),
      "zstd -q -d -c a.tar.zst | /usr/bin/python3 -c 'import sys, tarfile\n"
      "t = tarfile.open(fileobj=sys.stdin.buffer, mode=\"r|\")\n"
      "for m in t: sys.stdout.buffer.write(m.name.encode() + b\" \" + t.extractfile(m).read() + "
      "b\"\\n\")'");
  ASSERT_EQ(python.status, 0) << python.err;
  std::string expected;
  for (const auto& [name, data] : members) expected += name + " " + data + "\n";
  EXPECT_TRUE(python.out == expected) << "Python's tarfile read other bytes";
}

TEST(TarWriterTest, CompressionThreadsWriteTheTarThatGzipAndTheLibraryRead) {
  TempDir dir;
  WriteShard(dir.path() + "/plain.tar", ZstdSamples(), {});
  for (TarCompression compression : {TarCompression::kGzip, TarCompression::kZstd}) {
    const std::string ext = compression == TarCompression::kGzip ? ".tar.gz" : ".tar.zst";
    for (int threads : {1, 2, 4}) {
      const std::string path = Cat(dir.path(), "/t", threads, ext);
      WriteShard(path, ZstdSamples(), {.compression = compression, .threads = threads});
      EXPECT_EQ(LibraryMembers(path), LibraryMembers(dir.path() + "/plain.tar")) << path;
    }
    if (compression == TarCompression::kGzip) {
      EXPECT_EQ(ReadFile(Cat(dir.path(), "/t1", ext)), ReadFile(Cat(dir.path(), "/t4", ext)));
    }
    EXPECT_EQ(ReadFile(Cat(dir.path(), "/t2", ext)), ReadFile(Cat(dir.path(), "/t4", ext)));
  }
  ASSERT_EQ(RunShell("gzip -t " + dir.path() + "/t4.tar.gz && gzip -d -c " + dir.path() +
                     "/t4.tar.gz > " + dir.path() + "/t4.tar"),
            0);
  EXPECT_EQ(ReadFile(dir.path() + "/t4.tar"), ReadFile(dir.path() + "/plain.tar"));
  for (TarCompression compression :
       {TarCompression::kNone, TarCompression::kGzip, TarCompression::kZstd}) {
    for (int threads : {0, 257}) {
      const std::string bad = dir.path() + "/bad.tar";
      absl::Status refused =
          TarWriter::Create(bad, {.compression = compression, .threads = threads}).status();
      EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(refused.message(),
                Cat(bad, ": compression threads must be from 1 to 256, got ", threads));
      EXPECT_NE(access(bad.c_str(), F_OK), 0);
    }
  }
}

TEST(TarWriterTest, ZstdSameSamplesGiveIdenticalBytes) {
  TempDir dir;
  for (int level : {-1, 1, 19}) {
    const std::string a = dir.path() + "/a.tar.zst";
    const std::string b = dir.path() + "/b.tar.zst";
    WriteShard(a, ZstdSamples(), {.compression = TarCompression::kZstd, .level = level});
    WriteShard(b, ZstdSamples(), {.compression = TarCompression::kZstd, .level = level});
    EXPECT_EQ(ReadFile(a), ReadFile(b)) << "level " << level;
  }
}

// ReadThroughLoader reads `url` with the default handler (reraise): the keys
// of the samples it yields and the status it ends with.
std::pair<std::vector<std::string>, absl::Status> ReadThroughLoader(const std::string& url) {
  absl::StatusOr<Pipeline> p = WebDataset(url);
  EXPECT_TRUE(p.ok()) << p.status();
  Loader loader(*p, {.workers = 1});
  std::vector<std::string> keys;
  while (true) {
    absl::StatusOr<std::optional<Sample>> item = loader.Next();
    if (!item.ok()) return {keys, item.status()};
    if (!item->has_value()) return {keys, absl::OkStatus()};
    keys.emplace_back((**item).key());
  }
}

TEST(TarWriterTest, ZstdBitFlipIsAnErrorNamingTheShard) {
  TempDir dir;
  const std::string path = dir.path() + "/flip.tar.zst";
  // Small enough that the reader checks the frame before it hands out a
  // sample (docs/RELIABILITY.md, "Damage found only at the end").
  Sample s;
  s.Set("__key__", std::string("k"));
  s.Set("bin", Buffer::Copy(RandomBytes(20000, 5)));
  WriteShard(path, {s}, {.compression = TarCompression::kZstd});
  ASSERT_EQ(ReadThroughLoader(path),
            (std::pair<std::vector<std::string>, absl::Status>{{"k"}, absl::OkStatus()}));
  // zstd stores incompressible bytes as they are: a bit flipped there decodes
  // to a different byte, which only the content checksum can tell.
  std::string shard = ReadFile(path);
  const size_t at = shard.find(RandomBytes(20000, 5).substr(10000, 64));
  ASSERT_NE(at, std::string::npos);
  shard[at] ^= 0x10;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << shard;
  auto [keys, status] = ReadThroughLoader(path);
  EXPECT_THAT(keys, ::testing::IsEmpty());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(path + ": corrupt or truncated compressed data, detected by compressed "
                               "offset "));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(": Zstd decompression failed: Restored data doesn't match checksum"));
}

TEST(TarWriterTest, ZstdBitFlipInALargeShardIsAnErrorAfterTheSamplesBeforeTheCheck) {
  // The checksum is checked where the frame ends: samples of a large shard
  // are handed out before that (the damaged one among them), but the stream
  // still ends in the error, never silently.
  TempDir dir;
  const std::string path = dir.path() + "/flip.tar.zst";
  std::vector<Sample> samples;
  std::vector<std::string> order;
  for (int i = 0; i < 40; ++i) {
    Sample s;
    s.Set("__key__", "k" + std::to_string(100 + i));
    s.Set("bin", Buffer::Copy(RandomBytes(50000, i + 1)));
    order.emplace_back(s.key());
    samples.push_back(std::move(s));
  }
  WriteShard(path, samples, {.compression = TarCompression::kZstd});
  std::string shard = ReadFile(path);
  const size_t at = shard.find(RandomBytes(50000, 1).substr(25000, 64));
  ASSERT_NE(at, std::string::npos);
  shard[at] ^= 0x10;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << shard;
  auto [keys, status] = ReadThroughLoader(path);
  EXPECT_LT(keys.size(), order.size());
  EXPECT_TRUE(std::equal(keys.begin(), keys.end(), order.begin()));
  EXPECT_THAT(keys, ::testing::Contains("k100"));  // the damaged sample
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(": Zstd decompression failed: Restored data doesn't match checksum"));
  EXPECT_THAT(std::string(status.message()), ::testing::StartsWith(path + ": "));
}

TEST(TarWriterTest, CompressionLevelOutOfRangeIsInvalidArgumentAndCreatesNothing) {
  TempDir dir;
  for (auto [compression, level] :
       {std::pair{TarCompression::kGzip, 10}, std::pair{TarCompression::kZstd, 23}}) {
    const std::string path = dir.path() + "/a.tar";
    auto w = TarWriter::Create(path, {.compression = compression, .level = level});
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(w.status().message(),
              path + ": compression level " + std::to_string(level) + " is out of range");
    EXPECT_NE(access(path.c_str(), F_OK), 0) << level;
  }
  // The highest levels are in range.
  WriteShard(dir.path() + "/g.tar.gz", {MakeSample("k")},
             {.compression = TarCompression::kGzip, .level = 9});
  WriteShard(dir.path() + "/z.tar.zst", {MakeSample("k")},
             {.compression = TarCompression::kZstd, .level = 22});
}

TEST(TarWriterTest, FullDeviceIsResourceExhaustedNamingThePath) {
  // /dev/full fails every write with ENOSPC: a small shard fails when it is
  // closed (everything was buffered until then), a large member on its write.
  for (TarCompression compression :
       {TarCompression::kNone, TarCompression::kGzip, TarCompression::kZstd}) {
    auto small = TarWriter::Create("/dev/full", {.compression = compression});
    ASSERT_TRUE(small.ok()) << small.status();
    ASSERT_TRUE((*small)->Write(MakeSample("k")).ok());
    absl::Status closed = (*small)->Close();
    EXPECT_EQ(closed.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(closed.message(), "/dev/full: closing: Write error (No space left on device)");

    auto large = TarWriter::Create("/dev/full", {.compression = compression});
    ASSERT_TRUE(large.ok()) << large.status();
    absl::Status written = (*large)->WriteMember("big.bin", RandomBytes(1 << 20, 3));
    EXPECT_EQ(written.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(written.message(),
              "/dev/full: writing big.bin: Write error (No space left on device)");
  }
}

TEST(TarWriterTest, ZstdToStandardOutputLeavesItOpen) {
  TempDir dir;
  WriteShard(dir.path() + "/file.tar.zst", ZstdSamples(), {.compression = TarCompression::kZstd});
  // Standard output is pointed at a file while the writer writes "-".
  std::fflush(stdout);
  const int saved = dup(1);
  const int file = open((dir.path() + "/stdout.tar.zst").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(file, 0);
  ASSERT_EQ(dup2(file, 1), 1);
  close(file);
  // Nothing may stop the test before standard output is restored.
  absl::Status status = [] {
    auto w = TarWriter::Create("-", {.compression = TarCompression::kZstd});
    if (!w.ok()) return w.status();
    for (const Sample& s : ZstdSamples()) {
      if (absl::Status written = (*w)->Write(s); !written.ok()) return written;
    }
    return (*w)->Close();
  }();
  const bool still_open = fcntl(1, F_GETFD) != -1;
  dup2(saved, 1);
  close(saved);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(still_open);
  EXPECT_EQ(ReadFile(dir.path() + "/stdout.tar.zst"), ReadFile(dir.path() + "/file.tar.zst"));
}

TEST(TarWriterTest, SampleWithoutKeyIsInvalidArgument) {
  TempDir dir;
  auto w = TarWriter::Create(dir.path() + "/a.tar");
  ASSERT_TRUE(w.ok());
  Sample s;
  s.Set("txt", std::string("x"));
  absl::Status status = (*w)->Write(s);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("a.tar: sample has no __key__"));
}

TEST(TarWriterTest, ArrayFieldIsInvalidArgumentNamingIt) {
  TempDir dir;
  auto w = TarWriter::Create(dir.path() + "/a.tar");
  ASSERT_TRUE(w.ok());
  Sample s;
  s.Set("__key__", std::string("k"));
  s.Set("img", Array::Allocate(DType::kUInt8, {2, 2}));
  absl::Status status = (*w)->Write(s);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("sample k: field img is an array"));
}

TEST(TarWriterTest, UncreatableFileIsAnErrorNamingThePath) {
  // The system's reason decides the code: here no such directory.
  auto w = TarWriter::Create("/nonexistent-dir/x/a.tar");
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("No such file or directory"));
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("/nonexistent-dir/x/a.tar"));
}

TEST(TarWriterTest, WriteAfterCloseIsFailedPrecondition) {
  TempDir dir;
  auto w = TarWriter::Create(dir.path() + "/a.tar");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->WriteMember("a.txt", "x").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TarWriterTest, GnuTarAndPythonTarfileReadTheOutput) {
  TempDir dir;
  std::string path = dir.path() + "/a.tar";
  auto w = TarWriter::Create(path);
  ASSERT_TRUE(w.ok());
  std::string long_key(150, 'k');  // needs a pax header
  ASSERT_TRUE((*w)->Write(MakeSample(long_key)).ok());
  ASSERT_TRUE((*w)->Close().ok());
  std::string listing = dir.path() + "/list.txt";
  ASSERT_EQ(RunShell("tar -tf " + path + " > " + listing), 0);
  EXPECT_EQ(ReadFile(listing), long_key + ".cls\n" + long_key + ".jpg\n" + long_key + ".txt\n");
  std::string py = dir.path() + "/py.txt";
  ASSERT_EQ(RunShell("/usr/bin/python3 -c 'import tarfile,sys; t=tarfile.open(sys.argv[1]); "
                     "print(\",\".join(m.name[-3:]+\"=\"+str(m.size) for m in t))' " +
                     path + " > " + py),
            0);
  EXPECT_EQ(ReadFile(py), "cls=1,jpg=4,txt=5\n");
}

}  // namespace
}  // namespace wds
