// GpuBatchDecoder on a CUDA device. One batch:
//   1. its payloads are gathered into a pinned staging buffer (one memcpy
//      each; jobs already pinned, and Options::stage_inputs false, are read
//      in place), with the kernel's source table at the end;
//   2. JPEGs go to nvJPEG's batched decode (the JPEG engines for what they
//      take, GPU-hybrid for the rest), reading from staging, writing full-size
//      RGB into the decoder's device scratch; pixels decoded in the worker are
//      copied there (cudaMemcpyAsync from staging);
//   3. a JPEG nvJPEG refuses is decoded here by the CPU decoder and copied;
//   4. one kernel launch resizes, crops, flips, converts and normalizes every
//      image into `out`.
// Everything runs on the caller's stream (a batch on another stream than the
// last first waits for the last). Staging is held until the event recorded
// after the kernel completes; scratch is reused in stream order.
// Device memory: scratch grows to the largest batch and is kept; nothing is
// allocated per batch once batches repeat their shape.
//
// Without the CUDA kernels (WDS_WITH_CUDA_KERNELS) there is no device
// decoder; without nvJPEG (WDS_WITH_NVJPEG) every JPEG takes step 3.
#include <cstring>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"

#if WDS_WITH_CUDA_KERNELS
#include <cuda_runtime_api.h>

#include "base/host_allocator.h"
#include "gpu/job_column.h"
#include "gpu/phase_clock.h"
#include "gpu/resize_kernel.h"
#include "gpu/staging.h"
#include "wds/internal/base/status_macros.h"
#if WDS_WITH_NVJPEG
#include "gpu/nvjpeg_decoder.h"
#endif
#endif

namespace wds {

#if !WDS_WITH_CUDA_KERNELS

absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> CreateDeviceBatchDecoder(
    int device, const GpuBatchDecoder::Options& /*options*/) {
  return absl::UnavailableError(Cat("decode on cuda:", device,
                                    ": this build has no GPU decode path (built without the "
                                    "CUDA kernels: no nvcc, or a sanitizer build)"));
}

#else

namespace gpu {
namespace {

constexpr size_t kAlign = 256;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

absl::Status Cuda(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      Cat("decode on cuda: ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

// StreamDrain synchronizes `stream` when destroyed, unless cleared.
struct StreamDrain {
  cudaStream_t stream;
  bool active = true;
  ~StreamDrain() {
    if (active) cudaStreamSynchronize(stream);
  }
};

class DeviceBatchDecoder final : public GpuBatchDecoder {
 public:
  DeviceBatchDecoder(int device, std::shared_ptr<HostAllocator> pinned)
      : device_(device), staging_(std::move(pinned), kStagingBuffers) {}

  ~DeviceBatchDecoder() override {
    cudaSetDevice(device_);
    for (InUse& u : in_use_) {
      cudaEventSynchronize(u.done);
      cudaEventDestroy(u.done);
    }
    in_use_.clear();
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (sources_ != nullptr) cudaFree(sources_);
  }

  absl::Status Init(const Options& options) {
    options_ = options;
    WDS_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), Cat("cudaSetDevice(", device_, ")")));
#if WDS_WITH_NVJPEG
    absl::StatusOr<std::unique_ptr<NvjpegBatchDecoder>> nvjpeg =
        NvjpegBatchDecoder::Create(options.max_cpu_threads);
    if (!nvjpeg.ok()) return nvjpeg.status();
    nvjpeg_ = *std::move(nvjpeg);
#else
    (void)options;
#endif
    return absl::OkStatus();
  }

  absl::Status Decode(const BytesList& jobs, const TextList* keys, const TextList* urls, void* out,
                      void* stream_ptr) override {
    PhaseClock clock;
    WDS_ASSIGN_OR_RETURN(JobColumn column, ParseJobColumn(jobs, keys, urls));
    clock.Add(stats_.seconds.parse);
    WDS_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "cudaSetDevice"));
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    // Scratch and the source table are reused in stream order: a batch on
    // another stream than the last first waits for the last one.
    if (!in_use_.empty() && stream != last_stream_) {
      WDS_RETURN_IF_ERROR(
          Cuda(cudaStreamWaitEvent(stream, in_use_.back().done, 0), "cudaStreamWaitEvent"));
    }
    last_stream_ = stream;
    const size_t n = jobs.size();

    // Where each full-size image goes in scratch, and the staging layout
    // (the payloads, when staged, then the source table).
    // Jobs in page-locked memory are read in place: staging them would copy
    // pinned memory into pinned memory on this thread.
    const bool staged = options_.stage_inputs && !column.pinned;
    if (!staged) stats_.images_read_in_place += static_cast<int64_t>(n);
    std::vector<size_t> scratch_at(n);
    std::vector<size_t> staging_at(n);
    size_t scratch_bytes = 0;
    size_t staging_bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      const JobHeader& h = column.headers[i];
      scratch_at[i] = scratch_bytes;
      scratch_bytes += AlignUp(size_t{3} * h.width * h.height);
      if (staged) {
        staging_at[i] = staging_bytes;
        staging_bytes += AlignUp(column.payloads[i].size());
      }
    }
    const size_t sources_at = staging_bytes;
    staging_bytes += n * sizeof(ResizeSource);
    WDS_RETURN_IF_ERROR(Reserve(scratch_bytes, n, stream));
    WDS_ASSIGN_OR_RETURN(StagingBuffer staging, Lease(staging_bytes));
    clock.Add(stats_.seconds.wait);
    // Destroyed before `staging`: an error after this point first waits for
    // whatever was enqueued to stop reading it.
    StreamDrain drain{stream};

    // 1. Gather (or, unstaged, read the jobs where they are).
    uint8_t* host = staging.data();
    auto* sources = reinterpret_cast<ResizeSource*>(host + sources_at);
    std::vector<const uint8_t*> input(n);
    for (size_t i = 0; i < n; ++i) {
      const std::string_view p = column.payloads[i];
      if (staged) {
        std::memcpy(host + staging_at[i], p.data(), p.size());
        input[i] = host + staging_at[i];
      } else {
        input[i] = reinterpret_cast<const uint8_t*>(p.data());
      }
      sources[i] = SourceOf(column.headers[i], scratch_ + scratch_at[i]);
    }

    // 2. Pixels copied; nvJPEG for the JPEGs.
    std::vector<size_t> jpegs;
    for (size_t i = 0; i < n; ++i) {
      const JobHeader& h = column.headers[i];
      if (h.kind == JobKind::kJpeg) {
        jpegs.push_back(i);
        continue;
      }
      WDS_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(scratch_ + scratch_at[i], input[i],
                                               column.payloads[i].size(), cudaMemcpyHostToDevice,
                                               stream),
                               "copying pixels to the device"));
      ++stats_.worker_decoded_images;
    }
    clock.Add(stats_.seconds.gather);
    std::vector<bool> decoded(jpegs.size(), false);
#if WDS_WITH_NVJPEG
    if (!jpegs.empty()) {
      std::vector<NvjpegInput> inputs;
      std::vector<NvjpegOutput> outputs;
      inputs.reserve(jpegs.size());
      outputs.reserve(jpegs.size());
      for (size_t i : jpegs) {
        const JobHeader& h = column.headers[i];
        inputs.push_back({input[i], column.payloads[i].size(), h.hardware});
        outputs.push_back({scratch_ + scratch_at[i], size_t{3} * h.width});
      }
      decoded = nvjpeg_->Decode(inputs, outputs, stream);
    }
#endif
    clock.Add(stats_.seconds.nvjpeg);
    // 3. What nvJPEG refused (or every JPEG, without nvJPEG): the CPU decoder.
    std::vector<Array> cpu_decoded;
    for (size_t k = 0; k < jpegs.size(); ++k) {
      if (decoded[k]) {
        ++stats_.nvjpeg_images;
        continue;
      }
      const size_t i = jpegs[k];
      absl::StatusOr<Array> cpu = DecodeJpegOnCpu(column.payloads[i]);
      const std::string_view site = column.headers[i].site;
      if (!cpu.ok()) return JobError(cpu.status(), i, site, keys, urls);
      // ParseJobColumn checked the frame header; libjpeg decodes that size.
      if (cpu->nbytes() != size_t{3} * column.headers[i].width * column.headers[i].height) {
        return JobError(absl::InternalError("the CPU decoder's size differs from the frame's"), i,
                        site, keys, urls);
      }
      WDS_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(scratch_ + scratch_at[i], cpu->data.data(),
                                               cpu->nbytes(), cudaMemcpyHostToDevice, stream),
                               "copying a CPU-decoded image to the device"));
      cpu_decoded.push_back(*std::move(cpu));
      ++stats_.cpu_fallback_images;
    }

    clock.Add(stats_.seconds.cpu_decode);

    // 4. The kernel.
    WDS_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(sources_, sources, n * sizeof(ResizeSource),
                                             cudaMemcpyHostToDevice, stream),
                             "copying the source table"));
    const int launched = LaunchResizeBatch(sources_, static_cast<int>(n),
                                           MakeResizeTarget(column.output, out), stream);
    WDS_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(launched), "the resize kernel's launch"));
    cudaEvent_t done = nullptr;
    WDS_RETURN_IF_ERROR(
        Cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate"));
    if (absl::Status s = Cuda(cudaEventRecord(done, stream), "cudaEventRecord"); !s.ok()) {
      cudaEventDestroy(done);
      return s;
    }
    // What the copies and nvJPEG read is kept until the batch is done: the
    // staging buffer, the jobs when read in place, the CPU-decoded images.
    in_use_.push_back(InUse{std::move(staging), staged ? BytesList{} : jobs,
                            std::move(cpu_decoded), done});
    drain.active = false;
    clock.Add(stats_.seconds.kernel);
    ++stats_.batches;
    stats_.images += static_cast<int64_t>(n);
    return absl::OkStatus();
  }

  int device() const override { return device_; }
  bool nvjpeg_hardware() const override {
#if WDS_WITH_NVJPEG
    return nvjpeg_->hardware();
#else
    return false;
#endif
  }
  std::string_view decoder() const override {
#if WDS_WITH_NVJPEG
    if (nvjpeg_->chroma_interpolated()) {
      return nvjpeg_->hardware() ? "nvjpeg hardware+hybrid" : "nvjpeg hybrid";
    }
    return nvjpeg_->hardware() ? "nvjpeg hardware+hybrid, chroma replicated"
                               : "nvjpeg hybrid, chroma replicated";
#else
    return "cpu";
#endif
  }

 private:
  static constexpr int kStagingBuffers = 4;
  struct InUse {
    StagingBuffer staging;
    BytesList jobs;                  // unstaged: what nvJPEG and the copies read
    std::vector<Array> cpu_decoded;  // the sources of the fallbacks' copies
    cudaEvent_t done;
  };

  // Reserve makes scratch hold `bytes` and the source table `count` entries.
  // Growing waits for the stream: the old memory may still be read.
  absl::Status Reserve(size_t bytes, size_t count, cudaStream_t stream) {
    if (bytes <= scratch_bytes_ && count <= sources_count_) return absl::OkStatus();
    WDS_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
    if (bytes > scratch_bytes_) {
      if (scratch_ != nullptr) cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      void* p = nullptr;
      WDS_RETURN_IF_ERROR(Cuda(cudaMalloc(&p, bytes), Cat("cudaMalloc(", bytes, ") for scratch")));
      scratch_ = static_cast<uint8_t*>(p);
      scratch_bytes_ = bytes;
    }
    if (count > sources_count_) {
      if (sources_ != nullptr) cudaFree(sources_);
      sources_ = nullptr;
      sources_count_ = 0;
      void* p = nullptr;
      WDS_RETURN_IF_ERROR(
          Cuda(cudaMalloc(&p, count * sizeof(ResizeSource)), "cudaMalloc for the source table"));
      sources_ = static_cast<ResizeSource*>(p);
      sources_count_ = count;
    }
    return absl::OkStatus();
  }

  // Lease returns a staging buffer, first releasing those whose batches are
  // done, and waiting for the oldest when all are in use.
  absl::StatusOr<StagingBuffer> Lease(size_t bytes) {
    while (!in_use_.empty() && (cudaEventQuery(in_use_.front().done) == cudaSuccess ||
                                static_cast<int>(in_use_.size()) >= kStagingBuffers)) {
      WDS_RETURN_IF_ERROR(Cuda(cudaEventSynchronize(in_use_.front().done), "cudaEventSynchronize"));
      cudaEventDestroy(in_use_.front().done);
      in_use_.pop_front();
    }
    return staging_.Acquire(bytes);
  }

  int device_;
  Options options_;
  cudaStream_t last_stream_ = nullptr;
  StagingPool staging_;
  std::deque<InUse> in_use_;
  uint8_t* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  ResizeSource* sources_ = nullptr;
  size_t sources_count_ = 0;
#if WDS_WITH_NVJPEG
  std::unique_ptr<NvjpegBatchDecoder> nvjpeg_;
#endif
};

}  // namespace
}  // namespace gpu

absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> CreateDeviceBatchDecoder(
    int device, const GpuBatchDecoder::Options& options) {
  absl::StatusOr<std::shared_ptr<HostAllocator>> pinned = PinnedHostAllocator(device);
  if (!pinned.ok()) {
    return absl::UnavailableError(
        Cat("decode on cuda:", device, ": ", ToStd(pinned.status().message())));
  }
  auto decoder = std::make_unique<gpu::DeviceBatchDecoder>(device, *std::move(pinned));
  if (absl::Status s = decoder->Init(options); !s.ok()) return s;
  return std::unique_ptr<GpuBatchDecoder>(std::move(decoder));
}

#endif  // WDS_WITH_CUDA_KERNELS

}  // namespace wds
