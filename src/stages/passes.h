// Internal streams that restart or cap an upstream; shared by Pipeline
// (WithLength / WithEpoch) and the Repeat stage.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "wds/base/stage.h"

namespace wds {

// PassesStream opens `upstream` with ctx.pass = first_pass, first_pass + 1, ...
// chaining the passes; `passes` in all (nullopt: forever). When a pass yields
// nothing, the stream ends if `empty_pass_is_error` is false, else fails with
// FailedPrecondition (an endless stream over no data would spin forever).
std::unique_ptr<SampleStream> PassesStream(StreamFactory upstream, WorkerContext ctx,
                                           std::optional<int64_t> passes, bool empty_pass_is_error);

// LimitStream yields at most `n` items of `upstream`.
std::unique_ptr<SampleStream> LimitStream(std::unique_ptr<SampleStream> upstream, int64_t n);

}  // namespace wds
