// DevicePrefetcher: batches as tensors on the training device, one batch ahead.
//
//   wds::Loader loader(pipeline.ToTuple({"jpg", "cls"}).Batched(64), {.workers = 4});
//   wds::DevicePrefetcher prefetcher(loader, {.device = torch::Device(torch::kCUDA, local_rank),
//                                             .tensor = {.layout = wds::TensorLayout::kNCHW}});
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     loader.SetEpoch(epoch);
//     for (const wds::TensorBatch& batch : prefetcher) Step(batch[0], batch[1]);
//   }
//
// On a CUDA device, while the caller trains on batch k, batch k+1 is already
// being copied (non_blocking) on a side stream from the pool's page-locked
// memory. Next() makes the caller's current stream wait for that copy (a GPU
// wait, not a host one) and records the tensors on that stream, so the caching
// allocator does not reuse them early. The host batch is kept until the copy's
// event has completed, so its pool buffer is never reused under a running copy.
//
// Batches of Pipeline::DecodeOnGpu: their image columns are decoded on the
// device (nvJPEG and one kernel, wds/gpu/gpu_decode.h) on the side stream,
// straight into the batch tensor; on the CPU, by the host decoder on the
// calling thread. A Loader made with LoaderOptions::gpu_decoders has its
// workers decode them instead, in parallel, and this thread only finishes
// them (one kernel launch; PendingImagesToTensor); one made with
// decode_gpu_jobs_on_host has its workers decode them on the host (its batches
// then hold arrays).
//
// On the CPU the tensors are zero-copy views of the batch (ToTensorBatch); the
// prefetcher still draws one batch ahead, so order, end of epoch and errors
// behave the same on every device.
//
// Epochs: Next() returns nullopt when the source does; the prefetcher never
// draws past that point, and the Next() after it draws again (for a Loader,
// that starts its next epoch, after any SetEpoch). An exception thrown by the
// source or by a conversion while drawing ahead is rethrown at its place in
// the order: by the Next() after the one returning the batch before it.
//
// Errors are exceptions (see tensor.h): c10::ValueError from the constructor
// for a device that cannot be used; conversion errors as ToTensorBatch throws
// them; source errors unchanged (wds::LoaderError from a Loader).
// Thread safety: one consumer thread; not copyable.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "wds/base/checkpointable.h"
#include "wds/base/pull_iterator.h"
#include "wds/base/sample.h"
#include "wds/loader/loader.h"
#include "wds/torch/tensor.h"

namespace wds {

class GpuBatchDecoder;
class PendingImages;

// GpuJobsToTensor decodes position `field` of `batch`, a column of GPU jobs
// (Pipeline::DecodeOnGpu), into a new tensor on `device` ("cuda" without an
// index: the current device) with `decoder`, made at first use for that
// device (the host decoder for the CPU); on CUDA the decode is enqueued on the
// device's current stream, which the tensor is allocated on. Throws
// wds::LoaderError for a decode error (naming the shard and key), and
// c10::ValueError for a field that holds no GPU jobs, a device that is not
// available, or a `decoder` made for another device.
// `layout`, if given, receives the column's layout.
torch::Tensor GpuJobsToTensor(const Sample& batch, size_t field, const torch::Device& device,
                              std::unique_ptr<GpuBatchDecoder>& decoder,
                              GpuBatchLayout* layout = nullptr);

// PendingImagesToTensor finishes `pending` (a batch's images that a Loader's
// workers decoded, LoaderOptions::gpu_decoders) into a new tensor on `device`
// ("cuda" without an index: the current device), which must be where the
// images are (their CUDA device; the CPU for GpuBatchDecoder::kHost); on CUDA
// on the device's current stream, which the tensor is allocated on. Throws
// c10::ValueError for another device, wds::LoaderError for a CUDA error.
torch::Tensor PendingImagesToTensor(PendingImages& pending, const torch::Device& device);

struct DevicePrefetcherOptions {
  // device is torch::kCPU or a CUDA device; a CUDA device without an index is
  // the current device at construction.
  torch::Device device = torch::kCPU;
  // fields and tensor are passed to ToTensorBatch for every batch; on a CUDA
  // device the kNCHW view is taken of the device tensor, and of a column of
  // GPU jobs only when it decodes channels last. On CUDA, only the job
  // columns among `fields` (all, when empty) are decoded.
  std::vector<std::string> fields;
  ToTensorOptions tensor;
};

class DevicePrefetcher final : public Checkpointable {
 public:
  // BatchSource returns the next batch, nullopt at the end of an epoch, and
  // throws on an error.
  using BatchSource = std::function<std::optional<Sample>()>;

  // Throws c10::ValueError for a null source, a device type other than CPU and
  // CUDA, a CUDA device when torch::cuda::is_available() is false (a LibTorch
  // without CUDA, or no GPU), or a CUDA index out of range.
  DevicePrefetcher(BatchSource source, DevicePrefetcherOptions options = {});
  // Draws from loader.Next() and throws its errors as wds::LoaderError.
  // REQUIRES: `loader` outlives this prefetcher.
  DevicePrefetcher(Loader& loader, DevicePrefetcherOptions options = {});
  // ~DevicePrefetcher waits for the copies in flight before it releases their
  // host batches.
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  // Next returns the next batch on the device, or nullopt at the end of an
  // epoch. The returned tensors are ready for use on the caller's current stream.
  std::optional<TensorBatch> Next();

  // device is the resolved device (with its index for CUDA).
  const torch::Device& device() const;

  // State (Checkpointable) is the loader's state after the last batch Next()
  // returned: the batch drawn ahead is not part of it. The loader's state is
  // taken before every draw (tens of microseconds). FailedPrecondition for a
  // prefetcher over a BatchSource, or the loader's own State() errors.
  [[nodiscard]] absl::StatusOr<std::string> State() const override;
  // Restore (Checkpointable) drops the batch drawn ahead and restores the
  // loader (Loader::Restore, whose errors it returns).
  [[nodiscard]] absl::Status Restore(std::string_view state) override;

  using Iterator = PullIterator<TensorBatch>;
  // begin draws the first batch of an epoch; iterating ends with the epoch.
  Iterator begin();
  Iterator end();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wds
