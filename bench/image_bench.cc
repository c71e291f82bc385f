// Micro-benchmarks for the image decoders on an ImageNet-like picture: a
// 500x375 JPEG at quality 90 (~75 KB), the same picture as WebP (q90) and
// PNG, decoded full size and to 224x224 (stretch, centre crop, random resized
// crop), plus a 1024x768 JPEG where DCT scaling applies. items/s are images; bytes/s are encoded
// input bytes; src_Mpix/s are encoded pixels per second, comparable to tjbench's "Megapixels/sec".
//
// The fixtures are made with cjpeg, cwebp and dwebp in a temporary directory,
// or in $WDS_IMAGE_BENCH_DIR (kept, so that tjbench can run on the same file:
// tjbench $WDS_IMAGE_BENCH_DIR/photo.jpg -rgb -nowrite). $WDS_IMAGE_BENCH_JPEG
// names a JPEG to use instead of the synthetic one.
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/output_slots.h"
#include "gpu/gpu_job.h"
#include "gpu/image_route.h"
#include "gpu/output_spec.h"
#include "gpu/resize_kernel.h"
#include "gpu/resize_math.h"
#include "image/codecs.h"
#include "image/resample.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/image/image.h"

namespace wds {
namespace {

constexpr int kWidth = 500;
constexpr int kHeight = 375;

// Picture is smooth shapes, some texture and sensor-like noise: close to a
// photograph in how hard it is for a JPEG encoder (~75 KB at q90 for 500x375).
std::string PicturePpm(int width, int height) {
  std::string ppm = "P6\n" + std::to_string(width) + " " + std::to_string(height) + "\n255\n";
  uint64_t state = 88172645463325252ULL;
  auto noise = [&state] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return static_cast<double>(state % 1000) / 1000.0 - 0.5;
  };
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        const double v = 120 + 70 * std::sin(x / 41.0 + c) * std::cos(y / 29.0 - c) +
                         25 * std::sin((x + 2 * y) / 6.0 + c * 1.7) + 34 * noise();
        ppm.push_back(static_cast<char>(std::lround(std::fmin(255, std::fmax(0, v)))));
      }
    }
  }
  return ppm;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void Shell(const std::string& command) {
  if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
}

struct Fixtures {
  std::string jpeg;
  std::string png;
  std::string webp;
  std::string large_jpeg;  // 1024x768, where DCT scaling applies to 224x224 outputs

  Fixtures() {
    const char* keep = std::getenv("WDS_IMAGE_BENCH_DIR");
    std::string dir;
    if (keep != nullptr) {
      dir = keep;
      std::filesystem::create_directories(dir);
    } else {
      std::string tmpl =
          (std::filesystem::temp_directory_path() / "wds-image-bench-XXXXXX").string();
      if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
      dir = tmpl;
    }
    {
      std::ofstream f(dir + "/photo.ppm", std::ios::binary);
      f << PicturePpm(kWidth, kHeight);
      std::ofstream large(dir + "/large.ppm", std::ios::binary);
      large << PicturePpm(1024, 768);
    }
    const char* source = std::getenv("WDS_IMAGE_BENCH_JPEG");
    const std::string q = "'" + dir + "/";
    if (source != nullptr) {
      Shell(std::string("cp '") + source + "' " + q + "photo.jpg'");
      Shell("djpeg -pnm " + q + "photo.jpg' > " + q + "photo.ppm'");
    } else {
      Shell("cjpeg -quality 90 " + q + "photo.ppm' > " + q + "photo.jpg'");
    }
    Shell("cjpeg -quality 90 " + q + "large.ppm' > " + q + "large.jpg'");
    Shell("cwebp -quiet -q 90 " + q + "photo.ppm' -o " + q + "photo.webp'");
    Shell("dwebp -quiet " + q + "photo.webp' -o " + q + "photo.png'");
    jpeg = ReadFile(dir + "/photo.jpg");
    png = ReadFile(dir + "/photo.png");
    webp = ReadFile(dir + "/photo.webp");
    large_jpeg = ReadFile(dir + "/large.jpg");
    std::fprintf(stderr,
                 "image fixtures in %s: photo.jpg %zu bytes, photo.png %zu, photo.webp %zu\n",
                 dir.c_str(), jpeg.size(), png.size(), webp.size());
    if (keep == nullptr) std::filesystem::remove_all(dir);
  }
};

const Fixtures& Get() {
  static const Fixtures fixtures;
  return fixtures;
}

ImageDecodeOptions Options(ResizeMode mode) {
  ImageDecodeOptions options;
  options.resize.mode = mode;
  options.resize.width = 224;
  options.resize.height = 224;
  return options;
}

void Run(benchmark::State& state, const std::string& data, const char* spec,
         const ImageDecodeOptions& options) {
  const ImageSpec parsed = *ParseImageSpec(spec);
  Rng rng(1);
  ImageDecodeInfo info;
  for (auto _ : state) {
    absl::StatusOr<Array> image = DecodeImage(data, parsed, options, rng, &info);
    if (!image.ok()) {
      state.SkipWithError(std::string(image.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(image->data.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(data.size()));
  state.counters["src_Mpix/s"] =
      benchmark::Counter(static_cast<double>(info.width) * info.height * 1e-6 *
                             static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void BM_JpegRgb8Full(benchmark::State& s) { Run(s, Get().jpeg, "rgb8", {}); }
void BM_JpegL8Full(benchmark::State& s) { Run(s, Get().jpeg, "l8", {}); }
void BM_JpegTorchRgbFull(benchmark::State& s) { Run(s, Get().jpeg, "torchrgb", {}); }
void BM_JpegRgb8Stretch224(benchmark::State& s) {
  Run(s, Get().jpeg, "rgb8", Options(ResizeMode::kStretch));
}
void BM_JpegRgb8CenterCrop224(benchmark::State& s) {
  Run(s, Get().jpeg, "rgb8", Options(ResizeMode::kCenterCrop));
}
void BM_JpegRgb8RandomResizedCrop224(benchmark::State& s) {
  ImageDecodeOptions options = Options(ResizeMode::kRandomResizedCrop);
  options.hflip = 0.5;
  Run(s, Get().jpeg, "rgb8", options);
}
void BM_JpegTorchRgbCenterCrop224(benchmark::State& s) {
  Run(s, Get().jpeg, "torchrgb", Options(ResizeMode::kCenterCrop));
}
void BM_LargeJpegRgb8Full(benchmark::State& s) { Run(s, Get().large_jpeg, "rgb8", {}); }
void BM_LargeJpegRgb8CenterCrop224(benchmark::State& s) {
  Run(s, Get().large_jpeg, "rgb8", Options(ResizeMode::kCenterCrop));
}
void BM_PngRgb8Full(benchmark::State& s) { Run(s, Get().png, "rgb8", {}); }
void BM_PngRgb8CenterCrop224(benchmark::State& s) {
  Run(s, Get().png, "rgb8", Options(ResizeMode::kCenterCrop));
}
void BM_WebpRgb8Full(benchmark::State& s) { Run(s, Get().webp, "rgb8", {}); }
void BM_WebpRgb8CenterCrop224(benchmark::State& s) {
  Run(s, Get().webp, "rgb8", Options(ResizeMode::kCenterCrop));
}

// CyclingSlots offers the 64 slots of one batch-sized block in turn, as
// Batched does, so that every decode writes to memory that left the caches
// since the last one, as in the loader.
class CyclingSlots final : public OutputSlots {
 public:
  static constexpr int kSlots = 64;
  Buffer Offer(std::string_view, DType dtype, const std::vector<int64_t>& shape) override {
    const size_t slot = Array{dtype, shape, {}}.nbytes();
    if (block_.size() != slot * kSlots) {
      block_ = Buffer::Allocate(slot * kSlots);
      std::memset(block_.mutable_data(), 0, block_.size());
    }
    const size_t offset = slot * (next_++ % kSlots);
    return block_.Slice(offset, slot);
  }

 private:
  Buffer block_;
  size_t next_ = 0;
};

// Full-size rgb8 decodes as in the loader: each into the next slot of a batch
// block, from one of 64 copies of the JPEG (4.8 MB, beyond the core's
// caches). Against BM_JpegRgb8Full, which reuses one hot input and output,
// this is what cold memory costs a decode.
void BM_JpegRgb8IntoBatchSlots(benchmark::State& state) {
  const ImageSpec rgb8 = *ParseImageSpec("rgb8");
  std::vector<std::string> inputs(CyclingSlots::kSlots, Get().jpeg);
  CyclingSlots slots;
  Rng rng(1);
  size_t i = 0;
  for (auto _ : state) {
    const std::string& data = inputs[i++ % inputs.size()];
    absl::StatusOr<Array> image = DecodeImageInto(data, rgb8, {}, rng, nullptr, &slots, "jpg");
    if (!image.ok()) {
      state.SkipWithError(std::string(image.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(image->data.data());
  }
  state.SetItemsProcessed(state.iterations());
}

// The resampler alone: a 375x375 region of a 500x375 image to 224x224.
void BM_Resample375To224(benchmark::State& state) {
  const std::string pixels(static_cast<size_t>(kWidth) * kHeight * 3, '\x7f');
  for (auto _ : state) {
    Array out = image_internal::ResampleImage(reinterpret_cast<const uint8_t*>(pixels.data()),
                                              kWidth, kHeight, 3, {62.5, 0, 375, 375}, 224, 224);
    benchmark::DoNotOptimize(out.data.data());
  }
  state.SetItemsProcessed(state.iterations());
}

// The GPU path's resize on the host (ResizeBatchOnHost: a Loader without a
// GPU runs it in its workers), from a decoded 500x375 picture: range(0) 0 is
// the full size into uint8 channels-last, 1 the 375x375 centre square to
// 224x224 normalized float32 channels-first (decode("torchrgb", size=224,
// crop="center", normalize=...)). Beside BM_Resample375To224, the CPU path's.
void BM_HostResize(benchmark::State& state) {
  const std::string pixels(static_cast<size_t>(kWidth) * kHeight * 3, '\x7f');
  const bool crop = state.range(0) == 1;
  gpu::GpuOutput output;
  output.width = crop ? 224 : kWidth;
  output.height = crop ? 224 : kHeight;
  output.dtype = crop ? DType::kFloat32 : DType::kUInt8;
  output.channels_first = crop;
  if (crop) output.normalize = kImageNetNormalize;
  std::vector<float> out(static_cast<size_t>(output.width) * output.height * 3);
  const gpu::ResizeSource source = gpu::MakeResizeSource(
      kWidth, kHeight, crop ? 62 : 0, 0, crop ? 375 : kWidth, kHeight, false,
      reinterpret_cast<const uint8_t*>(pixels.data()), int64_t{kWidth} * 3);
  const gpu::ResizeTarget target = gpu::MakeResizeTarget(output, out.data());
  for (auto _ : state) {
    gpu::ResizeBatchOnHost(&source, 1, target);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}

// BM_HostResize's work done as the kernel does it, per output pixel
// (MakeAxisTap and ResampledPixel of resize_math.h, then the store): what
// ResizeBatchOnHost did before it used the CPU path's resampler.
void BM_HostResizePerPixel(benchmark::State& state) {
  const std::string pixels(static_cast<size_t>(kWidth) * kHeight * 3, '\x7f');
  const auto* src = reinterpret_cast<const uint8_t*>(pixels.data());
  const bool crop = state.range(0) == 1;
  const int width = crop ? 224 : kWidth;
  const int height = crop ? 224 : kHeight;
  std::vector<float> floats(static_cast<size_t>(width) * height * 3);
  std::vector<uint8_t> bytes(floats.size());
  for (auto _ : state) {
    for (int y = 0; y < height; ++y) {
      const gpu::AxisTap ty = gpu::MakeAxisTap(0, kHeight, height, y);
      for (int x = 0; x < width; ++x) {
        const gpu::AxisTap tx = gpu::MakeAxisTap(crop ? 62 : 0, crop ? 375 : kWidth, width, x);
        float sums[3];
        gpu::ResampledPixel(src, int64_t{kWidth} * 3, tx, ty, sums);
        for (int c = 0; c < 3; ++c) {
          const uint8_t v = gpu::RoundToByte(sums[c]);
          if (crop) {
            floats[(static_cast<size_t>(c) * height + y) * width + x] = gpu::NormalizedSample(
                v, kImageNetNormalize.mean[c], kImageNetNormalize.std[c]);
          } else {
            bytes[(static_cast<size_t>(y) * width + x) * 3 + c] = v;
          }
        }
      }
    }
    benchmark::DoNotOptimize(floats.data());
    benchmark::DoNotOptimize(bytes.data());
  }
  state.SetItemsProcessed(state.iterations());
}

// A batch of 64 GPU jobs of the picture, as GpuDecodeStage makes them (full
// size), for the consumer's host work before nvJPEG.
BytesList GpuJobColumn() {
  const gpu::RouteDecision d = gpu::RouteImage(Get().jpeg);
  if (d.route != gpu::ImageRoute::kGpu) throw std::runtime_error("the JPEG is not routed to the GPU");
  const gpu::JobHeader h = gpu::WholeJpegJob(d.header.width, d.header.height, d.hardware);
  BytesList jobs;
  for (int i = 0; i < 64; ++i) jobs.push_back(gpu::MakeJob(h, Get().jpeg));
  return jobs;
}

// What a consumer reads of a batch before decoding it: IsGpuJobColumn and
// GpuJobLayout (GpuBatchDecoder::Decode parses the column once more).
void BM_GpuJobColumnLayout(benchmark::State& state) {
  const BytesList jobs = GpuJobColumn();
  const Value column = jobs;
  for (auto _ : state) {
    if (!IsGpuJobColumn(column)) {
      state.SkipWithError("not a job column");
      return;
    }
    absl::StatusOr<GpuBatchLayout> layout = GpuJobLayout(jobs);
    benchmark::DoNotOptimize(layout);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(jobs.size()));
}

// The decoder's gather of a batch's payloads into one staging buffer (here
// pageable; pinned on a device), from 64 jobs' copies (beyond the caches).
void BM_GpuJobColumnGather(benchmark::State& state) {
  std::vector<BytesList> batches(8, GpuJobColumn());
  size_t bytes = 0;
  for (const Buffer& job : batches[0]) bytes += job.size();
  std::vector<uint8_t> staging(bytes);
  size_t b = 0;
  for (auto _ : state) {
    size_t at = 0;
    for (const Buffer& job : batches[b++ % batches.size()]) {
      std::memcpy(staging.data() + at, job.data(), job.size());
      at += job.size();
    }
    benchmark::DoNotOptimize(staging.data());
  }
  state.SetItemsProcessed(state.iterations() * 64);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}

// The worker's routing of a JPEG to nvJPEG: its header, then the walk of its
// markers and scan data (RouteImage), beside a full CPU decode of it.
void BM_GpuRouteJpeg(benchmark::State& state) {
  const std::string& jpeg = Get().jpeg;
  for (auto _ : state) {
    gpu::RouteDecision d = gpu::RouteImage(jpeg);
    if (d.route != gpu::ImageRoute::kGpu) {
      state.SkipWithError(d.reason.c_str());
      return;
    }
    benchmark::DoNotOptimize(d);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(jpeg.size()));
}

BENCHMARK(BM_JpegRgb8Full);
BENCHMARK(BM_JpegRgb8IntoBatchSlots);
BENCHMARK(BM_GpuRouteJpeg);
BENCHMARK(BM_HostResize)->Arg(0)->Arg(1);
BENCHMARK(BM_HostResizePerPixel)->Arg(0)->Arg(1);
BENCHMARK(BM_GpuJobColumnLayout);
BENCHMARK(BM_GpuJobColumnGather);
BENCHMARK(BM_JpegL8Full);
BENCHMARK(BM_JpegTorchRgbFull);
BENCHMARK(BM_JpegRgb8Stretch224);
BENCHMARK(BM_JpegRgb8CenterCrop224);
BENCHMARK(BM_JpegRgb8RandomResizedCrop224);
BENCHMARK(BM_JpegTorchRgbCenterCrop224);
BENCHMARK(BM_LargeJpegRgb8Full);
BENCHMARK(BM_LargeJpegRgb8CenterCrop224);
BENCHMARK(BM_PngRgb8Full);
BENCHMARK(BM_PngRgb8CenterCrop224);
BENCHMARK(BM_WebpRgb8Full);
BENCHMARK(BM_WebpRgb8CenterCrop224);
BENCHMARK(BM_Resample375To224);

}  // namespace
}  // namespace wds

BENCHMARK_MAIN();
