// Equalized epochs: how many batches each rank can run, computed exactly from
// per-shard sample counts before the epoch starts, so that every rank of a DDP
// job runs the same number of steps and no collective waits for a rank that
// has stopped.
//
//   wds::ShardSampleCounts counts;          // sidecar <shard>.idx, else header scan
//   absl::StatusOr<wds::RankEpochPlan> plan = wds::PlanRankEpoch(
//       shards, {.shuffle = true}, ctx, {.batch_size = 64, .partial = false}, counts);
//   int64_t local = plan->LocalSteps(wds::EqualizePolicy::kDrop);
//   int64_t steps = dist.AgreeOnMin(local);      // wds/torch/equalize.h: AgreeOnSteps
//   pipeline.WithLength(steps);
//
// The plan follows the Loader exactly: the shard list of each worker is the
// library's own ShardsForWorker for (rank, worker, epoch, pass 0), or its
// SlicesForWorker when options.split is SplitGranularity::kSamples; each worker
// batches its own samples (so a worker ends its pass with its own partial
// batch); and the Loader takes batches round-robin over the workers, worker 0
// first. Under WithLength(n) the workers' streams continue into further passes,
// so the first n batches hold ceil((n - w) / W) batches of worker w (W workers).
// From that:
//   - the most batches that hold no sample twice: min over w of (W * b_w + w),
//     where b_w is worker w's batch count for its pass;
//   - the fewest batches that hold every batch of the pass: max over w of
//     (W * (b_w - 1) + w + 1).
//
// Policies:
//   kDrop  steps = min over ranks of the no-repeat bound; with partial = false
//          (drop_last) every step is a full batch. Within an epoch no sample is
//          seen twice, on one rank or across ranks; the samples left out are
//          exactly those the plans' batches do not reach (SamplesInFirst).
//   kWrap  steps = max over ranks of the covering bound, with partial batches:
//          every sample of the epoch's shards is trained on in that epoch, on
//          the rank that owns its shard. A worker that finishes its pass
//          before the epoch ends continues into its next pass (pass 1's
//          permutation of the shards, split the same way), so those extra
//          batches repeat samples the epoch also trains on: nothing is lost,
//          worker w yields ceil((steps - w) / W) - b_w batches of
//          its next pass.
//   kPad   steps = max over ranks of batches(), for evaluation: every rank
//          runs its natural epoch (every sample of the epoch once, none
//          repeated or left out), and a rank with fewer batches runs padding
//          steps after its last, each marked as padding, so per-step
//          collectives still pair up (RunPaddedEpoch, wds/loader/padded_epoch.h).
//   kOff   no equalization: each rank runs its natural epoch; uneven ranks are
//          caught by the training loop's step-count check, not prevented.
//
// Thread safety: ShardSampleCounts is not thread-safe; the rest are values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/base/stage.h"
#include "wds/shards/shard_list.h"

namespace wds {

enum class EqualizePolicy : uint8_t { kDrop, kWrap, kPad, kOff };

// ParseEqualizePolicy accepts "drop", "wrap", "pad" and "off".
[[nodiscard]] absl::StatusOr<EqualizePolicy> ParseEqualizePolicy(std::string_view name);
std::string_view EqualizePolicyName(EqualizePolicy policy);

// ShardSampleCounts memoizes CountSamples (wds/tar/shard_index.h) per URL: an
// epoch's plan counts only the shards this rank reads, and each shard once
// per process.
class ShardSampleCounts {
 public:
  [[nodiscard]] absl::StatusOr<int64_t> Count(const std::string& url);
  // Set records a count without reading the shard (tests, counts known from a
  // DatasetIndex).
  void Set(const std::string& url, int64_t count) { counts_[url] = count; }

 private:
  std::map<std::string, int64_t> counts_;
};

struct EpochBatching {
  int64_t batch_size = 1;  // >= 1
  // partial: a worker's last, short batch of its pass is yielded
  // (BatchOptions::partial). Without it that remainder is dropped.
  bool partial = true;
};

// WorkerPlan is one loader worker's pass 0 of an epoch.
struct WorkerPlan {
  // shards lists the shards the worker reads (under kSamples, in part).
  std::vector<std::string> shards;
  int64_t samples = 0;
  int64_t batches = 0;
};

struct RankEpochPlan {
  EpochBatching batching;
  std::vector<WorkerPlan> workers;  // indexed by worker
  // list_digest fingerprints what every rank must see alike for a split by
  // node to share the data out without overlap: the list in its order, by
  // each URL's last component (a node's own mirror or mount may differ
  // before it), and for a sample-granular split every shard's count. Ranks
  // that glob a directory while shards are written, or read a stale copy of
  // the dataset index, differ here; AgreeOnSteps (wds/torch/equalize.h)
  // checks it. 0 without a nodesplitter (each rank reads its own list) and for a
  // plan from samples (a resumed epoch, whose shares come from one job
  // state). dataset_shards is the list's length and dataset_samples a
  // sample-granular split's total (0 for whole shards).
  uint64_t list_digest = 0;
  int64_t dataset_shards = 0;
  int64_t dataset_samples = 0;

  int64_t samples() const;
  int64_t batches() const;
  // BatchesWithoutRepeats: the most loader batches drawn from pass 0 alone.
  int64_t BatchesWithoutRepeats() const;
  // BatchesCoveringPass: the fewest loader batches that include all of pass 0.
  int64_t BatchesCoveringPass() const;
  // LocalSteps is this rank's proposal under `policy` (BatchesWithoutRepeats
  // for kDrop, BatchesCoveringPass for kWrap, batches() for kPad and kOff).
  int64_t LocalSteps(EqualizePolicy policy) const;
  // SamplesInFirst counts the samples in the first `n` loader batches.
  // REQUIRES: n <= BatchesWithoutRepeats() (later batches come from passes
  // this plan does not describe).
  int64_t SamplesInFirst(int64_t n) const;
};

// PlanFromSamples is the plan of a rank whose worker w reads
// worker_samples[w] samples (no shards named). InvalidArgument for
// batch_size < 1.
[[nodiscard]] absl::StatusOr<RankEpochPlan> PlanFromSamples(
    const std::vector<int64_t>& worker_samples, const EpochBatching& batching);

// PlanRankEpoch plans ctx's rank for ctx.epoch with ctx.num_workers workers
// (ctx.worker and ctx.pass are ignored; ctx.seed must be the pipeline's seed).
// Errors: ShardsForWorker's (a worker without shards), CountSamples' (naming
// the shard), InvalidArgument for batch_size < 1.
[[nodiscard]] absl::StatusOr<RankEpochPlan> PlanRankEpoch(const std::vector<std::string>& shards,
                                                          const ShardListOptions& options,
                                                          const WorkerContext& ctx,
                                                          const EpochBatching& batching,
                                                          ShardSampleCounts& counts);

}  // namespace wds
