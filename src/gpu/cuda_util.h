// What the GPU path's CUDA runtime code shares: a CUDA error as a Status, and
// the choice of device. Include only where WDS_WITH_CUDA_KERNELS is set.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "wds/internal/base/strings.h"

namespace wds::gpu {

// Cuda is OK for cudaSuccess, else Internal "decode on cuda: <what>: <name>
// (<description>)"; ResourceExhausted for cudaErrorMemoryAllocation.
inline absl::Status Cuda(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string message =
      Cat("decode on cuda: ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  return e == cudaErrorMemoryAllocation ? absl::ResourceExhaustedError(message)
                                        : absl::InternalError(message);
}

// UseDevice makes `device` the calling thread's current device when it is
// not, before a CUDA call that needs one (a launch, an allocation, a free, a
// handle's destruction). It does not restore the previous device: on a
// thread that has none yet, the runtime's default is device 0, and setting it
// back would make a context there, which a rank must never do (the pinned
// allocator, base/host_allocator.h, works the same way). So a thread that
// drops the GPU path's objects, or finishes its batches, has their device
// current afterwards: a rank's own GPU, in one process per GPU. A failure
// shows in the call that follows.
inline void UseDevice(int device) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device) cudaSetDevice(device);
}

}  // namespace wds::gpu
