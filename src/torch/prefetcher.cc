#include "wds/torch/prefetcher.h"

// Only device-generic c10 interfaces (Stream, Event, StreamGuard) are used, so
// this file compiles the same against a CPU-only and a CUDA LibTorch; the CUDA
// path is chosen at run time, after torch::cuda::is_available().
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <cxxabi.h>
#include <torch/cuda.h>

#include <algorithm>
#include <deque>
#include <exception>
#include <utility>

#include "torch/torch_dtype.h"
#include "torch/torch_errors.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

const c10::impl::DeviceGuardImplInterface& CudaGuard() {
  return *c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

// ResolveDevice checks `device` and gives a CUDA device its index.
torch::Device ResolveDevice(const torch::Device& device) {
  if (device.is_cpu()) return device;
  if (!device.is_cuda()) {
    ThrowValueError(Cat("DevicePrefetcher: device ", device.str(), " is neither CPU nor CUDA"));
  }
  if (!torch::cuda::is_available()) {
    ThrowValueError(Cat("DevicePrefetcher: device ", device.str(),
                        " is not available: torch::cuda::is_available() is false (a LibTorch "
                        "built without CUDA, or no GPU visible)"));
  }
  if (!device.has_index()) return torch::Device(torch::kCUDA, CudaGuard().getDevice().index());
  const size_t count = torch::cuda::device_count();
  if (static_cast<size_t>(device.index()) >= count) {
    ThrowValueError(Cat("DevicePrefetcher: device ", device.str(), " is out of range: ", count,
                        " CUDA device(s) visible"));
  }
  return device;
}

// Staged is a batch drawn ahead. On CUDA, `copied` completes when its copy to
// the device has, and `host` keeps the host tensors (hence the pool buffers)
// that the copy reads.
struct Staged {
  TensorBatch batch;
  std::vector<torch::Tensor> host;
  std::optional<c10::Event> copied;
};

// InFlight is a handed-out batch whose copy may still be running.
struct InFlight {
  c10::Event copied;
  std::vector<torch::Tensor> host;
};

// NativeHandle is the cudaStream_t of a CUDA c10::Stream, through the
// device-generic native_handle() of LibTorch 2.x; null where LibTorch lacks
// it (1.13, which has no CUDA build here either).
template <typename S>
auto NativeHandle(const S& stream, int) -> decltype(stream.native_handle()) {
  return stream.native_handle();
}
template <typename S>
void* NativeHandle(const S& /*stream*/, long) {
  return nullptr;
}

// StreamHandle is the cudaStream_t of `target`'s current stream, or null
// for the CPU. Throws LoaderError where LibTorch cannot say it.
void* StreamHandle(const torch::Device& target) {
  if (!target.is_cuda()) return nullptr;
  void* handle = NativeHandle(CudaGuard().getStream(target), 0);
  if (handle == nullptr) {
    throw LoaderError(absl::UnimplementedError(
        "decode on cuda: this LibTorch has no c10::Stream::native_handle() (LibTorch 2.x)"));
  }
  return handle;
}

std::optional<Sample> NextFromLoader(Loader& loader) {
  absl::StatusOr<std::optional<Sample>> next = loader.Next();
  if (!next.ok()) throw LoaderError(next.status());
  return *std::move(next);
}

}  // namespace

torch::Tensor GpuJobsToTensor(const Sample& batch, size_t field, const torch::Device& device,
                              std::unique_ptr<GpuBatchDecoder>& decoder, GpuBatchLayout* layout_out) {
  const BytesList* jobs =
      field < batch.size() ? std::get_if<BytesList>(&batch[field].second) : nullptr;
  if (jobs == nullptr || !IsGpuJobColumn(batch[field].second)) {
    ThrowValueError(Cat("GpuJobsToTensor: field ", field, " of the batch holds no GPU jobs"));
  }
  const auto [keys, urls] = BatchKeysAndUrls(batch);
  absl::StatusOr<GpuBatchLayout> layout = GpuJobLayout(*jobs, keys, urls);
  if (!layout.ok()) throw LoaderError(layout.status());
  if (layout_out != nullptr) *layout_out = *layout;
  const torch::TensorOptions options = torch::TensorOptions().dtype(ToTorchDType(layout->dtype));
  // "cuda" without an index is the current device: its index picks the
  // decoder (an index of -1 would be kHost's, writing host memory there).
  const torch::Device target = ResolveDevice(device);
  const int decoder_device = target.is_cuda() ? target.index() : GpuBatchDecoder::kHost;
  if (decoder != nullptr && decoder->device() != decoder_device) {
    ThrowValueError(Cat("GpuJobsToTensor: the decoder is for ",
                        decoder->device() == GpuBatchDecoder::kHost
                            ? std::string("the host")
                            : Cat("cuda:", decoder->device()),
                        ", the tensor for ", target.str()));
  }
  if (decoder == nullptr) {
    absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> made = GpuBatchDecoder::Create(decoder_device);
    if (!made.ok()) throw LoaderError(made.status());
    decoder = *std::move(made);
  }
  void* handle = StreamHandle(target);
  torch::Tensor out = torch::empty(layout->shape, options.device(target));
  if (absl::Status s = decoder->Decode(*jobs, keys, urls, out.data_ptr(), handle); !s.ok()) {
    throw LoaderError(s);
  }
  return out;
}

torch::Tensor PendingImagesToTensor(PendingImages& pending, const torch::Device& device) {
  auto refuse = [&pending](const torch::Device& target) {
    ThrowValueError(
        Cat("PendingImagesToTensor: ", pending.TypeName(), ", the tensor is for ", target.str()));
  };
  // Host images for a GPU (or the reverse) are refused before "cuda" is
  // resolved, which needs a device.
  if (device.is_cuda() == (pending.device() == GpuBatchDecoder::kHost)) refuse(device);
  const torch::Device target = ResolveDevice(device);
  if (target.is_cuda() && pending.device() != target.index()) refuse(target);
  const GpuBatchLayout& layout = pending.layout();
  const torch::TensorOptions options =
      torch::TensorOptions().dtype(ToTorchDType(layout.dtype)).device(target);
  void* handle = StreamHandle(target);
  torch::Tensor out = torch::empty(layout.shape, options);
  if (absl::Status s = pending.Finish(out.data_ptr(), handle); !s.ok()) throw LoaderError(s);
  return out;
}

struct DevicePrefetcher::Impl {
  BatchSource source;
  // loader is the Loader drawn from, if any; ahead_state its state before
  // the draw whose result (a batch or the end) is staged, not yet handed out.
  Loader* loader = nullptr;
  std::optional<absl::StatusOr<std::string>> ahead_state;
  DevicePrefetcherOptions options;
  std::optional<c10::Stream> side;  // the copy stream; CUDA only
  std::optional<Staged> staged;
  bool end_staged = false;  // the draw ahead met the end: the next Next() returns it
  std::exception_ptr deferred;
  std::deque<InFlight> in_flight;  // in copy order, so they complete in order
  // gpu_decoder decodes the GPU job columns of batches (DecodeOnGpu) on the
  // device; made at the first such batch.
  std::unique_ptr<GpuBatchDecoder> gpu_decoder;

  ~Impl() {
    WaitForCopies();
    gpu_decoder.reset();
  }

  std::optional<TensorBatch> Next();
  std::optional<Staged> Draw();
  Staged CopyToDevice(TensorBatch host);
  MadeTensors DecodeOnDevice(const Sample& batch);
  void Hand(Staged& ready);
  void ReleaseCopied();
  void WaitForCopies() noexcept;
};

std::optional<TensorBatch> DevicePrefetcher::Impl::Next() {
  ReleaseCopied();
  if (deferred) std::rethrow_exception(std::exchange(deferred, nullptr));
  if (end_staged) {
    end_staged = false;
    ahead_state.reset();
    return std::nullopt;
  }
  if (!staged) {
    staged = Draw();
    ahead_state.reset();
    if (!staged) return std::nullopt;
  }
  Staged current = *std::move(staged);
  staged.reset();
  // Drawing ahead is what overlaps the next copy with this step; its failure
  // belongs after `current` in the order, so it waits for the next call.
  try {
    staged = Draw();
    end_staged = !staged.has_value();
  } catch (const abi::__forced_unwind&) {
    throw;  // the thread is being ended (pthread_exit): it unwinds to its start
  } catch (...) {
    deferred = std::current_exception();
  }
  if (current.copied) Hand(current);
  return std::move(current.batch);
}

std::optional<Staged> DevicePrefetcher::Impl::Draw() {
  if (loader != nullptr) ahead_state = loader->State();
  std::optional<Sample> sample = source();
  if (!sample) return std::nullopt;
  if (!side) {
    // GPU jobs on a CPU prefetcher: decoded here, by the CPU decoder; images
    // the workers decoded on the host, finished here.
    if (absl::Status s = DecodeGpuJobsOnHost(*sample); !s.ok()) throw LoaderError(s);
    return Staged{
        ToTensorBatch(*sample, options.fields, options.tensor, DecodeOnDevice(*sample)), {}, {}};
  }
  c10::StreamGuard guard(*side);
  const MadeTensors decoded = DecodeOnDevice(*sample);
  // The host tensors stay as stored: a permuted view would make the copy
  // gather on the host; the device view is taken after the copy instead.
  ToTensorOptions host_options = options.tensor;
  host_options.layout = TensorLayout::kAsStored;
  return CopyToDevice(ToTensorBatch(*sample, options.fields, host_options, decoded));
}

// DecodeOnDevice decodes every selected GPU job column of `batch` into a new
// tensor on the device, and finishes every PendingImages there, on the side
// stream (the current stream), in the layout asked for: the made tensors
// ToTensorBatch takes in those columns' places.
MadeTensors DevicePrefetcher::Impl::DecodeOnDevice(const Sample& batch) {
  const std::vector<std::string>& fields = options.fields;
  MadeTensors decoded;
  for (size_t i = 0; i < batch.size(); ++i) {
    const std::string& name = batch[i].first;
    if (!fields.empty() && std::find(fields.begin(), fields.end(), name) == fields.end()) continue;
    const Value& value = batch[i].second;
    PendingImages* pending = AsPendingImages(value);
    if (pending == nullptr && !IsGpuJobColumn(value)) continue;
    GpuBatchLayout layout;
    torch::Tensor t;
    if (pending != nullptr) {
      layout = pending->layout();
      t = PendingImagesToTensor(*pending, options.device);
    } else {
      t = GpuJobsToTensor(batch, i, options.device, gpu_decoder, &layout);
    }
    if (options.tensor.layout == TensorLayout::kNCHW && !layout.channels_first) {
      t = t.permute({0, 3, 1, 2});
    }
    decoded.emplace_back(name, std::move(t));
  }
  return decoded;
}

Staged DevicePrefetcher::Impl::CopyToDevice(TensorBatch host) {
  Staged out;
  out.batch.names = std::move(host.names);
  out.batch.rest = std::move(host.rest);
  c10::StreamGuard guard(*side);
  for (size_t i = 0; i < host.tensors.size(); ++i) {
    const torch::Tensor& t = host.tensors[i];
    if (t.device() == options.device) {  // decoded there (DecodeOnDevice), in its view
      out.batch.tensors.push_back(t);
      continue;
    }
    torch::Tensor copy = t.to(options.device, /*non_blocking=*/true);
    if (options.tensor.layout == TensorLayout::kNCHW && copy.dim() == 4) {
      copy = copy.permute({0, 3, 1, 2});
    }
    out.batch.tensors.push_back(std::move(copy));
  }
  out.copied.emplace(c10::DeviceType::CUDA);
  out.copied->record(*side);
  out.host = std::move(host.tensors);
  return out;
}

void DevicePrefetcher::Impl::Hand(Staged& ready) {
  const c10::Stream consumer = CudaGuard().getStream(options.device);
  ready.copied->block(consumer);
  // The tensors were allocated on the side stream; without this the caching
  // allocator could hand their memory to the next copy while the caller's
  // stream still reads it.
  for (torch::Tensor& t : ready.batch.tensors) t.record_stream(consumer);
  in_flight.push_back(InFlight{*std::move(ready.copied), std::move(ready.host)});
}

void DevicePrefetcher::Impl::ReleaseCopied() {
  while (!in_flight.empty() && in_flight.front().copied.query()) in_flight.pop_front();
}

void DevicePrefetcher::Impl::WaitForCopies() noexcept {
  if (!side) return;
  try {
    side->synchronize();
  } catch (const c10::Error&) {
    // A failed synchronize means a broken CUDA context: no copy can still be
    // reading the host buffers, so releasing them is safe.
  }
}

DevicePrefetcher::DevicePrefetcher(BatchSource source, DevicePrefetcherOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (!source) ThrowValueError("DevicePrefetcher: the batch source is empty");
  options.device = ResolveDevice(options.device);
  if (options.device.is_cuda()) {
    impl_->side = CudaGuard().getStreamFromGlobalPool(options.device, /*isHighPriority=*/false);
  }
  impl_->source = std::move(source);
  impl_->options = std::move(options);
}

DevicePrefetcher::DevicePrefetcher(Loader& loader, DevicePrefetcherOptions options)
    : DevicePrefetcher([&loader] { return NextFromLoader(loader); }, std::move(options)) {
  impl_->loader = &loader;
}

absl::StatusOr<std::string> DevicePrefetcher::State() const {
  if (impl_->loader == nullptr) {
    return absl::FailedPreconditionError(
        "DevicePrefetcher::State: a prefetcher over a BatchSource has no state");
  }
  if (impl_->ahead_state.has_value()) return *impl_->ahead_state;
  return impl_->loader->State();
}

absl::Status DevicePrefetcher::Restore(std::string_view state) {
  if (impl_->loader == nullptr) {
    return absl::FailedPreconditionError(
        "DevicePrefetcher::Restore: a prefetcher over a BatchSource has no state");
  }
  if (absl::Status restored = impl_->loader->Restore(state); !restored.ok()) return restored;
  impl_->WaitForCopies();
  impl_->in_flight.clear();
  impl_->staged.reset();
  impl_->end_staged = false;
  impl_->deferred = nullptr;
  impl_->ahead_state.reset();
  return absl::OkStatus();
}

DevicePrefetcher::~DevicePrefetcher() = default;

std::optional<TensorBatch> DevicePrefetcher::Next() { return impl_->Next(); }

const torch::Device& DevicePrefetcher::device() const { return impl_->options.device; }

DevicePrefetcher::Iterator DevicePrefetcher::begin() {
  return Iterator([this] { return Next(); });
}

DevicePrefetcher::Iterator DevicePrefetcher::end() { return Iterator(); }

}  // namespace wds
