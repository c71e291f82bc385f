// Collation of a list of samples into one batch (the rules are in batch.h).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "batch/batch_slots.h"
#include "wds/base/buffer_pool.h"
#include "wds/base/sample.h"
#include "wds/batch/batch.h"

namespace wds {

// kBatchedStage names the Batched stage in messages and error counters.
inline constexpr std::string_view kBatchedStage = "batched";

// Collate turns `samples` (REQUIRES: not empty) into one batch, taking every
// array's storage from `pool`, except the arrays that sit in `slots` (when not
// null): those are taken in place instead of copied. Errors name the URL and
// key of the sample at fault and the field.
[[nodiscard]] absl::StatusOr<Batch> Collate(const std::vector<Sample>& samples,
                                            const BatchOptions& options, BufferPool& pool,
                                            BatchSlots* slots = nullptr);

}  // namespace wds
