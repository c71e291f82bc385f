// What the GPU path's CUDA runtime code shares: a CUDA error as a Status, and
// a scoped current device. Include only where WDS_WITH_CUDA_KERNELS is set.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "absl/status/status.h"
#include "wds/internal/base/strings.h"

namespace wds::gpu {

// Cuda is OK for cudaSuccess, else Internal "decode on cuda: <what>: <name>
// (<description>)".
inline absl::Status Cuda(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      Cat("decode on cuda: ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

// DeviceGuard makes `device` current for its scope and restores the calling
// thread's device after (memory and events are released on whatever thread
// drops them last: a consumer's, whose current device must not change).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      cudaSetDevice(device);
    } else {
      previous_ = -1;
    }
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace wds::gpu
