// Elastic resume: finish an interrupted epoch on another number of ranks or
// workers, every sample of it once.
//
//   // At a checkpoint, on every rank (the same step everywhere):
//   std::string mine = *loader.State();
//   std::vector<std::string> all = AllGather(mine);    // e.g. wds::torch
//   std::string job = *loader.JobState(all);           // the same text on every rank
//
//   // On resume, with any number of ranks and workers:
//   wds::JobStateInfo info = *wds::DescribeJobState(job);
//   wds::RankEpochPlan plan = *wds::PlanResumedEpoch(pipeline, job, ctx, {.batch_size = 64});
//   int64_t steps = AgreeOnMin(plan.LocalSteps(wds::EqualizePolicy::kDrop));
//   wds::Loader loader(pipeline.WithLength(steps), options);
//   loader.Restore(job);        // then iterate: the rest of epoch info.epoch
//
// What an interrupted epoch left over is computed from positions alone (no
// data is read): for each worker of the job state, the samples of its pass 0
// that it had not handed out, i.e. those its shuffle buffer held and those
// its source had not read yet. Samples that were prefetched but not handed out
// are among them; a worker already in a later pass (WithLength wrapping)
// left nothing over. That leftover, worker after worker in (rank, worker)
// order, is one sequence that the new layout shares out as the sample-granular
// split does (rank r of R takes the r-th of R near-equal parts, worker w of K
// the w-th part of that), read by seeking to each run of samples. Each new
// worker's shuffle buffer then mixes its share with a seed that also depends
// on the resume's generation. The next epoch runs normally on the new layout.
//
// A job state holds positions only: per worker of the job five integers,
// plus, when the epoch was itself resumed, the job state it resumed from.
// Restoring on the job's own layout is exact (Loader::Restore).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/base/stage.h"
#include "wds/loader/equalize.h"
#include "wds/pipeline/pipeline.h"
#include "wds/shards/shard_list.h"

namespace wds {

// JobStateInfo is what a job state says of itself.
struct JobStateInfo {
  int64_t epoch = 0;
  bool running = false;  // taken inside an epoch (else: the epoch runs next)
  int world_size = 1;
  int workers = 1;
  // generation counts the elastic resumes the epoch has been through.
  int64_t generation = 0;
};

// DescribeJobState reads a Loader::JobState() text. InvalidArgument for text
// that is not one.
[[nodiscard]] absl::StatusOr<JobStateInfo> DescribeJobState(std::string_view job_state);

// PlanResumedEpoch is the plan (equalize.h) of ctx's rank, with ctx.num_workers
// workers among ctx.world_size ranks, for the rest of the job state's epoch:
// each worker's share of the leftover and its batches. Use it to size
// WithLength for a resume on another layout. Errors: those of
// Loader::Restore for a state it cannot resume (another recipe, a recipe
// without positions), and FailedPrecondition for a job state taken between
// epochs (nothing is left over: plan the epoch as usual).
[[nodiscard]] absl::StatusOr<RankEpochPlan> PlanResumedEpoch(const Pipeline& pipeline,
                                                             std::string_view job_state,
                                                             const WorkerContext& ctx,
                                                             const EpochBatching& batching);

// For runners other than Loader, each worker of which runs one copy of the
// recipe and records its own position (a DataLoader worker over the Python
// bindings' datasets):

// WorkerPosition is where one such worker stood: the pass it read, the
// samples its tar source and its shuffle stage (-1: none) had yielded, and
// whether its stream had ended. A worker that never started stands at
// {0, 0, -1}.
struct WorkerPosition {
  int64_t pass = 0;
  int64_t source_out = 0;
  int64_t shuffle_out = -1;
  bool ended = false;
};

// JobStateOfWorkers is the job state of `pipeline`'s epoch `epoch` whose
// worker w of rank r stood at positions[r][w] (world_size x workers of them,
// taken at one step); Loader::Restore, PlanResumedEpoch and LeftoverShareOf
// take it. When the epoch was itself resumed elastically, `base` is the job
// state it resumed from (its workers' pass 0 was their share of its
// leftover). InvalidArgument for positions of another shape or a base that
// is not a job state.
[[nodiscard]] absl::StatusOr<std::string> JobStateOfWorkers(
    const Pipeline& pipeline, int64_t epoch,
    const std::vector<std::vector<WorkerPosition>>& positions, std::string_view base = {});

// ResumedShare is what worker ctx of a new layout reads in pass 0 of
// `epoch`: `slices`, shuffled with a seed that also takes `generation`.
struct ResumedShare {
  int64_t epoch = 0;
  int64_t generation = 0;
  std::vector<ShardSlice> slices;
};

// LeftoverShareOf is ctx's share (its rank, world_size, worker and
// num_workers) of what `job_state` left of its epoch. Errors as
// PlanResumedEpoch's.
[[nodiscard]] absl::StatusOr<ResumedShare> LeftoverShareOf(const Pipeline& pipeline,
                                                           std::string_view job_state,
                                                           const WorkerContext& ctx);

}  // namespace wds
