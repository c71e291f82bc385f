// Tests for the wds-bench tool, run as a separate process as users run it, on
// small generated shards: 3 shards of 10 samples, each a tiny PNG and a cls.
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/tar/tar_writer.h"

namespace wds {
namespace {

using testing::ToolRun;

using ::testing::HasSubstr;
using testing::ReadFile;
using testing::RunShell;
using testing::TempDir;

constexpr int kShards = 3;
constexpr int kSamplesPerShard = 10;

class WdsBenchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string png = dir_->path() + "/image.png";
    ASSERT_EQ(RunShell("/usr/bin/python3 -c \"from PIL import Image; "
                       "Image.new('RGB', (8, 6), (10, 200, 30)).save('" +
                       png + "')\""),
              0);
    png_ = new std::string(ReadFile(png));
    ASSERT_FALSE(png_->empty());
    for (int shard = 0; shard < kShards; ++shard) {
      auto writer = TarWriter::Create(dir_->path() + "/shard-" + std::to_string(shard) + ".tar");
      ASSERT_TRUE(writer.ok()) << writer.status();
      for (int i = 0; i < kSamplesPerShard; ++i) {
        std::string key = "s" + std::to_string(shard) + "_" + std::to_string(i);
        ASSERT_TRUE((*writer)->WriteMember(key + ".png", *png_).ok());
        ASSERT_TRUE((*writer)->WriteMember(key + ".cls", std::to_string(i % 10)).ok());
      }
      ASSERT_TRUE((*writer)->Close().ok());
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete png_;
    dir_ = nullptr;
    png_ = nullptr;
  }

  static std::string Shards() { return dir_->path() + "/shard-{0..2}.tar"; }

  ToolRun Bench(const std::string& args, const std::string& env = "") {
    return testing::RunCaptured(run_dir_.path(),
                                env + " " + std::string(WDS_TOOLS_DIR) + "/wds-bench " + args);
  }

  // Query evaluates a Python expression over `json` (bound to d) and returns
  // what it prints: the JSON must parse for this to return anything.
  std::string Query(const std::string& json, const std::string& expression) {
    std::string file = run_dir_.Write("result.json", json);
    std::string script = run_dir_.Write(
        "query.py",
        "import json, sys\nd = json.load(open(sys.argv[1]))\nprint(repr((" + expression + ")))\n");
    std::string out = run_dir_.path() + "/query";
    int status = RunShell("/usr/bin/python3 " + script + " " + file + " > " + out);
    EXPECT_EQ(status, 0) << "not JSON: " << json;
    std::string text = ReadFile(out);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }

  static TempDir* dir_;
  static std::string* png_;
  TempDir run_dir_;
};

TempDir* WdsBenchTest::dir_ = nullptr;
std::string* WdsBenchTest::png_ = nullptr;

TEST_F(WdsBenchTest, JsonHasEveryKey) {
  ToolRun run = Bench("--json --batch 4 " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(Query(run.out, "sorted(d)"),
            "['batch', 'batches', 'bytes', 'bytes_source', 'decode', 'device', 'epochs', "
            "'first_batch_s', 'mb_per_s', 'minor_faults', 'peak_rss_mb', 'pool', 'read_pool', "
            "'samples', 'samples_per_s', 'seconds', 'shares', 'shuffle', 'steady_samples_per_s', "
            "'sys_s', 'urls', 'user_s', 'worker_seconds', 'workers']");
  EXPECT_EQ(Query(run.out, "sorted(d['shares'])"), "['collate', 'decode', 'read', 'waiting']");
  EXPECT_EQ(Query(run.out, "sorted(d['pool'])"),
            "['allocations', 'frees', 'peak_mb', 'pinned', 'reuses']");
  EXPECT_EQ(Query(run.out, "sorted(d['read_pool'])"),
            "['allocations', 'frees', 'peak_mb', 'reuses']");
  EXPECT_EQ(Query(run.out, "d['pool']['pinned']"), "False");
  // Times, page faults and CPU time depend on how loaded the machine is (a
  // run may fault in no new page, or take less CPU time than the kernel's
  // accounting tick): only types and the bounds that load cannot break.
  EXPECT_EQ(Query(run.out,
                  "[k for k in ['seconds', 'samples_per_s', 'steady_samples_per_s', 'mb_per_s', "
                  "'first_batch_s', 'peak_rss_mb', 'worker_seconds', 'user_s', 'sys_s'] "
                  "if type(d[k]) is not float or d[k] < 0]"),
            "[]");
  EXPECT_EQ(Query(run.out, "type(d['minor_faults']) is int and d['minor_faults'] >= 0"), "True");
  // A live process has resident pages, and the first batch is part of the run.
  EXPECT_EQ(Query(run.out, "d['peak_rss_mb'] > 0 and 0 < d['first_batch_s'] <= d['seconds']"),
            "True");
  // Eight batches: a rate after the first one.
  EXPECT_EQ(Query(run.out, "d['batches'] > 1 and d['steady_samples_per_s'] > 0"), "True");
}

TEST_F(WdsBenchTest, OneBatchHasNoSteadyRate) {
  // 30 samples in one batch: nothing comes after the first batch.
  ToolRun run = Bench("--json --batch 64 " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(Query(run.out, "d['batches'], d['steady_samples_per_s']"), "(1, 0.0)");
}

TEST_F(WdsBenchTest, PinMemoryWithoutAGpuWarnsAndRunsUnpinned) {
  if (std::system("nvidia-smi -L > /dev/null 2>&1") == 0) {
    GTEST_SKIP() << "tests the fallback without a GPU; this machine has one";
  }
  ToolRun run = Bench("--json --batch 4 --pin-memory " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("pin_memory was requested but pinned memory is unavailable"));
  EXPECT_EQ(Query(run.out, "d['pool']['pinned'], d['samples']"), "(False, 30)");
}

TEST_F(WdsBenchTest, DeviceCpuIsTheDefaultAndSaysSo) {
  ToolRun run = Bench("--json --batch 4 --device cpu " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(Query(run.out, "d['device']"), "'cpu'");
}

TEST_F(WdsBenchTest, DeviceOptionErrorsNameTheOption) {
  ToolRun bad = Bench("--device gpu " + Shards());
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr("--device: expected cpu, cuda or cuda:N, got 'gpu'"));
  ToolRun none = Bench("--device cuda --decode none " + Shards());
  EXPECT_EQ(none.status, 1);
  EXPECT_THAT(none.err, HasSubstr("--device cuda needs an image --decode spec, not none"));
  ToolRun in_workers = Bench("--decode-in-workers " + Shards());
  EXPECT_EQ(in_workers.status, 1);
  EXPECT_THAT(in_workers.err, HasSubstr("--decode-in-workers needs --device cuda (the CPU path "
                                        "always decodes in the workers)"));
}

TEST_F(WdsBenchTest, DeviceCudaWithoutAGpuFailsNamingWhy) {
  if (std::system("nvidia-smi -L > /dev/null 2>&1") == 0) {
    GTEST_SKIP() << "tests the refusal without a GPU; this machine has one";
  }
  for (const std::string mode : {"", "--decode-in-workers "}) {
    ToolRun run = Bench("--device cuda " + mode + Shards());
    EXPECT_EQ(run.status, 1) << mode;
    EXPECT_THAT(run.err, HasSubstr("wds-bench: decode on cuda:0: ")) << mode;
  }
}

TEST_F(WdsBenchTest, OneWorkerHasOnePartialBatch) {
  ToolRun run = Bench("--json --workers 1 --batch 4 " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(Query(run.out, "d['samples'], d['batches']"), "(30, 8)");
}

TEST_F(WdsBenchTest, EachWorkerEndsWithItsOwnPartialBatch) {
  // One shard per worker: 10 samples each make batches of 4, 4 and 2.
  ToolRun run = Bench("--json --workers 3 --batch 4 " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(Query(run.out, "d['samples'], d['batches'], d['workers']"), "(30, 9, 3)");
}

TEST_F(WdsBenchTest, EpochsMultiplyCounts) {
  ToolRun run = Bench("--json --workers 2 --batch 5 --epochs 3 --shuffle 8 " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  // Worker 0 reads two shards (4 batches), worker 1 one shard (2), per epoch.
  EXPECT_EQ(Query(run.out, "d['samples'], d['batches']"), "(90, 18)");
}

TEST_F(WdsBenchTest, SharesAreFractionsAndStagesSumToOne) {
  ToolRun run = Bench("--json --workers 2 --batch 4 " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(Query(run.out, "all(0 <= v <= 1 for v in d['shares'].values())"), "True");
  EXPECT_EQ(Query(run.out,
                  "abs(d['shares']['read'] + d['shares']['decode'] + "
                  "d['shares']['collate'] - 1) < 0.001"),
            "True");
}

TEST_F(WdsBenchTest, BytesAreTheUndecodedFieldSizes) {
  ToolRun run = Bench("--json --decode none --epochs 2 " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  // cls payloads are one digit each.
  const size_t per_epoch = kShards * kSamplesPerShard * (png_->size() + 1);
  EXPECT_EQ(Query(run.out, "d['bytes'], d['samples'], d['decode']"),
            "(" + std::to_string(2 * per_epoch) + ", 60, 'none')");
}

TEST_F(WdsBenchTest, FieldsAndCenterCropDecode) {
  ToolRun run = Bench(
      "--json --fields png,cls --decode rgb8 --resize 4x4 --crop center --batch 10 " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(Query(run.out, "d['samples'], d['batches']"), "(30, 3)");
}

TEST_F(WdsBenchTest, TextSummaryWithoutJson) {
  ToolRun run = Bench("--batch 4 " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("30 samples in 8 batches"));
  EXPECT_THAT(run.out, HasSubstr("samples/s"));
  EXPECT_THAT(run.out, HasSubstr("first batch"));
}

TEST_F(WdsBenchTest, SweepPrintsOnePointPerWorkerCountAndWritesPng) {
  const std::string plot = run_dir_.path() + "/sweep.png";
  ToolRun run = Bench("--json --batch 4 --sweep-workers 1..3 --plot " + plot + " " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(Query(run.out, "[(p['workers'], p['batches']) for p in d]"),
            "[(1, 8), (2, 8), (3, 9)]");
  std::string png = ReadFile(plot);
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST_F(WdsBenchTest, SweepListWithoutJsonPrintsEachPoint) {
  ToolRun run = Bench("--batch 4 --sweep-workers 3,1 " + Shards());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("workers 3: 30 samples in 9 batches"));
  EXPECT_THAT(run.out, HasSubstr("workers 1: 30 samples in 8 batches"));
}

TEST_F(WdsBenchTest, MissingGnuplotIsAClearError) {
  const std::string plot = run_dir_.path() + "/sweep.png";
  ToolRun run = Bench("--sweep-workers 1..2 --plot " + plot + " " + Shards(), "PATH=/nonexistent");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("gnuplot not found"));
}

TEST_F(WdsBenchTest, UnknownOptionExitsOneNamingIt) {
  ToolRun run = Bench("--bogus 3 " + Shards());
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("unknown option --bogus"));
}

TEST_F(WdsBenchTest, BadOptionValueNamesTheOption) {
  ToolRun run = Bench("--workers 0 " + Shards());
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("--workers: expected an integer >= 1, got '0'"));
}

TEST_F(WdsBenchTest, BadResizeNamesTheValue) {
  ToolRun run = Bench("--resize 224 " + Shards());
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("--resize: expected WxH, got '224'"));
}

TEST_F(WdsBenchTest, UnknownDecodeSpecIsAnError) {
  ToolRun run = Bench("--decode rgb9 " + Shards());
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("--decode"));
  EXPECT_THAT(run.err, HasSubstr("rgb9"));
}

TEST_F(WdsBenchTest, MissingPatternIsAnError) {
  ToolRun run = Bench("--json");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("missing URL_PATTERN"));
}

TEST_F(WdsBenchTest, MalformedPatternIsAnError) {
  ToolRun run = Bench("'" + dir_->path() + "/shard-{0..2.tar'");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("shard-{0..2.tar"));
}

TEST_F(WdsBenchTest, UnreadableShardNamesTheFile) {
  ToolRun run = Bench(dir_->path() + "/missing-{0..1}.tar");
  EXPECT_EQ(run.status, 1);
  EXPECT_THAT(run.err, HasSubstr("missing-0.tar"));
}

}  // namespace
}  // namespace wds
