#include "wds/loader/equalize.h"

#include <algorithm>
#include <utility>

#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/tar/shard_index.h"

namespace wds {
namespace {

int64_t BatchesOf(int64_t samples, const EpochBatching& batching) {
  const int64_t full = samples / batching.batch_size;
  return full + (batching.partial && samples % batching.batch_size != 0 ? 1 : 0);
}

absl::Status CheckBatching(const EpochBatching& batching) {
  if (batching.batch_size >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      Cat("equalize: batch size must be >= 1, got ", batching.batch_size));
}

// BatchesFromWorker is how many of the first n round-robin batches come from
// worker w of `workers`.
int64_t BatchesFromWorker(int64_t n, int w, int workers) {
  return n <= w ? 0 : (n - w + workers - 1) / workers;
}

}  // namespace

absl::StatusOr<EqualizePolicy> ParseEqualizePolicy(std::string_view name) {
  if (name == "drop") return EqualizePolicy::kDrop;
  if (name == "wrap") return EqualizePolicy::kWrap;
  if (name == "pad") return EqualizePolicy::kPad;
  if (name == "off") return EqualizePolicy::kOff;
  return absl::InvalidArgumentError(
      Cat("unknown equalize policy \"", name, "\" (expected drop, wrap, pad or off)"));
}

std::string_view EqualizePolicyName(EqualizePolicy policy) {
  switch (policy) {
    case EqualizePolicy::kDrop:
      return "drop";
    case EqualizePolicy::kWrap:
      return "wrap";
    case EqualizePolicy::kPad:
      return "pad";
    case EqualizePolicy::kOff:
      return "off";
  }
  return "?";
}

absl::StatusOr<int64_t> ShardSampleCounts::Count(const std::string& url) {
  auto it = counts_.find(url);
  if (it != counts_.end()) return it->second;
  WDS_ASSIGN_OR_RETURN(int64_t count, CountSamples(url));
  counts_.emplace(url, count);
  return count;
}

int64_t RankEpochPlan::samples() const {
  int64_t total = 0;
  for (const WorkerPlan& w : workers) total += w.samples;
  return total;
}

int64_t RankEpochPlan::batches() const {
  int64_t total = 0;
  for (const WorkerPlan& w : workers) total += w.batches;
  return total;
}

int64_t RankEpochPlan::BatchesWithoutRepeats() const {
  const int64_t n = static_cast<int64_t>(workers.size());
  int64_t bound = INT64_MAX;
  for (int64_t w = 0; w < n; ++w) bound = std::min(bound, n * workers[w].batches + w);
  return workers.empty() ? 0 : bound;
}

int64_t RankEpochPlan::BatchesCoveringPass() const {
  const int64_t n = static_cast<int64_t>(workers.size());
  int64_t bound = 0;
  for (int64_t w = 0; w < n; ++w) {
    if (workers[w].batches > 0) bound = std::max(bound, n * (workers[w].batches - 1) + w + 1);
  }
  return bound;
}

int64_t RankEpochPlan::LocalSteps(EqualizePolicy policy) const {
  switch (policy) {
    case EqualizePolicy::kDrop:
      return BatchesWithoutRepeats();
    case EqualizePolicy::kWrap:
      return BatchesCoveringPass();
    case EqualizePolicy::kPad:
    case EqualizePolicy::kOff:
      return batches();
  }
  return 0;
}

int64_t RankEpochPlan::SamplesInFirst(int64_t n) const {
  const int num_workers = static_cast<int>(workers.size());
  int64_t total = 0;
  for (int w = 0; w < num_workers; ++w) {
    const int64_t taken = BatchesFromWorker(n, w, num_workers);
    total += std::min(taken * batching.batch_size, workers[w].samples);
  }
  return total;
}

absl::StatusOr<RankEpochPlan> PlanFromSamples(const std::vector<int64_t>& worker_samples,
                                              const EpochBatching& batching) {
  WDS_RETURN_IF_ERROR(CheckBatching(batching));
  RankEpochPlan plan;
  plan.batching = batching;
  for (int64_t samples : worker_samples) {
    WorkerPlan worker;
    worker.samples = samples;
    worker.batches = BatchesOf(samples, batching);
    plan.workers.push_back(std::move(worker));
  }
  return plan;
}

absl::StatusOr<RankEpochPlan> PlanRankEpoch(const std::vector<std::string>& shards,
                                            const ShardListOptions& options,
                                            const WorkerContext& ctx, const EpochBatching& batching,
                                            ShardSampleCounts& counts) {
  WDS_RETURN_IF_ERROR(CheckBatching(batching));
  RankEpochPlan plan;
  plan.batching = batching;
  WorkerContext worker_ctx = ctx;
  worker_ctx.pass = 0;
  std::vector<int64_t> all_counts;
  uint64_t digest = Fnv1a(Cat("shards ", shards.size()));
  for (const std::string& url : shards) {
    // The URL's last component with its length (a node's own mirror or
    // mount differs before it), and a sample-granular split's count.
    const std::string_view name = std::string_view(url).substr(url.rfind('/') + 1);
    digest = Fnv1a(name, Fnv1aValue(name.size(), digest));
    if (options.split != SplitGranularity::kSamples) continue;
    WDS_ASSIGN_OR_RETURN(int64_t count, counts.Count(url));
    all_counts.push_back(count);
    plan.dataset_samples += count;
    digest = Fnv1aValue(static_cast<uint64_t>(count), digest);
  }
  // Without a node split each rank reads a list of its own: nothing to agree on.
  plan.list_digest = options.nodesplitter ? digest : 0;
  plan.dataset_shards = static_cast<int64_t>(shards.size());
  for (int w = 0; w < ctx.num_workers; ++w) {
    worker_ctx.worker = w;
    WorkerPlan worker;
    if (options.split == SplitGranularity::kSamples) {
      WDS_ASSIGN_OR_RETURN(std::vector<ShardSlice> slices,
                           SlicesForWorker(shards, all_counts, options, worker_ctx));
      for (ShardSlice& slice : slices) {
        worker.samples += slice.end - slice.begin;
        worker.shards.push_back(std::move(slice.url));
      }
    } else {
      WDS_ASSIGN_OR_RETURN(worker.shards, ShardsForWorker(shards, options, worker_ctx));
      for (const std::string& url : worker.shards) {
        WDS_ASSIGN_OR_RETURN(int64_t count, counts.Count(url));
        worker.samples += count;
      }
    }
    worker.batches = BatchesOf(worker.samples, batching);
    plan.workers.push_back(std::move(worker));
  }
  return plan;
}

}  // namespace wds
