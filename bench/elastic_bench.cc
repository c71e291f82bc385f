// elastic_bench: what an elastic resume costs at scale, on a simulated index
// (no shard is read: a dataset index gives the counts).
//
//   elastic_bench [shards=10000] [ranks=1000] [workers=8] [new_ranks=750] [new_workers=8]
//
// A job of `ranks` x `workers` reads shards of 900..1100 samples (about 1,000
// each) through a shuffle buffer of 1,000 and batches of 64, and stops at
// 40% of its epoch. Every worker's position is synthesized where the real
// shuffle would stand. The bench prints, as JSON: the job
// state's size, in all and per rank; the time to read it and to work out one
// rank's share of the leftover on the new layout (what each rank does at
// restart); that share's samples against the leftover over the new ranks;
// and the time to size the resumed epoch (PlanResumedEpoch).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loader/elastic_plan.h"
#include "loader/loader_state.h"
#include "wds/loader/elastic.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/tar/shard_index.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void Check(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "elastic_bench: %s\n", std::string(status.message()).c_str());
  std::exit(1);
}

int Arg(int argc, char** argv, int i, int fallback) {
  return argc > i ? std::atoi(argv[i]) : fallback;
}

constexpr int64_t kBuffer = 1000;
constexpr int64_t kInitial = 100;

// SourceOut is how many samples the shuffle stage (wds/stages.h) has taken
// from a pass of `n` when it has yielded `k`: it counts what its steps pull,
// not which samples.
int64_t SourceOut(int64_t n, int64_t k) {
  int64_t pulled = 0;
  int64_t buffer = 0;
  for (int64_t step = 0; step < k; ++step) {
    while (pulled < n) {
      ++pulled, ++buffer;
      if (buffer < kBuffer && pulled < n) ++pulled, ++buffer;
      if (buffer >= kInitial) break;
    }
    --buffer;
  }
  return pulled;
}

}  // namespace

int main(int argc, char** argv) {
  const int shards = Arg(argc, argv, 1, 10000);
  const int ranks = Arg(argc, argv, 2, 1000);
  const int workers = Arg(argc, argv, 3, 8);
  const int new_ranks = Arg(argc, argv, 4, 750);
  const int new_workers = Arg(argc, argv, 5, 8);

  auto index = std::make_shared<wds::DatasetIndex>();
  std::vector<std::string> urls;
  int64_t total = 0;
  for (int i = 0; i < shards; ++i) {
    urls.push_back(absl::StrCat("s3://bucket/train-", i, ".tar"));
    const int64_t n = 900 + (i * 7919) % 201;
    index->shards.push_back({urls.back(), n, n * 110000});
    total += n;
  }
  wds::WebDatasetOptions options{.seed = 5, .shardshuffle = true};
  options.dataset_index = index;
  absl::StatusOr<wds::Pipeline> source = wds::WebDataset(urls, options);
  Check(source.status());
  const wds::Pipeline pipeline = source->Shuffle(kBuffer, kInitial).Batched(64);

  // Every worker 40% into its share, its buffer full.
  std::vector<wds::LoaderStateData> states;
  for (int r = 0; r < ranks; ++r) {
    wds::LoaderStateData d;
    d.recipe = pipeline.recipe();
    d.rank = r;
    d.world_size = ranks;
    d.workers = workers;
    d.mode = static_cast<int>(wds::EpochMode::kLength);
    d.length = total / (64 * ranks);
    d.running = true;
    d.remaining = d.length / 2;
    wds::GroupState group;
    wds::WorkerContext ctx;
    ctx.rank = r;
    ctx.world_size = ranks;
    ctx.num_workers = workers;
    for (ctx.worker = 0; ctx.worker < workers; ++ctx.worker) {
      const auto [a, b] = wds::SampleShare(total, ctx, true, true);
      const int64_t shuffled = (b - a) * 2 / 5;
      group.workers.push_back({{0, SourceOut(b - a, shuffled), shuffled, b - a}});
    }
    d.group = group;
    states.push_back(std::move(d));
  }
  absl::StatusOr<wds::JobStateData> gathered = wds::GatherJob(states, nullptr);
  Check(gathered.status());
  const std::string text = wds::JobStateJson(*gathered);

  Clock::time_point start = Clock::now();
  absl::StatusOr<wds::JobStateData> job = wds::ParseJobState(text);
  Check(job.status());
  const double parse_s = Since(start);

  wds::WorkerContext ctx;
  ctx.rank = new_ranks / 2;
  ctx.world_size = new_ranks;
  ctx.num_workers = new_workers;
  start = Clock::now();
  int64_t share = 0;
  size_t slices = 0;
  for (ctx.worker = 0; ctx.worker < new_workers; ++ctx.worker) {
    absl::StatusOr<std::vector<wds::ShardSlice>> part = wds::LeftoverShare(pipeline, *job, ctx);
    Check(part.status());
    share += wds::SampleCount(*part);
    slices += part->size();
  }
  const double share_s = Since(start);

  start = Clock::now();
  ctx.worker = 0;
  absl::StatusOr<wds::RankEpochPlan> plan =
      wds::PlanResumedEpoch(pipeline, text, ctx, {.batch_size = 64});
  Check(plan.status());
  const double plan_s = Since(start);

  absl::StatusOr<std::vector<int64_t>> sizes = wds::LeftoverSizes(pipeline, *job);
  Check(sizes.status());
  int64_t leftover = 0;
  for (int64_t n : *sizes) leftover += n;

  std::printf(
      "{\"samples\": %lld, \"shards\": %d, \"ranks\": %d, \"workers\": %d, \"new_ranks\": %d, "
      "\"new_workers\": %d, \"job_state_bytes\": %zu, \"job_state_bytes_per_rank\": %.1f, "
      "\"parse_s\": %.4f, \"rank_share_s\": %.4f, \"plan_resumed_epoch_s\": %.4f, "
      "\"leftover_samples\": %lld, \"rank_share_samples\": %lld, \"rank_share_slices\": %zu, "
      "\"fair_share_samples\": %.1f}\n",
      static_cast<long long>(total), shards, ranks, workers, new_ranks, new_workers, text.size(),
      static_cast<double>(text.size()) / ranks, parse_s, share_s, plan_s,
      static_cast<long long>(leftover), static_cast<long long>(share), slices,
      static_cast<double>(leftover) / new_ranks);
  return 0;
}
