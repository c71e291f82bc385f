// Tests for `wds-shard cat`, `extract`, `stats`, `verify` and `index`, run as
// separate processes as users run them.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/tar/shard_index.h"

namespace wds {
namespace {

using testing::ToolRun;

namespace fs = std::filesystem;
using testing::Compression;
using ::testing::HasSubstr;
using testing::MakeTar;
using ::testing::Not;
using testing::ReadFile;
using testing::RunShell;
using testing::RunWdsShard;
using testing::TarEntry;
using testing::TarFormat;
using testing::TempDir;

// A 1x1 gray PNG (value 0) with valid CRCs, 67 bytes.
const std::string kPng(
    "\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x01"
    "\x00\x00\x00\x01\x08\x00\x00\x00\x00\x3a\x7e\x9b\x55\x00\x00\x00\x0a\x49\x44\x41"
    "\x54\x78\xda\x63\x60\x00\x00\x00\x02\x00\x01\xe5\x27\xde\xfc\x00\x00\x00\x00\x49"
    "\x45\x4e\x44\xae\x42\x60\x82",
    67);

std::vector<TarEntry> CleanEntries() {
  return {{"a.png", kPng}, {"a.cls", "1"},  {"b.png", kPng},
          {"b.cls", "2"},  {"c.png", kPng}, {"c.cls", "3"}};
}

// ---- cat ----

TEST(WdsShardCatTest, WritesTheNamedFieldIgnoringCase) {
  TempDir dir;
  dir.Write("s.tar", MakeTar({{"a.TXT", "hello"}, {"a.cls", "1"}, {"b.txt", "other"}}));
  ToolRun run = RunWdsShard(dir, "cat s.tar a txt");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, "hello");
}

TEST(WdsShardCatTest, FieldMayBeLeftOutForASingleMember) {
  TempDir dir;
  dir.Write("s.tar.gz", MakeTar({{"a.txt", "x"}, {"d/b.bin", std::string("\0\1", 2)}},
                                TarFormat::kPax, Compression::kGzip));
  ToolRun run = RunWdsShard(dir, "cat s.tar.gz d/b");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, std::string("\0\1", 2));
}

TEST(WdsShardCatTest, SeveralFieldsWithoutOneNamedIsAnError) {
  TempDir dir;
  dir.Write("s.tar", MakeTar({{"a.txt", "hello"}, {"a.cls", "1"}}));
  ToolRun run = RunWdsShard(dir, "cat s.tar a");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("s.tar: sample 'a' has fields txt, cls; name one"));
}

TEST(WdsShardCatTest, MissingKeyIsAnErrorNamingShardAndKey) {
  TempDir dir;
  dir.Write("s.tar", MakeTar({{"a.txt", "hello"}}));
  ToolRun run = RunWdsShard(dir, "cat s.tar zz txt");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("s.tar: no sample with key 'zz'"));
}

TEST(WdsShardCatTest, MissingFieldIsAnErrorListingTheFields) {
  TempDir dir;
  dir.Write("s.tar", MakeTar({{"a.txt", "hello"}}));
  ToolRun run = RunWdsShard(dir, "cat s.tar a jpg");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("sample 'a' has no field 'jpg' (it has txt)"));
}

// ---- extract ----

TEST(WdsShardExtractTest, WritesEveryMemberUnderItsName) {
  TempDir dir;
  dir.Write("s.tar", MakeTar({{"__meta__", "m"}, {"d/a.txt", "A"}, {"noext", "N"}}));
  ToolRun run = RunWdsShard(dir, "extract --output out s.tar");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(ReadFile(dir.path() + "/out/d/a.txt"), "A");
  EXPECT_EQ(ReadFile(dir.path() + "/out/__meta__"), "m");
  EXPECT_EQ(ReadFile(dir.path() + "/out/noext"), "N");
  EXPECT_THAT(run.err, HasSubstr("wrote 3 file(s) to out"));
}

TEST(WdsShardExtractTest, ExistingFileIsAnErrorWithoutForce) {
  TempDir dir;
  dir.Write("s.tar", MakeTar({{"a.txt", "new"}}));
  dir.Write("out/a.txt", "old");
  ToolRun run = RunWdsShard(dir, "extract --output out s.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("out/a.txt: exists (use --force to overwrite)"));
  EXPECT_EQ(ReadFile(dir.path() + "/out/a.txt"), "old");
  ASSERT_EQ(RunWdsShard(dir, "extract --force --output out s.tar").status, 0);
  EXPECT_EQ(ReadFile(dir.path() + "/out/a.txt"), "new");
}

TEST(WdsShardExtractTest, NameLeavingTheOutputDirectoryIsRefused) {
  TempDir dir;
  dir.Write("s.tar", MakeTar({{"ok.txt", "1"}, {"../evil.txt", "2"}}, TarFormat::kUstar));
  ToolRun run = RunWdsShard(dir, "extract --output out s.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("s.tar: member ../evil.txt at offset 1024 would be written "
                                 "outside the output directory"));
  EXPECT_FALSE(fs::exists(dir.path() + "/evil.txt"));
}

// ---- stats ----

TEST(WdsShardStatsTest, TextReportsCountsAndSizes) {
  TempDir dir;
  dir.Write("s.tar",
            MakeTar({{"a.txt", "1"}, {"a.JPG", "1234"}, {"b.txt", "12"}}, TarFormat::kUstar));
  ToolRun run = RunWdsShard(dir, "stats s.tar");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out,
            "s.tar\n"
            "  samples 2  members 3  member bytes 7  file bytes 4096\n"
            "  field jpg          count 1        bytes 4            min 4  p50 4  p90 4  max 4  "
            "mean 4.0\n"
            "  field txt          count 2        bytes 3            min 1  p50 1  p90 2  max 2  "
            "mean 1.5\n"
            "  sample size: min 2  p50 2  p90 5  max 5  mean 3.5\n");
}

TEST(WdsShardStatsTest, JsonHasPerShardAndTotalFigures) {
  TempDir dir;
  dir.Write("s0.tar", MakeTar({{"a.txt", "1"}}));
  dir.Write("s1.tar", MakeTar({{"b.txt", "22"}, {"c.txt", "333"}}));
  ToolRun run = RunWdsShard(dir, "stats --json s{0..1}.tar");
  ASSERT_EQ(run.status, 0) << run.err;
  std::string py = dir.path() + "/py.txt";
  std::ofstream(dir.path() + "/stats.json") << run.out;
  ASSERT_EQ(
      RunShell("/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
               "t=d[\"total\"]; print(len(d[\"shards\"]), d[\"shards\"][1][\"url\"], "
               "t[\"samples\"], t[\"fields\"][\"txt\"][\"bytes\"], t[\"sample_size\"][\"max\"])' " +
               dir.path() + "/stats.json > " + py),
      0);
  EXPECT_EQ(ReadFile(py), "2 s1.tar 3 6 3\n");
}

TEST(WdsShardStatsTest, JobsGiveTheSameReportAndTheFirstFailingShardInOrderIsTheError) {
  TempDir dir;
  std::vector<TarEntry> big;  // read last when every job starts at once
  for (int i = 0; i < 2000; ++i) big.push_back({"k" + std::to_string(i) + ".txt", "xyz"});
  dir.Write("s0.tar", MakeTar(big));
  for (int i = 1; i < 5; ++i) dir.Write("s" + std::to_string(i) + ".tar", MakeTar(CleanEntries()));
  for (const char* format : {"", "--json "}) {
    ToolRun serial = RunWdsShard(dir, std::string("stats --jobs 1 ") + format + "s{0..4}.tar");
    ASSERT_EQ(serial.status, 0) << serial.err;
    ToolRun four = RunWdsShard(dir, std::string("stats --jobs 4 ") + format + "s{0..4}.tar");
    ASSERT_EQ(four.status, 0) << four.err;
    EXPECT_EQ(four.out, serial.out);
    EXPECT_THAT(four.out, HasSubstr("s4.tar"));
  }
  dir.Write("s3.tar", MakeTar(CleanEntries()).substr(0, 700));  // cut short
  ToolRun run = RunWdsShard(dir, "stats --jobs 8 s0.tar s1.tar s5.tar s3.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.out, HasSubstr("s1.tar\n"));  // the shards before it are reported
  EXPECT_THAT(run.err, HasSubstr("s5.tar"));    // missing, before the cut s3.tar
  EXPECT_THAT(run.err, Not(HasSubstr("s3.tar")));
}

TEST(WdsShardStatsTest, BrokenShardIsAnErrorNamingIt) {
  TempDir dir;
  dir.Write("x.tar", std::string(2048, 'x'));
  ToolRun run = RunWdsShard(dir, "stats x.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("x.tar: not a tar archive"));
}

// ---- verify ----

TEST(WdsShardVerifyTest, CleanShardIsOk) {
  TempDir dir;
  dir.Write("s.tar", MakeTar(CleanEntries()));
  ToolRun run = RunWdsShard(dir, "verify --decode s.tar");
  EXPECT_EQ(run.status, 0) << run.out << run.err;
  EXPECT_EQ(run.out, "s.tar: ok (3 samples)\n");
}

void ExpectProblem(const TempDir& dir, const std::string& shard, const std::string& line,
                   const std::string& options = "") {
  ToolRun run = RunWdsShard(dir, "verify " + options + shard);
  EXPECT_EQ(run.status, 1) << run.out;
  EXPECT_THAT(run.out, HasSubstr(shard + ": " + line));
  EXPECT_THAT(run.err, HasSubstr("verify: "));
}

TEST(WdsShardVerifyTest, DuplicateFieldIsNamedWithKeyAndOffset) {
  TempDir dir;
  std::vector<TarEntry> entries = CleanEntries();
  entries.insert(entries.begin() + 2, {"a.CLS", "9"});
  dir.Write("s.tar", MakeTar(entries, TarFormat::kUstar));
  ExpectProblem(dir, "s.tar", "key 'a' at offset 2048: duplicate field 'cls' (member a.CLS)");
}

TEST(WdsShardVerifyTest, SplitKeyIsNamedWithBothOffsets) {
  TempDir dir;
  std::vector<TarEntry> entries = CleanEntries();
  entries.push_back({"a.txt", "late"});
  dir.Write("s.tar", MakeTar(entries, TarFormat::kUstar));
  ExpectProblem(dir, "s.tar",
                "key 'a' at offset 6144: the key's members are split: it also starts a sample at "
                "offset 0");
}

TEST(WdsShardVerifyTest, MemberWithoutAFieldIsNamed) {
  TempDir dir;
  std::vector<TarEntry> entries = CleanEntries();
  entries.push_back({"README", "x"});
  dir.Write("s.tar", MakeTar(entries, TarFormat::kUstar));
  ExpectProblem(dir, "s.tar", "member README at offset 6144 has no field");
}

TEST(WdsShardVerifyTest, SampleMissingACommonFieldIsNamed) {
  TempDir dir;
  std::vector<TarEntry> entries = CleanEntries();
  entries.erase(entries.begin() + 3);  // b.cls
  dir.Write("s.tar", MakeTar(entries, TarFormat::kUstar));
  ExpectProblem(dir, "s.tar",
                "key 'b' at offset 2048: missing field 'cls' (present in 2 of 3 samples)");
}

TEST(WdsShardVerifyTest, TruncatedShardIsNamed) {
  TempDir dir;
  std::string tar = MakeTar(CleanEntries(), TarFormat::kUstar);
  dir.Write("s.tar", tar.substr(0, 4096 + 512 + 30));
  ExpectProblem(dir, "s.tar", "member c.png at offset 4096");
  EXPECT_THAT(RunWdsShard(dir, "verify s.tar").out, Not(HasSubstr("s.tar: s.tar")));
}

TEST(WdsShardVerifyTest, CorruptGzipIsNamed) {
  TempDir dir;
  std::string tar = MakeTar(CleanEntries(), TarFormat::kPax, Compression::kGzip);
  tar[tar.size() - 12] ^= 0x55;  // inside the deflate data or the CRC
  dir.Write("s.tar.gz", tar);
  ToolRun run = RunWdsShard(dir, "verify s.tar.gz");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.out, HasSubstr("s.tar.gz: "));
  EXPECT_THAT(run.out, Not(HasSubstr("ok")));
}

TEST(WdsShardVerifyTest, UndecodableImageIsNamedOnlyWithDecode) {
  TempDir dir;
  std::vector<TarEntry> entries = CleanEntries();
  entries[2].data = "not a png";
  dir.Write("s.tar", MakeTar(entries, TarFormat::kUstar));
  EXPECT_EQ(RunWdsShard(dir, "verify s.tar").status, 0);
  ExpectProblem(dir, "s.tar", "key 'b' at offset 2048: field 'png' does not decode", "--decode ");
}

TEST(WdsShardVerifyTest, EmptyShardIsAProblem) {
  TempDir dir;
  dir.Write("s.tar", MakeTar({}));
  ExpectProblem(dir, "s.tar", "no samples");
}

TEST(WdsShardVerifyTest, MatchingIndexIsOkAndAStaleOneIsNamed) {
  TempDir dir;
  dir.Write("s.tar", MakeTar(CleanEntries(), TarFormat::kUstar));
  ASSERT_EQ(RunWdsShard(dir, "index s.tar").status, 0);
  EXPECT_EQ(RunWdsShard(dir, "verify s.tar").status, 0);
  std::string idx = ReadFile(dir.path() + "/s.tar.idx");
  const size_t at = idx.find("png 2560 ");
  ASSERT_NE(at, std::string::npos) << idx;
  idx.replace(at, 9, "png 3072 ");
  dir.Write("s.tar.idx", idx);
  ExpectProblem(dir, "s.tar",
                "index s.tar.idx line 3 member 1 does not match the shard, which has png 2560 67 "
                "b.png");
}

TEST(WdsShardVerifyTest, IndexWithAnotherSampleCountIsNamed) {
  TempDir dir;
  dir.Write("s.tar", MakeTar(CleanEntries(), TarFormat::kUstar));
  dir.Write("s.tar.idx", "v1.2 1\npng 512 67 a.png\n");
  ExpectProblem(dir, "s.tar", "index s.tar.idx lists 1 samples, the shard has 3");
}

TEST(WdsShardVerifyTest, OneBadShardAmongGoodOnesFailsNamingIt) {
  TempDir dir;
  dir.Write("s0.tar", MakeTar(CleanEntries()));
  dir.Write("s1.tar", "junk");
  ToolRun run = RunWdsShard(dir, "verify s{0..1}.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.out, HasSubstr("s0.tar: ok (3 samples)\ns1.tar: "));
  EXPECT_THAT(run.err, HasSubstr("1 of 2 shard(s)"));
}

TEST(WdsShardVerifyTest, JobsReportEachShardWholeInTheOrderGiven) {
  TempDir dir;
  std::vector<TarEntry> big;  // checked last when every job starts at once
  for (int i = 0; i < 2000; ++i) big.push_back({"k" + std::to_string(i) + ".txt", "xyz"});
  dir.Write("s0.tar", MakeTar(big));
  dir.Write("s1.tar", "junk");
  dir.Write("s2.tar", MakeTar(CleanEntries()));
  std::vector<TarEntry> dup = CleanEntries();  // two problems: two lines, together
  dup.push_back({"c.cls", "4"});
  dup.push_back({"d.png", kPng});
  dup.push_back({"d.cls", "4"});
  dup.push_back({"d.cls", "5"});
  dir.Write("s3.tar", MakeTar(dup));
  dir.Write("s4.tar", MakeTar(CleanEntries()));
  ToolRun serial = RunWdsShard(dir, "verify --jobs 1 s{0..4}.tar");
  ToolRun four = RunWdsShard(dir, "verify --jobs 4 s{0..4}.tar");
  EXPECT_EQ(four.status, 1);
  EXPECT_EQ(four.out, serial.out);
  EXPECT_EQ(four.err, serial.err);
  EXPECT_THAT(four.out, ::testing::MatchesRegex("s0.tar: ok \\(2000 samples\\)\n"
                                                "s1.tar: [^\n]*\n"
                                                "s2.tar: ok \\(3 samples\\)\n"
                                                "s3.tar: key 'c' at offset [0-9]+: duplicate "
                                                "field 'cls' \\(member c.cls\\)\n"
                                                "s3.tar: key 'd' at offset [0-9]+: duplicate "
                                                "field 'cls' \\(member d.cls\\)\n"
                                                "s4.tar: ok \\(3 samples\\)\n"));
  EXPECT_THAT(four.err, HasSubstr("verify: 3 problem(s) in 2 of 5 shard(s)"));
}

TEST(WdsShardVerifyTest, JobsMustBeAPositiveInteger) {
  TempDir dir;
  dir.Write("s.tar", MakeTar(CleanEntries()));
  for (const char* command : {"verify", "stats"}) {
    ToolRun run = RunWdsShard(dir, std::string(command) + " --jobs 0 s.tar");
    EXPECT_EQ(run.status, 1) << command;
    EXPECT_THAT(run.err, HasSubstr(std::string(command) +
                                   ": --jobs needs an integer of at least 1, not '0'"));
    EXPECT_EQ(run.out, "");
  }
}

// ---- index ----

TEST(WdsShardIndexTest, SidecarOffsetsPointAtTheMemberBytes) {
  TempDir dir;
  std::vector<TarEntry> entries = CleanEntries();
  entries.push_back({std::string(150, 'l') + ".txt", std::string(1000, 'z')});
  const std::string tar = MakeTar(entries, TarFormat::kPax);
  dir.Write("s.tar", tar);
  ToolRun run = RunWdsShard(dir, "index s.tar");
  ASSERT_EQ(run.status, 0) << run.err;
  absl::StatusOr<ShardIndex> index = ShardIndex::Load(dir.path() + "/s.tar.idx");
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->samples.size(), 4u);
  int checked = 0;
  for (const IndexSample& sample : index->samples) {
    for (const IndexMember& m : sample.members) {
      const auto entry = std::find_if(entries.begin(), entries.end(),
                                      [&](const TarEntry& e) { return e.name == m.name; });
      ASSERT_NE(entry, entries.end()) << m.name;
      EXPECT_EQ(tar.substr(m.offset, m.size), entry->data) << m.name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 7);
  EXPECT_THAT(ReadFile(dir.path() + "/s.tar.idx"), HasSubstr("v1.2 4\npng 1536 67 a.png cls "));
}

TEST(WdsShardIndexTest, JsonListsShardsRelativeToItsDirectory) {
  TempDir dir;
  dir.Write("data/s0.tar", MakeTar({{"a.txt", "1"}}));
  dir.Write("data/s1.tar", MakeTar({{"b.txt", "2"}, {"c.txt", "3"}}));
  dir.Write("other/x.tar", MakeTar({{"d.txt", "4"}}));
  ToolRun run = RunWdsShard(dir, "index --json data/ds.json data/s{0..1}.tar other/x.tar");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("index: 3 shard(s), 4 samples; data/ds.json"));
  absl::StatusOr<DatasetIndex> index = DatasetIndex::Load(dir.path() + "/data/ds.json");
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->shards.size(), 3u);
  EXPECT_EQ(index->shards[0].url, dir.path() + "/data/s0.tar");
  EXPECT_EQ(index->shards[1].nsamples, 2);
  EXPECT_EQ(index->shards[1].filesize,
            static_cast<int64_t>(fs::file_size(dir.path() + "/data/s1.tar")));
  const std::string json = ReadFile(dir.path() + "/data/ds.json");
  EXPECT_THAT(json, HasSubstr("\"url\": \"s0.tar\""));
  EXPECT_THAT(json,
              HasSubstr("\"url\": \"" + fs::canonical(dir.path()).string() + "/other/x.tar\""));
  EXPECT_TRUE(fs::exists(dir.path() + "/other/x.tar.idx"));
}

TEST(WdsShardIndexTest, CompressedShardIsIndexedInUncompressedOffsets) {
  TempDir dir;
  dir.Write("s.tar", MakeTar(CleanEntries()));
  dir.Write("s.tar.zst", MakeTar(CleanEntries(), TarFormat::kPax, Compression::kZstd));
  ASSERT_EQ(RunWdsShard(dir, "index s.tar s.tar.zst").status, 0);
  EXPECT_EQ(ReadFile(dir.path() + "/s.tar.zst.idx"), ReadFile(dir.path() + "/s.tar.idx"));
}

TEST(WdsShardIndexTest, JobsGiveTheSameIndexesAndListInTheOrderGiven) {
  TempDir dir;
  for (int i = 0; i < 6; ++i) {
    std::vector<TarEntry> entries;
    for (int j = 0; j <= i; ++j) entries.push_back({"k" + std::to_string(j) + ".txt", "x"});
    dir.Write("s" + std::to_string(i) + ".tar", MakeTar(entries));
  }
  // s2 twice: scanned once, listed twice.
  const std::string shards = "s5.tar s{0..4}.tar s2.tar";
  ASSERT_EQ(RunWdsShard(dir, "index --json one.json " + shards).status, 0);
  std::vector<std::string> serial;
  for (int i = 0; i < 6; ++i)
    serial.push_back(ReadFile(dir.path() + "/s" + std::to_string(i) + ".tar.idx"));
  ToolRun run = RunWdsShard(dir, "index --jobs 4 --json four.json " + shards);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("index: 7 shard(s), 24 samples; four.json"));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(ReadFile(dir.path() + "/s" + std::to_string(i) + ".tar.idx"), serial[i]) << i;
  }
  EXPECT_EQ(ReadFile(dir.path() + "/four.json"), ReadFile(dir.path() + "/one.json"));
  absl::StatusOr<DatasetIndex> index = DatasetIndex::Load(dir.path() + "/four.json");
  ASSERT_TRUE(index.ok()) << index.status();
  std::vector<std::string> names;  // Load resolves them against the JSON's directory
  for (const DatasetShard& shard : index->shards) {
    names.push_back(fs::path(shard.url).lexically_relative(dir.path()).string());
  }
  EXPECT_THAT(names, ::testing::ElementsAre("s5.tar", "s0.tar", "s1.tar", "s2.tar", "s3.tar",
                                            "s4.tar", "s2.tar"));
}

TEST(WdsShardIndexTest, TheErrorIsTheFirstFailingShardInTheOrderGivenAndNoJsonIsWritten) {
  TempDir dir;
  for (int i : {0, 2, 4}) dir.Write("s" + std::to_string(i) + ".tar", MakeTar(CleanEntries()));
  dir.Write("s3.tar", MakeTar(CleanEntries()).substr(0, 700));  // cut short
  ToolRun run = RunWdsShard(dir, "index --jobs 8 --json ds.json s{0..4}.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("s1.tar"));  // missing, before the cut s3.tar
  EXPECT_THAT(run.err, Not(HasSubstr("s3.tar")));
  EXPECT_TRUE(fs::exists(dir.path() + "/s0.tar.idx"));  // every shard before it was indexed
  EXPECT_FALSE(fs::exists(dir.path() + "/ds.json"));
}

TEST(WdsShardIndexTest, RemoteShardsWhoseIndexesWouldBeOneFileAreRefusedBeforeAnyRead) {
  TempDir dir;
  // Nothing listens on port 1: had either been read, the error would be a connection's.
  ToolRun run = RunWdsShard(dir,
                            "index --dir idx http://127.0.0.1:1/a/x.tar "
                            "http://127.0.0.1:1/b/x.tar?v=2");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("index: http://127.0.0.1:1/a/x.tar and "
                                 "http://127.0.0.1:1/b/x.tar?v=2 would both write idx/x.tar.idx"));
  EXPECT_FALSE(fs::exists(dir.path() + "/idx"));
}

TEST(WdsShardIndexTest, OneShardSpelledThreeWaysIsScannedOnceAndListedThrice) {
  TempDir dir;
  dir.Write("a.tar", MakeTar(CleanEntries()));
  ASSERT_EQ(RunWdsShard(dir, "index a.tar").status, 0);
  const std::string serial = ReadFile(dir.path() + "/a.tar.idx");
  fs::remove(dir.path() + "/a.tar.idx");
  ToolRun run =
      RunWdsShard(dir, "index --jobs 4 --json ds.json a.tar ./a.tar " + dir.path() + "//a.tar");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("index: 3 shard(s), 9 samples"));
  EXPECT_EQ(ReadFile(dir.path() + "/a.tar.idx"), serial);
}

TEST(WdsShardIndexTest, ALocalAndARemoteShardWhoseIndexesWouldBeOneFileAreRefused) {
  TempDir dir;
  dir.Write("x.tar", MakeTar(CleanEntries()));
  ToolRun run = RunWdsShard(dir, "index x.tar http://127.0.0.1:1/x.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("index: x.tar and http://127.0.0.1:1/x.tar would both write "
                                 "./x.tar.idx\n"));
  EXPECT_FALSE(fs::exists(dir.path() + "/x.tar.idx"));  // refused before any scan
}

TEST(WdsShardIndexTest, JobsMustBeAPositiveInteger) {
  TempDir dir;
  dir.Write("s.tar", MakeTar(CleanEntries()));
  for (const char* bad : {"0", "-1", "x"}) {
    ToolRun run = RunWdsShard(dir, std::string("index --jobs ") + bad + " s.tar");
    EXPECT_EQ(run.status, 1) << bad;
    EXPECT_THAT(run.err, HasSubstr(std::string("index: --jobs needs an integer of at least 1, "
                                               "not '") +
                                   bad + "'"));
  }
}

TEST(WdsShardIndexTest, MissingShardIsAnErrorNamingIt) {
  TempDir dir;
  ToolRun run = RunWdsShard(dir, "index nope.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("nope.tar"));
  EXPECT_FALSE(fs::exists(dir.path() + "/nope.tar.idx"));
}

}  // namespace
}  // namespace wds
