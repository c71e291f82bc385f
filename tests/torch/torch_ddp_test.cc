// Multi-process DDP runs of the built wds-train over deliberately uneven
// shards (100, 300, 50, 700 and 20 samples), Gloo on loopback: equal step
// counts, no repeats, the promised number left out, and mismatches that fail
// with a message instead of hanging.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gpu/jpeg_variants.h"
#include "gtest/gtest.h"
#include "util/remote_test_util.h"
#include "util/test_util.h"
#include "wds/base/array.h"
#include "wds/decode/npy.h"
#include "wds/loader/equalize.h"
#include "wds/shards/shard_list.h"
#include "wds/tar/shard_index.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kShardSizes[] = {100, 300, 50, 700, 20};
constexpr int kTotal = 1170;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// FreePort asks the kernel for a port that is free now.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// An 8x8 gray image (npy) and a class per sample; keys "s<shard>_<index>".
std::string MakeShard(int shard, int samples) {
  std::vector<testing::TarEntry> entries;
  for (int i = 0; i < samples; ++i) {
    const std::string key = "s" + std::to_string(shard) + "_" + std::to_string(i);
    const int label = (i + shard) % 4;
    std::string pixels(64, static_cast<char>(label * 60));
    Array image{DType::kUInt8, {8, 8}, Buffer::Copy(pixels)};
    entries.push_back({key + ".npy", EncodeNpy(image)});
    entries.push_back({key + ".cls", std::to_string(label)});
  }
  return testing::MakeTar(entries);
}

struct RankResult {
  int exit_code = -1;
  std::string json;    // the stdout line
  std::string stderr;  // everything the rank logged
  std::vector<int64_t> batches;
  std::vector<int64_t> samples;
  std::map<int, std::vector<std::string>> keys;  // by epoch
};

std::vector<int64_t> JsonInts(const std::string& json, const std::string& name) {
  std::smatch match;
  std::vector<int64_t> values;
  if (!std::regex_search(json, match, std::regex("\"" + name + "\": \\[([0-9, ]*)\\]"))) {
    return values;
  }
  std::stringstream list(match[1].str());
  std::string item;
  while (std::getline(list, item, ',')) values.push_back(std::stoll(item));
  return values;
}

class DdpTest : public ::testing::Test {
 protected:
  explicit DdpTest(std::vector<int> sizes = {std::begin(kShardSizes), std::end(kShardSizes)})
      : sizes_(std::move(sizes)) {}

  void SetUp() override {
    for (size_t s = 0; s < sizes_.size(); ++s) {
      shards_.push_back(dir_.Write("shard-" + std::to_string(s) + ".tar",
                                   MakeShard(static_cast<int>(s), sizes_[s])));
    }
  }

  std::string Pattern() const {
    return dir_.path() + "/shard-{0.." + std::to_string(sizes_.size() - 1) + "}.tar";
  }

  // Train runs `world` ranks of wds-train (each killed after 50 s at most)
  // and collects their results.
  std::vector<RankResult> Train(int world, const std::string& args,
                                const std::map<int, std::string>& rank_args = {}) {
    const int port = FreePort();
    const std::string tool = std::string(WDS_TOOLS_DIR) + "/wds-train";
    const std::string keys = dir_.path() + "/keys" + std::to_string(++runs_);
    std::string command;
    for (int r = 0; r < world; ++r) {
      const std::string out = dir_.path() + "/rank" + std::to_string(r);
      command += "(RANK=" + std::to_string(r) + " WORLD_SIZE=" + std::to_string(world) +
                 " LOCAL_RANK=" + std::to_string(r) +
                 " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                 " timeout -s KILL 50 " + tool + " --train '" + Pattern() +
                 "' --image-field npy --image-size 8 --num-classes 4 --shuffle 0 --threads 1" +
                 " --log-keys " + keys + " " + args + " " +
                 (rank_args.count(r) ? rank_args.at(r) : std::string()) + " >" + out + ".out 2>" +
                 out + ".err; echo $? >" + out + ".rc) & ";
    }
    EXPECT_EQ(testing::RunShell(command + "wait"), 0);
    std::vector<RankResult> results(world);
    for (int r = 0; r < world; ++r) {
      const std::string out = dir_.path() + "/rank" + std::to_string(r);
      RankResult& result = results[r];
      result.exit_code = std::stoi(ReadFile(out + ".rc"));
      result.json = ReadFile(out + ".out");
      result.stderr = ReadFile(out + ".err");
      result.batches = JsonInts(result.json, "batches");
      result.samples = JsonInts(result.json, "samples");
      std::ifstream lines(keys + ".rank" + std::to_string(r));
      int epoch = 0;
      std::string key;
      while (lines >> epoch >> key) result.keys[epoch].push_back(key);
    }
    return results;
  }

  // AllKeys is every key trained on in `epoch`, over all ranks.
  static std::vector<std::string> AllKeys(const std::vector<RankResult>& results, int epoch) {
    std::vector<std::string> all;
    for (const RankResult& r : results) {
      auto it = r.keys.find(epoch);
      if (it != r.keys.end()) all.insert(all.end(), it->second.begin(), it->second.end());
    }
    return all;
  }

  static size_t Distinct(const std::vector<std::string>& keys) {
    return std::set<std::string>(keys.begin(), keys.end()).size();
  }

  const std::vector<int> sizes_;
  testing::TempDir dir_;
  std::vector<std::string> shards_;
  int runs_ = 0;
};

// The case that whole-shard splitting cannot balance: 7 shards of 5 to 610
// samples (1,385 in all) over 3 ranks, batch 32. Split by shards, one rank's
// shards held fewer samples than a batch, so dropping trained 0 steps, and
// wrapping repeated that rank's few samples dozens of times.
class SevenUnevenShardsDdpTest : public DdpTest {
 protected:
  SevenUnevenShardsDdpTest() : DdpTest({5, 610, 40, 300, 120, 90, 220}) {}
};

// Rank 0 reads shards 0, 2, 4 (170 samples: 17 batches of 10), rank 1 shards
// 1, 3 (1000 samples): both run 17 steps, and 1170 - 2 * 170 = 830 samples are
// left out of each epoch.
TEST_F(DdpTest, DropTwoRanksRunTheSmallestRanksBatches) {
  std::vector<RankResult> results =
      Train(2, "--split shards --epochs 2 --batch-size 10 --no-shardshuffle --equalize drop");
  for (const RankResult& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.stderr;
    EXPECT_THAT(r.batches, ElementsAre(17, 17)) << r.json;
    EXPECT_THAT(r.samples, ElementsAre(170, 170)) << r.json;
    EXPECT_THAT(r.json, HasSubstr("\"world_size\": 2, "));
  }
  for (int epoch : {0, 1}) {
    const std::vector<std::string> keys = AllKeys(results, epoch);
    EXPECT_EQ(keys.size(), 340u);
    EXPECT_EQ(Distinct(keys), 340u) << "a sample was trained on twice in epoch " << epoch;
    EXPECT_EQ(kTotal - static_cast<int>(keys.size()), 830);
  }
}

// With shard shuffling each epoch gives the ranks other shards; the steps are
// the minimum over the ranks of their full batches, as the plan computes from
// the shards each rank reads in that epoch.
TEST_F(DdpTest, DropThreeRanksWithShardShuffleFollowsThePlan) {
  std::vector<RankResult> results = Train(3, "--split shards --epochs 3 --batch-size 16 --seed 5");
  ShardSampleCounts counts;
  for (int s = 0; s < 5; ++s) counts.Set(shards_[s], kShardSizes[s]);
  for (int epoch = 0; epoch < 3; ++epoch) {
    int64_t steps = INT64_MAX;
    for (int rank = 0; rank < 3; ++rank) {
      WorkerContext ctx{.rank = rank, .world_size = 3, .epoch = epoch, .seed = 5};
      RankEpochPlan plan = PlanRankEpoch(*ExpandUrls(Pattern()), {.shuffle = true}, ctx,
                                         {.batch_size = 16, .partial = false}, counts)
                               .value();
      steps = std::min(steps, plan.LocalSteps(EqualizePolicy::kDrop));
    }
    const std::vector<std::string> keys = AllKeys(results, epoch);
    EXPECT_EQ(keys.size(), static_cast<size_t>(3 * 16 * steps)) << "epoch " << epoch;
    EXPECT_EQ(Distinct(keys), keys.size()) << "a sample was trained on twice in epoch " << epoch;
    for (const RankResult& r : results) {
      ASSERT_EQ(r.exit_code, 0) << r.stderr;
      ASSERT_EQ(r.batches.size(), 3u) << r.json;
      EXPECT_EQ(r.batches[epoch], steps) << r.json;
    }
  }
}

// The default split is sample-granular: with 1170 samples each of 3 ranks
// holds 390 (two workers, 195 each: 12 full batches of 16), so every rank
// runs 24 steps of full batches, 1152 distinct samples are trained in each
// epoch, and with shard shuffling the 18 left out differ between epochs.
TEST_F(DdpTest, SampleSplitGivesEveryRankAnEqualShare) {
  std::vector<RankResult> results =
      Train(3, "--epochs 2 --batch-size 16 --seed 5 --equalize drop --workers 2");
  for (const RankResult& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.stderr;
    EXPECT_THAT(r.batches, ElementsAre(24, 24)) << r.json;
    EXPECT_THAT(r.samples, ElementsAre(384, 384)) << r.json;
  }
  EXPECT_THAT(results[0].stderr, HasSubstr("split samples, equalize drop"));
  EXPECT_THAT(results[0].stderr,
              HasSubstr("epoch 0: 1170 samples over 3 rank(s), 390 each; equalize drop: batches "
                        "per rank 24 24 24 -> 24 steps; 1152 samples trained, 18 left out"));
  std::set<std::string> epochs[2];
  for (int epoch : {0, 1}) {
    const std::vector<std::string> keys = AllKeys(results, epoch);
    EXPECT_EQ(keys.size(), 1152u);
    EXPECT_EQ(Distinct(keys), 1152u) << "a sample was trained on twice in epoch " << epoch;
    epochs[epoch].insert(keys.begin(), keys.end());
  }
  EXPECT_NE(epochs[0], epochs[1]);
}

// wds-train's defaults (sample split, drop) on the seven uneven shards: each
// rank holds 461 or 462 samples, 14 full batches of 32, so every rank runs 14
// steps in each epoch, 3 * 14 * 32 = 1,344 distinct samples are trained per
// epoch and the 41 left out (the partial batches) differ between epochs.
TEST_F(SevenUnevenShardsDdpTest, DefaultsGiveEqualStepsAndTrainAllButThePartialBatches) {
  std::vector<RankResult> results = Train(3, "--epochs 2 --batch-size 32 --seed 3");
  for (const RankResult& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.stderr;
    EXPECT_THAT(r.batches, ElementsAre(14, 14)) << r.json;
    EXPECT_THAT(r.samples, ElementsAre(448, 448)) << r.json;
  }
  for (int epoch : {0, 1}) {
    EXPECT_THAT(results[0].stderr,
                HasSubstr("epoch " + std::to_string(epoch) +
                          ": 1385 samples over 3 rank(s), 461 to 462 each; equalize drop: batches "
                          "per rank 14 14 14 -> 14 steps; 1344 samples trained, 41 left out"));
  }
  std::set<std::string> trained[2];
  for (int epoch : {0, 1}) {
    const std::vector<std::string> keys = AllKeys(results, epoch);
    EXPECT_EQ(keys.size(), 1344u);
    trained[epoch].insert(keys.begin(), keys.end());
    EXPECT_EQ(trained[epoch].size(), 1344u) << "a sample was trained on twice in epoch " << epoch;
  }
  EXPECT_NE(trained[0], trained[1]);
}

// ... and with --equalize wrap every one of the 1,385 samples is trained in
// each epoch, exactly once: 15 steps on every rank (14 full batches and a
// partial one of 13 or 14 samples), none of them from a next pass.
TEST_F(SevenUnevenShardsDdpTest, WrapTrainsEverySampleOfTheEpoch) {
  std::vector<RankResult> results = Train(3, "--epochs 1 --batch-size 32 --equalize wrap");
  for (const RankResult& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.stderr;
    EXPECT_THAT(r.batches, ElementsAre(15)) << r.json;
  }
  const std::vector<std::string> keys = AllKeys(results, 0);
  EXPECT_EQ(Distinct(keys), 1385u);
  EXPECT_EQ(keys.size(), 1385u);
  EXPECT_THAT(results[0].stderr,
              HasSubstr("epoch 0: 1385 samples over 3 rank(s), 461 to 462 each; equalize wrap: "
                        "batches per rank 15 15 15 -> 15 steps; every sample trained"));
}

// Two loader workers per rank: rank 0's workers hold 120 and 50 samples (12 and
// 5 batches), so only 11 round-robin batches come from their first pass.
TEST_F(DdpTest, DropWithTwoWorkersCountsEachWorkersBatches) {
  std::vector<RankResult> results = Train(
      2, "--split shards --epochs 1 --batch-size 10 --no-shardshuffle --equalize drop --workers 2");
  for (const RankResult& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.stderr;
    EXPECT_THAT(r.batches, ElementsAre(11)) << r.json;
    EXPECT_THAT(r.samples, ElementsAre(110)) << r.json;
  }
  const std::vector<std::string> keys = AllKeys(results, 0);
  EXPECT_EQ(Distinct(keys), 220u);
  EXPECT_EQ(keys.size(), 220u);
}

// Wrap: rank 1's 1000 samples make 63 batches of 16 (the last one of 8); rank
// 0 (170 samples, 11 batches a pass) runs 63 too, going round its shards 5
// times and then 8 batches into a sixth pass: 5 * 170 + 8 * 16 = 978 samples.
// Every one of the 1170 samples is trained on in each epoch.
TEST_F(DdpTest, WrapTrainsEverySampleAndRepeatsOnTheShortRank) {
  std::vector<RankResult> results =
      Train(2, "--split shards --epochs 1 --batch-size 16 --no-shardshuffle --equalize wrap");
  ASSERT_EQ(results[0].exit_code, 0) << results[0].stderr;
  ASSERT_EQ(results[1].exit_code, 0) << results[1].stderr;
  EXPECT_THAT(results[0].batches, ElementsAre(63));
  EXPECT_THAT(results[1].batches, ElementsAre(63));
  EXPECT_THAT(results[0].samples, ElementsAre(978));
  EXPECT_THAT(results[1].samples, ElementsAre(1000));
  EXPECT_EQ(Distinct(AllKeys(results, 0)), static_cast<size_t>(kTotal));
  EXPECT_EQ(Distinct(results[1].keys[0]), 1000u);
}

// Without equalization rank 0 runs out after 17 steps while rank 1 waits in
// its 18th step's gradient all-reduce: both fail within the timeout, and the
// message names the ranks and their step counts.
TEST_F(DdpTest, OffWithUnevenRanksFailsNamingRanksAndStepCounts) {
  std::vector<RankResult> results = Train(
      2,
      "--split shards --epochs 1 --batch-size 10 --no-shardshuffle --equalize off --timeout-s 4");
  EXPECT_NE(results[0].exit_code, 0);
  EXPECT_NE(results[1].exit_code, 0);
  EXPECT_NE(results[0].exit_code, 137) << "rank 0 hung until killed";
  EXPECT_NE(results[1].exit_code, 137) << "rank 1 hung until killed";
  EXPECT_THAT(results[0].stderr, HasSubstr("CheckStepCounts"));
  EXPECT_THAT(results[0].stderr, HasSubstr("rank 0: 17 steps"));
  EXPECT_THAT(results[0].stderr, HasSubstr("rank 1: did not report a step count"));
  EXPECT_THAT(results[1].stderr, HasSubstr("wds-train: rank 1: "));
}

// Padding steps train on nothing: kPad is for evaluation (wds/loader/padded_epoch.h).
TEST_F(DdpTest, EqualizePadIsRefusedForTraining) {
  std::vector<RankResult> results = Train(1, "--equalize pad");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_NE(results[0].exit_code, 0);
  EXPECT_THAT(results[0].stderr,
              HasSubstr("--equalize pad is for evaluation (padding steps train on nothing): "
                        "training takes drop, wrap or off"));
}

// --join: the per-step all-reduce ends the epoch on both ranks when rank 0
// runs out, so the unequalized run completes with 17 steps each.
TEST_F(DdpTest, JoinEndsTheEpochOnEveryRankTogether) {
  std::vector<RankResult> results =
      Train(2, "--split shards --epochs 1 --batch-size 10 --no-shardshuffle --equalize off --join");
  for (const RankResult& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.stderr;
    EXPECT_THAT(r.batches, ElementsAre(17)) << r.json;
  }
  EXPECT_EQ(Distinct(AllKeys(results, 0)), 340u);
}

// The safety nets hold under the sample split too. 4 ranks share 1170 samples
// as 292, 293, 292 and 293, so with batches of 4 ranks 1 and 3 hold one step
// more (a partial batch). Unequalized, the step-count check names the ranks
// and their counts instead of hanging; with --join all end after 73 steps.
TEST_F(DdpTest, SampleSplitUnequalizedFailsNamingRanksAndStepCounts) {
  std::vector<RankResult> results =
      Train(4, "--epochs 1 --batch-size 4 --no-shardshuffle --equalize off --timeout-s 4");
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(results[r].exit_code, 0) << "rank " << r;
    EXPECT_NE(results[r].exit_code, 137) << "rank " << r << " hung until killed";
  }
  EXPECT_THAT(results[0].stderr, HasSubstr("split samples, equalize off"));
  EXPECT_THAT(results[0].stderr, HasSubstr("CheckStepCounts"));
  EXPECT_THAT(results[0].stderr, HasSubstr("rank 0: 73 steps"));
}

TEST_F(DdpTest, SampleSplitJoinEndsTheEpochOnEveryRankTogether) {
  std::vector<RankResult> results =
      Train(4, "--epochs 1 --batch-size 4 --no-shardshuffle --equalize off --join");
  for (const RankResult& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.stderr;
    EXPECT_THAT(r.batches, ElementsAre(73)) << r.json;
    EXPECT_THAT(r.samples, ElementsAre(292)) << r.json;
  }
  const std::vector<std::string> keys = AllKeys(results, 0);
  EXPECT_EQ(keys.size(), 1168u);
  EXPECT_EQ(Distinct(keys), 1168u);
}

// --shared-gpu: both ranks train on cuda:0 with Gloo, and each rank's loader
// pins its batches for cuda:0 too, not for its LOCAL_RANK's device (rank 1
// once failed with "CUDA device 1 is out of range" on a one-GPU machine).
// Without CUDA the same command is refused up front, naming the device.
TEST_F(DdpTest, SharedGpuRanksPinTheirBatchesForTheTrainingDevice) {
  std::vector<RankResult> results =
      Train(2, "--epochs 1 --batch-size 10 --split shards --no-shardshuffle --shared-gpu");
  for (int r = 0; r < 2; ++r) {
    if (torch::cuda::is_available()) {
      ASSERT_EQ(results[r].exit_code, 0) << results[r].stderr;
      EXPECT_THAT(results[r].batches, ElementsAre(results[0].batches[0])) << results[r].json;
    } else {
      EXPECT_NE(results[r].exit_code, 0);
      EXPECT_THAT(results[r].stderr,
                  HasSubstr("DistributedOptions.device is cuda:0 but LibTorch sees no CUDA device"))
          << "rank " << r;
    }
  }
}

// Shards of 24 colour JPEGs each (several sizes) for --decode-device.
class JpegDdpTest : public DdpTest {
 protected:
  JpegDdpTest() : DdpTest({24, 24, 24}) {}
  void SetUp() override {
    for (size_t s = 0; s < sizes_.size(); ++s) {
      std::vector<testing::TarEntry> entries;
      for (int i = 0; i < sizes_[s]; ++i) {
        const std::string key = "s" + std::to_string(s) + "_" + std::to_string(i);
        gpu_testing::JpegRecipe recipe;
        recipe.width = 40 + 4 * (i % 5);
        recipe.height = 30 + 2 * (i % 3);
        entries.push_back({key + ".jpg", gpu_testing::EncodeJpeg(recipe)});
        entries.push_back({key + ".cls", std::to_string(i % 4)});
      }
      shards_.push_back(
          dir_.Write("shard-" + std::to_string(s) + ".tar", testing::MakeTar(entries)));
    }
  }
};

TEST_F(JpegDdpTest, DecodeDeviceOptionErrorsNameTheProblem) {
  const std::string common = "--epochs 1 --batch-size 8 --image-field jpg --device cpu ";
  std::vector<RankResult> bad = Train(1, common + "--channels 3 --decode-device gpu");
  EXPECT_EQ(bad[0].exit_code, 2);
  EXPECT_THAT(bad[0].stderr, HasSubstr("--decode-device must be cpu or cuda, not \"gpu\""));
  std::vector<RankResult> gray = Train(1, common + "--channels 1 --decode-device cuda");
  EXPECT_EQ(gray[0].exit_code, 2);
  EXPECT_THAT(gray[0].stderr, HasSubstr("--decode-device cuda needs --channels 3"));
  std::vector<RankResult> cpu = Train(1, common + "--channels 3 --decode-device cuda");
  EXPECT_EQ(cpu[0].exit_code, 2);
  EXPECT_THAT(cpu[0].stderr, HasSubstr("--decode-device cuda needs a CUDA training device, not cpu"));
  std::vector<RankResult> workers = Train(1, common + "--channels 3 --decode-in-workers");
  EXPECT_EQ(workers[0].exit_code, 2);
  EXPECT_THAT(workers[0].stderr, HasSubstr("--decode-in-workers needs --decode-device cuda (the "
                                           "CPU path always decodes in the workers)"));
}

// On a GPU, decoding there trains on the same samples in the same order as
// decoding in the workers.
TEST_F(JpegDdpTest, DecodeOnTheGpuTrainsTheCpuPathsKeysInOrder) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::string common =
      "--epochs 2 --batch-size 8 --image-field jpg --channels 3 --image-size 16 --seed 4 "
      "--shuffle 10 --workers 2 ";
  std::vector<RankResult> cpu = Train(1, common + "--decode-device cpu");
  std::vector<RankResult> gpu = Train(1, common + "--decode-device cuda");
  std::vector<RankResult> workers = Train(1, common + "--decode-device cuda --decode-in-workers");
  ASSERT_EQ(cpu[0].exit_code, 0) << cpu[0].stderr;
  ASSERT_EQ(gpu[0].exit_code, 0) << gpu[0].stderr;
  ASSERT_EQ(workers[0].exit_code, 0) << workers[0].stderr;
  EXPECT_EQ(gpu[0].batches, cpu[0].batches);
  EXPECT_EQ(gpu[0].keys, cpu[0].keys);
  EXPECT_EQ(workers[0].batches, cpu[0].batches);
  EXPECT_EQ(workers[0].keys, cpu[0].keys);
  EXPECT_EQ(AllKeys(gpu, 0).size(), 72u);
}

// A restart resumes after the latest checkpoint and runs only the epochs left.
TEST_F(DdpTest, RestartResumesFromTheLatestCheckpoint) {
  const std::string args =
      "--split shards --batch-size 10 --no-shardshuffle --checkpoint-dir " + dir_.path() + "/ckpt";
  std::vector<RankResult> first = Train(2, "--epochs 1 " + args);
  ASSERT_EQ(first[0].exit_code, 0) << first[0].stderr;
  EXPECT_EQ(access((dir_.path() + "/ckpt/checkpoint-000001.pt").c_str(), R_OK), 0);
  std::vector<RankResult> second = Train(2, "--epochs 2 " + args);
  for (const RankResult& r : second) {
    ASSERT_EQ(r.exit_code, 0) << r.stderr;
    EXPECT_THAT(r.batches, ElementsAre(17)) << r.json;
    EXPECT_THAT(r.keys, ::testing::Contains(::testing::Key(1)));
  }
  EXPECT_THAT(second[0].stderr, HasSubstr("resuming after epoch 1"));
  EXPECT_EQ(access((dir_.path() + "/ckpt/checkpoint-000002.pt").c_str(), R_OK), 0);
}

// Rank 1 is killed (SIGKILL) after 30 steps, in epoch 0; the others fail in
// their next collective. Restarted, every rank continues after step 28 (the
// latest mid-epoch checkpoint: model, optimizer, loader position, random
// state) and the run ends with parameters identical, bit for bit, to an
// uninterrupted one, having trained each epoch's batches once.
TEST_F(DdpTest, MidEpochResumeAfterSigkillEndsBitIdentical) {
  const std::string args =
      "--epochs 2 --batch-size 10 --seed 3 --workers 2 --shuffle 50 "
      "--timeout-s 20";
  std::vector<RankResult> whole = Train(3, args);
  ASSERT_EQ(whole[0].exit_code, 0) << whole[0].stderr;
  std::smatch hash;
  ASSERT_TRUE(
      std::regex_search(whole[0].json, hash, std::regex("\"params_hash\": \"([0-9a-f]+)\"")));
  const std::string checkpoints = " --checkpoint-dir " + dir_.path() + "/ckpt --checkpoint-every 4";
  std::vector<RankResult> killed = Train(3, args + checkpoints, {{1, "--crash-after-steps 30"}});
  EXPECT_NE(killed[1].exit_code, 0);
  EXPECT_NE(killed[0].exit_code, 0);
  std::vector<RankResult> resumed = Train(3, args + checkpoints);
  EXPECT_THAT(resumed[0].stderr, HasSubstr("resuming in epoch 0 after step 28"));
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(resumed[r].exit_code, 0) << resumed[r].stderr;
    EXPECT_THAT(resumed[r].json, HasSubstr("\"params_hash\": \"" + hash[1].str() + "\""))
        << "rank " << r;
    EXPECT_EQ(resumed[r].batches, whole[r].batches);
    EXPECT_EQ(resumed[r].samples, whole[r].samples);
  }
}

// Elastic resume: 3 ranks of 2 workers are killed in epoch 0 (rank 1 after
// 10 steps; the latest checkpoint is at step 8). From that checkpoint the
// epoch finishes on 2 ranks of 1 worker, and, from a copy of it, on 4 ranks of
// 3. The keys trained up to the checkpoint and after it are every sample of
// the epoch once, but for the ones the resumed run's equalization leaves out
// (its plan says how many), and every resumed rank runs the same steps.
TEST_F(DdpTest, ElasticResumeOnAnotherLayoutTrainsEachSampleOnce) {
  const std::string args = "--epochs 1 --batch-size 10 --seed 3 --shuffle 50 --timeout-s 20";
  const std::string ckpt = dir_.path() + "/ckpt";
  std::vector<RankResult> killed = Train(
      3, args + " --workers 2 --checkpoint-dir " + ckpt + " --checkpoint-every 4",
      {{1, "--crash-after-steps 10"}});
  ASSERT_NE(killed[1].exit_code, 0);
  // What the model kept: each rank's first 8 batches.
  std::vector<std::string> head;
  for (const RankResult& r : killed) {
    ASSERT_TRUE(r.keys.count(0)) << r.stderr;
    ASSERT_GE(r.keys.at(0).size(), 80u);
    head.insert(head.end(), r.keys.at(0).begin(), r.keys.at(0).begin() + 80);
  }
  ASSERT_EQ(testing::RunShell("cp -r " + ckpt + " " + ckpt + "-copy"), 0);
  const int total = std::accumulate(std::begin(kShardSizes), std::end(kShardSizes), 0);
  for (const auto& [world, workers, dir] :
       {std::tuple{2, 1, ckpt}, std::tuple{4, 3, ckpt + "-copy"}}) {
    SCOPED_TRACE(std::to_string(world) + " ranks of " + std::to_string(workers) + " workers");
    std::vector<RankResult> resumed =
        Train(world, args + " --workers " + std::to_string(workers) + " --checkpoint-dir " + dir +
                         " --checkpoint-every 4");
    std::vector<std::string> trained = head;
    for (const RankResult& r : resumed) {
      ASSERT_EQ(r.exit_code, 0) << r.stderr;
      EXPECT_EQ(r.batches, resumed[0].batches) << "unequal steps";
      trained.insert(trained.end(), r.keys.at(0).begin(), r.keys.at(0).end());
    }
    EXPECT_THAT(resumed[0].stderr,
                HasSubstr("taken by 3 rank(s) x 2 worker(s); finishing epoch 0 on " +
                          std::to_string(world) + " x " + std::to_string(workers)));
    std::smatch left_out;
    ASSERT_TRUE(std::regex_search(resumed[0].stderr, left_out,
                                  std::regex("samples trained, ([0-9]+) left out")));
    EXPECT_EQ(Distinct(trained), trained.size()) << "a sample was trained twice";
    EXPECT_EQ(static_cast<int>(trained.size()), total - std::stoi(left_out[1].str()));
    // drop_last: less than one batch per worker of the new layout.
    EXPECT_LT(std::stoi(left_out[1].str()), world * workers * 10);
  }
}

// --index: the counts come from one JSON index (no sidecar, no scan). With
// true counts every rank holds 390 samples (39 batches of 10); an index that
// undercounts a shard makes the rank reading its end fail naming it.
TEST_F(DdpTest, IndexFileGivesTheCounts) {
  DatasetIndex index;
  for (int s = 0; s < 5; ++s) index.shards.push_back({shards_[s], kShardSizes[s], 0});
  ASSERT_TRUE(index.Save(dir_.path() + "/index.json").ok());
  const std::string args =
      "--epochs 1 --batch-size 10 --no-shardshuffle --index " + dir_.path() + "/index.json";
  std::vector<RankResult> results = Train(3, args);
  for (const RankResult& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.stderr;
    EXPECT_THAT(r.batches, ElementsAre(39)) << r.json;
  }
  index.shards[0].nsamples = 90;
  ASSERT_TRUE(index.Save(dir_.path() + "/index.json").ok());
  results = Train(3, args + " --timeout-s 10");
  EXPECT_NE(results[0].exit_code, 0);
  EXPECT_THAT(
      results[0].stderr,
      HasSubstr(shards_[0] + ": the shard holds more than the 90 samples its index counts"));
}

// --index URL: the same index fetched from a server by every rank (shards
// listed by their absolute paths); a URL the server does not have fails
// every rank naming it.
TEST_F(DdpTest, ARemoteIndexGivesTheCountsToo) {
  DatasetIndex index;
  for (int s = 0; s < 5; ++s) index.shards.push_back({shards_[s], kShardSizes[s], 0});
  const std::string served = dir_.path() + "/www";
  std::filesystem::create_directories(served);
  ASSERT_TRUE(index.Save(served + "/index.json").ok());
  absl::StatusOr<std::unique_ptr<testing::NginxServer>> nginx = testing::NginxServer::Start(served);
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  const std::string args = "--epochs 1 --batch-size 10 --no-shardshuffle --index ";
  std::vector<RankResult> results = Train(3, args + (*nginx)->HttpUrl("/index.json"));
  for (const RankResult& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.stderr;
    EXPECT_THAT(r.batches, ElementsAre(39)) << r.json;
  }
  const std::string missing = (*nginx)->HttpUrl("/none.json");
  results = Train(3, args + missing + " --timeout-s 10");
  for (const RankResult& r : results) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.stderr, HasSubstr("--index: " + missing + ": HTTP 404"));
  }
}

}  // namespace
}  // namespace wds
