// Tests for the wds-shard tool, run as a separate process as users run it.
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"

namespace wds {
namespace {

using testing::ToolRun;

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

std::string ReferenceLs(const TempDir& dir, const std::string& urls) {
  std::string out = dir.path() + "/reference";
  int status = RunShell(std::string("/usr/bin/python3 ") + WDS_SOURCE_DIR +
                        "/tests/tools/reference_ls.py " + urls + " > " + out);
  EXPECT_EQ(status, 0);
  return ReadFile(out);
}

// Tricky names: pax and GNU long names, dots in directories, upper-case
// extensions, metadata, non-regular members, non-adjacent repeats, unicode.
std::vector<TarEntry> TrickyEntries() {
  std::string long_dir(120, 'd');
  return {
      {"__meta__", "m"},
      {"__index__/x.json", "{}"},
      {"dir.v1/a.JPG", "jpeg-bytes"},
      {"dir.v1/a.seg.PNG", "png"},
      {"dir.v1/a.cls", "3"},
      {"dir.v1", "", 'd'},
      {"link.txt", "dir.v1/a.cls", 'l'},
      {"noext", "skipped"},
      {long_dir + "/b.txt", std::string(1000, 'x')},
      {"caf\xc3\xa9.txt", "unicode"},
      {"a2.cls", "1"},
      {"a3.cls", "2"},
      {"a2.txt", "again"},
      {"empty.bin", ""},
  };
}

TEST(WdsShardLsTest, JsonAgreesWithReferenceGroupingOnTrickyShards) {
  TempDir dir;
  std::string urls;
  int i = 0;
  for (auto [format, compression] : {std::pair{TarFormat::kPax, Compression::kNone},
                                     {TarFormat::kGnu, Compression::kGzip},
                                     {TarFormat::kPax, Compression::kBzip2},
                                     {TarFormat::kGnu, Compression::kXz}}) {
    std::string name = "shard-" + std::to_string(i++) + ".tar";
    urls += " " + dir.Write(name, MakeTar(TrickyEntries(), format, compression));
  }
  ToolRun run = RunWdsShard(dir, "ls --json" + urls);
  ASSERT_EQ(run.status, 0) << run.err;
  std::string reference = ReferenceLs(dir, urls);
  EXPECT_EQ(run.out, reference);
  EXPECT_THAT(run.out, HasSubstr("\"__key__\": \"caf\\u00e9\""));
  EXPECT_THAT(run.out, HasSubstr("\"jpg\": {\"size\": 10, \"crc32\": "));
}

TEST(WdsShardLsTest, JsonLineHasExactShape) {
  TempDir dir;
  std::string url = dir.Write("s.tar", MakeTar({{"k1.txt", "hello"}, {"k1.cls", "7"}}));
  ToolRun run = RunWdsShard(dir, "ls --json " + url);
  ASSERT_EQ(run.status, 0) << run.err;
  // crc32("hello") = 907060870, crc32("7") = 1790921346 (zlib).
  EXPECT_EQ(run.out, "{\"__key__\": \"k1\", \"__url__\": \"" + url +
                         "\", \"txt\": {\"size\": 5, \"crc32\": 907060870}, \"cls\": {\"size\": 1, "
                         "\"crc32\": 1790921346}}\n");
}

TEST(WdsShardLsTest, TextLinesNameUrlKeyAndFieldSizes) {
  TempDir dir;
  std::string url = dir.Write("s.tar", MakeTar({{"k1.txt", "hello"}, {"k2.cls", "7"}}));
  ToolRun run = RunWdsShard(dir, "ls " + url);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, url + "\tk1\ttxt:5\n" + url + "\tk2\tcls:1\n");
}

TEST(WdsShardLsTest, BracePatternExpandsToShards) {
  TempDir dir;
  dir.Write("p-0.tar", MakeTar({{"a.txt", "1"}}));
  dir.Write("p-1.tar", MakeTar({{"b.txt", "2"}}));
  ToolRun run = RunWdsShard(dir, "ls " + dir.path() + "/p-{0..1}.tar");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, dir.path() + "/p-0.tar\ta\ttxt:1\n" + dir.path() + "/p-1.tar\tb\ttxt:1\n");
}

TEST(WdsShardLsTest, MissingShardExitsNonZeroNamingTheUrl) {
  TempDir dir;
  ToolRun run = RunWdsShard(dir, "ls --json " + dir.path() + "/missing.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr(dir.path() + "/missing.tar"));
  EXPECT_EQ(run.out, "");
}

TEST(WdsShardLsTest, TruncatedShardExitsNonZeroAfterTheGoodSamples) {
  TempDir dir;
  std::string tar =
      MakeTar({{"a.txt", "first"}, {"b.txt", std::string(5000, 'b')}}, TarFormat::kUstar);
  std::string url = dir.Write("t.tar", tar.substr(0, 512 + 512 + 512 + 1000));
  ToolRun run = RunWdsShard(dir, "ls " + url);
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, url + "\ta\ttxt:5\n");
  EXPECT_THAT(run.err, HasSubstr(url));
  EXPECT_THAT(run.err, HasSubstr("b.txt"));
}

TEST(WdsShardLsTest, NotATarExitsNonZero) {
  TempDir dir;
  std::string url = dir.Write("x.tar", std::string(4096, 'z'));
  ToolRun run = RunWdsShard(dir, "ls " + url);
  EXPECT_EQ(run.status, 1);
  // Code and message, without the status's payloads (its error kind).
  EXPECT_THAT(run.err, HasSubstr("INVALID_ARGUMENT: " + url +
                                 ": not a tar archive (Unrecognized archive "
                                 "format)\n"));
  EXPECT_THAT(run.err, Not(HasSubstr("webdataset_cpp/")));
}

TEST(WdsShardLsTest, FailingPipeAfterCompleteTarExitsNonZero) {
  TempDir dir;
  std::string path = dir.Write("ok.tar", MakeTar({{"a.txt", "x"}}));
  ToolRun run = RunWdsShard(dir, "ls 'pipe:cat " + path + "; exit 3'");
  EXPECT_EQ(run.status, 1);
  // The command failed, so the sample still being grouped is not trusted.
  EXPECT_EQ(run.out, "");
  EXPECT_THAT(run.err, HasSubstr("exit status 3"));
}

TEST(WdsShardLsTest, ContinueHandlerSkipsBadShardAndReportsIt) {
  TempDir dir;
  std::string good = dir.Write("good.tar", MakeTar({{"a.txt", "x"}}));
  ToolRun run =
      RunWdsShard(dir, "ls --handler warn_and_continue " + dir.path() + "/missing.tar " + good);
  EXPECT_EQ(run.status, 0);
  EXPECT_EQ(run.out, good + "\ta\ttxt:1\n");
  EXPECT_THAT(run.err, HasSubstr("missing.tar"));
  EXPECT_THAT(run.err, HasSubstr("1 error(s) handled by warn_and_continue"));
}

TEST(WdsShardLsTest, BadArgumentsAreErrors) {
  TempDir dir;
  EXPECT_THAT(RunWdsShard(dir, "ls --handler bogus x.tar").err, HasSubstr("\"bogus\""));
  EXPECT_THAT(RunWdsShard(dir, "ls --frobnicate x.tar").err,
              HasSubstr("unknown option --frobnicate"));
  EXPECT_THAT(RunWdsShard(dir, "ls").err, HasSubstr("no shard URL"));
  EXPECT_THAT(RunWdsShard(dir, "ls 'x-{1..2.tar'").err, HasSubstr("x-{1..2.tar"));
  EXPECT_EQ(RunWdsShard(dir, "frob").status, 1);
  EXPECT_EQ(RunWdsShard(dir, "").status, 2);
}

}  // namespace
}  // namespace wds
