// Pinned host memory, and the choice between it and aligned memory that
// LoaderOptions::pin_memory makes (the Loader is its one user).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "wds/base/buffer_pool.h"

namespace wds {

// PinnedHostAllocator returns an allocator of CUDA page-locked memory
// (cudaHostAlloc) for `device`. Every CUDA call it makes is preceded by
// cudaSetDevice(device) on the calling thread, which is its only way of
// choosing a device: it never creates a context on device 0 by accident.
// That call leaves `device` current on the threads that allocate or free
// (loader workers, or whichever thread drops a batch's last reference).
// Errors: FailedPrecondition when the library was built without CUDA or no
// device is present at run time (the caller falls back to AlignedHostAllocator),
// InvalidArgument when `device` is out of range (a misconfiguration, e.g. a
// LOCAL_RANK beyond the GPUs that CUDA_VISIBLE_DEVICES leaves visible).
// Implemented in cuda_host_allocator.cc, the one file that sees CUDA.
[[nodiscard]] absl::StatusOr<std::shared_ptr<HostAllocator>> PinnedHostAllocator(int device);

// BatchAllocator is DefaultBatchAllocator's choice and the reason for it.
struct BatchAllocator {
  std::shared_ptr<HostAllocator> allocator;
  // note is empty when the choice is what was asked for; otherwise it says
  // why pinned memory was asked for but not used (for a one-time warning).
  std::string note;
};

// DefaultBatchAllocator picks pinned memory on `device` when `pin_memory` is
// set and pinned memory is available (built with CUDA, a device present),
// else AlignedHostAllocator() with a note. A `device` that does not exist
// where devices do is PinnedHostAllocator's InvalidArgument, not a fallback:
// the rank would otherwise train on unpinned memory for a typo.
[[nodiscard]] absl::StatusOr<BatchAllocator> DefaultBatchAllocator(bool pin_memory, int device);

}  // namespace wds
