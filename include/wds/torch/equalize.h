// Equalized steps across DDP ranks: each rank plans its epoch (wds/loader/equalize.h)
// and the ranks agree on one step count, so that every collective of the
// epoch has a partner on every rank.
//
//   wds::RankEpochPlan plan = *wds::PlanRankEpoch(shards, list_options, ctx, batching, counts);
//   absl::StatusOr<wds::EqualizedSteps> steps =
//       wds::AgreeOnSteps(dist, plan, wds::EqualizePolicy::kDrop);
//   wds::Loader loader(pipeline.WithLength(steps->steps), loader_options);
//
// Thread safety: as DistributedContext (one thread issues its collectives).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/loader/equalize.h"
#include "wds/torch/distributed.h"

namespace wds {

struct EqualizedSteps {
  int64_t steps = 0;
  // proposals[r] is rank r's LocalSteps under the policy.
  std::vector<int64_t> proposals;
};

// AgreeOnSteps gathers every rank's plan.LocalSteps(policy) and
// plan.list_digest (two all-gathers) and returns the steps' minimum for
// kDrop, their maximum for kWrap and kPad, and for kOff the rank's own batch count
// (the ranks may then differ). Ranks whose plans split different shard
// lists or counts (list_digest) would read overlapping shares or leave
// samples out: that is FailedPrecondition on every rank, naming which ranks
// see which (two more all-gathers, of the plans' shards and samples). Every rank must call
// it, with the same policy, at the same point of its collective sequence.
[[nodiscard]] absl::StatusOr<EqualizedSteps> AgreeOnSteps(const DistributedContext& context,
                                                          const RankEpochPlan& plan,
                                                          EqualizePolicy policy);

}  // namespace wds
