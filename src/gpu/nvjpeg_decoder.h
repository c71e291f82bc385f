// nvJPEG's batched decode of the JPEGs that RouteImage sends to the GPU, to
// interleaved RGB in device memory. Built only with WDS_WITH_NVJPEG, into its
// own library (wds_gpu_nvjpeg), not into wds::core.
//
// gpu_nvjpeg_test checks it on a GPU machine (scripts/gpu_check.sh);
// GpuBatchDecoder (wds/gpu/gpu_decode.h) drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace wds::gpu {

// NvjpegInput is one encoded JPEG in host memory (a staging buffer), and
// whether the hardware backend takes it (RouteDecision::hardware).
struct NvjpegInput {
  const uint8_t* data = nullptr;
  size_t length = 0;
  bool hardware = true;
};

// NvjpegOutput is where one image's RGB pixels go: device memory of at least
// pitch * header.height bytes, pitch >= 3 * header.width.
struct NvjpegOutput {
  uint8_t* pixels = nullptr;
  size_t pitch = 0;
};

// NvjpegBatchDecoder holds nvJPEG handles for one device: the hardware
// backend (the JPEG engines of A100, H100, H200) when the GPU has it, and
// the GPU-hybrid backend for what the engines do not take (progressive
// JPEGs, 4:1:1 subsampling) and for GPUs without engines. Not thread-safe:
// one per decoding thread.
class NvjpegBatchDecoder {
 public:
  // Create makes the handles on the current device. Errors: Unavailable
  // naming nvJPEG's status when neither backend initialises.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NvjpegBatchDecoder>> Create(
      int max_cpu_threads);
  ~NvjpegBatchDecoder();
  NvjpegBatchDecoder(const NvjpegBatchDecoder&) = delete;
  NvjpegBatchDecoder& operator=(const NvjpegBatchDecoder&) = delete;

  bool hardware() const { return hardware_.handle != nullptr; }
  // chroma_interpolated is true when every backend in use upsamples chroma by
  // interpolation, as the CPU decoder does (nvJPEG 12.1 on).
  bool chroma_interpolated() const {
    return hybrid_.interpolated && (!hardware() || hardware_.interpolated);
  }

  // Decode enqueues the decode of `inputs` into `outputs` on `stream` (a
  // cudaStream_t). Returns, per image, true when nvJPEG decoded it and false
  // when its share of the batch failed: those images go to the CPU decoder,
  // whose error (for a corrupt image) reaches the handler as on the CPU path.
  // Batches may go to other streams: each backend's state is reused in
  // stream order (a batch on a new stream waits on the GPU for the last), and
  // initialised again for another batch size only once its last batch is done.
  // REQUIRES: inputs.size() == outputs.size(); every input routed to the GPU.
  [[nodiscard]] std::vector<bool> Decode(absl::Span<const NvjpegInput> inputs,
                                         absl::Span<const NvjpegOutput> outputs, void* stream);

 private:
  struct Backend {
    void* handle = nullptr;  // nvjpegHandle_t
    void* state = nullptr;   // nvjpegJpegState_t
    int batch_size = 0;      // of the last nvjpegDecodeBatchedInitialize
    bool interpolated = false;  // made with NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION
    void* last_batch = nullptr;   // cudaEvent_t recorded after the last nvjpegDecodeBatched
    void* last_stream = nullptr;  // the cudaStream_t it ran on
  };
  NvjpegBatchDecoder() = default;
  bool DecodeWith(Backend& backend, const std::vector<size_t>& which,
                  absl::Span<const NvjpegInput> inputs, absl::Span<const NvjpegOutput> outputs,
                  void* stream);

  int max_cpu_threads_ = 1;
  Backend hardware_;
  Backend hybrid_;
};

}  // namespace wds::gpu
