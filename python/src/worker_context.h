// The WorkerContext of a chain opened from Python, where the placement comes
// in as plain integers (a DataLoader worker's, or the caller's).
#pragma once

#include <cstdint>

#include "wds/base/stage.h"

namespace wdspy {

// CheckedWorkerContext returns the context of worker `worker` of
// `num_workers` on rank `rank` of `world_size`, in `epoch` and `pass`, with
// `seed`; its other fields keep their defaults. Raises ValueError
// (CheckPlacement, chain.h) for a placement out of range.
wds::WorkerContext CheckedWorkerContext(int rank, int world_size, int worker, int num_workers,
                                        int64_t epoch, int64_t pass, uint64_t seed = 0);

}  // namespace wdspy
