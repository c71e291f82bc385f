// NvjpegBatchDecoder.
#include "gpu/nvjpeg_decoder.h"

#include <nvjpeg.h>

#include "wds/internal/base/strings.h"

namespace wds::gpu {
namespace {

nvjpegHandle_t Handle(void* p) { return static_cast<nvjpegHandle_t>(p); }
nvjpegJpegState_t State(void* p) { return static_cast<nvjpegJpegState_t>(p); }

}  // namespace

absl::StatusOr<std::unique_ptr<NvjpegBatchDecoder>> NvjpegBatchDecoder::Create(
    int max_cpu_threads) {
  std::unique_ptr<NvjpegBatchDecoder> d(new NvjpegBatchDecoder);
  d->max_cpu_threads_ = max_cpu_threads < 1 ? 1 : max_cpu_threads;
  auto make = [](nvjpegBackend_t backend, Backend& out) -> nvjpegStatus_t {
    nvjpegHandle_t handle = nullptr;
    nvjpegStatus_t s = nvjpegCreateEx(backend, nullptr, nullptr, 0, &handle);
    if (s != NVJPEG_STATUS_SUCCESS) return s;
    nvjpegJpegState_t state = nullptr;
    s = nvjpegJpegStateCreate(handle, &state);
    if (s != NVJPEG_STATUS_SUCCESS) {
      nvjpegDestroy(handle);
      return s;
    }
    out.handle = handle;
    out.state = state;
    return NVJPEG_STATUS_SUCCESS;
  };
  // A GPU without JPEG engines answers NVJPEG_STATUS_ARCH_MISMATCH: it gets
  // the hybrid backend alone.
  make(NVJPEG_BACKEND_HARDWARE, d->hardware_);
  const nvjpegStatus_t hybrid = make(NVJPEG_BACKEND_GPU_HYBRID, d->hybrid_);
  if (hybrid != NVJPEG_STATUS_SUCCESS) {
    return absl::UnavailableError(
        Cat("nvJPEG's GPU-hybrid backend does not initialise: status ", static_cast<int>(hybrid)));
  }
  return d;
}

NvjpegBatchDecoder::~NvjpegBatchDecoder() {
  for (Backend* b : {&hardware_, &hybrid_}) {
    if (b->state != nullptr) nvjpegJpegStateDestroy(State(b->state));
    if (b->handle != nullptr) nvjpegDestroy(Handle(b->handle));
  }
}

bool NvjpegBatchDecoder::DecodeWith(Backend& backend, const std::vector<size_t>& which,
                                    absl::Span<const NvjpegInput> inputs,
                                    absl::Span<const NvjpegOutput> outputs, void* stream) {
  const int n = static_cast<int>(which.size());
  if (n == 0) return true;
  if (backend.batch_size != n) {
    if (nvjpegDecodeBatchedInitialize(Handle(backend.handle), State(backend.state), n,
                                      max_cpu_threads_,
                                      NVJPEG_OUTPUT_RGBI) != NVJPEG_STATUS_SUCCESS) {
      backend.batch_size = 0;
      return false;
    }
    backend.batch_size = n;
  }
  std::vector<const unsigned char*> data(n);
  std::vector<size_t> lengths(n);
  std::vector<nvjpegImage_t> images(n);
  for (int i = 0; i < n; ++i) {
    const size_t k = which[i];
    data[i] = inputs[k].data;
    lengths[i] = inputs[k].length;
    images[i] = nvjpegImage_t{};
    images[i].channel[0] = outputs[k].pixels;
    images[i].pitch[0] = outputs[k].pitch;
  }
  const nvjpegStatus_t s =
      nvjpegDecodeBatched(Handle(backend.handle), State(backend.state), data.data(), lengths.data(),
                          images.data(), static_cast<cudaStream_t>(stream));
  // A failed batch leaves the state to be initialised again (nvJPEG's
  // documented way to reset it).
  if (s != NVJPEG_STATUS_SUCCESS) backend.batch_size = 0;
  return s == NVJPEG_STATUS_SUCCESS;
}

std::vector<bool> NvjpegBatchDecoder::Decode(absl::Span<const NvjpegInput> inputs,
                                             absl::Span<const NvjpegOutput> outputs, void* stream) {
  std::vector<size_t> on_hardware;
  std::vector<size_t> on_hybrid;
  for (size_t i = 0; i < inputs.size(); ++i) {
    (hardware() && inputs[i].hardware ? on_hardware : on_hybrid).push_back(i);
  }
  std::vector<bool> decoded(inputs.size(), false);
  if (hardware() && DecodeWith(hardware_, on_hardware, inputs, outputs, stream)) {
    for (size_t i : on_hardware) decoded[i] = true;
  }
  if (DecodeWith(hybrid_, on_hybrid, inputs, outputs, stream)) {
    for (size_t i : on_hybrid) decoded[i] = true;
  }
  return decoded;
}

}  // namespace wds::gpu
