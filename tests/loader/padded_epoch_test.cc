// Padded epochs (wds/loader/padded_epoch.h): an evaluation that reads every
// sample once on uneven ranks, each rank running the agreed steps: its own
// batches, then its last batch again, marked as padding. Ranks are loaders of
// one process here; the torchrun run is in the Python tests.
#include "wds/loader/padded_epoch.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/loader/equalize.h"
#include "wds/pipeline/web_dataset.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeSample;
using testing::TempDir;
using testing::VectorSource;

// Uneven shards, 263 samples; split by whole shards over 3 ranks.
const std::vector<int> kSizes = {37, 5, 61, 23, 44, 9, 30, 54};

struct Step {
  std::vector<std::string> keys;
  bool real;
};

TEST(RunPaddedEpochTest, UnevenRanksRunEqualStepsAndReadEverySampleOnce) {
  TempDir dir;
  const std::vector<std::string> urls = testing::WriteUnevenShards(dir, kSizes);
  constexpr int kRanks = 3;
  constexpr int kWorkers = 2;
  for (int64_t epoch : {0, 1}) {
    // Each rank plans its natural epoch; kPad agrees on the largest.
    ShardSampleCounts counts;
    std::vector<int64_t> natural;
    for (int r = 0; r < kRanks; ++r) {
      WorkerContext ctx{
          .rank = r, .world_size = kRanks, .num_workers = kWorkers, .epoch = epoch, .seed = 11};
      RankEpochPlan plan =
          PlanRankEpoch(urls, {.shuffle = true, .split = SplitGranularity::kShards}, ctx,
                        {.batch_size = 4, .partial = true}, counts)
              .value();
      natural.push_back(plan.LocalSteps(EqualizePolicy::kPad));
    }
    const int64_t steps = *std::max_element(natural.begin(), natural.end());
    ASSERT_NE(*std::min_element(natural.begin(), natural.end()), steps) << "the ranks are even";
    std::vector<std::string> real_keys;
    for (int r = 0; r < kRanks; ++r) {
      Pipeline recipe =
          WebDataset(urls, {.seed = 11, .shardshuffle = true, .split = SplitGranularity::kShards})
              .value()
              .Batched(4);
      Loader loader(recipe, {.workers = kWorkers, .rank = r, .world_size = kRanks});
      loader.SetEpoch(epoch);
      std::vector<Step> ran;
      ASSERT_TRUE(RunPaddedEpoch(loader, steps, [&](const Sample& batch, bool real) {
                    ran.push_back({std::get<TextList>(*batch.Find("__key__")), real});
                    return absl::OkStatus();
                  }).ok());
      ASSERT_EQ(static_cast<int64_t>(ran.size()), steps) << "rank " << r;
      for (int64_t i = 0; i < steps; ++i) {
        // Its own batches first, then padding: its last batch again.
        EXPECT_EQ(ran[i].real, i < natural[r]) << "rank " << r << " step " << i;
        if (i >= natural[r]) EXPECT_EQ(ran[i].keys, ran[natural[r] - 1].keys);
        if (ran[i].real) real_keys.insert(real_keys.end(), ran[i].keys.begin(), ran[i].keys.end());
      }
    }
    std::vector<std::string> all = testing::UnevenShardKeys(kSizes);
    std::sort(all.begin(), all.end());
    std::sort(real_keys.begin(), real_keys.end());
    EXPECT_EQ(real_keys, all) << "epoch " << epoch << ": every sample exactly once";
  }
}

Pipeline Letters(size_t n) {
  std::vector<Sample> samples;
  for (size_t i = 0; i < n; ++i) samples.push_back(MakeSample(std::string(1, 'a' + i)));
  return Pipeline(VectorSource(std::move(samples)));
}

// Ran records each step as "<key>" or "<key>:pad".
struct Ran {
  std::vector<std::string> steps;
  absl::Status Record(const Sample& sample, bool real) {
    steps.push_back(std::string(sample.key()) + (real ? "" : ":pad"));
    return absl::OkStatus();
  }
};

TEST(RunPaddedEpochTest, ExactlyTheStepsOfTheLoaderRunUnpadded) {
  Loader loader(Letters(3), {.workers = 1});
  Ran ran;
  ASSERT_TRUE(RunPaddedEpoch(loader, 3, [&](const Sample& s, bool real) {
                return ran.Record(s, real);
              }).ok());
  EXPECT_THAT(ran.steps, ElementsAre("a", "b", "c"));
}

TEST(RunPaddedEpochTest, ALoaderYieldingMoreThanTheStepsFailsAfterThem) {
  Loader loader(Letters(4), {.workers = 1});
  Ran ran;
  absl::Status done =
      RunPaddedEpoch(loader, 2, [&](const Sample& s, bool real) { return ran.Record(s, real); });
  EXPECT_EQ(done.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(done.message(),
            "RunPaddedEpoch: this rank's loader yielded more than the 2 agreed steps, so the "
            "plans the ranks agreed with do not describe its epoch (other counts, workers or "
            "batching?); the batches after step 2 were not run");
  EXPECT_THAT(ran.steps, ElementsAre("a", "b"));
}

TEST(RunPaddedEpochTest, ALoaderWithoutBatchesPadsWithTheFillOrFails) {
  Loader loader(Letters(0), {.workers = 1});
  Ran ran;
  absl::Status done =
      RunPaddedEpoch(loader, 2, [&](const Sample& s, bool real) { return ran.Record(s, real); });
  EXPECT_EQ(done.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(done.message(),
            "RunPaddedEpoch: this rank's loader yielded no batch to pad its 2 steps with: pass a "
            "fill batch of the usual shape");
  EXPECT_TRUE(ran.steps.empty());
  const Sample fill = MakeSample("fill");
  ASSERT_TRUE(RunPaddedEpoch(
                  loader, 2, [&](const Sample& s, bool real) { return ran.Record(s, real); }, &fill)
                  .ok());
  EXPECT_THAT(ran.steps, ElementsAre("fill:pad", "fill:pad"));
  // No steps asked, none run.
  EXPECT_TRUE(RunPaddedEpoch(loader, 0, [&](const Sample&, bool) {
                ADD_FAILURE() << "a step ran";
                return absl::OkStatus();
              }).ok());
}

TEST(RunPaddedEpochTest, ASizedRecipeAndNegativeStepsAreRefused) {
  Loader sized(Letters(3).WithLength(5), {.workers = 1});
  auto never = [](const Sample&, bool) {
    ADD_FAILURE() << "a step ran";
    return absl::OkStatus();
  };
  absl::Status done = RunPaddedEpoch(sized, 5, never);
  EXPECT_EQ(done.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(done.message(), HasSubstr("the loader's recipe is sized (WithLength / WithEpoch)"));
  Loader loader(Letters(3), {.workers = 1});
  done = RunPaddedEpoch(loader, -1, never);
  EXPECT_EQ(done.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(done.message(), "RunPaddedEpoch: steps -1 < 0");
}

TEST(RunPaddedEpochTest, TheFirstErrorOfAStepOrOfTheLoaderEndsTheEpoch) {
  Loader loader(Letters(3), {.workers = 1});
  Ran ran;
  absl::Status done = RunPaddedEpoch(loader, 5, [&](const Sample& s, bool real) {
    if (!real) return absl::AbortedError("padding step refused");
    return ran.Record(s, real);
  });
  EXPECT_EQ(done, absl::AbortedError("padding step refused"));
  EXPECT_THAT(ran.steps, ElementsAre("a", "b", "c"));

  Loader failing(Letters(3).Map([](Sample s) -> absl::StatusOr<Sample> {
    if (s.key() == "b") return absl::DataLossError("b is damaged");
    return s;
  }),
                 {.workers = 1});
  ran.steps.clear();
  done =
      RunPaddedEpoch(failing, 5, [&](const Sample& s, bool real) { return ran.Record(s, real); });
  EXPECT_EQ(done.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(done.message(), HasSubstr("b is damaged"));
  EXPECT_THAT(ran.steps, ElementsAre("a"));
}

}  // namespace
}  // namespace wds
