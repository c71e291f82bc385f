// The arithmetic of an elastic resume (wds/loader/elastic.h): what each worker of a
// job state left over of its epoch, and which part of that a worker of the
// new layout reads.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "loader/loader_state.h"
#include "wds/base/stage.h"
#include "wds/pipeline/pipeline.h"
#include "wds/shards/shard_list.h"

namespace wds {

// CheckElastic is OK when `job` can be resumed on another layout by a loader
// of `pipeline`: the same recipe (its length and sizing may differ), neither
// of them WithEpoch (whose streams span epochs).
[[nodiscard]] absl::Status CheckElastic(const Pipeline& pipeline, const JobStateData& job);

// LeftoverSizes is the number of samples each worker of `job` left over, in
// (rank, worker) order. It opens a worker's pass only when its checkpoint
// does not know the pass's size (a shard-granular split).
[[nodiscard]] absl::StatusOr<std::vector<int64_t>> LeftoverSizes(const Pipeline& pipeline,
                                                                 const JobStateData& job);

// LeftoverShare is the slices that worker `ctx` of the new layout (its
// rank, world_size, worker and num_workers) reads of `job`'s leftover, in
// order. It opens the passes of just the job's workers whose leftover
// overlaps that share. `sizes` is LeftoverSizes(pipeline, job), which a
// caller planning several workers computes once.
[[nodiscard]] absl::StatusOr<std::vector<ShardSlice>> LeftoverShare(
    const Pipeline& pipeline, const JobStateData& job, const std::vector<int64_t>& sizes,
    const WorkerContext& ctx);
[[nodiscard]] absl::StatusOr<std::vector<ShardSlice>> LeftoverShare(const Pipeline& pipeline,
                                                                    const JobStateData& job,
                                                                    const WorkerContext& ctx);

}  // namespace wds
