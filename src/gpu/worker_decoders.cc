// GpuWorkerDecoders: a free list of (decoder, stream) leased per call.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/status_macros.h"

#if WDS_WITH_CUDA_KERNELS
#include <cuda_runtime_api.h>

#include "gpu/cuda_util.h"
#endif

namespace wds {
namespace {

// Worker is one decoder with its stream (null on the host), and the stats it
// had when they were last added to the total.
struct Worker {
  std::unique_ptr<GpuBatchDecoder> decoder;
  void* stream = nullptr;
  GpuBatchDecoder::Stats reported;
};

// AddSince adds to `total` what `now` counts beyond `before`.
void AddSince(GpuBatchDecoder::Stats& total, const GpuBatchDecoder::Stats& now,
              const GpuBatchDecoder::Stats& before) {
  total.batches += now.batches - before.batches;
  total.images += now.images - before.images;
  total.nvjpeg_images += now.nvjpeg_images - before.nvjpeg_images;
  total.cpu_fallback_images += now.cpu_fallback_images - before.cpu_fallback_images;
  total.worker_decoded_images += now.worker_decoded_images - before.worker_decoded_images;
  total.images_read_in_place += now.images_read_in_place - before.images_read_in_place;
  GpuBatchDecoder::Stats::Phases& t = total.seconds;
  const GpuBatchDecoder::Stats::Phases& a = now.seconds;
  const GpuBatchDecoder::Stats::Phases& b = before.seconds;
  t.parse += a.parse - b.parse;
  t.wait += a.wait - b.wait;
  t.gather += a.gather - b.gather;
  t.nvjpeg += a.nvjpeg - b.nvjpeg;
  t.cpu_decode += a.cpu_decode - b.cpu_decode;
  t.kernel += a.kernel - b.kernel;
}

}  // namespace

struct GpuWorkerDecoders::Impl {
  int device = GpuBatchDecoder::kHost;
  GpuBatchDecoder::Options options;
  std::string decoder;
  bool nvjpeg_hardware = false;
  mutable absl::Mutex mu;
  std::vector<std::unique_ptr<Worker>> idle ABSL_GUARDED_BY(mu);
  int made ABSL_GUARDED_BY(mu) = 0;
  GpuBatchDecoder::Stats total ABSL_GUARDED_BY(mu);

  // Make makes a decoder and, on a device, a non-blocking stream for it.
  absl::StatusOr<std::unique_ptr<Worker>> Make() {
    auto worker = std::make_unique<Worker>();
    WDS_ASSIGN_OR_RETURN(worker->decoder, GpuBatchDecoder::Create(device, options));
#if WDS_WITH_CUDA_KERNELS
    if (device != GpuBatchDecoder::kHost) {
      gpu::DeviceGuard guard(device);
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
      absl::MutexLock lock(&mu);
      if (!idle.empty()) {
        std::unique_ptr<Worker> worker = std::move(idle.back());
        idle.pop_back();
        return worker;
      }
    }
    WDS_ASSIGN_OR_RETURN(std::unique_ptr<Worker> worker, Make());
    absl::MutexLock lock(&mu);
    ++made;
    return worker;
  }

  // Return adds what `worker` decoded to the total and makes it idle.
  void Return(std::unique_ptr<Worker> worker) {
    absl::MutexLock lock(&mu);
    AddSince(total, worker->decoder->stats(), worker->reported);
    worker->reported = worker->decoder->stats();
    idle.push_back(std::move(worker));
  }

  // Destroy waits for what a worker's stream still runs, then frees it.
  void Destroy(Worker& worker) {
#if WDS_WITH_CUDA_KERNELS
    if (worker.stream != nullptr) {
      gpu::DeviceGuard guard(device);
      cudaStreamSynchronize(static_cast<cudaStream_t>(worker.stream));
      cudaStreamDestroy(static_cast<cudaStream_t>(worker.stream));
      worker.stream = nullptr;
    }
#else
    (void)worker;
#endif
  }
};

GpuWorkerDecoders::GpuWorkerDecoders(int device, std::unique_ptr<Impl> impl)
    : device_(device), impl_(std::move(impl)) {}

GpuWorkerDecoders::~GpuWorkerDecoders() {
  absl::MutexLock lock(&impl_->mu);
  for (std::unique_ptr<Worker>& w : impl_->idle) impl_->Destroy(*w);
}

absl::StatusOr<std::shared_ptr<GpuWorkerDecoders>> GpuWorkerDecoders::Create(
    int device, GpuBatchDecoder::Options options) {
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  impl->options = options;
  WDS_ASSIGN_OR_RETURN(std::unique_ptr<Worker> first, impl->Make());
  impl->decoder = std::string(first->decoder->decoder());
  impl->nvjpeg_hardware = first->decoder->nvjpeg_hardware();
  {
    absl::MutexLock lock(&impl->mu);
    impl->idle.push_back(std::move(first));
    impl->made = 1;
  }
  return std::shared_ptr<GpuWorkerDecoders>(new GpuWorkerDecoders(device, std::move(impl)));
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

GpuBatchDecoder::Stats GpuWorkerDecoders::stats() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->total;
}

int GpuWorkerDecoders::decoders() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->made;
}

}  // namespace wds
