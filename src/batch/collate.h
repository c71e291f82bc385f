// Collation of a list of samples into one batch (the rules are in batch.h).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "batch/batch_slots.h"
#include "wds/batch.h"
#include "wds/buffer_pool.h"
#include "wds/sample.h"

namespace wds {

// kBatchedStage names the Batched stage in messages and error counters.
inline constexpr std::string_view kBatchedStage = "batched";

// CollateBatch is Collate, taking the arrays that sit in `slots` (may be
// null) in place instead of copying them.
[[nodiscard]] absl::StatusOr<Batch> CollateBatch(const std::vector<Sample>& samples,
                                                 const BatchOptions& options, BufferPool& pool,
                                                 BatchSlots* slots);

}  // namespace wds
