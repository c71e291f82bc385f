// Padded epochs: an evaluation that sees every sample of the epoch exactly
// once and still runs the same number of steps on every rank, so that a
// collective in each step (a metric's all-reduce, a synced log) always has a
// partner on every rank.
//
//   wds::RankEpochPlan plan = *wds::PlanRankEpoch(shards, list_options, ctx, batching, counts);
//   int64_t steps = wds::AgreeOnSteps(dist, plan, wds::EqualizePolicy::kPad)->steps;
//   wds::Loader loader(pipeline, options);        // its natural epoch: no WithLength
//   absl::Status done = wds::RunPaddedEpoch(loader, steps,
//       [&](const wds::Sample& batch, bool real) -> absl::Status {
//         int64_t correct = real ? Correct(batch) : 0;   // a padding step counts nothing
//         dist.AllReduce(...);                            // on every rank, every step
//         return absl::OkStatus();
//       });
//
// Under kPad the steps are the largest rank's batch count (plan.batches()), so
// a rank runs its own batches (real) and then, until `steps`, padding steps
// that repeat its last batch (often its short one, which the model already
// ran) marked as padding. A rank without a batch (its proposal in
// EqualizedSteps::proposals is 0) has nothing to pad with: every rank sees
// the proposals, so all can refuse together, or that rank passes a fill.
//
// Thread safety: as the Loader (one consumer thread).
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "wds/base/sample.h"
#include "wds/loader/loader.h"

namespace wds {

// RunPaddedEpoch runs one epoch of `loader` as exactly `steps` calls of
// `step`: step(batch, true) for each batch the loader yields, then
// step(last batch, false) for the steps left. `fill`, when given, is the
// padding of a rank whose loader yields no batch at all.
//
// Errors: InvalidArgument for steps < 0 and for a loader whose recipe is
// sized (WithLength / WithEpoch: its workers would repeat samples instead of
// padding); FailedPrecondition when the loader yields more than `steps`
// batches (the plans that agreed on the steps do not describe this rank's
// epoch: nothing after step `steps` is run, and the message says so) and
// when it yields none and `fill` is null; the loader's own error (a
// LoaderError's status) and the first error `step` returns, each ending the
// epoch there.
[[nodiscard]] absl::Status RunPaddedEpoch(
    Loader& loader, int64_t steps,
    absl::FunctionRef<absl::Status(const Sample& batch, bool real)> step,
    const Sample* fill = nullptr);

}  // namespace wds
