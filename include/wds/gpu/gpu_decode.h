// Decoding images on the GPU: the loader's workers read, route and plan each
// image (crop, flip: the CPU path's random draws), and the consumer of the
// batches decodes a whole batch at once on its device with nvJPEG and one
// fused resize/crop/normalize kernel, writing straight into the batch tensor.
//
//   wds::Pipeline p = ds.DecodeOnGpu("torchrgb", {.resize = {ResizeMode::kCenterCrop, 224, 224}},
//                                    {.normalize = wds::kImageNetNormalize})
//                         .ToTuple({"jpg", "cls"}).Batched(64);
//   wds::Loader loader(p, {.workers = 4});
//   wds::DevicePrefetcher batches(loader, {.device = torch::Device(torch::kCUDA, local_rank)});
//   // batches yield float32 [64, 3, 224, 224] CUDA tensors
//
// What travels from a worker to the consumer is a "GPU job" per image, in
// place of the decoded array: the encoded JPEG with its plan, or, for an image
// nvJPEG does not take (PNG, WebP, CMYK or 12-bit JPEG, ...), its pixels,
// decoded by the CPU decoder in the worker at the output size. Either way the
// worker's random draws are the CPU path's, so a seed gives the same crops,
// keys and order on both paths, and the loader's state is the same. Errors the
// CPU decoder finds in the worker (a corrupt PNG, an unreadable JPEG header)
// go to the decode stage's handler as on the CPU path.
//
// A batch's column of jobs (BytesList) becomes one array: GpuBatchDecoder on a
// CUDA device (nvJPEG where the build has it; the CPU decoder otherwise), or
// on the host (the same arithmetic on the CPU; what a CPU consumer gets).
// DevicePrefetcher (wds::torch) and the Python Loader do this for every job
// column they meet. Or the Loader's workers decode their own batches on the
// device (LoaderOptions::gpu_decoders, GpuWorkerDecoders), and the consumer
// only finishes them into its tensors (PendingImages::Finish):
//
//   wds::Loader loader(p, {.workers = 4, .gpu_decoders = *wds::GpuWorkerDecoders::Create(
//                                            local_rank, {}, /*decoders=*/4)});
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/base/array.h"
#include "wds/base/buffer_pool.h"
#include "wds/base/sample.h"
#include "wds/base/stage.h"
#include "wds/decode/decode.h"
#include "wds/image/image.h"

namespace wds {

// Normalize maps a sample v in [0, 255] to (v / 255 - mean[c]) / std[c].
struct Normalize {
  std::array<float, 3> mean = {0, 0, 0};
  std::array<float, 3> std = {1, 1, 1};
};

// kImageNetNormalize is torchvision's ImageNet mean and std.
inline constexpr Normalize kImageNetNormalize = {{0.485f, 0.456f, 0.406f},
                                                 {0.229f, 0.224f, 0.225f}};

// GpuDecodeOptions are the GPU path's additions to ImageDecodeOptions.
struct GpuDecodeOptions {
  // float16 makes a float spec's output float16 instead of float32.
  bool float16 = false;
  // normalize, if set, applies to float specs only; every std must be > 0
  // and every value finite.
  std::optional<Normalize> normalize;
};

// GpuDecodeStage is the workers' half: it replaces each image field (by
// extension, as ImageDecoder) with a GPU job, then decodes the other fields
// with BasicDecoders, like DecodeStage(image_spec, ...). The GPU path serves
// the 3-channel specs (rgb8, rgb, torchrgb8, torchrgb, torch), every resize
// mode and hflip. A spec or option it cannot serve makes it a FailingStage
// (InvalidArgument starting "decode on cuda: ", naming the spec or option).
StageFactory GpuDecodeStage(std::string_view image_spec, ImageDecodeOptions image = {},
                            GpuDecodeOptions gpu = {}, DecodeOptions options = {});

// GpuJobDecoder is GpuDecodeStage's image decoder alone, for decode stages
// built by hand (as ImageDecoder is for the CPU path): a GPU job for each
// field whose extension IsImageExtension, nullopt for the others. Errors
// (setup): GpuDecodeStage's.
[[nodiscard]] absl::StatusOr<FieldDecoder> GpuJobDecoder(std::string_view image_spec,
                                                         ImageDecodeOptions image = {},
                                                         GpuDecodeOptions gpu = {});

// IsGpuJobColumn is true for a batch's column of GPU jobs: a non-empty
// BytesList whose values are all GPU jobs.
bool IsGpuJobColumn(const Value& value);

// PackGpuJobs writes a column of GPU jobs as one byte string, to send it to
// another process (Python pickles GpuJobs so, from a torch DataLoader
// worker): the count, each job's length, then the jobs back to back, as
// little-endian 64-bit integers and bytes; each copy is marked as lying in
// ordinary memory, whatever the original did (JobHeader::pinned). `out`
// holds GpuJobsPackedSize(jobs) bytes. UnpackGpuJobs reads it back: the jobs
// are slices of `packed` (no copy). Errors: InvalidArgument naming what is
// malformed (too short, a length past the end, bytes after the last job, a
// job that is not a GPU job).
size_t GpuJobsPackedSize(const BytesList& jobs);
void PackGpuJobs(const BytesList& jobs, uint8_t* out);
[[nodiscard]] absl::StatusOr<BytesList> UnpackGpuJobs(const Buffer& packed);

// BatchKeysAndUrls is a batch's __key__ and __url__ columns (null where
// absent): what GpuJobLayout and GpuBatchDecoder::Decode take to name a job
// in an error, when the job carries no site of its own.
struct BatchKeysAndUrls {
  explicit BatchKeysAndUrls(const Sample& batch);
  const TextList* keys = nullptr;
  const TextList* urls = nullptr;
};

// GpuBatchLayout is what a column of jobs decodes to: [B, H, W, 3] or
// [B, 3, H, W] of uint8, float32 or float16.
struct GpuBatchLayout {
  DType dtype = DType::kUInt8;
  std::vector<int64_t> shape;
  bool channels_first = false;  // [B, 3, H, W] (the torch* specs)
  size_t nbytes() const;
};

// GpuJobLayout reads the layout of a column of jobs. Errors: InvalidArgument
// naming the key (and URL) of the first job that is not a GPU job, or whose
// output differs from the first's (images of different sizes decoded without
// a resize, or jobs of different specs). keys and urls (the batch's __key__
// and __url__ columns) may be null.
[[nodiscard]] absl::StatusOr<GpuBatchLayout> GpuJobLayout(const BytesList& jobs,
                                                          const TextList* keys = nullptr,
                                                          const TextList* urls = nullptr);

// PendingImages is a batch's column of jobs decoded at full size by
// GpuBatchDecoder::DecodeAhead (a Loader's worker, with
// LoaderOptions::gpu_decoders), waiting for Finish to write the batch: one
// launch of the resize/crop/normalize kernel into the consumer's tensor, on
// the consumer's stream, after a GPU-side wait for the decode. So the
// consumer's host work per batch is a stream wait, a launch and an event, and
// the decode itself runs on the workers' threads.
//
// The full-size pixels (3 bytes a pixel) lie in a block of the decoder's
// device pool until the last reference is dropped (on any thread); the block
// is then reused once the last Finish's kernel has run (or the decode, when
// never finished): the pool makes the next batch's stream wait for that, on
// the GPU. Thread-safe. Finish and the release make the pixels' device the
// calling thread's current device (gpu/cuda_util.h's UseDevice says why).
class PendingImages : public ValueObject {
 public:
  // layout is what Finish writes: GpuJobLayout of the jobs.
  const GpuBatchLayout& layout() const { return layout_; }
  // device is the CUDA device of the pixels (GpuBatchDecoder::kHost: host memory).
  int device() const { return device_; }
  // "images decoded on cuda:0, not yet finished into a batch".
  std::string TypeName() const override;

  // Finish writes the batch into `out`: layout().nbytes() bytes of memory on
  // device() (host memory for kHost), enqueued on `stream` (a cudaStream_t of
  // that device; null is the legacy default stream; ignored on kHost). `out`
  // is ready once the stream reaches this point. May be called again (another
  // tensor, another stream: it then also waits for the last Finish). Errors:
  // Internal naming a CUDA error, ResourceExhausted when out of memory.
  [[nodiscard]] virtual absl::Status Finish(void* out, void* stream) = 0;

 protected:
  PendingImages(GpuBatchLayout layout, int device) : layout_(std::move(layout)), device_(device) {}

 private:
  GpuBatchLayout layout_;
  int device_;
};

// AsPendingImages is the PendingImages `value` holds, else null.
PendingImages* AsPendingImages(const Value& value);

// GpuBatchDecoder decodes columns of jobs. Not thread-safe: one per consumer
// (or per worker, for DecodeAhead).
class GpuBatchDecoder {
 public:
  static constexpr int kHost = -1;

  struct Options {
    // max_cpu_threads is nvJPEG's CPU thread count for the hybrid backend
    // (nvjpegDecodeBatchedInitialize's; recent nvJPEG versions ignore it).
    int max_cpu_threads = 4;
    // stage_inputs gathers a batch's payloads into pinned staging before
    // nvJPEG reads them (a memcpy per image). false hands nvJPEG the jobs'
    // own memory, and keeps the jobs until the batch is done. nvjpeg_bench
    // times both. A batch whose jobs are all pinned (a Loader with
    // pin_memory makes them in its pinned pool) is read in place whatever
    // this says. Ignored by kHost.
    bool stage_inputs = true;
  };
  // Stats counts the batches decoded whole (a batch that fails adds no
  // count); the phases' time counts every call, failed ones too.
  struct Stats {
    int64_t batches = 0;
    int64_t images = 0;
    int64_t nvjpeg_images = 0;       // decoded by nvJPEG
    int64_t cpu_fallback_images = 0;  // JPEGs nvJPEG refused, decoded here by the CPU decoder
    int64_t worker_decoded_images = 0;  // jobs that came as pixels (decoded in the worker)
    // images_read_in_place: images whose jobs were read where they lie, not
    // gathered into staging (pinned jobs, stage_inputs false). 0 on kHost.
    int64_t images_read_in_place = 0;
    // Where Decode spent the calling thread's time, in seconds, by phase:
    // what a consumer that cannot keep up profiles first.
    struct Phases {
      double parse = 0;  // reading and checking the jobs
      // wait: for a staging buffer (the GPU is behind) and a device block
      // (allocated while batches grow)
      double wait = 0;
      double gather = 0;      // copying the payloads into pinned staging
      double nvjpeg = 0;      // in nvJPEG's batched decode (its host work and waits)
      double cpu_decode = 0;  // the CPU decoder (every JPEG on kHost)
      // kernel: the source table's copy and, in Decode, the kernel's launch
      // (on kHost: the resize; DecodeAhead leaves the kernel to Finish)
      double kernel = 0;
    } seconds;

    // += adds every count and phase.
    Stats& operator+=(const Stats& other);
  };

  // Create makes a decoder for CUDA device `device`, or kHost. Errors:
  // Unavailable for a device when this build has no GPU decode path (no CUDA
  // kernels) or the device cannot be used, naming the CUDA error.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> Create(int device,
                                                                               Options options);
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> Create(int device) {
    return Create(device, Options{});
  }
  virtual ~GpuBatchDecoder() = default;

  // Decode writes the column `jobs` into `out`: layout.nbytes() bytes of
  // device memory of this decoder's device (or host memory for kHost), where
  // layout is GpuJobLayout(jobs). On a device, the work is enqueued on
  // `stream` (a cudaStream_t; null is the legacy default stream) and `out` is
  // ready once the stream reaches this point; `jobs` may be released when
  // Decode returns. Errors: GpuJobLayout's; for a JPEG neither nvJPEG nor the
  // CPU decoder can decode, the CPU decoder's error naming the URL and key;
  // Internal naming a CUDA or nvJPEG error.
  [[nodiscard]] virtual absl::Status Decode(const BytesList& jobs, const TextList* keys,
                                            const TextList* urls, void* out, void* stream) = 0;

  // DecodeAhead is Decode's first half: it checks the jobs and decodes them
  // at full size (nvJPEG, the workers' pixels, the CPU fallback) into memory
  // of this decoder's block pool, enqueued on `stream` (ignored on kHost, where
  // it decodes on the calling thread), and returns them for Finish to write
  // into the batch later, on another stream or thread. On a device, Decode is
  // DecodeAhead then Finish on the same stream. `jobs` may be released when
  // it returns. Errors: Decode's.
  [[nodiscard]] virtual absl::StatusOr<std::shared_ptr<PendingImages>> DecodeAhead(
      const BytesList& jobs, const TextList* keys, const TextList* urls, void* stream) = 0;

  // DecodeToArray decodes on the host into a new Array, whose storage comes
  // from `pool` when given (else malloc). REQUIRES: kHost. Errors: Decode's;
  // the pool's ResourceExhausted.
  [[nodiscard]] absl::StatusOr<Array> DecodeToArray(const BytesList& jobs, const TextList* keys,
                                                    const TextList* urls,
                                                    BufferPool* pool = nullptr);

  virtual int device() const = 0;
  // nvjpeg_hardware is true when nvJPEG's hardware backend (the JPEG
  // engines) initialised on the device.
  virtual bool nvjpeg_hardware() const = 0;
  // decoder names what decodes JPEGs: "nvjpeg hardware+hybrid",
  // "nvjpeg hybrid", "cpu" (a build without nvJPEG, or kHost). An nvJPEG
  // older than 12.1 adds ", chroma replicated": it upsamples subsampled chroma
  // by repeating samples, where the CPU decoder interpolates, so its pixels
  // differ from the CPU path's by more than rounding at colour edges.
  virtual std::string_view decoder() const = 0;
  const Stats& stats() const { return stats_; }

 protected:
  GpuBatchDecoder() = default;
  Stats stats_;
};

// GpuWorkerDecoders are the decoders of a Loader's workers
// (LoaderOptions::gpu_decoders): each DecodeAhead call leases one, with a
// CUDA stream of its own, so the workers decode side by side and the consumer
// only finishes the batches (PendingImages::Finish). Create makes the first
// ones; another is made when more workers decode at once than there are
// decoders. All are kept from epoch to epoch, with their nvJPEG handles,
// staging and device memory. Thread-safe.
class GpuWorkerDecoders {
 public:
  // Create makes `decoders` decoders (at least one: a device that cannot
  // decode is then a setup error; one per worker keeps their set-up out of the
  // first batches), on the calling thread, whose current device becomes
  // `device`. Errors: GpuBatchDecoder::Create's; Internal naming a CUDA error.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<GpuWorkerDecoders>> Create(
      int device, GpuBatchDecoder::Options options = {}, int decoders = 1);
  ~GpuWorkerDecoders();
  GpuWorkerDecoders(const GpuWorkerDecoders&) = delete;
  GpuWorkerDecoders& operator=(const GpuWorkerDecoders&) = delete;

  // DecodeAhead replaces every GPU job column of `batch` with the
  // PendingImages it decodes to. Errors: GpuBatchDecoder::DecodeAhead's for
  // the first column that fails (the columns before it are already replaced);
  // its decoder stays usable.
  [[nodiscard]] absl::Status DecodeAhead(Sample& batch);

  int device() const;
  // decoder and nvjpeg_hardware: GpuBatchDecoder's, of the decoders Create
  // made. Where they differ (the JPEG engines refused a later handle),
  // decoder names both kinds ("nvjpeg hardware+hybrid (2 of 4 decoders:
  // nvjpeg hybrid)") and nvjpeg_hardware is false.
  std::string decoder() const;
  bool nvjpeg_hardware() const;
  // stats sums the decoders' stats over every DecodeAhead so far.
  GpuBatchDecoder::Stats stats() const;
  // decoders is how many decoders exist: the most workers that decoded at once.
  int decoders() const;

 private:
  struct Impl;
  explicit GpuWorkerDecoders(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// DecodeGpuJobsToArray decodes a column of jobs on the host into a new Array
// (storage from `pool` when given), with the calling thread's own kHost
// decoder, which keeps its memory from call to call. Errors: DecodeToArray's.
[[nodiscard]] absl::StatusOr<Array> DecodeGpuJobsToArray(const BytesList& jobs,
                                                        const TextList* keys = nullptr,
                                                        const TextList* urls = nullptr,
                                                        BufferPool* pool = nullptr);

// DecodeGpuJobsOnHost replaces every GPU job column of `batch` with the host
// array it decodes to (what a consumer on the CPU does; the Loader's workers
// with LoaderOptions::decode_gpu_jobs_on_host), with DecodeGpuJobsToArray,
// its storage from `pool` when given (the Loader's batch pool: recycled,
// pinned when asked).
[[nodiscard]] absl::Status DecodeGpuJobsOnHost(Sample& batch, BufferPool* pool = nullptr);

}  // namespace wds
