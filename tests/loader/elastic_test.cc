// Elastic resume (wds/loader/elastic.h): an epoch stopped on one layout of ranks and
// workers finishes on another, every sample of it trained once (but for the
// equalization's remainder), with equal steps on every rank. Ranks are
// loaders of one process here, each with its own rank and world size; the
// torchrun run of wds-train is in the Python tests.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/loader/elastic.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/tar/shard_index.h"

namespace wds {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

constexpr int64_t kBatch = 4;
// Uneven shards, 263 samples: the ranks' shares end inside shards.
const std::vector<int> kSizes = {37, 5, 61, 23, 44, 9, 30, 54};

std::vector<std::string> WriteShards(const TempDir& dir) {
  return testing::WriteUnevenShards(dir, kSizes);
}

std::vector<std::string> AllKeys() { return testing::UnevenShardKeys(kSizes); }

// Base is the recipe without its epoch sizing: shuffled shards split by
// samples (the sidecars give the counts), a shuffle buffer, batches of 4.
Pipeline Base(const std::vector<std::string>& urls) {
  return WebDataset(urls, {.seed = 11, .shardshuffle = true}).value().Shuffle(16, 4).Batched(kBatch);
}

struct Layout {
  int ranks;
  int workers;
};

// A Job is one run of every rank of a layout, each rank a Loader.
struct Job {
  Layout layout;
  int64_t steps = 0;
  std::vector<std::unique_ptr<Loader>> ranks;

  // Batches takes `n` batches (all when n < 0) on every rank, rank by rank,
  // and returns each batch's keys, by rank; every rank must give as many
  // batches, and all of them when n < 0.
  std::vector<std::vector<std::vector<std::string>>> Batches(int64_t n) {
    std::vector<std::vector<std::vector<std::string>>> by_rank;
    for (auto& loader : ranks) {
      std::vector<std::vector<std::string>>& batches = by_rank.emplace_back();
      while (n < 0 || static_cast<int64_t>(batches.size()) < n) {
        absl::StatusOr<std::optional<Sample>> item = loader->Next();
        EXPECT_TRUE(item.ok()) << item.status();
        if (!item.ok() || !item->has_value()) break;
        batches.push_back(std::get<TextList>(*(*item)->Find("__key__")));
      }
      EXPECT_EQ(static_cast<int64_t>(batches.size()), n < 0 ? steps : n)
          << "the ranks ran unequal steps";
    }
    return by_rank;
  }

  // Keys is Batches' keys, in one list.
  std::vector<std::string> Keys(int64_t n) {
    std::vector<std::string> keys;
    for (const auto& batches : Batches(n)) {
      for (const auto& batch : batches) keys.insert(keys.end(), batch.begin(), batch.end());
    }
    return keys;
  }

  std::string State() {
    std::vector<std::string> states;
    for (auto& loader : ranks) states.push_back(loader->State().value());
    absl::StatusOr<std::string> job = ranks.back()->JobState(states);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.value_or("");
  }
};

LoaderOptions Options(const Layout& layout, int rank) {
  return {.workers = layout.workers, .prefetch = 3, .rank = rank, .world_size = layout.ranks};
}

// Start runs epoch 0 from the beginning, equalized as wds-train does: the
// fewest batches over ranks that repeat no sample (EqualizePolicy::kDrop).
Job Start(const std::vector<std::string>& urls, const Layout& layout) {
  Job job{layout};
  job.steps = INT64_MAX;
  ShardSampleCounts counts;
  for (int r = 0; r < layout.ranks; ++r) {
    WorkerContext ctx;
    ctx.rank = r;
    ctx.world_size = layout.ranks;
    ctx.num_workers = layout.workers;
    ctx.seed = 11;
    ShardListOptions list{.shuffle = true, .split = SplitGranularity::kSamples};
    RankEpochPlan plan = PlanRankEpoch(urls, list, ctx, {.batch_size = kBatch}, counts).value();
    job.steps = std::min(job.steps, plan.LocalSteps(EqualizePolicy::kDrop));
  }
  for (int r = 0; r < layout.ranks; ++r) {
    job.ranks.push_back(
        std::make_unique<Loader>(Base(urls).WithLength(job.steps), Options(layout, r)));
  }
  return job;
}

// Resume runs the rest of the job state's epoch on `layout`; *lost is the
// number of leftover samples the equalized steps do not reach.
Job Resume(const std::vector<std::string>& urls, const std::string& state, const Layout& layout,
           int64_t* lost) {
  Job job{layout};
  job.steps = INT64_MAX;
  std::vector<RankEpochPlan> plans;
  for (int r = 0; r < layout.ranks; ++r) {
    WorkerContext ctx;
    ctx.rank = r;
    ctx.world_size = layout.ranks;
    ctx.num_workers = layout.workers;
    absl::StatusOr<RankEpochPlan> plan =
        PlanResumedEpoch(Base(urls), state, ctx, {.batch_size = kBatch});
    EXPECT_TRUE(plan.ok()) << plan.status();
    plans.push_back(*plan);
    job.steps = std::min(job.steps, plan->LocalSteps(EqualizePolicy::kDrop));
  }
  *lost = 0;
  for (const RankEpochPlan& plan : plans) *lost += plan.samples() - plan.SamplesInFirst(job.steps);
  for (int r = 0; r < layout.ranks; ++r) {
    job.ranks.push_back(
        std::make_unique<Loader>(Base(urls).WithLength(job.steps), Options(layout, r)));
    absl::Status restored = job.ranks.back()->Restore(state);
    EXPECT_TRUE(restored.ok()) << restored;
    EXPECT_EQ(job.ranks.back()->epoch(), 0);
  }
  return job;
}

// ExpectEachOnce checks that `trained` holds no key twice and every key but
// `lost` of them.
void ExpectEachOnce(const std::vector<std::string>& trained, int64_t lost) {
  std::map<std::string, int> seen;
  for (const std::string& k : trained) ++seen[k];
  for (const auto& [k, n] : seen) EXPECT_EQ(n, 1) << k << " was trained " << n << " times";
  EXPECT_EQ(static_cast<int64_t>(seen.size()), static_cast<int64_t>(AllKeys().size()) - lost);
  const std::vector<std::string> all = AllKeys();
  const std::set<std::string> known(all.begin(), all.end());
  for (const auto& [k, n] : seen) EXPECT_TRUE(known.count(k)) << k;
}

TEST(ElasticTest, ThreeRanksOfTwoWorkersResumeOnTwoOfOneAndOnFourOfThree) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir);
  Job first = Start(urls, {3, 2});
  ASSERT_GT(first.steps, 10);
  const std::vector<std::string> head = first.Keys(7);
  const std::string state = first.State();
  ASSERT_THAT(state, HasSubstr("webdataset-cpp job state"));

  for (const Layout& layout : {Layout{2, 1}, Layout{4, 3}}) {
    SCOPED_TRACE(absl::StrCat(layout.ranks, " ranks of ", layout.workers, " workers"));
    int64_t lost = 0;
    Job second = Resume(urls, state, layout, &lost);
    // The equalization's remainder: less than one global batch.
    EXPECT_LT(lost, layout.ranks * kBatch);
    std::vector<std::string> trained = head;
    const std::vector<std::string> tail = second.Keys(-1);
    trained.insert(trained.end(), tail.begin(), tail.end());
    ExpectEachOnce(trained, lost);
  }
}

TEST(ElasticTest, ResumingTwiceFromOneStateGivesTheSameKeysInTheSameOrder) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir);
  Job first = Start(urls, {3, 2});
  first.Keys(5);
  const std::string state = first.State();
  int64_t lost = 0;
  const std::vector<std::string> once = Resume(urls, state, {4, 3}, &lost).Keys(-1);
  const std::vector<std::string> twice = Resume(urls, state, {4, 3}, &lost).Keys(-1);
  ASSERT_FALSE(once.empty());
  EXPECT_EQ(once, twice);
}

TEST(ElasticTest, AnEpochResumedTwiceStillTrainsEachSampleOnce) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir);
  Job first = Start(urls, {3, 2});
  std::vector<std::string> trained = first.Keys(4);
  const std::string state1 = first.State();
  int64_t lost1 = 0;
  Job second = Resume(urls, state1, {2, 1}, &lost1);
  const std::vector<std::string> middle = second.Keys(6);
  trained.insert(trained.end(), middle.begin(), middle.end());
  const std::string state2 = second.State();
  EXPECT_EQ(DescribeJobState(state2)->generation, 1);
  EXPECT_EQ(DescribeJobState(state1)->generation, 0);
  // A rank's own state of a resumed epoch needs the job state it came from.
  Loader alone(Base(urls).WithLength(second.steps), Options({2, 1}, 0));
  EXPECT_THAT(std::string(alone.Restore(second.ranks[0]->State().value()).message()),
              HasSubstr("restore it through the job state"));
  int64_t lost2 = 0;
  Job third = Resume(urls, state2, {3, 2}, &lost2);
  const std::vector<std::string> tail = third.Keys(-1);
  trained.insert(trained.end(), tail.begin(), tail.end());
  EXPECT_LT(lost2, 3 * kBatch);
  // The second run's own equalization remainder was not reached before its
  // stop: the third run's leftover holds it.
  ExpectEachOnce(trained, lost2);
}

TEST(ElasticTest, TheJobsOwnLayoutResumesExactly) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir);
  Job whole = Start(urls, {3, 2});
  const auto expected = whole.Batches(-1);
  Job first = Start(urls, {3, 2});
  first.Keys(5);
  const std::string state = first.State();
  Job second{{3, 2}, first.steps - 5};
  for (int r = 0; r < 3; ++r) {
    second.ranks.push_back(
        std::make_unique<Loader>(Base(urls).WithLength(first.steps), Options({3, 2}, r)));
    ASSERT_TRUE(second.ranks.back()->Restore(state).ok());
  }
  // Each rank's tail is the tail of its uninterrupted run, batch for batch.
  const auto tail = second.Batches(-1);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(tail[r], std::vector<std::vector<std::string>>(expected[r].begin() + 5,
                                                             expected[r].end()))
        << "rank " << r;
  }
}

TEST(ElasticTest, StatesThatCannotBeResumedElsewhereSayWhy) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir);
  Job first = Start(urls, {3, 2});
  first.Keys(3);
  const std::string state = first.State();

  // Another recipe: another seed.
  Pipeline other = WebDataset(urls, {.seed = 12, .shardshuffle = true}).value().Shuffle(16, 4)
                       .Batched(kBatch).WithLength(5);
  Loader loader(other, Options({2, 1}, 0));
  EXPECT_THAT(std::string(loader.Restore(state).message()), HasSubstr("another recipe"));
  WorkerContext ctx;
  ctx.world_size = 2;
  EXPECT_THAT(std::string(PlanResumedEpoch(other, state, ctx, {.batch_size = kBatch})
                              .status()
                              .message()),
              HasSubstr("another recipe"));

  // WithEpoch streams span epochs.
  Loader epoch(Base(urls).WithEpoch(5), Options({2, 1}, 0));
  EXPECT_THAT(std::string(epoch.Restore(state).message()),
              HasSubstr("WithEpoch recipe's streams continue across epochs"));

  // Gathering: a missing rank, a repeated one, a state of another job.
  std::vector<std::string> states;
  for (auto& r : first.ranks) states.push_back(r->State().value());
  EXPECT_THAT(std::string(first.ranks[0]->JobState({states[0], states[1]}).status().message()),
              HasSubstr("2 rank states for a world of 3"));
  EXPECT_THAT(
      std::string(first.ranks[0]->JobState({states[0], states[1], states[1]}).status().message()),
      HasSubstr("rank 1's state is there twice, rank 2's not"));
  EXPECT_EQ(first.ranks[0]->JobState({states[0], "{}", states[2]}).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Not a job state; a version this build does not know; fields of another
  // type (state_fuzz: a repeated "format" key holding a number had thrown).
  EXPECT_EQ(DescribeJobState("{\"format\": \"x\"}").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DescribeJobState("{\"format\": 1}").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(DescribeJobState("{\"format\": \"webdataset-cpp job state\", "
                                           "\"version\": \"1\"}")
                              .status()
                              .message()),
              HasSubstr("job state version 0 is unknown"));
  EXPECT_THAT(std::string(first.ranks[0]
                              ->Restore("{\"format\": \"webdataset-cpp loader state\", "
                                        "\"format\": 2}")
                              .message()),
              HasSubstr("not a loader state"));
  std::string future = state;
  future.replace(future.find("\"version\":1"), 11, "\"version\":7");
  EXPECT_THAT(std::string(DescribeJobState(future).status().message()),
              HasSubstr("job state version 7 is unknown"));

  // A chain of base job states (one per resume within an epoch) is bounded:
  // 64 read, 65 do not.
  std::string nested = state;
  for (int i = 0; i < 65; ++i) {
    nested = state.substr(0, state.size() - 1) + ",\"base\":" + nested + "}";
    absl::StatusOr<JobStateInfo> info = DescribeJobState(nested);
    if (i < 64) {
      ASSERT_TRUE(info.ok()) << i << ": " << info.status();
    } else {
      EXPECT_THAT(std::string(info.status().message()),
                  HasSubstr("nests more than 64 job states"));
    }
  }
}

TEST(ElasticTest, AStateBetweenEpochsStartsTheNextEpochOnAnyLayout) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir);
  Job first = Start(urls, {3, 2});
  first.Keys(-1);
  const std::string state = first.State();
  EXPECT_FALSE(DescribeJobState(state)->running);
  EXPECT_EQ(DescribeJobState(state)->epoch, 1);
  Loader loader(Base(urls).WithLength(3), Options({2, 1}, 1));
  ASSERT_TRUE(loader.Restore(state).ok());
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_FALSE(loader.in_epoch());
  WorkerContext ctx;
  ctx.world_size = 2;
  EXPECT_THAT(
      std::string(PlanResumedEpoch(Base(urls), state, ctx, {.batch_size = 4}).status().message()),
      HasSubstr("taken between epochs"));
}

}  // namespace
}  // namespace wds
