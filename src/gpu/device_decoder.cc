// GpuBatchDecoder on a CUDA device. DecodeAhead, for one batch:
//   1. its payloads are gathered into a pinned staging buffer (one memcpy
//      each; jobs already pinned, and Options::stage_inputs false, are read
//      in place), with the kernel's source table at the end;
//   2. JPEGs go to nvJPEG's batched decode (the JPEG engines for what they
//      take, GPU-hybrid for the rest), reading from staging, writing full-size
//      RGB into a block of the decoder's pool; pixels decoded in the worker
//      are copied there (cudaMemcpyAsync from staging);
//   3. a JPEG nvJPEG refuses is decoded here by the CPU decoder and copied;
//   4. the source table is copied to the block's end, and an event recorded.
// PendingImages::Finish then launches one kernel that resizes, crops, flips,
// converts and normalizes every image into `out`, on the consumer's stream
// after that event; Decode is the two on the caller's stream.
// Staging is held until the decode's event completes. A block returns to the
// pool with the event of its last use (the last Finish's kernel), which the
// stream of the batch that takes it next waits for. Device memory: blocks grow
// to the largest batch and are kept; nothing is allocated per batch once
// batches repeat their shape, unless a consumer holds more batches than before.
//
// Without the CUDA kernels (WDS_WITH_CUDA_KERNELS) there is no device
// decoder; without nvJPEG (WDS_WITH_NVJPEG) every JPEG takes step 3.
#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"

#if WDS_WITH_CUDA_KERNELS
#include <cuda_runtime_api.h>

#include "base/host_allocator.h"
#include "gpu/cuda_util.h"
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

// Event is a CUDA event shared by what waits for it: a batch's staging lease
// and its PendingImages.
class Event {
 public:
  static absl::StatusOr<std::shared_ptr<Event>> Create(int device) {
    auto event = std::shared_ptr<Event>(new Event(device));
    WDS_RETURN_IF_ERROR(
        Cuda(cudaEventCreateWithFlags(&event->event_, cudaEventDisableTiming), "cudaEventCreate"));
    return event;
  }
  static absl::StatusOr<std::shared_ptr<Event>> Recorded(int device, cudaStream_t stream) {
    WDS_ASSIGN_OR_RETURN(std::shared_ptr<Event> event, Create(device));
    WDS_RETURN_IF_ERROR(Cuda(cudaEventRecord(event->event_, stream), "cudaEventRecord"));
    return event;
  }
  ~Event() {
    if (event_ == nullptr) return;
    UseDevice(device_);
    cudaEventDestroy(event_);  // released by CUDA once it has completed
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  explicit Event(int device) : device_(device) {}
  int device_;
  cudaEvent_t event_ = nullptr;
};

// BlockPool is device memory for decoded batches, reused from batch to batch:
// each block comes back with the event of its last use, which the stream of
// the next batch to take it waits for (on the GPU). Blocks are sized as
// staging buffers are (PooledSize). It holds as many blocks as batches are
// decoded and not yet dropped. Shared by a decoder and the PendingImages it
// made (which may outlive it); thread-safe.
class BlockPool {
 public:
  static constexpr size_t kGranule = size_t{1} << 20;
  struct Block {
    uint8_t* data = nullptr;
    size_t bytes = 0;
    std::shared_ptr<Event> last_use;  // null: nothing enqueued reads or writes it
  };

  explicit BlockPool(int device) : device_(device) {}
  ~BlockPool() {
    UseDevice(device_);
    for (Block& b : idle_) Free(b);
  }

  // Acquire returns a block of at least `bytes` that `stream` may use: the
  // smallest idle one that fits (the stream first waits for its last use),
  // else a new one. Idle blocks too small for this batch are freed first:
  // that waits on the host, but only while batches grow.
  absl::StatusOr<Block> Acquire(size_t bytes, cudaStream_t stream) {
    Block block;
    std::vector<Block> too_small;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto best = idle_.end();
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        if (it->bytes >= bytes && (best == idle_.end() || it->bytes < best->bytes)) best = it;
      }
      if (best != idle_.end()) {
        block = std::move(*best);
        idle_.erase(best);
      } else {
        too_small.swap(idle_);
      }
    }
    if (block.data != nullptr) {
      if (block.last_use != nullptr) {
        const cudaError_t e = cudaStreamWaitEvent(stream, block.last_use->get(), 0);
        if (e != cudaSuccess) {
          Return(std::move(block));
          return Cuda(e, "cudaStreamWaitEvent");
        }
        block.last_use.reset();
      }
      return block;
    }
    for (Block& b : too_small) Free(b);
    const size_t size = PooledSize(bytes, kGranule);
    void* p = nullptr;
    WDS_RETURN_IF_ERROR(
        Cuda(cudaMalloc(&p, size), Cat("cudaMalloc(", size, ") for a batch's decoded images")));
    block.data = static_cast<uint8_t*>(p);
    block.bytes = size;
    return block;
  }

  void Return(Block block) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(block));
  }

  int device() const { return device_; }

 private:
  // Free waits for the block's last use, then frees it.
  static void Free(Block& block) {
    if (block.last_use != nullptr) cudaEventSynchronize(block.last_use->get());
    cudaFree(block.data);
  }

  const int device_;
  std::mutex mu_;
  std::vector<Block> idle_;  // guarded by mu_ (std::mutex: ThreadSanitizer sees it)
};

// DevicePendingImages is DecodeAhead's result on a device: full-size RGB in a
// pool block, the resize sources at the block's end, and the event of the
// decode.
class DevicePendingImages final : public PendingImages {
 public:
  DevicePendingImages(const JobColumn& column, std::shared_ptr<BlockPool> pool,
                      BlockPool::Block block, const ResizeSource* sources,
                      std::shared_ptr<Event> decoded)
      : PendingImages(column.layout, pool->device()),
        output_(column.output),
        count_(static_cast<int>(column.headers.size())),
        pool_(std::move(pool)),
        block_(std::move(block)),
        sources_(sources),
        decoded_(std::move(decoded)) {}

  ~DevicePendingImages() override {
    block_.last_use = finished_ != nullptr ? std::move(finished_) : std::move(decoded_);
    pool_->Return(std::move(block_));
  }

  // Finish after a Finish on another stream first waits for that one too:
  // `finished_`, the block's last use, then covers every kernel that read it.
  absl::Status Finish(void* out, void* stream_ptr) override {
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    std::lock_guard<std::mutex> lock(mu_);
    UseDevice(device());
    WDS_ASSIGN_OR_RETURN(std::shared_ptr<Event> finished, Event::Create(device()));
    WDS_RETURN_IF_ERROR(
        Cuda(cudaStreamWaitEvent(stream, decoded_->get(), 0), "waiting for the decode"));
    if (finished_ != nullptr) {
      WDS_RETURN_IF_ERROR(
          Cuda(cudaStreamWaitEvent(stream, finished_->get(), 0), "waiting for the last finish"));
    }
    const int launched =
        LaunchResizeBatch(sources_, count_, MakeResizeTarget(output_, out), stream);
    WDS_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(launched), "the resize kernel's launch"));
    if (const cudaError_t e = cudaEventRecord(finished->get(), stream); e != cudaSuccess) {
      // Without the event nothing would say when the kernel is done: wait here,
      // so that neither `out` nor the block is reused under it.
      cudaStreamSynchronize(stream);
      return Cuda(e, "cudaEventRecord");
    }
    finished_ = std::move(finished);
    return absl::OkStatus();
  }

 private:
  GpuOutput output_;
  int count_;
  std::shared_ptr<BlockPool> pool_;
  BlockPool::Block block_;
  const ResizeSource* sources_;      // device memory, in block_
  std::shared_ptr<Event> decoded_;   // after nvJPEG, the copies and the source table
  std::mutex mu_;                    // Finish from several threads
  std::shared_ptr<Event> finished_;  // after the last Finish's kernel (guarded by mu_)
};

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
      : device_(device),
        staging_(std::move(pinned), kStagingBuffers),
        blocks_(std::make_shared<BlockPool>(device)) {}

  // The members (nvJPEG's handles, staging, the pool) are released on the
  // decoder's device.
  ~DeviceBatchDecoder() override {
    UseDevice(device_);
    for (InUse& u : in_use_) cudaEventSynchronize(u.done->get());
    in_use_.clear();
  }

  absl::Status Init(const Options& options) {
    options_ = options;
    // Left current (cuda_util.h's UseDevice says why).
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
                      void* stream) override {
    WDS_ASSIGN_OR_RETURN(std::shared_ptr<PendingImages> pending,
                         DecodeAhead(jobs, keys, urls, stream));
    PhaseClock clock;
    WDS_RETURN_IF_ERROR(pending->Finish(out, stream));
    clock.Add(stats_.seconds.kernel);
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<PendingImages>> DecodeAhead(const BytesList& jobs,
                                                             const TextList* keys,
                                                             const TextList* urls,
                                                             void* stream_ptr) override {
    PhaseClock clock;
    Stats counts;  // added to stats_ when the batch is decoded
    WDS_ASSIGN_OR_RETURN(JobColumn column, ParseJobColumn(jobs, keys, urls));
    clock.Add(stats_.seconds.parse);
    WDS_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "cudaSetDevice"));
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    const size_t n = jobs.size();

    // Where each full-size image goes in the block (the source table at its
    // end), and the staging layout (the payloads, when staged, then the
    // source table). Jobs in page-locked memory are read in place: staging
    // them would copy pinned memory into pinned memory on this thread.
    const bool staged = options_.stage_inputs && !column.pinned;
    if (!staged) counts.images_read_in_place += static_cast<int64_t>(n);
    std::vector<size_t> pixels_at(n);
    std::vector<size_t> staging_at(n);
    size_t pixel_bytes = 0;
    size_t staging_bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      const JobHeader& h = column.headers[i];
      pixels_at[i] = pixel_bytes;
      pixel_bytes += AlignUp(size_t{3} * h.width * h.height);
      if (staged) {
        staging_at[i] = staging_bytes;
        staging_bytes += AlignUp(column.payloads[i].size());
      }
    }
    const size_t sources_at = staging_bytes;
    staging_bytes += n * sizeof(ResizeSource);
    WDS_ASSIGN_OR_RETURN(StagingBuffer staging, Lease(staging_bytes));
    WDS_ASSIGN_OR_RETURN(BlockPool::Block block,
                         blocks_->Acquire(pixel_bytes + n * sizeof(ResizeSource), stream));
    uint8_t* pixels = block.data;
    auto* device_sources = reinterpret_cast<ResizeSource*>(block.data + pixel_bytes);
    clock.Add(stats_.seconds.wait);
    // Until the decode is handed out, an error first waits for whatever was
    // enqueued to stop using the block, the staging buffer and the CPU
    // fallbacks' pixels: `drain` is destroyed before them.
    BlockReturn block_return{blocks_.get(), &block};
    std::vector<Array> cpu_decoded;
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
      sources[i] = SourceOf(column.headers[i], pixels + pixels_at[i]);
    }

    // 2. Pixels copied; nvJPEG for the JPEGs.
    std::vector<size_t> jpegs;
    for (size_t i = 0; i < n; ++i) {
      const JobHeader& h = column.headers[i];
      if (h.kind == JobKind::kJpeg) {
        jpegs.push_back(i);
        continue;
      }
      WDS_RETURN_IF_ERROR(
          Cuda(cudaMemcpyAsync(pixels + pixels_at[i], input[i], column.payloads[i].size(),
                               cudaMemcpyHostToDevice, stream),
               "copying pixels to the device"));
      ++counts.worker_decoded_images;
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
        outputs.push_back({pixels + pixels_at[i], size_t{3} * h.width});
      }
      decoded = nvjpeg_->Decode(inputs, outputs, stream);
    }
#endif
    clock.Add(stats_.seconds.nvjpeg);
    // 3. What nvJPEG refused (or every JPEG, without nvJPEG): the CPU decoder.
    for (size_t k = 0; k < jpegs.size(); ++k) {
      if (decoded[k]) {
        ++counts.nvjpeg_images;
        continue;
      }
      const size_t i = jpegs[k];
      WDS_ASSIGN_OR_RETURN(Array cpu, DecodeJobJpeg(column, i, nullptr, keys, urls));
      WDS_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(pixels + pixels_at[i], cpu.data.data(), cpu.nbytes(),
                                               cudaMemcpyHostToDevice, stream),
                               "copying a CPU-decoded image to the device"));
      cpu_decoded.push_back(std::move(cpu));
      ++counts.cpu_fallback_images;
    }
    clock.Add(stats_.seconds.cpu_decode);

    // 4. The source table, for the kernel that Finish launches.
    WDS_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(device_sources, sources, n * sizeof(ResizeSource),
                                             cudaMemcpyHostToDevice, stream),
                             "copying the source table"));
    WDS_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, Event::Recorded(device_, stream));
    // What the copies and nvJPEG read is kept until the decode is done: the
    // staging buffer, the jobs when read in place, the CPU-decoded images.
    in_use_.push_back(InUse{std::move(staging), staged ? BytesList{} : jobs,
                            std::move(cpu_decoded), done});
    drain.active = false;
    block_return.block = nullptr;
    auto pending = std::make_shared<DevicePendingImages>(column, blocks_, std::move(block),
                                                         device_sources, std::move(done));
    clock.Add(stats_.seconds.kernel);
    ++counts.batches;
    counts.images += static_cast<int64_t>(n);
    stats_ += counts;
    return pending;
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
    std::shared_ptr<Event> done;
  };
  // BlockReturn gives `block` back to its pool on an error path (with no
  // last use: the stream was drained), unless cleared.
  struct BlockReturn {
    BlockPool* pool;
    BlockPool::Block* block;
    ~BlockReturn() {
      if (block != nullptr) pool->Return(std::move(*block));
    }
  };

  // Lease returns a staging buffer, first releasing those whose batches are
  // decoded, and waiting for the oldest when all are in use.
  absl::StatusOr<StagingBuffer> Lease(size_t bytes) {
    while (!in_use_.empty() && (cudaEventQuery(in_use_.front().done->get()) == cudaSuccess ||
                                static_cast<int>(in_use_.size()) >= kStagingBuffers)) {
      WDS_RETURN_IF_ERROR(
          Cuda(cudaEventSynchronize(in_use_.front().done->get()), "cudaEventSynchronize"));
      in_use_.pop_front();
    }
    return staging_.Acquire(bytes);
  }

  int device_;
  Options options_;
  StagingPool staging_;
  std::shared_ptr<BlockPool> blocks_;
  std::deque<InUse> in_use_;
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
