// GpuWorkerDecoders: a free list of (decoder, stream) leased per call.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

#if WDS_WITH_CUDA_KERNELS
#include <cuda_runtime_api.h>

#include "gpu/cuda_util.h"
#endif

namespace wds {
namespace {

// Worker is one decoder with its stream (null on the host), and its stats as
// of its last return (what GpuWorkerDecoders::stats() adds up).
struct Worker {
  std::unique_ptr<GpuBatchDecoder> decoder;
  void* stream = nullptr;
  GpuBatchDecoder::Stats reported;
};

}  // namespace

struct GpuWorkerDecoders::Impl {
  int device = GpuBatchDecoder::kHost;
  GpuBatchDecoder::Options options;
  std::string decoder;
  bool nvjpeg_hardware = false;
  // std::mutex, not absl::Mutex: ThreadSanitizer sees it.
  mutable std::mutex mu;
  std::vector<std::unique_ptr<Worker>> idle;  // guarded by mu, as `all`
  std::vector<const Worker*> all;             // every worker made, leased or idle

  // Make makes a decoder and, on a device, a non-blocking stream for it.
  absl::StatusOr<std::unique_ptr<Worker>> Make() {
    auto worker = std::make_unique<Worker>();
    WDS_ASSIGN_OR_RETURN(worker->decoder, GpuBatchDecoder::Create(device, options));
#if WDS_WITH_CUDA_KERNELS
    if (device != GpuBatchDecoder::kHost) {
      gpu::UseDevice(device);
      cudaStream_t stream = nullptr;
      WDS_RETURN_IF_ERROR(gpu::Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                    "cudaStreamCreate for a worker's decoder"));
      worker->stream = stream;
    }
#endif
    return worker;
  }

  // Lease takes an idle worker, or makes one.
  absl::StatusOr<std::unique_ptr<Worker>> Lease() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!idle.empty()) {
        std::unique_ptr<Worker> worker = std::move(idle.back());
        idle.pop_back();
        return worker;
      }
    }
    WDS_ASSIGN_OR_RETURN(std::unique_ptr<Worker> worker, Make());
    std::lock_guard<std::mutex> lock(mu);
    all.push_back(worker.get());
    return worker;
  }

  // Return takes `worker`'s stats and makes it idle.
  void Return(std::unique_ptr<Worker> worker) {
    std::lock_guard<std::mutex> lock(mu);
    worker->reported = worker->decoder->stats();
    idle.push_back(std::move(worker));
  }

  // Destroy waits for what a worker's stream still runs, then frees it.
  void Destroy(Worker& worker) {
#if WDS_WITH_CUDA_KERNELS
    if (worker.stream != nullptr) {
      gpu::UseDevice(device);
      cudaStreamSynchronize(static_cast<cudaStream_t>(worker.stream));
      cudaStreamDestroy(static_cast<cudaStream_t>(worker.stream));
      worker.stream = nullptr;
    }
#else
    (void)worker;
#endif
  }
};

GpuWorkerDecoders::GpuWorkerDecoders(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GpuWorkerDecoders::~GpuWorkerDecoders() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (std::unique_ptr<Worker>& w : impl_->idle) impl_->Destroy(*w);
}

absl::StatusOr<std::shared_ptr<GpuWorkerDecoders>> GpuWorkerDecoders::Create(
    int device, GpuBatchDecoder::Options options, int decoders) {
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  impl->options = options;
  std::vector<std::unique_ptr<Worker>> made;
  for (int i = 0; i < std::max(1, decoders); ++i) {
    absl::StatusOr<std::unique_ptr<Worker>> worker = impl->Make();
    if (!worker.ok()) {
      for (std::unique_ptr<Worker>& w : made) impl->Destroy(*w);
      return worker.status();
    }
    made.push_back(*std::move(worker));
  }
  // The decoders may differ: the JPEG engines may refuse a later handle. Then
  // decoder() names both kinds, and nvjpeg_hardware() is false.
  impl->decoder = std::string(made[0]->decoder->decoder());
  impl->nvjpeg_hardware = true;
  int others = 0;
  std::string other;
  for (const std::unique_ptr<Worker>& w : made) {
    impl->nvjpeg_hardware = impl->nvjpeg_hardware && w->decoder->nvjpeg_hardware();
    if (w->decoder->decoder() == impl->decoder) continue;
    ++others;
    other = std::string(w->decoder->decoder());
  }
  if (others > 0) {
    impl->decoder = Cat(impl->decoder, " (", others, " of ", made.size(), " decoders: ", other, ")");
  }
  {
    std::lock_guard<std::mutex> lock(impl->mu);
    for (const std::unique_ptr<Worker>& w : made) impl->all.push_back(w.get());
    impl->idle = std::move(made);
  }
  return std::shared_ptr<GpuWorkerDecoders>(new GpuWorkerDecoders(std::move(impl)));
}

absl::Status GpuWorkerDecoders::DecodeAhead(Sample& batch) {
  const BatchKeysAndUrls names(batch);
  std::unique_ptr<Worker> worker;
  absl::Status status;
  for (Sample::Field& f : batch) {
    if (!IsGpuJobColumn(f.second)) continue;
    if (worker == nullptr) {
      absl::StatusOr<std::unique_ptr<Worker>> leased = impl_->Lease();
      if (!leased.ok()) return leased.status();
      worker = *std::move(leased);
    }
    absl::StatusOr<std::shared_ptr<PendingImages>> pending = worker->decoder->DecodeAhead(
        std::get<BytesList>(f.second), names.keys, names.urls, worker->stream);
    if (!pending.ok()) {
      status = pending.status();
      break;
    }
    f.second = ObjectRef(*std::move(pending));
  }
  if (worker != nullptr) impl_->Return(std::move(worker));
  return status;
}

std::string GpuWorkerDecoders::decoder() const { return impl_->decoder; }
bool GpuWorkerDecoders::nvjpeg_hardware() const { return impl_->nvjpeg_hardware; }

int GpuWorkerDecoders::device() const { return impl_->device; }

GpuBatchDecoder::Stats GpuWorkerDecoders::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  GpuBatchDecoder::Stats total;
  for (const Worker* w : impl_->all) total += w->reported;
  return total;
}

int GpuWorkerDecoders::decoders() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int>(impl_->all.size());
}

}  // namespace wds
