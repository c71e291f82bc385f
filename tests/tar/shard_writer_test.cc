// Tests for ShardWriter: naming, rolling at maxcount/maxsize, compression,
// reproducibility, atomic finishing, index sidecars and errors.
#include "wds/tar/shard_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/internal/tar/shard_roller.h"
#include "wds/tar/shard_index.h"
#include "wds/wds.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Sample MakeSample(const std::string& key, size_t bytes = 10) {
  Sample s;
  s.Set("__key__", key);
  s.Set("bin", Buffer::Copy(std::string(bytes, 'b')));
  return s;
}

// ReadKeys reads a shard with the library's reader.
std::vector<std::string> ReadKeys(const std::string& url) {
  absl::StatusOr<Pipeline> p = WebDataset(std::vector<std::string>{url}, {});
  EXPECT_TRUE(p.ok()) << p.status();
  WorkerContext ctx;
  std::unique_ptr<SampleStream> stream = p->Open(ctx);
  absl::StatusOr<std::vector<Sample>> samples = testing::Drain(*stream);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? testing::Keys(*samples) : std::vector<std::string>{};
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

TEST(FormatShardNameTest, ZeroPaddedWidth) {
  EXPECT_EQ(*FormatShardName("out/train-%06d.tar", 12), "out/train-000012.tar");
}

TEST(FormatShardNameTest, PlainAndSpacePaddedConversions) {
  EXPECT_EQ(*FormatShardName("s%d.tar", 7), "s7.tar");
  EXPECT_EQ(*FormatShardName("s%3d.tar", 7), "s  7.tar");
}

TEST(FormatShardNameTest, DoublePercentIsLiteral) {
  EXPECT_EQ(*FormatShardName("100%%/s-%02d.tar", 3), "100%/s-03.tar");
}

TEST(FormatShardNameTest, PatternWithoutConversionIsInvalidArgument) {
  absl::StatusOr<std::string> name = FormatShardName("out/train.tar", 0);
  EXPECT_EQ(name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(name.status().message()), HasSubstr("exactly one integer conversion"));
}

TEST(FormatShardNameTest, TwoConversionsAreInvalidArgument) {
  EXPECT_EQ(FormatShardName("%d-%d.tar", 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FormatShardNameTest, StringConversionIsInvalidArgument) {
  absl::StatusOr<std::string> name = FormatShardName("out/%s.tar", 0);
  EXPECT_EQ(name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(name.status().message()), HasSubstr("out/%s.tar"));
}

TEST(ShardWriterTest, RollsAtMaxcount) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%02d.tar", {.maxcount = 3});
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < 7; ++i) ASSERT_TRUE((*w)->Write(MakeSample("k" + std::to_string(i))).ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->shards_written(), 3);
  EXPECT_EQ((*w)->samples_written(), 7);
  EXPECT_THAT(ListDir(dir.path()), ElementsAre("s-00.tar", "s-01.tar", "s-02.tar"));
  EXPECT_THAT(ReadKeys(dir.path() + "/s-00.tar"), ElementsAre("k0", "k1", "k2"));
  EXPECT_THAT(ReadKeys(dir.path() + "/s-01.tar"), ElementsAre("k3", "k4", "k5"));
  EXPECT_THAT(ReadKeys(dir.path() + "/s-02.tar"), ElementsAre("k6"));
}

TEST(ShardWriterTest, ExactlyMaxcountSamplesMakeOneShard) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar", {.maxcount = 4});
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*w)->Write(MakeSample("k" + std::to_string(i))).ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_THAT(ListDir(dir.path()), ElementsAre("s-0.tar"));
}

// A sample "kN" with a 1000-byte field takes 512 + 1024 tar bytes; two of
// them and the end-of-archive blocks are exactly 4096 bytes.
TEST(ShardWriterTest, RollsBeforeTheSampleThatWouldPassMaxsize) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar", {.maxsize = 4096});
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE((*w)->Write(MakeSample("k" + std::to_string(i), 1000)).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_THAT(ListDir(dir.path()), ElementsAre("s-0.tar", "s-1.tar", "s-2.tar"));
  EXPECT_EQ(FileSize(dir.path() + "/s-0.tar"), 4096);
  EXPECT_EQ(FileSize(dir.path() + "/s-1.tar"), 4096);
  EXPECT_EQ(FileSize(dir.path() + "/s-2.tar"), 512 + 1024 + 1024);
}

TEST(ShardWriterTest, OneByteBelowTheFitGivesOneSamplePerShard) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar", {.maxsize = 4095});
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*w)->Write(MakeSample("k" + std::to_string(i), 1000)).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->shards_written(), 3);
}

TEST(ShardWriterTest, SampleLargerThanMaxsizeGetsAShardOfItsOwn) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar", {.maxsize = 4096});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(MakeSample("small", 10)).ok());
  ASSERT_TRUE((*w)->Write(MakeSample("big", 10000)).ok());
  ASSERT_TRUE((*w)->Write(MakeSample("after", 10)).ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_THAT(ReadKeys(dir.path() + "/s-0.tar"), ElementsAre("small"));
  EXPECT_THAT(ReadKeys(dir.path() + "/s-1.tar"), ElementsAre("big"));
  EXPECT_THAT(ReadKeys(dir.path() + "/s-2.tar"), ElementsAre("after"));
}

TEST(ShardWriterTest, FootprintIsNeverBelowTheRealTarSize) {
  TempDir dir;
  std::vector<std::string> keys = {"a",
                                   std::string(99, 'l'),
                                   std::string(200, 'x'),
                                   "caf\xc3\xa9",
                                   std::string(90, 'd') + "/" + std::string(90, 'e'),
                                   "u/" + std::string(60, 'a') + "\xe6\x97\xa5\xe6\x9c\xac"};
  for (size_t size : {0, 1, 511, 512, 513}) {
    for (const std::string& key : keys) {
      std::string path = dir.path() + "/t.tar";
      auto w = TarWriter::Create(path);
      ASSERT_TRUE(w.ok());
      Sample s = MakeSample(key, size);
      s.Set("txt", std::string("hello"));
      ASSERT_TRUE((*w)->Write(s).ok()) << key;
      ASSERT_TRUE((*w)->Close().ok());
      EXPECT_GE(TarFootprint(s) + 1024, FileSize(path)) << key << " size " << size;
    }
  }
}

TEST(ShardWriterTest, RollerCountsAndSizesLikeTheWriter) {
  ShardRoller roller(2, 1 << 20);
  EXPECT_TRUE(roller.Add(100));
  EXPECT_FALSE(roller.Add(100));
  EXPECT_TRUE(roller.Add(100));
  ShardRoller by_size(100, 3000);
  EXPECT_TRUE(by_size.Add(1000));
  EXPECT_FALSE(by_size.Add(976));
  EXPECT_TRUE(by_size.Add(1));
}

TEST(ShardWriterTest, FirstShardSetsTheFirstNumber) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%03d.tar", {.maxcount = 1, .first_shard = 41});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(MakeSample("a")).ok());
  ASSERT_TRUE((*w)->Write(MakeSample("b")).ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_THAT(ListDir(dir.path()), ElementsAre("s-041.tar", "s-042.tar"));
}

TEST(ShardWriterTest, OnCloseSeesTheFinishedShardUnderItsFinalName) {
  TempDir dir;
  std::vector<ShardInfo> seen;
  std::vector<std::vector<std::string>> listings;
  ShardWriterOptions options{.maxcount = 2};
  options.on_close = [&](const ShardInfo& info) {
    seen.push_back(info);
    listings.push_back(ListDir(dir.path()));
    return absl::OkStatus();
  };
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar", options);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*w)->Write(MakeSample("k" + std::to_string(i), 1000)).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].path, dir.path() + "/s-0.tar");
  EXPECT_EQ(seen[0].number, 0);
  EXPECT_EQ(seen[0].samples, 2);
  EXPECT_EQ(seen[0].data_bytes, 2000);
  EXPECT_EQ(seen[0].tar_bytes, 4096);
  EXPECT_EQ(seen[0].file_bytes, 4096);
  EXPECT_EQ(seen[1].samples, 1);
  EXPECT_THAT(listings[0], ElementsAre("s-0.tar"));
  EXPECT_THAT(listings[1], ElementsAre("s-0.tar", "s-1.tar"));
}

TEST(ShardWriterTest, OnCloseErrorIsReturnedByTheWriteThatFinishedTheShard) {
  TempDir dir;
  ShardWriterOptions options{.maxcount = 1};
  options.on_close = [](const ShardInfo& info) {
    return absl::UnavailableError("upload of " + info.path + " failed");
  };
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar", options);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(MakeSample("a")).ok());
  absl::Status status = (*w)->Write(MakeSample("b"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("s-0.tar failed"));
  EXPECT_EQ((*w)->Close().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(ListDir(dir.path()), ElementsAre("s-0.tar"));
}

void WriteShards(const std::string& pattern, TarWriterOptions tar) {
  auto w = ShardWriter::Create(pattern, {.maxcount = 5, .tar = tar});
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < 12; ++i) {
    Sample s = MakeSample("key" + std::to_string(i), 300 + i);
    s.Set("cls", int64_t{i % 3});
    ASSERT_TRUE((*w)->Write(s).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
}

TEST(ShardWriterTest, EachCompressionIsReproducibleByteForByte) {
  TempDir dir;
  struct Case {
    const char* suffix;
    TarWriterOptions tar;
    std::string magic;
  };
  for (const Case& c :
       {Case{"tar", {}, "key"},
        Case{"tar.gz", {.compression = TarCompression::kGzip, .level = 9}, "\x1f\x8b"},
        Case{"tar.zst", {.compression = TarCompression::kZstd, .level = 19}, "\x28\xb5\x2f\xfd"}}) {
    WriteShards(dir.path() + "/a-%d." + c.suffix, c.tar);
    WriteShards(dir.path() + "/b-%d." + c.suffix, c.tar);
    for (int i = 0; i < 3; ++i) {
      std::string a = ReadFile(dir.path() + "/a-" + std::to_string(i) + "." + c.suffix);
      std::string b = ReadFile(dir.path() + "/b-" + std::to_string(i) + "." + c.suffix);
      EXPECT_EQ(a, b) << c.suffix << " shard " << i;
      EXPECT_EQ(a.substr(0, c.magic.size()), c.magic) << c.suffix;
    }
    EXPECT_EQ(ReadKeys(dir.path() + "/b-2." + c.suffix),
              (std::vector<std::string>{"key10", "key11"}));
  }
  // Runs a second apart would differ if the gzip header carried a time.
  EXPECT_EQ(ReadFile(dir.path() + "/a-0.tar.gz").substr(4, 4), std::string(4, '\0'));
}

TEST(ShardWriterTest, DestroyedWithoutCloseRemovesTheTemporaryFile) {
  TempDir dir;
  {
    auto w = ShardWriter::Create(dir.path() + "/s-%d.tar", {.maxcount = 2});
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*w)->Write(MakeSample("k" + std::to_string(i))).ok());
    EXPECT_THAT(ListDir(dir.path()),
                ElementsAre("s-0.tar", "s-1.tar." + std::to_string(getpid()) + ".tmp"));
  }
  EXPECT_THAT(ListDir(dir.path()), ElementsAre("s-0.tar"));
}

TEST(ShardWriterTest, AbortRemovesTheUnfinishedShard) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(MakeSample("k")).ok());
  (*w)->Abort();
  EXPECT_THAT(ListDir(dir.path()), ElementsAre());
}

TEST(ShardWriterTest, WriteErrorRemovesTheUnfinishedShardAndSticks) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar", {.maxcount = 2});
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*w)->Write(MakeSample("k" + std::to_string(i))).ok());
  Sample bad = MakeSample("bad");
  bad.Set("img", Array::Allocate(DType::kUInt8, {2, 2}));
  absl::Status status = (*w)->Write(bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("sample bad: field img is an array"));
  EXPECT_EQ((*w)->Write(MakeSample("later")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->Close().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ListDir(dir.path()), ElementsAre("s-0.tar"));
}

TEST(ShardWriterTest, KeyWithADotInItsBasenameIsInvalidArgument) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar");
  ASSERT_TRUE(w.ok());
  absl::Status status = (*w)->Write(MakeSample("dir.v1/a.b"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("key 'dir.v1/a.b'"));
  EXPECT_THAT(ListDir(dir.path()), ElementsAre());
}

TEST(ShardWriterTest, KeyWithEmptyBasenameIsInvalidArgument) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->Write(MakeSample("dir/")).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShardWriterTest, FieldWithASlashIsInvalidArgument) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar");
  ASSERT_TRUE(w.ok());
  Sample s = MakeSample("k");
  s.Set("a/b", std::string("x"));
  absl::Status status = (*w)->Write(s);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("field 'a/b'"));
}

TEST(ShardWriterTest, KeyInASubdirectoryIsWritten) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(MakeSample("dir.v1/a")).ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_THAT(ReadKeys(dir.path() + "/s-0.tar"), ElementsAre("dir.v1/a"));
}

TEST(ShardWriterTest, UncreatableDirectoryIsAnErrorNamingTheShard) {
  auto w = ShardWriter::Create("/nonexistent-dir/x/s-%d.tar");
  ASSERT_TRUE(w.ok());
  absl::Status status = (*w)->Write(MakeSample("k"));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("/nonexistent-dir/x/s-0.tar"));
}

TEST(ShardWriterTest, NonPositiveMaxcountIsInvalidArgument) {
  EXPECT_EQ(ShardWriter::Create("s-%d.tar", {.maxcount = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShardWriterTest, BadPatternIsInvalidArgumentAtCreate) {
  EXPECT_EQ(ShardWriter::Create("s.tar").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShardWriterTest, WriteAfterCloseIsFailedPrecondition) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->Write(MakeSample("k")).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ListDir(dir.path()), ElementsAre());
}

TEST(ShardWriterTest, IndexSidecarsMatchAHeaderScan) {
  TempDir dir;
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar", {.maxcount = 2, .write_index = true});
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 3; ++i) {
    Sample s = MakeSample(std::string(120, 'k') + std::to_string(i), 700);
    s.Set("seg.png", std::string("png"));
    ASSERT_TRUE((*w)->Write(s).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_THAT(ListDir(dir.path()), ElementsAre("s-0.tar", "s-0.tar.idx", "s-1.tar", "s-1.tar.idx"));
  for (const char* shard : {"/s-0.tar", "/s-1.tar"}) {
    absl::StatusOr<ShardIndex> scanned = ScanShard(dir.path() + shard);
    ASSERT_TRUE(scanned.ok()) << scanned.status();
    EXPECT_EQ(ReadFile(dir.path() + shard + ".idx"), *scanned->ToText());
  }
  absl::StatusOr<ShardIndex> first = ShardIndex::Load(dir.path() + "/s-0.tar.idx");
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->samples.size(), 2u);
  EXPECT_EQ(first->samples[0].members[1].field, "seg.png");
}

TEST(ShardWriterTest, StaleIndexSidecarIsReplaced) {
  TempDir dir;
  dir.Write("s-0.tar.idx", "v1.2 99\n");
  auto w = ShardWriter::Create(dir.path() + "/s-%d.tar", {.write_index = true});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(MakeSample("k")).ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ(*CountSamples(dir.path() + "/s-0.tar"), 1);
}

}  // namespace
}  // namespace wds
