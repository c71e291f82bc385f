// PinnedHostAllocator: CUDA page-locked host memory, compiled only when the
// CUDA toolkit was found (WDS_WITH_CUDA); otherwise it reports why not.
#include <cstdlib>
#include <memory>
#include <string>

#include "base/host_allocator.h"
#include "wds/base/buffer_pool.h"
#include "wds/internal/base/strings.h"

#if WDS_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace wds {

#if WDS_WITH_CUDA
namespace {

std::string CudaError(std::string_view call, cudaError_t error) {
  return Cat(call, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
}

// CudaPinnedAllocator selects its device on the calling thread before every
// CUDA call: the CUDA runtime would otherwise use (and create a context on)
// whatever device is current there, device 0 on a fresh thread.
class CudaPinnedAllocator final : public HostAllocator {
 public:
  explicit CudaPinnedAllocator(int device)
      : device_(device), name_(Cat("cuda_pinned(device ", device, ")")) {}

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
      return absl::ResourceExhaustedError(CudaError(Cat("cudaSetDevice(", device_, ")"), e));
    }
    void* p = nullptr;
    if (cudaError_t e = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault);
        e != cudaSuccess) {
      return absl::ResourceExhaustedError(Cat(
          "cannot allocate ", bytes, " bytes of pinned memory: ", CudaError("cudaHostAlloc", e)));
    }
    return p;
  }

  void Deallocate(void* p, size_t /*bytes*/) override {
    // Freeing cannot report failure; a failed free leaks rather than crashes
    // (it happens only when the CUDA runtime is already shutting down).
    if (cudaSetDevice(device_) == cudaSuccess) cudaFreeHost(p);
  }

  bool pinned() const override { return true; }
  std::string_view name() const override { return name_; }

 private:
  const int device_;
  const std::string name_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<HostAllocator>> PinnedHostAllocator(int device) {
  // cudaGetDeviceCount creates no context, so probing is safe on any device.
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return absl::FailedPreconditionError(
        Cat("no CUDA device is usable: ", CudaError("cudaGetDeviceCount", e)));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device is present");
  if (device < 0 || device >= count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return absl::InvalidArgumentError(
        Cat("CUDA device ", device, " is out of range: ", count,
            count == 1 ? " device is" : " devices are",
            " visible (CUDA_VISIBLE_DEVICES=", visible ? visible : "<unset>", ")"));
  }
  return std::shared_ptr<HostAllocator>(std::make_shared<CudaPinnedAllocator>(device));
}

#else

absl::StatusOr<std::shared_ptr<HostAllocator>> PinnedHostAllocator(int device) {
  return absl::FailedPreconditionError(
      Cat("pinned memory for device ", device,
          " is unavailable: webdataset-cpp was built without CUDA"));
}

#endif

}  // namespace wds
