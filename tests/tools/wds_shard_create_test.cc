// Tests for `wds-shard create` and wds-fashion-mnist, run as separate
// processes as users run them.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/image/image.h"
#include "wds/tar/shard_index.h"
#include "wds/tar/tar_reader.h"

namespace wds {
namespace {

using testing::ToolRun;

namespace fs = std::filesystem;
using testing::Compression;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::MakeTar;
using testing::ReadFile;
using testing::RunShell;
using testing::RunWdsShard;
using testing::TarEntry;
using testing::TarFormat;
using testing::TempDir;

const std::string kTool = testing::ToolPath("wds-shard");

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

ToolRun Shell(const TempDir& dir, const std::string& command) {
  return testing::RunCaptured(dir.path(), command);
}

// Members reads a shard's members in order with TarReader: name -> bytes.
std::vector<std::pair<std::string, std::string>> Members(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  auto reader = TarReader::Open(*OpenUrl(path));
  while (true) {
    absl::StatusOr<std::optional<TarMember>> m = (*reader)->Next();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok() || !m->has_value()) break;
    out.emplace_back((*m)->name, std::string((*m)->data.view()));
  }
  return out;
}

std::vector<std::string> Names(const std::string& path) {
  std::vector<std::string> names;
  for (const auto& [name, data] : Members(path)) names.push_back(name);
  return names;
}

// MakeTree writes a small dataset with nested keys, several dots, an empty
// file, binary bytes and a non-ASCII name.
void MakeTree(const TempDir& dir) {
  dir.Write("in/a.jpg", std::string("\xff\xd8\x00\x01", 4));
  dir.Write("in/a.txt", "hello");
  dir.Write("in/dir.v1/b.seg.png", "png-bytes");
  dir.Write("in/dir.v1/b.cls", "3");
  dir.Write("in/c/empty.bin", "");
  dir.Write("in/caf\xc3\xa9.txt", "unicode");
  dir.Write("in/.hidden.txt", "skipped");
}

TEST(WdsShardCreateTest, TreeRoundTripsByteForByteThroughExtract) {
  TempDir dir;
  MakeTree(dir);
  ToolRun run = RunWdsShard(dir, "create --output out/s-%06d.tar in");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("wrote 1 shard(s), 4 samples"));
  EXPECT_THAT(ListDir(dir.path() + "/out"), ElementsAre("s-000000.tar"));
  ToolRun extract = RunWdsShard(dir, "extract --output back out/s-000000.tar");
  ASSERT_EQ(extract.status, 0) << extract.err;
  for (const char* name :
       {"a.jpg", "a.txt", "dir.v1/b.seg.png", "dir.v1/b.cls", "c/empty.bin", "caf\xc3\xa9.txt"}) {
    EXPECT_EQ(ReadFile(dir.path() + "/back/" + name), ReadFile(dir.path() + "/in/" + name)) << name;
  }
  EXPECT_FALSE(fs::exists(dir.path() + "/back/.hidden.txt"));
}

TEST(WdsShardCreateTest, SamplesInKeyOrderFieldsSortedAndGnuTarListsThem) {
  TempDir dir;
  MakeTree(dir);
  ASSERT_EQ(RunWdsShard(dir, "create --output out/s-%06d.tar in").status, 0);
  ToolRun tar = Shell(dir, "tar -tf out/s-000000.tar");
  ASSERT_EQ(tar.status, 0) << tar.err;
  EXPECT_EQ(tar.out,
            "a.jpg\na.txt\nc/empty.bin\ncaf\xc3\xa9.txt\ndir.v1/b.cls\ndir.v1/b.seg.png\n");
  ToolRun verbose = Shell(dir, "tar -tvf out/s-000000.tar");
  EXPECT_THAT(verbose.out, HasSubstr("-r--r--r-- bigdata/bigdata   5 1970-01-01 00:00 a.txt"));
}

TEST(WdsShardCreateTest, PythonTarfileReadsTheOutput) {
  TempDir dir;
  MakeTree(dir);
  ASSERT_EQ(RunWdsShard(dir, "create --output out/s-%06d.tar.gz in").status, 0);
  ToolRun py =
      Shell(dir,
            "/usr/bin/python3 -c 'import tarfile; t = tarfile.open(\"out/s-000000.tar.gz\"); "
            "print(\" \".join(m.name + \"=\" + str(m.size) for m in t))'");
  ASSERT_EQ(py.status, 0) << py.err;
  EXPECT_EQ(py.out,
            "a.jpg=4 a.txt=5 c/empty.bin=0 caf\xc3\xa9.txt=7 dir.v1/b.cls=1 "
            "dir.v1/b.seg.png=9\n");
}

TEST(WdsShardCreateTest, ReferenceGroupingAgreesWithOurReader) {
  TempDir dir;
  MakeTree(dir);
  ASSERT_EQ(RunWdsShard(dir, "create --maxcount 2 --output out/s-%d.tar in").status, 0);
  const std::string shards = "out/s-0.tar out/s-1.tar";
  ToolRun ours = RunWdsShard(dir, "ls --json " + shards);
  ToolRun reference = Shell(dir, "/usr/bin/python3 " + std::string(WDS_SOURCE_DIR) +
                                     "/tests/tools/reference_ls.py " + shards);
  ASSERT_EQ(reference.status, 0) << reference.err;
  EXPECT_EQ(ours.out, reference.out);
  EXPECT_THAT(ours.out, HasSubstr("\"__key__\": \"dir.v1/b\""));
}

void MakeNumbered(const TempDir& dir, int n, size_t bytes) {
  for (int i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "in/k%02d.bin", i);
    dir.Write(name, std::string(bytes, static_cast<char>('a' + i % 26)));
  }
}

TEST(WdsShardCreateTest, MaxcountBoundaries) {
  TempDir dir;
  MakeNumbered(dir, 7, 10);
  ASSERT_EQ(RunWdsShard(dir, "create --maxcount 3 --output out/s-%d.tar in").status, 0);
  EXPECT_THAT(ListDir(dir.path() + "/out"), ElementsAre("s-0.tar", "s-1.tar", "s-2.tar"));
  EXPECT_THAT(Names(dir.path() + "/out/s-1.tar"), ElementsAre("k03.bin", "k04.bin", "k05.bin"));
  EXPECT_THAT(Names(dir.path() + "/out/s-2.tar"), ElementsAre("k06.bin"));
}

// Each sample takes 512 + 1024 tar bytes: two and the end blocks fill 4K.
TEST(WdsShardCreateTest, MaxsizeBoundariesWithSuffix) {
  TempDir dir;
  MakeNumbered(dir, 5, 1000);
  ASSERT_EQ(RunWdsShard(dir, "create --maxsize 4K --output out/s-%d.tar in").status, 0);
  EXPECT_THAT(ListDir(dir.path() + "/out"), ElementsAre("s-0.tar", "s-1.tar", "s-2.tar"));
  EXPECT_EQ(fs::file_size(dir.path() + "/out/s-0.tar"), 4096u);
  ASSERT_EQ(RunWdsShard(dir, "create --maxsize 4095 --output one/s-%d.tar in").status, 0);
  EXPECT_EQ(ListDir(dir.path() + "/one").size(), 5u);
  ASSERT_EQ(RunWdsShard(dir, "create --maxsize 3G --output big/s-%d.tar in").status, 0);
  EXPECT_EQ(ListDir(dir.path() + "/big").size(), 1u);
}

TEST(WdsShardCreateTest, BadMaxsizeIsAnError) {
  TempDir dir;
  MakeNumbered(dir, 1, 1);
  ToolRun run = RunWdsShard(dir, "create --maxsize 3X --output out/s-%d.tar in");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("bad size '3X'"));
  EXPECT_FALSE(fs::exists(dir.path() + "/out"));
}

TEST(WdsShardCreateTest, EachCompressionIsReadBack) {
  TempDir dir;
  MakeTree(dir);
  struct Case {
    std::string args;
    std::string file;
    std::string magic;
  };
  for (const Case& c :
       {Case{"--compress none --output n/s-%d.tar.gz", "n/s-0.tar.gz", "a.jpg"},
        Case{"--output g/s-%d.tar.gz", "g/s-0.tar.gz", "\x1f\x8b"},
        Case{"--compress gz:1 --output g1/s-%d.tar", "g1/s-0.tar", "\x1f\x8b"},
        Case{"--compress zst:19 --output z/s-%d.tar", "z/s-0.tar", "\x28\xb5\x2f\xfd"},
        Case{"--output z3/s-%d.tar.zst", "z3/s-0.tar.zst", "\x28\xb5\x2f\xfd"}}) {
    ToolRun run = RunWdsShard(dir, "create " + c.args + " in");
    ASSERT_EQ(run.status, 0) << c.args << ": " << run.err;
    const std::string path = dir.path() + "/" + c.file;
    EXPECT_EQ(ReadFile(path).substr(0, c.magic.size()), c.magic) << c.args;
    EXPECT_EQ(Names(path).size(), 6u) << c.args;
  }
}

TEST(WdsShardCreateTest, BadCompressionLevelIsAnError) {
  TempDir dir;
  MakeTree(dir);
  ToolRun run = RunWdsShard(dir, "create --compress gz:10 --output out/s-%d.tar in");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("the level of 'gz:10' is out of range"));
}

TEST(WdsShardCreateTest, TwoRunsGiveIdenticalBytes) {
  TempDir dir;
  MakeNumbered(dir, 20, 300);
  for (const char* out : {"a", "b"}) {
    ASSERT_EQ(RunWdsShard(dir, std::string("create --maxcount 6 --compress gz --shuffle --seed 7 "
                                           "--index --output ") +
                                   out + "/s-%03d.tar in")
                  .status,
              0);
  }
  std::vector<std::string> names = ListDir(dir.path() + "/a");
  EXPECT_EQ(names.size(), 4u + 4u + 1u);
  EXPECT_EQ(names, ListDir(dir.path() + "/b"));
  for (const std::string& name : names) {
    EXPECT_EQ(ReadFile(dir.path() + "/a/" + name), ReadFile(dir.path() + "/b/" + name)) << name;
  }
}

TEST(WdsShardCreateTest, CompressThreadsGiveTheSameGzipBytes) {
  TempDir dir;
  MakeNumbered(dir, 20, 100000);  // shards of 600 KB: several 128 KiB blocks each
  for (const char* run : {"one", "three"}) {
    const std::string threads = std::string(run) == "one" ? "1" : "3";
    ASSERT_EQ(RunWdsShard(dir, "create --maxcount 6 --compress gz --compress-threads " + threads +
                                   " --output " + run + "/s-%03d.tar in")
                  .status,
              0);
  }
  std::vector<std::string> names = ListDir(dir.path() + "/one");
  EXPECT_EQ(names.size(), 4u);
  EXPECT_EQ(names, ListDir(dir.path() + "/three"));
  for (const std::string& name : names) {
    EXPECT_EQ(ReadFile(dir.path() + "/one/" + name), ReadFile(dir.path() + "/three/" + name));
  }
  ToolRun bad =
      RunWdsShard(dir, "create --compress gz --compress-threads 300 --output b/s-%d.tar in");
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr("--compress-threads: at most 256, not 300"));
  ToolRun zero = RunWdsShard(dir, "create --compress-threads 0 --output z/s-%d.tar in");
  EXPECT_EQ(zero.status, 1);
  EXPECT_THAT(zero.err, HasSubstr("--compress-threads"));
}

TEST(WdsShardCreateTest, ShuffleOrderDependsOnTheSeed) {
  TempDir dir;
  MakeNumbered(dir, 20, 1);
  ASSERT_EQ(RunWdsShard(dir, "create --shuffle --seed 1 --output a/s-%d.tar in").status, 0);
  ASSERT_EQ(RunWdsShard(dir, "create --shuffle --seed 2 --output b/s-%d.tar in").status, 0);
  ASSERT_EQ(RunWdsShard(dir, "create --output c/s-%d.tar in").status, 0);
  std::vector<std::string> a = Names(dir.path() + "/a/s-0.tar");
  std::vector<std::string> b = Names(dir.path() + "/b/s-0.tar");
  std::vector<std::string> sorted = Names(dir.path() + "/c/s-0.tar");
  EXPECT_NE(a, b);
  EXPECT_NE(a, sorted);
  std::sort(a.begin(), a.end());
  EXPECT_EQ(a, sorted);
}

TEST(WdsShardCreateTest, WorkersGiveTheSameBytesAsOneWorker) {
  TempDir dir;
  MakeNumbered(dir, 40, 700);
  const std::string options = "create --maxcount 7 --maxsize 8K --index --compress zst ";
  ASSERT_EQ(RunWdsShard(dir, options + "--workers 1 --output one/s-%03d.tar in").status, 0);
  ToolRun four = RunWdsShard(dir, options + "--workers 4 --output four/s-%03d.tar in");
  ASSERT_EQ(four.status, 0) << four.err;
  std::vector<std::string> names = ListDir(dir.path() + "/one");
  EXPECT_EQ(names.size(), 2u * 10u + 1u);
  EXPECT_EQ(names, ListDir(dir.path() + "/four"));
  for (const std::string& name : names) {
    EXPECT_EQ(ReadFile(dir.path() + "/one/" + name), ReadFile(dir.path() + "/four/" + name))
        << name;
  }
}

TEST(WdsShardCreateTest, IndexWritesSidecarsAndTheDatasetJson) {
  TempDir dir;
  MakeNumbered(dir, 5, 10);
  ToolRun run = RunWdsShard(dir, "create --maxcount 3 --index --output out/train-%06d.tar in");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("index: out/train-shardindex.json"));
  absl::StatusOr<DatasetIndex> index =
      DatasetIndex::Load(dir.path() + "/out/train-shardindex.json");
  ASSERT_TRUE(index.ok()) << index.status();
  const std::string out = dir.path() + "/out/";
  EXPECT_THAT(
      index->shards,
      ElementsAre(DatasetShard{out + "train-000000.tar", 3,
                               static_cast<int64_t>(fs::file_size(out + "train-000000.tar"))},
                  DatasetShard{out + "train-000001.tar", 2,
                               static_cast<int64_t>(fs::file_size(out + "train-000001.tar"))}));
  EXPECT_THAT(ReadFile(out + "train-shardindex.json"), HasSubstr("\"url\": \"train-000000.tar\""));
  EXPECT_EQ(ReadFile(out + "train-000001.tar.idx"),
            "v1.2 2\nbin 512 10 k03.bin\nbin 1536 10 k04.bin\n");
}

TEST(WdsShardCreateTest, ImageFolderAddsClassIndexAndWritesClasses) {
  TempDir dir;
  dir.Write("root/dog/d1.jpg", "D1");
  dir.Write("root/cat/c1.jpg", "C1");
  dir.Write("root/cat/sub/c2.png", "C2");
  dir.Write("root/bird/b1.jpg", "B1");
  dir.Write("root/README", "ignored");
  ToolRun run = RunWdsShard(dir, "create --format imagefolder --output out/train-%04d.tar root");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("ignoring root/README"));
  EXPECT_EQ(ReadFile(dir.path() + "/out/train-classes.txt"), "bird\ncat\ndog\n");
  using Member = std::pair<std::string, std::string>;
  EXPECT_THAT(Members(dir.path() + "/out/train-0000.tar"),
              ElementsAre(Member{"bird/b1.cls", "0"}, Member{"bird/b1.jpg", "B1"},
                          Member{"cat/c1.cls", "1"}, Member{"cat/c1.jpg", "C1"},
                          Member{"cat/sub/c2.cls", "1"}, Member{"cat/sub/c2.png", "C2"},
                          Member{"dog/d1.cls", "2"}, Member{"dog/d1.jpg", "D1"}));
}

TEST(WdsShardCreateTest, ImageFolderFileNamedClsIsADuplicateField) {
  TempDir dir;
  dir.Write("root/cat/c1.jpg", "C1");
  dir.Write("root/cat/c1.cls", "7");
  ToolRun run = RunWdsShard(dir, "create --format imagefolder --output out/s-%d.tar root");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("key 'cat/c1' has two members for field 'cls'"));
  EXPECT_THAT(ListDir(dir.path() + "/out"), IsEmpty());
}

TEST(WdsShardCreateTest, TsvListingKeepsItsOrderAndResolvesRelativePaths) {
  TempDir dir;
  dir.Write("data/x.bin", "X");
  dir.Write("data/y.bin", "YY");
  dir.Write("lists/train.tsv",
            "# comment\nzeta\tjpg=../data/x.bin\ttxt=../data/y.bin\n\nalpha\tbin=" + dir.path() +
                "/data/y.bin\n");
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar lists/train.tsv");
  ASSERT_EQ(run.status, 0) << run.err;
  using Member = std::pair<std::string, std::string>;
  EXPECT_THAT(
      Members(dir.path() + "/out/s-0.tar"),
      ElementsAre(Member{"zeta.jpg", "X"}, Member{"zeta.txt", "YY"}, Member{"alpha.bin", "YY"}));
}

TEST(WdsShardCreateTest, JsonlListingTakesPathsAndInlineNumbers) {
  TempDir dir;
  dir.Write("x.png", "PNG");
  dir.Write("list.jsonl",
            "{\"__key__\": \"s/1\", \"png\": \"x.png\", \"cls\": 4}\n"
            "{\"__key__\": \"s/2\", \"png\": \"x.png\", \"score\": 0.5}\n");
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar list.jsonl");
  ASSERT_EQ(run.status, 0) << run.err;
  using Member = std::pair<std::string, std::string>;
  EXPECT_THAT(Members(dir.path() + "/out/s-0.tar"),
              ElementsAre(Member{"s/1.cls", "4"}, Member{"s/1.png", "PNG"},
                          Member{"s/2.png", "PNG"}, Member{"s/2.score", "0.5"}));
}

TEST(WdsShardCreateTest, ListingWithAMissingFileNamesLineAndPath) {
  TempDir dir;
  dir.Write("x.bin", "X");
  dir.Write("list.tsv", "a\tbin=x.bin\nb\tbin=missing.bin\n");
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar list.tsv");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("list.tsv:2: missing.bin: cannot read"));
  EXPECT_FALSE(fs::exists(dir.path() + "/out"));
}

TEST(WdsShardCreateTest, ListingWithARepeatedKeyNamesBothLines) {
  TempDir dir;
  dir.Write("x.bin", "X");
  dir.Write("list.tsv", "a\tbin=x.bin\nb\tbin=x.bin\na\ttxt=x.bin\n");
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar list.tsv");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("list.tsv:3: key 'a' was already listed on line 1"));
}

TEST(WdsShardCreateTest, ListingKeyWithADotIsAnError) {
  TempDir dir;
  dir.Write("x.bin", "X");
  dir.Write("list.tsv", "a.b\tbin=x.bin\n");
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar list.tsv");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("list.tsv:1: key 'a.b'"));
}

TEST(WdsShardCreateTest, TwoFilesForOneKeyAndFieldNameBothPaths) {
  TempDir dir;
  dir.Write("in/a.jpg", "1");
  dir.Write("in/a.JPG", "2");
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar in");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("key 'a' has two members for field 'jpg'"));
  EXPECT_THAT(run.err, HasSubstr("in/a.JPG"));
  EXPECT_THAT(run.err, HasSubstr("in/a.jpg"));
  EXPECT_THAT(ListDir(dir.path() + "/out"), IsEmpty());
}

TEST(WdsShardCreateTest, UnreadableFileIsAnErrorNamingIt) {
  TempDir dir;
  dir.Write("in/a.jpg", "1");
  fs::create_symlink(dir.path() + "/nowhere", dir.path() + "/in/b.jpg");
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar in");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("in/b.jpg: cannot read"));
  EXPECT_THAT(ListDir(dir.path() + "/out"), IsEmpty());
}

TEST(WdsShardCreateTest, FileWithoutAFieldIsAnErrorNamingIt) {
  TempDir dir;
  dir.Write("in/a.jpg", "1");
  dir.Write("in/README", "no field");
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar in");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("in/README: the name has no dot"));
}

TEST(WdsShardCreateTest, EmptyDirectoryIsAnError) {
  TempDir dir;
  fs::create_directories(dir.path() + "/in");
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar in");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("in: no samples found"));
  EXPECT_FALSE(fs::exists(dir.path() + "/out"));
}

TEST(WdsShardCreateTest, EmptyTarOnStdinIsAnError) {
  TempDir dir;
  dir.Write("empty.tar", MakeTar({}));
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar - < empty.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("no samples found in -"));
  EXPECT_THAT(ListDir(dir.path() + "/out"), IsEmpty());
}

TEST(WdsShardCreateTest, PatternWithoutANumberIsAnError) {
  TempDir dir;
  MakeNumbered(dir, 1, 1);
  ToolRun run = RunWdsShard(dir, "create --output out/s.tar in");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("exactly one integer conversion"));
}

TEST(WdsShardCreateTest, ReshardsATarStreamKeepingMemberNames) {
  TempDir dir;
  dir.Write("in.tar", MakeTar({{"__meta__", "m"},
                               {"a.JPG", "jpg"},
                               {"a.cls", "1"},
                               {"noext", "x"},
                               {"d/b.txt", "b"},
                               {"c.txt", "c"}},
                              TarFormat::kGnu, Compression::kXz));
  ToolRun run = RunWdsShard(dir, "create --maxcount 2 --output out/s-%d.tar - < in.tar");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("2 member(s) without a field or with a metadata name"));
  EXPECT_THAT(Names(dir.path() + "/out/s-0.tar"), ElementsAre("a.JPG", "a.cls", "d/b.txt"));
  EXPECT_THAT(Names(dir.path() + "/out/s-1.tar"), ElementsAre("c.txt"));
  ToolRun before = RunWdsShard(dir, "ls in.tar");
  ToolRun after = RunWdsShard(dir, "ls out/s-0.tar out/s-1.tar");
  auto strip_urls = [](std::string text) {
    std::string out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out += line.substr(line.find('\t')) + "\n";
    return out;
  };
  EXPECT_EQ(strip_urls(after.out), strip_urls(before.out));
}

TEST(WdsShardCreateTest, ReshardingRefusesARepeatedField) {
  TempDir dir;
  dir.Write("in.tar", MakeTar({{"a.jpg", "1"}, {"a.JPG", "2"}}, TarFormat::kUstar));
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar in.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("in.tar: member a.JPG at offset 1024: key 'a' has two members "
                                 "for field 'jpg': member a.jpg at offset 0 and member a.JPG"));
  EXPECT_THAT(ListDir(dir.path() + "/out"), IsEmpty());
}

TEST(WdsShardCreateTest, TruncatedTarStreamLeavesOnlyFinishedShards) {
  TempDir dir;
  std::vector<TarEntry> entries;
  for (int i = 0; i < 6; ++i) entries.push_back({"k" + std::to_string(i) + ".bin", "0123"});
  std::string tar = MakeTar(entries, TarFormat::kUstar);
  dir.Write("cut.tar", tar.substr(0, tar.size() - 1024 - 700));
  ToolRun run = RunWdsShard(dir, "create --maxcount 2 --output out/s-%d.tar - < cut.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("truncated"));
  EXPECT_THAT(run.err, HasSubstr("1 finished shard(s) remain, unfinished ones were removed"));
  EXPECT_THAT(ListDir(dir.path() + "/out"), ElementsAre("s-0.tar"));
}

// The shell feeds one 1 KiB sample at a time, slowly, so that the tool is
// mid-run when it gets SIGINT; it must stop at a sample boundary, remove its
// unfinished shard and exit with 128 + SIGINT.
TEST(WdsShardCreateTest, InterruptedRunLeavesNoPartialShard) {
  TempDir dir;
  std::vector<TarEntry> entries;
  for (int i = 0; i < 400; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "k%04d.bin", i);
    entries.push_back({name, std::string(100, 'x')});
  }
  dir.Write("all.tar", MakeTar(entries, TarFormat::kUstar));
  const std::string producer =
      "for i in $(seq 0 399); do dd if=all.tar bs=1024 skip=$i count=1 status=none || exit 0; "
      "sleep 0.01; done";
  // The tool writes its pid (exec keeps the shell's), the shell its status.
  RunShell("cd " + dir.path() + " && { (" + producer + ") | sh -c 'echo $$ > pid; exec " + kTool +
           " create --maxcount 3 --output out/s-%03d.tar - 2> err'; echo $? > rc; } &");
  // Wait for two finished shards and one being written.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool started = false;
  while (std::chrono::steady_clock::now() < deadline && !started) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    int finished = 0, temporary = 0;
    for (const std::string& name : ListDir(dir.path() + "/out")) {
      (name.find(".tmp") == std::string::npos ? finished : temporary)++;
    }
    started = finished >= 2 && temporary == 1;
  }
  ASSERT_TRUE(started) << "the third shard never started";
  const pid_t pid = static_cast<pid_t>(std::atoi(ReadFile(dir.path() + "/pid").c_str()));
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGINT), 0);
  std::string rc;
  while (rc.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    rc = ReadFile(dir.path() + "/rc");
  }
  EXPECT_EQ(rc, "130\n") << "wds-shard did not stop on SIGINT";
  EXPECT_THAT(ReadFile(dir.path() + "/err"), HasSubstr("interrupted by signal 2"));
  std::vector<std::string> left = ListDir(dir.path() + "/out");
  ASSERT_GE(left.size(), 2u);
  for (size_t i = 0; i < left.size(); ++i) {
    char expected[32];
    std::snprintf(expected, sizeof(expected), "s-%03zu.tar", i);
    EXPECT_EQ(left[i], expected);
    EXPECT_EQ(Names(dir.path() + "/out/" + left[i]).size(), 3u) << left[i];
  }
}

// MakeRandomTree writes `n` samples of incompressible bytes, 1-40 KB each.
void MakeRandomTree(const TempDir& dir, int n) {
  uint32_t x = 12345;
  for (int i = 0; i < n; ++i) {
    std::string data(1000 + (x = x * 1664525u + 1013904223u) % 40000, '\0');
    for (char& c : data) c = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
    char name[32];
    std::snprintf(name, sizeof(name), "in/k%04d.bin", i);
    dir.Write(name, data);
  }
}

// SpawnTool starts `wds-shard ARGS...` in `dir` with stdout and stderr to
// /dev/null; returns its pid.
pid_t SpawnTool(const std::string& dir, const std::vector<std::string>& args) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (chdir(dir.c_str()) != 0) _exit(127);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    std::vector<char*> argv = {const_cast<char*>(kTool.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(kTool.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

TEST(WdsShardCreateTest, KilledAtRandomPointsNeverLeavesAPartialShardUnderAFinalName) {
  TempDir dir;
  MakeRandomTree(dir, 300);
  const std::vector<std::string> args = {"create", "--workers", "2",        "--maxcount",
                                         "15",     "--index",   "--output", "out/s-%04d.tar",
                                         "in"};
  ToolRun reference = RunWdsShard(dir,
                                  "create --workers 2 --maxcount 15 --index "
                                  "--output ref/s-%04d.tar in");
  ASSERT_EQ(reference.status, 0) << reference.err;
  const std::vector<std::string> finished = ListDir(dir.path() + "/ref");
  ASSERT_EQ(finished.size(), 2u * 20 + 1);  // 20 shards, their .idx, the dataset JSON
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(testing::RunShell("cd " + dir.path() + " && " + kTool +
                              " create --workers 2 --maxcount 15 --output timing/s-%04d.tar in "
                              "2>/dev/null"),
            0);
  const auto run_time = std::chrono::steady_clock::now() - start;
  std::mt19937 rng(7);
  for (int kill_number = 0; kill_number < 20; ++kill_number) {
    const pid_t pid = SpawnTool(dir.path(), args);
    const auto delay = std::chrono::duration_cast<std::chrono::microseconds>(run_time) *
                       std::uniform_real_distribution<double>(0.0, 1.2)(rng);
    std::this_thread::sleep_for(delay);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    // Whatever bears a final name is whole: byte for byte the reference's.
    for (const std::string& name : ListDir(dir.path() + "/out")) {
      if (name.find(".tmp") != std::string::npos) continue;
      EXPECT_EQ(ReadFile(dir.path() + "/out/" + name), ReadFile(dir.path() + "/ref/" + name))
          << "kill " << kill_number << " after " << delay.count() << " us: " << name;
    }
  }
  // A rerun removes what the killed runs left and completes identically.
  ToolRun rerun = RunWdsShard(dir,
                              "create --workers 2 --maxcount 15 --index "
                              "--output out/s-%04d.tar in");
  ASSERT_EQ(rerun.status, 0) << rerun.err;
  EXPECT_EQ(ListDir(dir.path() + "/out"), finished);
  for (const std::string& name : finished) {
    EXPECT_EQ(ReadFile(dir.path() + "/out/" + name), ReadFile(dir.path() + "/ref/" + name)) << name;
  }
}

// kCompressions: plain tars are written by libarchive, zstd ones through
// ZstdFileSink; both must fail alike.
const std::vector<std::string> kCompressions = {"none", "zst"};

TEST(WdsShardCreateTest, FileSizeLimitIsAnErrorNamingTheFileAndLeavesNothingPartial) {
  if (access("/usr/bin/prlimit", X_OK) != 0) GTEST_SKIP() << "prlimit(1) is needed";
  for (const std::string& compression : kCompressions) {
    SCOPED_TRACE(compression);
    TempDir dir;
    MakeRandomTree(dir, 100);
    // Shards of ~200 KB (random bytes: as large compressed) against a 100 KB
    // limit on any file written: the first write past it fails (EFBIG), as on
    // a full disk.
    ToolRun run = Shell(dir, "/usr/bin/prlimit --fsize=100000 " + kTool + " create --compress " +
                                 compression + " --maxcount 10 --output out/s-%04d.tar in");
    EXPECT_EQ(run.status, 1) << run.err;
    EXPECT_THAT(run.err, HasSubstr("out/s-0000.tar"));
    EXPECT_THAT(run.err, HasSubstr("File too large"));
    EXPECT_THAT(ListDir(dir.path() + "/out"), ::testing::IsEmpty());
  }
}

TEST(WdsShardCreateTest, FullDiskIsAnErrorNamingTheFileAndLeavesNothingPartial) {
  for (const std::string& compression : kCompressions) {
    SCOPED_TRACE(compression);
    TempDir dir;
    MakeRandomTree(dir, 100);
    std::filesystem::create_directories(dir.path() + "/out");
    if (testing::RunShell("mount -t tmpfs -o size=300k tmpfs " + dir.path() + "/out 2>/dev/null") !=
        0) {
      GTEST_SKIP() << "mounting a small tmpfs needs root";
    }
    ToolRun run = Shell(dir, kTool + " create --compress " + compression +
                                 " --maxcount 10 --output out/s-%04d.tar in");
    std::vector<std::string> left = ListDir(dir.path() + "/out");
    testing::RunShell("umount " + dir.path() + "/out");
    EXPECT_EQ(run.status, 1) << run.err;
    EXPECT_THAT(run.err, HasSubstr("No space left on device"));
    EXPECT_THAT(run.err, HasSubstr("out/s-0001.tar"));
    // The first shard (about 200 KB) was finished and kept; nothing else.
    EXPECT_THAT(left, ::testing::ElementsAre("s-0000.tar"));
  }
}

TEST(WdsShardCreateTest, NoProgressLineWhenStderrIsNotATerminal) {
  TempDir dir;
  MakeNumbered(dir, 3, 10);
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar in");
  ASSERT_EQ(run.status, 0);
  EXPECT_EQ(run.err.find('\r'), std::string::npos) << run.err;
  EXPECT_THAT(run.err, HasSubstr("create: wrote 1 shard(s), 3 samples"));
}

TEST(WdsShardCreateTest, ProgressLineOnATerminal) {
  if (!fs::exists("/usr/bin/script")) GTEST_SKIP() << "script(1) is needed for a terminal";
  TempDir dir;
  MakeNumbered(dir, 3, 10);
  // script(1) runs the tool on a pseudo-terminal and copies what it shows.
  ToolRun run =
      Shell(dir, "/usr/bin/script -qec '" + kTool + " create --output out/s-%d.tar in' /dev/null");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\rwds-shard: 1/3 samples, 10 B"));
  EXPECT_THAT(run.out, HasSubstr("ETA"));
  EXPECT_THAT(run.out, HasSubstr("\r\033[Kwds-shard: create: wrote 1 shard(s)"));
}

TEST(WdsShardCreateTest, LeftoverShardFromAnEarlierRunIsNamed) {
  TempDir dir;
  MakeNumbered(dir, 2, 1);
  dir.Write("out/s-1.tar", "old");
  ToolRun run = RunWdsShard(dir, "create --output out/s-%d.tar in");
  ASSERT_EQ(run.status, 0);
  EXPECT_THAT(run.err, HasSubstr("out/s-1.tar is left from an earlier run"));
}

// WriteIdx writes a gzip-compressed IDX file of unsigned bytes.
void WriteIdx(const std::string& path, uint32_t magic, std::vector<uint32_t> dims,
              const std::string& data) {
  std::string bytes;
  auto put = [&](uint32_t v) {
    for (int shift : {24, 16, 8, 0}) bytes.push_back(static_cast<char>(v >> shift & 0xff));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  bytes += data;
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

TEST(FashionMnistTest, ConvertsIdxToPngAndClsSamples) {
  TempDir dir;
  std::string pixels;
  for (int i = 0; i < 3 * 2 * 3; ++i) pixels.push_back(static_cast<char>(i * 13));
  WriteIdx(dir.path() + "/images.gz", 0x803, {3, 2, 3}, pixels);
  WriteIdx(dir.path() + "/labels.gz", 0x801, {3}, std::string("\x07\x00\x09", 3));
  ToolRun run =
      Shell(dir, std::string(WDS_TOOLS_DIR) + "/wds-fashion-mnist images.gz labels.gz | " + kTool +
                     " create --maxcount 2 --output out/test-%06d.tar -");
  ASSERT_EQ(run.status, 0) << run.err;
  auto members = Members(dir.path() + "/out/test-000000.tar");
  ASSERT_EQ(members.size(), 4u);
  EXPECT_EQ(members[0], (std::pair<std::string, std::string>{"000000.cls", "7"}));
  EXPECT_EQ(members[2], (std::pair<std::string, std::string>{"000001.cls", "0"}));
  EXPECT_EQ(members[3].first, "000001.png");
  Rng rng(0);
  absl::StatusOr<Array> image =
      DecodeImage(members[3].second, *ParseImageSpec("l8"), ImageDecodeOptions(), rng);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::string(image->data.view()), pixels.substr(6, 6));
  EXPECT_EQ(Members(dir.path() + "/out/test-000001.tar")[0].second, "9");
}

TEST(FashionMnistTest, LabelCountMismatchIsAnError) {
  TempDir dir;
  WriteIdx(dir.path() + "/images.gz", 0x803, {2, 1, 1}, "ab");
  WriteIdx(dir.path() + "/labels.gz", 0x801, {3}, "abc");
  ToolRun run = Shell(dir, std::string(WDS_TOOLS_DIR) + "/wds-fashion-mnist images.gz labels.gz");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("labels.gz has 3 labels for 2 images"));
}

TEST(FashionMnistTest, WrongMagicIsAnError) {
  TempDir dir;
  WriteIdx(dir.path() + "/images.gz", 0x801, {2}, "ab");
  WriteIdx(dir.path() + "/labels.gz", 0x801, {2}, "ab");
  ToolRun run = Shell(dir, std::string(WDS_TOOLS_DIR) + "/wds-fashion-mnist images.gz labels.gz");
  EXPECT_THAT(run.err, HasSubstr("images.gz: not an IDX file"));
}

}  // namespace
}  // namespace wds
