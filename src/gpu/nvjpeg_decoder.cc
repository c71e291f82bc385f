// NvjpegBatchDecoder.
#include "gpu/nvjpeg_decoder.h"

#include <cuda_runtime_api.h>
#include <nvjpeg.h>

#include "wds/internal/base/strings.h"

namespace wds::gpu {
namespace {

nvjpegHandle_t Handle(void* p) { return static_cast<nvjpegHandle_t>(p); }
nvjpegJpegState_t State(void* p) { return static_cast<nvjpegJpegState_t>(p); }

// ChromaInterpolationFlag is the handle flag that upsamples subsampled chroma
// by interpolation, as libjpeg-turbo's default ("fancy") upsampling does,
// where this nvJPEG has it (12.1 on); without it, nvJPEG replicates chroma
// samples and differs from the CPU decoder by tens of levels at colour edges.
unsigned int ChromaInterpolationFlag() {
#ifdef NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION
  int major = 0;
  int minor = 0;
  if (nvjpegGetProperty(MAJOR_VERSION, &major) != NVJPEG_STATUS_SUCCESS ||
      nvjpegGetProperty(MINOR_VERSION, &minor) != NVJPEG_STATUS_SUCCESS) {
    return 0;
  }
  if (major * 1000 + minor >= 12001) return NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION;
#endif
  return 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NvjpegBatchDecoder>> NvjpegBatchDecoder::Create(
    int max_cpu_threads) {
  std::unique_ptr<NvjpegBatchDecoder> d(new NvjpegBatchDecoder);
  d->max_cpu_threads_ = max_cpu_threads < 1 ? 1 : max_cpu_threads;
  const unsigned int interpolate = ChromaInterpolationFlag();
  auto make = [&](nvjpegBackend_t backend, Backend& out) -> nvjpegStatus_t {
    nvjpegHandle_t handle = nullptr;
    // A backend that refuses the flag gets a handle without it (and the
    // decoder says so: chroma_interpolated()).
    nvjpegStatus_t s = nvjpegCreateEx(backend, nullptr, nullptr, interpolate, &handle);
    out.interpolated = interpolate != 0 && s == NVJPEG_STATUS_SUCCESS;
    if (s != NVJPEG_STATUS_SUCCESS && interpolate != 0) {
      s = nvjpegCreateEx(backend, nullptr, nullptr, 0, &handle);
    }
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
    if (b->last_batch != nullptr) {
      cudaEventSynchronize(static_cast<cudaEvent_t>(b->last_batch));
      cudaEventDestroy(static_cast<cudaEvent_t>(b->last_batch));
    }
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
    // nvJPEG requires the state's last batch to be done before it is
    // initialised again (a batch of another size, or after a failure); the
    // stream may still run it (a worker decodes ahead of its consumer).
    if (backend.last_batch != nullptr) {
      cudaEventSynchronize(static_cast<cudaEvent_t>(backend.last_batch));
    }
    if (nvjpegDecodeBatchedInitialize(Handle(backend.handle), State(backend.state), n,
                                      max_cpu_threads_,
                                      NVJPEG_OUTPUT_RGBI) != NVJPEG_STATUS_SUCCESS) {
      backend.batch_size = 0;
      return false;
    }
    backend.batch_size = n;
  }
  // The state is reused in stream order: a batch on another stream than the
  // last first waits (on the GPU) for the last one.
  if (backend.last_batch != nullptr && stream != backend.last_stream) {
    cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                        static_cast<cudaEvent_t>(backend.last_batch), 0);
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
  if (backend.last_batch == nullptr) {
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess) {
      backend.last_batch = event;
    }
  }
  if (backend.last_batch != nullptr &&
      cudaEventRecord(static_cast<cudaEvent_t>(backend.last_batch),
                      static_cast<cudaStream_t>(stream)) != cudaSuccess) {
    // Without the event, the next batch could not wait for this one: wait now.
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  }
  backend.last_stream = stream;
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
