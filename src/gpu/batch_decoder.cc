// GpuBatchDecoder's host side: parsing job columns, and the decoder for kHost
// (the CPU decoder and the kernel's host reference). The device decoder is in
// device_decoder.cc.
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "base/output_slots.h"
#include "gpu/gpu_job.h"
#include "gpu/job_column.h"
#include "gpu/phase_clock.h"
#include "gpu/resize_kernel.h"
#include "image/codecs.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds {

// Defined in device_decoder.cc.
absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> CreateDeviceBatchDecoder(
    int device, const GpuBatchDecoder::Options& options);

namespace gpu {
namespace {

bool SameOutput(const GpuOutput& a, const GpuOutput& b) {
  return a.dtype == b.dtype && a.channels_first == b.channels_first && a.width == b.width &&
         a.height == b.height && a.normalize.mean == b.normalize.mean &&
         a.normalize.std == b.normalize.std;
}

std::string OutputText(const GpuOutput& o) {
  return Cat(DTypeName(o.dtype), " ", o.width, "x", o.height,
             o.channels_first ? " channels first" : " channels last");
}

}  // namespace

std::string JobName(size_t i, std::string_view site, const TextList* keys, const TextList* urls) {
  if (!site.empty()) return std::string(site);
  // string_views of the lists' own strings (a ternary with "" would make a
  // temporary std::string).
  std::string_view key;
  std::string_view url;
  if (keys != nullptr && i < keys->size()) key = (*keys)[i];
  if (urls != nullptr && i < urls->size()) url = (*urls)[i];
  if (key.empty()) return Cat("image ", i, " of the batch");
  return url.empty() ? Cat("key ", key) : Cat(url, ": key ", key);
}

absl::Status JobError(const absl::Status& status, size_t i, std::string_view site,
                      const TextList* keys, const TextList* urls) {
  return absl::Status(status.code(), Cat("decode on cuda: ", JobName(i, site, keys, urls), ": ",
                                         ToStd(status.message())));
}

absl::StatusOr<JobColumn> ParseJobColumn(const BytesList& jobs, const TextList* keys,
                                         const TextList* urls) {
  if (jobs.empty()) return absl::InvalidArgumentError("decode on cuda: an empty batch");
  JobColumn column;
  column.headers.reserve(jobs.size());
  column.payloads.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::string_view payload;
    std::optional<JobHeader> h = ReadJob(jobs[i], &payload);
    if (!h.has_value()) {
      return JobError(absl::InvalidArgumentError(
                          "not a GPU job (bytes that GpuDecodeStage did not make)"),
                      i, {}, keys, urls);
    }
    if (h->kind == JobKind::kJpeg) {
      // nvJPEG writes the JPEG's own size into a slot sized by the header.
      const std::optional<std::pair<int, int>> frame = JpegFrameSize(payload);
      if (!frame.has_value() || frame->first != h->width || frame->second != h->height) {
        return JobError(absl::InvalidArgumentError(Cat(
                            "a GPU job says its JPEG is ", h->width, "x", h->height,
                            frame.has_value() ? Cat(", its frame header says ", frame->first, "x",
                                                    frame->second)
                                              : std::string(", and it has no frame header"))),
                        i, h->site, keys, urls);
      }
    }
    if (h->kind == JobKind::kPixels &&
        payload.size() != static_cast<size_t>(h->width) * h->height * 3) {
      return JobError(absl::InvalidArgumentError(Cat("pixels of ", h->width, "x", h->height,
                                                     " need ", size_t{3} * h->width * h->height,
                                                     " bytes, the job has ", payload.size())),
                      i, h->site, keys, urls);
    }
    if (i > 0 && !SameOutput(h->output, column.headers[0].output)) {
      return JobError(
          absl::InvalidArgumentError(Cat(
              "its output (", OutputText(h->output), ") differs from the batch's first image's (",
              OutputText(column.headers[0].output),
              "); images of different sizes need a resize to be batched")),
          i, h->site, keys, urls);
    }
    column.pinned = column.pinned && h->pinned;
    column.headers.push_back(*h);
    column.payloads.push_back(payload);
  }
  const GpuOutput& o = column.headers[0].output;
  column.output = o;
  column.layout.dtype = o.dtype;
  column.layout.channels_first = o.channels_first;
  const auto b = static_cast<int64_t>(jobs.size());
  column.layout.shape = o.channels_first ? std::vector<int64_t>{b, 3, o.height, o.width}
                                         : std::vector<int64_t>{b, o.height, o.width, 3};
  return column;
}

ResizeSource SourceOf(const JobHeader& h, const uint8_t* pixels) {
  return MakeResizeSource(h.width, h.height, h.crop.x, h.crop.y, h.crop.width, h.crop.height,
                          h.flip, pixels, int64_t{h.width} * 3);
}

absl::StatusOr<Array> DecodeJpegOnCpu(std::string_view jpeg, OutputSlots* slots) {
  Rng unused(0);  // full size, no flip: nothing is drawn
  return DecodeImageInto(jpeg, kJobPixelSpec, ImageDecodeOptions{}, unused, nullptr, slots, {});
}

absl::StatusOr<Array> DecodeJobJpeg(const JobColumn& column, size_t i, OutputSlots* slots,
                                    const TextList* keys, const TextList* urls) {
  const JobHeader& h = column.headers[i];
  absl::StatusOr<Array> cpu = DecodeJpegOnCpu(column.payloads[i], slots);
  if (!cpu.ok()) return JobError(cpu.status(), i, h.site, keys, urls);
  if (cpu->shape != std::vector<int64_t>{h.height, h.width, 3}) {
    return JobError(absl::InvalidArgumentError(Cat("decoded to ", ShapeString(cpu->shape),
                                                   ", its GPU job says ", h.width, "x", h.height)),
                    i, h.site, keys, urls);
  }
  return cpu;
}

namespace {

// GrowingSlot offers a decoder one block kept from image to image, grown when
// an image needs more: asked only once the decoder has read the image's
// header, so a header's claim is checked before anything is allocated.
class GrowingSlot final : public OutputSlots {
 public:
  Buffer Offer(std::string_view /*field*/, DType dtype,
               const std::vector<int64_t>& shape) override {
    size_t bytes = DTypeSize(dtype);
    for (int64_t d : shape) bytes *= static_cast<size_t>(d);
    if (bytes > block_.size()) block_ = Buffer::Allocate(bytes);
    return block_.Slice(0, bytes);
  }

 private:
  Buffer block_;
};

// HostPendingImages is DecodeAhead's result on the host: the JPEGs decoded
// into one block, the workers' pixels where they lie in their jobs.
class HostPendingImages final : public PendingImages {
 public:
  HostPendingImages(const JobColumn& column, BytesList jobs, Buffer decoded,
                    std::vector<ResizeSource> sources)
      : PendingImages(column.layout, GpuBatchDecoder::kHost),
        output_(column.output),
        jobs_(std::move(jobs)),
        decoded_(std::move(decoded)),
        sources_(std::move(sources)) {}

  absl::Status Finish(void* out, void* /*stream*/) override {
    ResizeBatchOnHost(sources_.data(), static_cast<int>(sources_.size()),
                      MakeResizeTarget(output_, out));
    return absl::OkStatus();
  }

 private:
  GpuOutput output_;
  BytesList jobs_;  // the kPixels payloads that sources_ point into
  Buffer decoded_;  // the JPEGs, full size, back to back
  std::vector<ResizeSource> sources_;
};

class HostBatchDecoder final : public GpuBatchDecoder {
 public:
  absl::StatusOr<std::shared_ptr<PendingImages>> DecodeAhead(const BytesList& jobs,
                                                             const TextList* keys,
                                                             const TextList* urls,
                                                             void* /*stream*/) override {
    PhaseClock clock;
    Stats counts;  // added to stats_ when the batch is decoded
    WDS_ASSIGN_OR_RETURN(JobColumn column, ParseJobColumn(jobs, keys, urls));
    clock.Add(stats_.seconds.parse);
    const size_t n = jobs.size();
    std::vector<size_t> decoded_at(n, 0);
    size_t decoded_bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      if (column.headers[i].kind != JobKind::kJpeg) continue;
      decoded_at[i] = decoded_bytes;
      decoded_bytes += size_t{3} * column.headers[i].width * column.headers[i].height;
    }
    Buffer decoded = Buffer::Allocate(decoded_bytes);
    std::vector<ResizeSource> sources(n);
    for (size_t i = 0; i < n; ++i) {
      const JobHeader& h = column.headers[i];
      const uint8_t* pixels = reinterpret_cast<const uint8_t*>(column.payloads[i].data());
      if (h.kind == JobKind::kJpeg) {
        uint8_t* to = decoded.mutable_data() + decoded_at[i];
        const size_t bytes = size_t{3} * h.width * h.height;
        MemorySlot slot(to, bytes);
        WDS_ASSIGN_OR_RETURN(Array cpu, DecodeJobJpeg(column, i, &slot, keys, urls));
        // The decoder takes the slot when the sizes agree, which the shape
        // check above made sure of; a copy keeps this right regardless.
        if (cpu.data_as<uint8_t>() != to) std::memcpy(to, cpu.data_as<uint8_t>(), bytes);
        pixels = to;
        ++counts.cpu_fallback_images;
      } else {
        ++counts.worker_decoded_images;
      }
      sources[i] = SourceOf(h, pixels);
    }
    clock.Add(stats_.seconds.cpu_decode);
    ++counts.batches;
    counts.images += static_cast<int64_t>(n);
    stats_ += counts;
    return std::make_shared<HostPendingImages>(column, jobs, std::move(decoded),
                                               std::move(sources));
  }

  absl::Status Decode(const BytesList& jobs, const TextList* keys, const TextList* urls, void* out,
                      void* /*stream*/) override {
    PhaseClock clock;
    Stats counts;  // added to stats_ when the batch is decoded
    WDS_ASSIGN_OR_RETURN(JobColumn column, ParseJobColumn(jobs, keys, urls));
    clock.Add(stats_.seconds.parse);
    const ResizeTarget target = MakeResizeTarget(column.output, out);
    const size_t image_bytes = column.layout.nbytes() / jobs.size();
    for (size_t i = 0; i < jobs.size(); ++i) {
      const JobHeader& h = column.headers[i];
      Array decoded;
      const uint8_t* pixels = reinterpret_cast<const uint8_t*>(column.payloads[i].data());
      if (h.kind == JobKind::kJpeg) {
        WDS_ASSIGN_OR_RETURN(decoded, DecodeJobJpeg(column, i, &pixels_, keys, urls));
        pixels = decoded.data_as<uint8_t>();
        ++counts.cpu_fallback_images;
      } else {
        ++counts.worker_decoded_images;
      }
      clock.Add(stats_.seconds.cpu_decode);
      // One image at a time: the target of image i is the batch's slot i.
      ResizeTarget one = target;
      one.data = static_cast<uint8_t*>(out) + i * image_bytes;
      const ResizeSource source = SourceOf(h, pixels);
      ResizeBatchOnHost(&source, 1, one);
      clock.Add(stats_.seconds.kernel);
    }
    ++counts.batches;
    counts.images += static_cast<int64_t>(jobs.size());
    stats_ += counts;
    return absl::OkStatus();
  }
  int device() const override { return kHost; }
  bool nvjpeg_hardware() const override { return false; }
  std::string_view decoder() const override { return "cpu"; }

 private:
  GrowingSlot pixels_;  // the JPEG being decoded, full size
};

}  // namespace
}  // namespace gpu

std::string PendingImages::TypeName() const {
  return Cat("images decoded on ",
             device_ == GpuBatchDecoder::kHost ? "the host" : Cat("cuda:", device_),
             ", not yet finished into a batch");
}

GpuBatchDecoder::Stats& GpuBatchDecoder::Stats::operator+=(const Stats& other) {
  batches += other.batches;
  images += other.images;
  nvjpeg_images += other.nvjpeg_images;
  cpu_fallback_images += other.cpu_fallback_images;
  worker_decoded_images += other.worker_decoded_images;
  images_read_in_place += other.images_read_in_place;
  seconds.parse += other.seconds.parse;
  seconds.wait += other.seconds.wait;
  seconds.gather += other.seconds.gather;
  seconds.nvjpeg += other.seconds.nvjpeg;
  seconds.cpu_decode += other.seconds.cpu_decode;
  seconds.kernel += other.seconds.kernel;
  return *this;
}

PendingImages* AsPendingImages(const Value& value) {
  const auto* object = std::get_if<ObjectRef>(&value);
  return object != nullptr ? dynamic_cast<PendingImages*>(object->get()) : nullptr;
}

size_t GpuBatchLayout::nbytes() const {
  size_t n = DTypeSize(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

bool IsGpuJobColumn(const Value& value) {
  const BytesList* list = std::get_if<BytesList>(&value);
  if (list == nullptr || list->empty()) return false;
  for (const Buffer& b : *list) {
    if (!gpu::ReadJob(b).has_value()) return false;
  }
  return true;
}

absl::StatusOr<GpuBatchLayout> GpuJobLayout(const BytesList& jobs, const TextList* keys,
                                            const TextList* urls) {
  WDS_ASSIGN_OR_RETURN(gpu::JobColumn column, gpu::ParseJobColumn(jobs, keys, urls));
  return column.layout;
}

absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> GpuBatchDecoder::Create(int device,
                                                                          Options options) {
  if (device == kHost) return std::unique_ptr<GpuBatchDecoder>(new gpu::HostBatchDecoder);
  if (device < 0) {
    return absl::InvalidArgumentError(Cat("GpuBatchDecoder: device ", device,
                                          " is neither a CUDA device index nor kHost"));
  }
  return CreateDeviceBatchDecoder(device, options);
}

absl::StatusOr<Array> GpuBatchDecoder::DecodeToArray(const BytesList& jobs, const TextList* keys,
                                                     const TextList* urls, BufferPool* pool) {
  if (device() != kHost) {
    return absl::FailedPreconditionError("GpuBatchDecoder::DecodeToArray needs a kHost decoder");
  }
  WDS_ASSIGN_OR_RETURN(GpuBatchLayout layout, GpuJobLayout(jobs, keys, urls));
  Array out;
  if (pool != nullptr) {
    WDS_ASSIGN_OR_RETURN(out.data, pool->Acquire(layout.nbytes()));
    out.dtype = layout.dtype;
    out.shape = layout.shape;
  } else {
    out = Array::Allocate(layout.dtype, layout.shape);
  }
  WDS_RETURN_IF_ERROR(Decode(jobs, keys, urls, out.data.mutable_data(), nullptr));
  return out;
}

BatchKeysAndUrls::BatchKeysAndUrls(const Sample& batch) {
  const Value* k = batch.Find(kKeyField);
  const Value* u = batch.Find(kUrlField);
  keys = k != nullptr ? std::get_if<TextList>(k) : nullptr;
  urls = u != nullptr ? std::get_if<TextList>(u) : nullptr;
}

absl::StatusOr<Array> DecodeGpuJobsToArray(const BytesList& jobs, const TextList* keys,
                                           const TextList* urls, BufferPool* pool) {
  // One host decoder per thread: the memory it decodes JPEGs into is kept
  // from batch to batch, not allocated (and faulted in) for each.
  thread_local gpu::HostBatchDecoder decoder;
  return decoder.DecodeToArray(jobs, keys, urls, pool);
}

absl::Status DecodeGpuJobsOnHost(Sample& batch, BufferPool* pool) {
  const auto [keys, urls] = BatchKeysAndUrls(batch);
  for (Sample::Field& f : batch) {
    if (!IsGpuJobColumn(f.second)) continue;
    WDS_ASSIGN_OR_RETURN(Array a,
                         DecodeGpuJobsToArray(std::get<BytesList>(f.second), keys, urls, pool));
    f.second = std::move(a);
  }
  return absl::OkStatus();
}

}  // namespace wds
