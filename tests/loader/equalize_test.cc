#include "wds/loader/equalize.h"

#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<std::string> kShards = {"a.tar", "b.tar", "c.tar", "d.tar", "e.tar"};

ShardSampleCounts UnevenCounts() {
  ShardSampleCounts counts;
  const int sizes[] = {100, 300, 50, 700, 20};
  for (int s = 0; s < 5; ++s) counts.Set(kShards[s], sizes[s]);
  return counts;
}

RankEpochPlan Plan(int rank, int world, int workers, int64_t batch, bool partial) {
  ShardSampleCounts counts = UnevenCounts();
  WorkerContext ctx{.rank = rank, .world_size = world, .num_workers = workers};
  return PlanRankEpoch(kShards, {}, ctx, {.batch_size = batch, .partial = partial}, counts).value();
}

TEST(ParseEqualizePolicyTest, NamesRoundTrip) {
  for (EqualizePolicy p :
       {EqualizePolicy::kDrop, EqualizePolicy::kWrap, EqualizePolicy::kPad, EqualizePolicy::kOff}) {
    EXPECT_EQ(ParseEqualizePolicy(EqualizePolicyName(p)).value(), p);
  }
  EXPECT_EQ(EqualizePolicyName(EqualizePolicy::kPad), "pad");
}

TEST(ParseEqualizePolicyTest, UnknownNameIsInvalidArgument) {
  absl::StatusOr<EqualizePolicy> p = ParseEqualizePolicy("even");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(),
            "unknown equalize policy \"even\" (expected drop, wrap, pad or off)");
}

TEST(PlanRankEpochTest, OneWorkerPerRankFollowsSplitByNode) {
  RankEpochPlan plan = Plan(0, 2, 1, 10, /*partial=*/false);
  ASSERT_EQ(plan.workers.size(), 1u);
  EXPECT_THAT(plan.workers[0].shards, ElementsAre("a.tar", "c.tar", "e.tar"));
  EXPECT_EQ(plan.samples(), 170);
  EXPECT_EQ(plan.LocalSteps(EqualizePolicy::kDrop), 17);
  EXPECT_EQ(plan.SamplesInFirst(17), 170);
}

TEST(PlanRankEpochTest, PartialBatchCountsForWrapOnly) {
  RankEpochPlan drop = Plan(1, 2, 1, 16, /*partial=*/false);  // 1000 samples
  RankEpochPlan wrap = Plan(1, 2, 1, 16, /*partial=*/true);
  EXPECT_EQ(drop.LocalSteps(EqualizePolicy::kDrop), 62);
  EXPECT_EQ(wrap.LocalSteps(EqualizePolicy::kWrap), 63);
  EXPECT_EQ(wrap.SamplesInFirst(63), 1000);
}

// The digest that AgreeOnSteps compares is the same on every rank of one
// list, and changes with the list's order or members (by their last
// component, not a node's own mirror before it) and, only for a
// sample-granular split, a count; it is 0 when each rank reads its own list.
TEST(PlanRankEpochTest, TheListDigestIsTheSameOnEveryRankAndNamesWhatTheSplitDependsOn) {
  auto digest = [](const std::vector<std::string>& shards, ShardSampleCounts counts, int rank,
                   SplitGranularity split, ShardSplitter nodes = SplitByNode) {
    WorkerContext ctx{.rank = rank, .world_size = 2, .num_workers = 2, .epoch = 3 * rank};
    ShardListOptions list{.shuffle = true, .nodesplitter = nodes, .split = split};
    RankEpochPlan plan = PlanRankEpoch(shards, list, ctx, {.batch_size = 4}, counts).value();
    return std::make_tuple(plan.list_digest, plan.dataset_shards, plan.dataset_samples);
  };
  ShardSampleCounts recounted = UnevenCounts();
  recounted.Set("c.tar", 51);
  const std::vector<std::string> reordered = {"b.tar", "a.tar", "c.tar", "d.tar", "e.tar"};
  const std::vector<std::string> mirrored = {"m/a.tar", "m/b.tar", "m/c.tar", "m/d.tar", "m/e.tar"};
  ShardSampleCounts mirror_counts;
  const int sizes[] = {100, 300, 50, 700, 20};
  for (int s = 0; s < 5; ++s) mirror_counts.Set(mirrored[s], sizes[s]);
  const std::vector<std::string> fewer(kShards.begin(), kShards.end() - 1);
  const std::vector<std::string> other = {"a.tar", "b.tar", "c.tar", "d.tar", "f.tar"};
  ShardSampleCounts other_counts = UnevenCounts();
  other_counts.Set("f.tar", 20);
  for (SplitGranularity split : {SplitGranularity::kSamples, SplitGranularity::kShards}) {
    const bool samples = split == SplitGranularity::kSamples;
    const auto base = digest(kShards, UnevenCounts(), 0, split);
    EXPECT_NE(std::get<0>(base), 0u);
    EXPECT_EQ(std::get<1>(base), 5);
    EXPECT_EQ(std::get<2>(base), samples ? 1170 : 0);
    EXPECT_EQ(digest(kShards, UnevenCounts(), 1, split), base);  // another rank and epoch
    EXPECT_EQ(digest(mirrored, mirror_counts, 1, split), base);
    EXPECT_NE(std::get<0>(digest(fewer, UnevenCounts(), 0, split)), std::get<0>(base));
    EXPECT_NE(std::get<0>(digest(reordered, UnevenCounts(), 0, split)), std::get<0>(base));
    EXPECT_NE(std::get<0>(digest(other, other_counts, 0, split)), std::get<0>(base));
    const auto counted = digest(kShards, recounted, 0, split);
    EXPECT_EQ(std::get<0>(counted) != std::get<0>(base), samples);
    EXPECT_EQ(std::get<2>(counted), samples ? 1171 : 0);
    EXPECT_EQ(std::get<0>(digest(kShards, UnevenCounts(), 0, split, nullptr)), 0u);
  }
}

// Workers hold 120 and 50 samples: 12 and 5 batches of 10. Round-robin, the
// 12th batch would be worker 1's sixth, from its next pass.
TEST(PlanRankEpochTest, RoundRobinBoundsPerWorker) {
  RankEpochPlan plan = Plan(0, 2, 2, 10, /*partial=*/false);
  ASSERT_EQ(plan.workers.size(), 2u);
  EXPECT_EQ(plan.workers[0].batches, 12);
  EXPECT_EQ(plan.workers[1].batches, 5);
  EXPECT_EQ(plan.BatchesWithoutRepeats(), 11);
  EXPECT_EQ(plan.BatchesCoveringPass(), 23);  // worker 0's 12th batch is round-robin item 23
  EXPECT_EQ(plan.SamplesInFirst(11), 110);
  EXPECT_EQ(plan.LocalSteps(EqualizePolicy::kOff), 17);
  EXPECT_EQ(plan.LocalSteps(EqualizePolicy::kPad), 17);  // the natural epoch's batches
}

TEST(PlanRankEpochTest, WorkerWithoutShardsIsFailedPrecondition) {
  ShardSampleCounts counts = UnevenCounts();
  WorkerContext ctx{.rank = 2, .world_size = 3, .num_workers = 2};
  absl::StatusOr<RankEpochPlan> plan = PlanRankEpoch(kShards, {}, ctx, {.batch_size = 4}, counts);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("rank 2 worker 1"));
}

TEST(PlanRankEpochTest, ZeroBatchSizeIsInvalidArgument) {
  ShardSampleCounts counts = UnevenCounts();
  absl::StatusOr<RankEpochPlan> plan = PlanRankEpoch(kShards, {}, {}, {.batch_size = 0}, counts);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShardSampleCountsTest, MissingShardIsAnErrorNamingIt) {
  testing::TempDir dir;
  ShardSampleCounts counts;
  absl::StatusOr<int64_t> n = counts.Count(dir.path() + "/missing.tar");
  EXPECT_FALSE(n.ok());
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("missing.tar"));
}

TEST(ShardSampleCountsTest, CountsByScanningTheShard) {
  testing::TempDir dir;
  const std::string shard =
      dir.Write("s.tar", testing::MakeTar({{"a.cls", "1"}, {"a.txt", "x"}, {"b.cls", "2"}}));
  ShardSampleCounts counts;
  EXPECT_EQ(counts.Count(shard).value(), 2);
}

}  // namespace
}  // namespace wds
