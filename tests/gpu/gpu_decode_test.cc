// Tests of the GPU decode path's host side, run on the CPU: which images go
// to nvJPEG and which to the CPU decoder, the plans (crops, flips) drawn for
// them, the staging of encoded bytes, the specs the GPU path serves, and the
// CPU reference of the fused resize kernel. JPEG variants are encoded here
// with libjpeg; the kernel itself is tested on a device (gpu_kernel_test).
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpu/image_route.h"
#include "gpu/output_spec.h"
#include "gpu/resize_kernel.h"
#include "gpu/resize_math.h"
#include "gpu/staging.h"
#include "gtest/gtest.h"
#include "image/resample.h"
#include "jpeg_variants.h"
#include "wds/base/random.h"
#include "wds/image/image.h"
#include "wds/internal/base/strings.h"

namespace wds::gpu {
namespace {

using gpu_testing::EncodeJpeg;
using gpu_testing::JpegRecipe;
using gpu_testing::Pattern;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ----------------------------------------------------------------------------
// Encoded images

// PatchedSof rewrites the first SOF0 marker: its type (0xc0 + n) and its
// sample precision, making variants libjpeg-turbo cannot write (12-bit,
// lossless).
std::string PatchedSof(std::string jpeg, unsigned char type, unsigned char precision) {
  const size_t at = jpeg.find("\xff\xc0", 2);
  EXPECT_NE(at, std::string::npos);
  jpeg[at + 1] = static_cast<char>(type);
  jpeg[at + 4] = static_cast<char>(precision);
  return jpeg;
}

void PngChunk(std::string& out, const char* type, const std::string& data) {
  const uint32_t n = static_cast<uint32_t>(data.size());
  const char length[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                          static_cast<char>(n >> 8), static_cast<char>(n)};
  out.append(length, 4);
  const std::string body = std::string(type, 4) + data;
  out += body;
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
  const char c[4] = {static_cast<char>(crc >> 24), static_cast<char>(crc >> 16),
                     static_cast<char>(crc >> 8), static_cast<char>(crc)};
  out.append(c, 4);
}

// EncodePng is an 8-bit RGB PNG of Pattern, written with zlib.
std::string EncodePng(int width, int height) {
  const std::vector<uint8_t> pixels = Pattern(width, height, 3);
  std::string raw;
  for (int y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(pixels.data()) + static_cast<size_t>(y) * width * 3,
               static_cast<size_t>(width) * 3);
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string packed(packed_size, '\0');
  EXPECT_EQ(compress(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
                     reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size())),
            Z_OK);
  packed.resize(packed_size);
  const char ihdr[13] = {0,
                         0,
                         static_cast<char>(width >> 8),
                         static_cast<char>(width),
                         0,
                         0,
                         static_cast<char>(height >> 8),
                         static_cast<char>(height),
                         8,
                         2,
                         0,
                         0,
                         0};
  std::string png = "\x89PNG\r\n\x1a\n";
  PngChunk(png, "IHDR", std::string(ihdr, 13));
  PngChunk(png, "IDAT", packed);
  PngChunk(png, "IEND", "");
  return png;
}

// ----------------------------------------------------------------------------
// Routing

TEST(ImageRouteTest, BaselineColourJpegGoesToTheGpu) {
  const RouteDecision d = RouteImage(EncodeJpeg({}));
  EXPECT_EQ(d.route, ImageRoute::kGpu);
  EXPECT_EQ(d.reason, "");
  EXPECT_EQ(d.header.width, 64);
  EXPECT_EQ(d.header.height, 48);
  EXPECT_EQ(d.header.components, 3);
  EXPECT_FALSE(d.header.progressive);
}

TEST(ImageRouteTest, ProgressiveJpegGoesToTheGpu) {
  JpegRecipe r;
  r.progressive = true;
  const RouteDecision d = RouteImage(EncodeJpeg(r));
  EXPECT_EQ(d.route, ImageRoute::kGpu);
  EXPECT_TRUE(d.header.progressive);
}

TEST(ImageRouteTest, RestartMarkerJpegGoesToTheGpu) {
  JpegRecipe r;
  r.restart_rows = 1;
  const std::string jpeg = EncodeJpeg(r);
  EXPECT_NE(jpeg.find("\xff\xd0"), std::string::npos);  // RST0
  EXPECT_EQ(RouteImage(jpeg).route, ImageRoute::kGpu);
}

TEST(ImageRouteTest, GrayJpegGoesToTheGpu) {
  JpegRecipe r;
  r.components = 1;
  const RouteDecision d = RouteImage(EncodeJpeg(r));
  EXPECT_EQ(d.route, ImageRoute::kGpu);
  EXPECT_EQ(d.header.components, 1);
}

TEST(ImageRouteTest, Subsampling444And422And440And411GoToTheGpu) {
  for (auto [h, v] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}, std::pair{4, 1}}) {
    JpegRecipe r;
    r.luma_h = h;
    r.luma_v = v;
    const RouteDecision d = RouteImage(EncodeJpeg(r));
    EXPECT_EQ(d.route, ImageRoute::kGpu) << h << "x" << v << ": " << d.reason;
    EXPECT_EQ(d.header.sampling[0][0], h);
    EXPECT_EQ(d.header.sampling[0][1], v);
  }
}

TEST(ImageRouteTest, SubsampledChromaPlaneFallsBackToTheCpu) {
  JpegRecipe r;
  r.luma_h = 1;
  r.luma_v = 1;
  r.chroma_h = 2;
  const RouteDecision d = RouteImage(EncodeJpeg(r));
  EXPECT_EQ(d.route, ImageRoute::kCpu);
  EXPECT_EQ(d.reason, "chroma subsampling 1x1,2x1,1x1");
}

TEST(ImageRouteTest, CmykJpegFallsBackToTheCpu) {
  JpegRecipe r;
  r.components = 4;
  const RouteDecision d = RouteImage(EncodeJpeg(r));
  EXPECT_EQ(d.route, ImageRoute::kCpu);
  EXPECT_EQ(d.reason, "CMYK JPEG");
  EXPECT_TRUE(d.header.adobe);
  EXPECT_EQ(d.header.components, 4);
}

TEST(ImageRouteTest, ArithmeticCodedJpegFallsBackToTheCpu) {
  JpegRecipe r;
  r.arithmetic = true;
  const RouteDecision d = RouteImage(EncodeJpeg(r));
  EXPECT_EQ(d.route, ImageRoute::kCpu);
  EXPECT_EQ(d.reason, "arithmetic-coded JPEG");
}

TEST(ImageRouteTest, TwelveBitJpegFallsBackToTheCpuWithLibjpegsReason) {
  const RouteDecision d = RouteImage(PatchedSof(EncodeJpeg({}), 0xc1, 12));
  EXPECT_EQ(d.route, ImageRoute::kCpu);
  EXPECT_EQ(d.reason,
            "unreadable JPEG header: unsupported JPEG: Unsupported JPEG data precision 12");
}

TEST(ImageRouteTest, LosslessJpegFallsBackToTheCpuWithLibjpegsReason) {
  const RouteDecision d = RouteImage(PatchedSof(EncodeJpeg({}), 0xc3, 8));
  EXPECT_EQ(d.route, ImageRoute::kCpu);
  EXPECT_EQ(d.reason,
            "unreadable JPEG header: unsupported JPEG: Unsupported JPEG process: SOF type 0xc3");
}

TEST(ImageRouteTest, PngAndWebpFallBackToTheCpu) {
  EXPECT_EQ(RouteImage(EncodePng(4, 3)).reason, "PNG");
  EXPECT_EQ(RouteImage(EncodePng(4, 3)).route, ImageRoute::kCpu);
  const std::string webp = std::string("RIFF\x10\0\0\0WEBPVP8 ", 16);
  EXPECT_EQ(RouteImage(webp).reason, "WebP");
  EXPECT_EQ(RouteImage(webp).route, ImageRoute::kCpu);
}

TEST(ImageRouteTest, BytesOfNoImageFallBackToTheCpu) {
  EXPECT_EQ(RouteImage("<html>").reason, "not a JPEG");
  EXPECT_EQ(RouteImage("").reason, "not a JPEG");
  EXPECT_EQ(RouteImage("").route, ImageRoute::kCpu);
}

TEST(ImageRouteTest, CorruptHeaderFallsBackAndFailsInTheCpuDecoderAsOnTheCpuPath) {
  const std::string jpeg = EncodeJpeg({});
  const std::string cut = jpeg.substr(0, 30);  // inside the quantization tables
  const RouteDecision d = RouteImage(cut);
  EXPECT_EQ(d.route, ImageRoute::kCpu);
  Rng rng(1);
  absl::StatusOr<Array> cpu = DecodeImage(cut, *ParseImageSpec("rgb8"), {}, rng);
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(d.reason, "unreadable JPEG header: " + std::string(cpu.status().message()));
}

TEST(ImageRouteTest, BaselineJpegIsOneScanForTheJpegEngines) {
  const RouteDecision d = RouteImage(EncodeJpeg({}));
  EXPECT_EQ(d.scans, 1);
  EXPECT_TRUE(d.hardware);
  JpegRecipe r;
  r.progressive = true;
  const RouteDecision progressive = RouteImage(EncodeJpeg(r));
  EXPECT_EQ(progressive.route, ImageRoute::kGpu);
  EXPECT_GT(progressive.scans, 1);
  EXPECT_FALSE(progressive.hardware);
}

TEST(ImageRouteTest, BaselineJpegOfAScanPerComponentGoesToTheHybridBackend) {
  JpegRecipe r;
  r.scan_per_component = true;
  const RouteDecision d = RouteImage(EncodeJpeg(r));
  EXPECT_EQ(d.route, ImageRoute::kGpu) << d.reason;
  EXPECT_FALSE(d.header.progressive);
  EXPECT_EQ(d.scans, 3);
  EXPECT_FALSE(d.hardware);  // the JPEG engines take one scan
}

TEST(ImageRouteTest, StrayMarkerInAScanFallsBackToTheCpu) {
  std::string jpeg = EncodeJpeg({});
  jpeg.insert(jpeg.find("\xff\xda") + 30, "\xff\x06");
  const RouteDecision d = RouteImage(jpeg);
  EXPECT_EQ(d.route, ImageRoute::kCpu);
  EXPECT_EQ(d.reason, "marker 0xff06 inside scan 1 (corrupt?)");
}

TEST(ImageRouteTest, BrokenMarkerStructureFallsBackToTheCpu) {
  const std::string jpeg = EncodeJpeg({});
  const size_t eoi = jpeg.rfind("\xff\xd9");
  // A restart marker among the header's segments (in a scan it would be one).
  const size_t sof = jpeg.find("\xff\xc0");
  EXPECT_EQ(RouteImage(jpeg.substr(0, sof) + "\xff\xd0" + jpeg.substr(sof)).reason,
            "marker 0xffd0 outside a scan (corrupt?)");
  // Bytes libjpeg skips as junk before a marker (image_fuzz found a walk
  // that took them for a segment, jumped over the frame by their "length"
  // and met an end-of-image marker before any scan).
  std::string junk = jpeg.substr(0, 2) + std::string("\xff\x00\x00\x04..", 6) + jpeg.substr(2);
  EXPECT_EQ(RouteImage(junk).route, ImageRoute::kCpu);
  EXPECT_EQ(RouteImage(junk).reason, "marker 0xff00 outside a scan (corrupt?)");
  // A comment segment after the scan whose length is impossible.
  EXPECT_EQ(RouteImage(jpeg.substr(0, eoi) + std::string("\xff\xfe\x00\x01", 4) + jpeg.substr(eoi))
                .reason,
            "a marker segment of length 1 (corrupt?)");
  // Bytes where the marker after a segment should be.
  std::string shifted = jpeg;
  shifted.insert(sof, "x");
  EXPECT_EQ(RouteImage(shifted).reason, Cat("no marker where one should be, at byte ", sof,
                                            " (corrupt?)"));
  // Between scans, tables and comments may come, and the walk goes on.
  const std::string comment("\xff\xfe\x00\x04hi", 6);
  const RouteDecision d = RouteImage(jpeg.substr(0, eoi) + comment + jpeg.substr(eoi));
  EXPECT_EQ(d.route, ImageRoute::kGpu) << d.reason;
  EXPECT_EQ(d.scans, 1);
}

TEST(ImageRouteTest, FillBytesInAScanStillGoToTheGpu) {
  // Runs of 0xFF are fill bytes before a marker: the walk passes them, and
  // nvJPEG's failure on such a scan sends the image to the CPU decoder.
  std::string jpeg = EncodeJpeg({});
  const size_t sos = jpeg.find("\xff\xda");
  ASSERT_NE(sos, std::string::npos);
  for (size_t i = sos + 20; i + 2 < jpeg.size(); ++i) jpeg[i] = '\xff';
  EXPECT_EQ(RouteImage(jpeg).route, ImageRoute::kGpu);
}

TEST(ImageRouteTest, TruncatedJpegFallsBackToTheCpu) {
  // nvJPEG fills in what is missing without an error; the CPU decoder says
  // the file was cut short.
  const std::string jpeg = EncodeJpeg({});
  const std::string cut = jpeg.substr(0, jpeg.find("\xff\xda") + 40);
  const RouteDecision d = RouteImage(cut);
  EXPECT_EQ(d.route, ImageRoute::kCpu);
  EXPECT_EQ(d.reason, "no end-of-image marker after the scan (truncated?)");
  EXPECT_EQ(RouteImage(jpeg).route, ImageRoute::kGpu);
  // Bytes after the end-of-image marker (trailers) do not matter.
  EXPECT_EQ(RouteImage(jpeg + std::string(100, 'x')).route, ImageRoute::kGpu);
}

TEST(ImageRouteTest, EndMarkerOfAThumbnailBeforeTheScanDoesNotCount) {
  // An EXIF thumbnail (a whole JPEG in APP1) ends before the main scan.
  const std::string thumb = EncodeJpeg({});
  const std::string jpeg = EncodeJpeg({});
  const std::string app1 = std::string("\xff\xe1") + static_cast<char>((thumb.size() + 2) >> 8) +
                           static_cast<char>((thumb.size() + 2) & 255) + thumb;
  std::string with_thumb = jpeg.substr(0, 2) + app1 + jpeg.substr(2);
  ASSERT_EQ(RouteImage(with_thumb).route, ImageRoute::kGpu);
  with_thumb.resize(with_thumb.rfind("\xff\xd9"));
  EXPECT_EQ(RouteImage(with_thumb).route, ImageRoute::kCpu);
}

// ----------------------------------------------------------------------------
// Plans: the CPU path's draws for a seed

struct Drawn {
  ImageRect crop;
  bool flipped = false;
  bool operator==(const Drawn& o) const { return crop == o.crop && flipped == o.flipped; }
};

std::vector<std::string> MixedBatch() {
  JpegRecipe cmyk;
  cmyk.components = 4;
  JpegRecipe wide;
  wide.width = 200;
  wide.height = 90;
  wide.progressive = true;
  return {EncodeJpeg({}), EncodePng(50, 70), EncodeJpeg(cmyk), EncodeJpeg(wide), EncodeJpeg({})};
}

TEST(PlanGpuImageTest, RandomCropsAndFlipsAreTheCpuPathsForEachSeed) {
  ImageDecodeOptions options;
  options.resize = {ResizeMode::kRandomResizedCrop, 32, 32};
  options.hflip = 0.5;
  const ImageSpec spec = *ParseImageSpec("rgb8");
  const std::vector<std::string> batch = MixedBatch();
  int gpu_images = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Rng cpu_rng(seed);
    Rng gpu_rng(seed);
    for (const std::string& image : batch) {
      ImageDecodeInfo cpu_info;
      ASSERT_TRUE(DecodeImage(image, spec, options, cpu_rng, &cpu_info).ok());
      Drawn gpu;
      const GpuImagePlan plan = PlanGpuImage(image, spec, options, gpu_rng);
      if (plan.decision.route == ImageRoute::kGpu) {
        ASSERT_TRUE(plan.plan.ok()) << plan.plan.status();
        gpu = {plan.plan->crop, plan.plan->flip};
        EXPECT_EQ(plan.info.crop, plan.plan->crop);
        ++gpu_images;
      } else {
        ImageDecodeInfo fallback;
        ASSERT_TRUE(DecodeImage(image, spec, options, gpu_rng, &fallback).ok());
        gpu = {fallback.crop, fallback.flipped};
      }
      EXPECT_TRUE(gpu == (Drawn{cpu_info.crop, cpu_info.flipped})) << "seed " << seed;
    }
    EXPECT_EQ(gpu_rng.Next(), cpu_rng.Next()) << "seed " << seed;
  }
  EXPECT_EQ(gpu_images, 60);  // three JPEGs of five, 20 seeds
}

TEST(PlanGpuImageTest, CenterCropIsTheCpuPathsAndDrawsNothing) {
  ImageDecodeOptions options;
  options.resize = {ResizeMode::kCenterCrop, 30, 30};
  JpegRecipe wide;
  wide.width = 200;
  wide.height = 90;
  Rng rng(5);
  const GpuImagePlan plan = PlanGpuImage(EncodeJpeg(wide), *ParseImageSpec("rgb8"), options, rng);
  ASSERT_TRUE(plan.plan.ok());
  EXPECT_EQ(plan.plan->crop, (ImageRect{55, 0, 90, 90}));
  EXPECT_EQ(plan.plan->out_width, 30);
  EXPECT_FALSE(plan.plan->flip);
  EXPECT_EQ(rng.Next(), Rng(5).Next());
}

TEST(PlanGpuImageTest, ImageBeyondMaxPixelsFailsAsOnTheCpuPath) {
  ImageDecodeOptions options;
  options.max_pixels = 1000;
  const std::string jpeg = EncodeJpeg({});
  Rng rng(1);
  const GpuImagePlan plan = PlanGpuImage(jpeg, *ParseImageSpec("rgb8"), options, rng);
  EXPECT_EQ(plan.decision.route, ImageRoute::kGpu);
  ASSERT_FALSE(plan.plan.ok());
  absl::StatusOr<Array> cpu = DecodeImage(jpeg, *ParseImageSpec("rgb8"), options, rng);
  EXPECT_EQ(plan.plan.status(), cpu.status());
  EXPECT_EQ(plan.plan.status().message(),
            "JPEG image is 64x48 (3072 pixels), more than max_pixels 1000");
}

TEST(PlanGpuImageTest, CpuRoutedImageDrawsNothing) {
  ImageDecodeOptions options;
  options.resize = {ResizeMode::kRandomResizedCrop, 8, 8};
  Rng rng(3);
  const GpuImagePlan plan = PlanGpuImage(EncodePng(9, 9), *ParseImageSpec("rgb8"), options, rng);
  EXPECT_EQ(plan.decision.route, ImageRoute::kCpu);
  EXPECT_EQ(plan.plan.status().message(), "routed to the CPU");
  EXPECT_EQ(rng.Next(), Rng(3).Next());
}

// ----------------------------------------------------------------------------
// Staging

// CountingAllocator is ordinary memory that counts what is outstanding.
class CountingAllocator final : public HostAllocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (fail) return absl::ResourceExhaustedError("no memory for the test");
    ++allocated;
    return std::aligned_alloc(kHostAlignment, bytes);
  }
  void Deallocate(void* p, size_t) override {
    ++freed;
    std::free(p);
  }
  bool pinned() const override { return true; }
  std::string_view name() const override { return "counting"; }

  int allocated = 0;
  int freed = 0;
  bool fail = false;
};

TEST(StagingTest, BufferIsReusedFromBatchToBatch) {
  auto allocator = std::make_shared<CountingAllocator>();
  StagingPool pool(allocator, 2);
  uint8_t* first = nullptr;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<StagingBuffer> buffer = pool.Acquire(6 + i);
    ASSERT_TRUE(buffer.ok());
    EXPECT_EQ(buffer->capacity(), StagingPool::kStagingGranule);
    if (first == nullptr) first = buffer->data();
    EXPECT_EQ(buffer->data(), first);
    EXPECT_EQ(pool.leased(), 1);
  }
  EXPECT_EQ(pool.allocations(), 1);
  EXPECT_EQ(pool.leased(), 0);
  EXPECT_EQ(pool.buffers(), 1);
}

TEST(StagingTest, SmallestIdleBufferThatFitsIsTaken) {
  auto allocator = std::make_shared<CountingAllocator>();
  StagingPool pool(allocator, 3);
  absl::StatusOr<StagingBuffer> big = pool.Acquire(3 * StagingPool::kStagingGranule);
  absl::StatusOr<StagingBuffer> small = pool.Acquire(10);
  ASSERT_TRUE(big.ok() && small.ok());
  uint8_t* small_data = small->data();
  *big = StagingBuffer();
  *small = StagingBuffer();
  absl::StatusOr<StagingBuffer> again = pool.Acquire(100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), small_data);
  EXPECT_EQ(pool.allocations(), 2);
}

TEST(StagingTest, BiggerBatchReplacesAnIdleBufferAtTheBound) {
  auto allocator = std::make_shared<CountingAllocator>();
  StagingPool pool(allocator, 1);
  ASSERT_TRUE(pool.Acquire(10).ok());  // leased and returned
  absl::StatusOr<StagingBuffer> bigger = pool.Acquire(StagingPool::kStagingGranule + 1);
  ASSERT_TRUE(bigger.ok());
  EXPECT_EQ(bigger->capacity(), 2 * StagingPool::kStagingGranule);
  EXPECT_EQ(pool.buffers(), 1);
  EXPECT_EQ(pool.reserved_bytes(), 2 * StagingPool::kStagingGranule);
  EXPECT_EQ(allocator->freed, 1);
}

// A batch a little larger than the last (its images vary in size) takes the
// same buffer: buffers are made an eighth larger than asked.
TEST(StagingTest, BufferHasAnEighthMoreThanAskedForTheNextBatches) {
  auto allocator = std::make_shared<CountingAllocator>();
  StagingPool pool(allocator, 1);
  constexpr size_t kGranule = StagingPool::kStagingGranule;
  uint8_t* first = nullptr;
  {
    absl::StatusOr<StagingBuffer> a = pool.Acquire(8 * kGranule);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->capacity(), 9 * kGranule);
    first = a->data();
  }
  absl::StatusOr<StagingBuffer> b = pool.Acquire(9 * kGranule);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(allocator->allocated, 1);
}

TEST(StagingTest, PoolIsBounded) {
  auto allocator = std::make_shared<CountingAllocator>();
  StagingPool pool(allocator, 2);
  absl::StatusOr<StagingBuffer> a = pool.Acquire(1);
  absl::StatusOr<StagingBuffer> b = pool.Acquire(1);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<StagingBuffer> c = pool.Acquire(7);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c.status().message(), "staging pool: all 2 buffers are in use (7 bytes asked)");
  EXPECT_EQ(allocator->allocated, 2);
}

TEST(StagingTest, AllocatorErrorIsReturned) {
  auto allocator = std::make_shared<CountingAllocator>();
  allocator->fail = true;
  StagingPool pool(allocator, 2);
  absl::StatusOr<StagingBuffer> a = pool.Acquire(1);
  EXPECT_EQ(a.status(), absl::ResourceExhaustedError("no memory for the test"));
  EXPECT_EQ(pool.buffers(), 0);
  EXPECT_EQ(pool.reserved_bytes(), 0u);
}

TEST(StagingTest, LeaseOutlivesItsPoolAndEverythingIsFreed) {
  auto allocator = std::make_shared<CountingAllocator>();
  StagingBuffer kept;
  {
    StagingPool pool(allocator, 2);
    EXPECT_TRUE(pool.pinned());
    absl::StatusOr<StagingBuffer> a = pool.Acquire(1);
    ASSERT_TRUE(pool.Acquire(1).ok());
    kept = *std::move(a);
  }
  EXPECT_EQ(allocator->freed, 0);  // the lease keeps the pool's state
  kept.data()[0] = 1;
  kept = StagingBuffer();
  EXPECT_EQ(allocator->allocated, 2);
  EXPECT_EQ(allocator->freed, 2);
}

// ----------------------------------------------------------------------------
// Specs the GPU path serves

absl::StatusOr<GpuOutput> Resolve(std::string_view spec, ImageDecodeOptions image = {},
                                  GpuDecodeOptions gpu = {}) {
  return ResolveGpuOutput(spec, image, gpu);
}

TEST(GpuOutputTest, ServesTheThreeChannelSpecsInBothLayouts) {
  ImageDecodeOptions image;
  image.resize = {ResizeMode::kCenterCrop, 224, 160};
  absl::StatusOr<GpuOutput> u8 = Resolve("rgb8", image);
  ASSERT_TRUE(u8.ok()) << u8.status();
  EXPECT_EQ(u8->dtype, DType::kUInt8);
  EXPECT_FALSE(u8->channels_first);
  EXPECT_EQ(u8->width, 224);
  EXPECT_EQ(u8->height, 160);
  EXPECT_TRUE(Resolve("torchrgb8")->channels_first);
  EXPECT_EQ(Resolve("torch")->dtype, DType::kFloat32);
  EXPECT_TRUE(Resolve("torchrgb")->channels_first);
  EXPECT_FALSE(Resolve("rgb")->channels_first);
  EXPECT_EQ(Resolve("rgb")->width, 0);  // kNone: each image's own size
}

TEST(GpuOutputTest, Float16AndNormalizeApplyToFloatSpecs) {
  GpuDecodeOptions gpu;
  gpu.float16 = true;
  gpu.normalize = Normalize{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
  absl::StatusOr<GpuOutput> out = Resolve("torch", {}, gpu);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype, DType::kFloat16);
  EXPECT_EQ(out->normalize.std[2], 0.225f);
}

TEST(GpuOutputTest, GraySpecIsRefusedNamingIt) {
  EXPECT_EQ(Resolve("l8").status(),
            absl::InvalidArgumentError("decode on cuda: image spec \"l8\" has 1 channel; the GPU "
                                       "path makes 3-channel outputs (rgb8, rgb, torchrgb8, "
                                       "torchrgb, torch)"));
  EXPECT_THAT(std::string(Resolve("torchl").status().message()),
              HasSubstr("image spec \"torchl\" has 1 channel"));
}

TEST(GpuOutputTest, RgbaSpecIsRefusedNamingIt) {
  EXPECT_EQ(Resolve("rgba8").status().message(),
            "decode on cuda: image spec \"rgba8\" has 4 channels; the GPU path makes 3-channel "
            "outputs (rgb8, rgb, torchrgb8, torchrgb, torch)");
}

TEST(GpuOutputTest, UnknownAndPilSpecsAreRefusedAsByTheCpuPath) {
  EXPECT_EQ(Resolve("RGB8").status().message(),
            "decode on cuda: " + std::string(ParseImageSpec("RGB8").status().message()));
  EXPECT_EQ(Resolve("pil").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(Resolve("pil").status().message()),
              HasSubstr("decode on cuda: image spec \"pil\" makes PIL images"));
}

TEST(GpuOutputTest, InvalidImageOptionsAreRefused) {
  ImageDecodeOptions image;
  image.hflip = 2;
  const absl::Status cpu = ValidateImageDecodeOptions(image);
  EXPECT_THAT(std::string(cpu.message()), HasSubstr("hflip probability 2"));
  EXPECT_EQ(Resolve("rgb8", image).status(),
            absl::InvalidArgumentError("decode on cuda: " + std::string(cpu.message())));
}

TEST(GpuOutputTest, Float16WithAUint8SpecIsRefused) {
  GpuDecodeOptions gpu;
  gpu.float16 = true;
  EXPECT_EQ(Resolve("torchrgb8", {}, gpu).status(),
            absl::InvalidArgumentError("decode on cuda: float16 output needs a float spec (rgb, "
                                       "torchrgb, torch), not \"torchrgb8\""));
}

TEST(GpuOutputTest, NormalizeWithAUint8SpecIsRefused) {
  GpuDecodeOptions gpu;
  gpu.normalize = Normalize{};
  EXPECT_EQ(Resolve("rgb8", {}, gpu).status(),
            absl::InvalidArgumentError("decode on cuda: normalize needs a float spec (rgb, "
                                       "torchrgb, torch), not \"rgb8\""));
}

TEST(GpuOutputTest, NormalizeWithZeroStdOrNanMeanIsRefused) {
  GpuDecodeOptions gpu;
  gpu.normalize = Normalize{{0, 0, 0}, {1, 0, 1}};
  EXPECT_EQ(Resolve("rgb", {}, gpu).status(),
            absl::InvalidArgumentError("decode on cuda: normalize channel 1 has mean 0 and std 0; "
                                       "both must be finite and std > 0"));
  gpu.normalize = Normalize{{0, 0, std::nanf("")}, {1, 1, 1}};
  EXPECT_EQ(Resolve("rgb", {}, gpu).status().message(),
            "decode on cuda: normalize channel 2 has mean nan and std 1; both must be finite and "
            "std > 0");
}

// ----------------------------------------------------------------------------
// The CPU reference of the resize kernel

struct Image {
  int width;
  int height;
  std::vector<uint8_t> pixels;  // RGB
};

Image Picture(int width, int height) { return {width, height, Pattern(width, height, 3)}; }

ResizeSource Source(const Image& image, ImageRect crop, bool flip = false) {
  image_internal::DecodePlan plan;
  plan.width = image.width;
  plan.height = image.height;
  plan.crop = crop;
  plan.flip = flip;
  return MakeResizeSource(plan, image.pixels.data(), int64_t{image.width} * 3);
}

GpuOutput Output(int width, int height, DType dtype = DType::kUInt8, bool channels_first = false) {
  GpuOutput out;
  out.width = width;
  out.height = height;
  out.dtype = dtype;
  out.channels_first = channels_first;
  return out;
}

template <typename T>
std::vector<T> RunReference(const ResizeSource& source, const GpuOutput& output) {
  std::vector<T> out(static_cast<size_t>(output.width) * output.height * 3);
  ResizeBatchOnHost(&source, 1, MakeResizeTarget(output, out.data()));
  return out;
}

TEST(ResizeReferenceTest, SourceTakesThePlansCropAndFlip) {
  const Image image = Picture(40, 30);
  const ResizeSource s = Source(image, {3, 4, 20, 10}, true);
  EXPECT_EQ(s.pitch, 120);
  EXPECT_EQ(s.width, 40);
  EXPECT_EQ(s.height, 30);
  EXPECT_EQ(s.x, 3);
  EXPECT_EQ(s.y, 4);
  EXPECT_EQ(s.region_width, 20);
  EXPECT_EQ(s.region_height, 10);
  EXPECT_EQ(s.flip, 1);
}

TEST(ResizeReferenceTest, WholeImageAtItsSizeIsACopy) {
  const Image image = Picture(23, 17);
  EXPECT_EQ(RunReference<uint8_t>(Source(image, {0, 0, 23, 17}), Output(23, 17)), image.pixels);
}

TEST(ResizeReferenceTest, EqualsTheCpuResamplerBytes) {
  const Image image = Picture(97, 61);
  const ImageRect crops[] = {{0, 0, 97, 61}, {10, 5, 60, 40}, {50, 20, 7, 9}};
  const std::pair<int, int> sizes[] = {{32, 24}, {13, 29}, {150, 90}, {7, 7}};
  for (const ImageRect& crop : crops) {
    for (auto [w, h] : sizes) {
      const Array cpu =
          image_internal::ResampleImage(image.pixels.data(), image.width, image.height, 3,
                                        image_internal::WholePixels(crop), w, h);
      const std::vector<uint8_t> expected(cpu.data_as<uint8_t>(),
                                          cpu.data_as<uint8_t>() + w * h * 3);
      EXPECT_EQ(RunReference<uint8_t>(Source(image, crop), Output(w, h)), expected)
          << crop.x << "," << crop.y << " " << crop.width << "x" << crop.height << " -> " << w
          << "x" << h;
    }
  }
}

// ResizeBatchOnHost runs the CPU path's resampler; the kernel computes each
// output pixel on its own (MakeAxisTap, ResampledPixel, then the store). Both
// must give the same bytes: fractional regions, flips, every dtype and layout.
TEST(ResizeReferenceTest, EqualsTheKernelsPerPixelArithmetic) {
  const Image image = Picture(61, 47);
  struct Region {
    double x, y, width, height;
  };
  const Region regions[] = {{0, 0, 61, 47}, {3.25, 1.5, 40.5, 30.75}, {20, 10, 5.5, 3}};
  const std::pair<int, int> sizes[] = {{61, 47}, {17, 11}, {90, 70}, {1, 1}};
  const Normalize normalize{{0.5f, 0.25f, 0.125f}, {0.5f, 2, 0.25f}};
  for (const Region& r : regions) {
    for (auto [w, h] : sizes) {
      for (int variant = 0; variant < 8; ++variant) {
        const bool flip = variant & 1;
        const bool channels_first = variant & 2;
        const DType dtype = variant & 4 ? DType::kFloat32 : DType::kUInt8;
        ResizeSource s = Source(image, {0, 0, 61, 47}, flip);
        s.x = r.x, s.y = r.y, s.region_width = r.width, s.region_height = r.height;
        GpuOutput output = Output(w, h, dtype, channels_first);
        output.normalize = normalize;
        std::vector<float> want(static_cast<size_t>(w) * h * 3);
        for (int y = 0; y < h; ++y) {
          const AxisTap ty = MakeAxisTap(s.y, s.region_height, h, y);
          for (int x = 0; x < w; ++x) {
            const AxisTap tx = MakeAxisTap(s.x, s.region_width, w, flip ? w - 1 - x : x);
            float sums[3];
            ResampledPixel(s.pixels, s.pitch, tx, ty, sums);
            for (int c = 0; c < 3; ++c) {
              const uint8_t v = RoundToByte(sums[c]);
              const size_t at = channels_first ? (static_cast<size_t>(c) * h + y) * w + x
                                               : (static_cast<size_t>(y) * w + x) * 3 + c;
              want[at] = dtype == DType::kUInt8
                             ? v
                             : NormalizedSample(v, normalize.mean[c], normalize.std[c]);
            }
          }
        }
        const std::string what = Cat(r.x, ",", r.y, " ", r.width, "x", r.height, " -> ", w, "x",
                                     h, " variant ", variant);
        if (dtype == DType::kUInt8) {
          const std::vector<uint8_t> got = RunReference<uint8_t>(s, output);
          ASSERT_EQ(std::vector<float>(got.begin(), got.end()), want) << what;
        } else {
          ASSERT_EQ(RunReference<float>(s, output), want) << what;
        }
      }
    }
  }
}

TEST(ResizeReferenceTest, FlipMirrorsEachRow) {
  const Image image = Picture(50, 40);
  const std::vector<uint8_t> plain =
      RunReference<uint8_t>(Source(image, {5, 5, 30, 30}), Output(9, 8));
  const std::vector<uint8_t> flipped =
      RunReference<uint8_t>(Source(image, {5, 5, 30, 30}, true), Output(9, 8));
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 9; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(flipped[(y * 9 + x) * 3 + c], plain[(y * 9 + 8 - x) * 3 + c]);
      }
    }
  }
}

TEST(ResizeReferenceTest, ChannelsFirstIsTheTransposeOfChannelsLast) {
  const Image image = Picture(50, 40);
  const ResizeSource s = Source(image, {0, 0, 50, 40});
  const std::vector<uint8_t> hwc = RunReference<uint8_t>(s, Output(11, 7));
  const std::vector<uint8_t> chw = RunReference<uint8_t>(s, Output(11, 7, DType::kUInt8, true));
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 77; ++i) ASSERT_EQ(chw[c * 77 + i], hwc[i * 3 + c]);
  }
}

TEST(ResizeReferenceTest, Float32IsTheCpuPathsSampleOver255) {
  const Image image = Picture(30, 20);
  const ResizeSource s = Source(image, {0, 0, 30, 20});
  const std::vector<uint8_t> bytes = RunReference<uint8_t>(s, Output(12, 9));
  const std::vector<float> floats = RunReference<float>(s, Output(12, 9, DType::kFloat32));
  for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(floats[i], bytes[i] / 255.0f);
}

TEST(ResizeReferenceTest, NormalizeSubtractsMeanAndDividesByStdPerChannel) {
  const Image image = Picture(30, 20);
  const ResizeSource s = Source(image, {0, 0, 30, 20});
  GpuOutput out = Output(12, 9, DType::kFloat32);
  out.normalize = Normalize{{0.5f, 0.25f, 0}, {0.5f, 2, 0.25f}};
  const std::vector<uint8_t> bytes = RunReference<uint8_t>(s, Output(12, 9));
  const std::vector<float> floats = RunReference<float>(s, out);
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int c = static_cast<int>(i % 3);
    ASSERT_EQ(floats[i], (bytes[i] / 255.0f - out.normalize.mean[c]) / out.normalize.std[c]);
  }
}

TEST(ResizeReferenceTest, Float16IsTheFloatRoundedToNearestEven) {
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalfBits(1.0f / 3), 0x3555);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);  // halfway to 65536: rounds up to infinity
  EXPECT_EQ(FloatToHalfBits(0x1.0p-24f), 0x0001);
  EXPECT_EQ(FloatToHalfBits(0x1.0p-25f), 0x0000);  // halfway to the smallest: to even, zero
  EXPECT_EQ(FloatToHalfBits(0x1.8p-25f), 0x0001);
  EXPECT_EQ(FloatToHalfBits(1.0f + 0x1.0p-11f), 0x3c00);  // halfway: to even
  EXPECT_EQ(FloatToHalfBits(1.0f + 0x1.8p-11f), 0x3c01);
  const Image image = Picture(30, 20);
  const ResizeSource s = Source(image, {0, 0, 30, 20});
  const std::vector<float> floats = RunReference<float>(s, Output(12, 9, DType::kFloat32));
  const std::vector<uint16_t> halves = RunReference<uint16_t>(s, Output(12, 9, DType::kFloat16));
  for (size_t i = 0; i < floats.size(); ++i) ASSERT_EQ(halves[i], FloatToHalfBits(floats[i]));
}

TEST(ResizeReferenceTest, BatchImagesGoToTheirOwnSlots) {
  const Image a = Picture(30, 20);
  const Image b = Picture(40, 40);
  const ResizeSource sources[] = {Source(a, {0, 0, 30, 20}), Source(b, {4, 4, 30, 30}, true)};
  std::vector<uint8_t> batch(2 * 6 * 5 * 3);
  ResizeBatchOnHost(sources, 2, MakeResizeTarget(Output(6, 5), batch.data()));
  const std::vector<uint8_t> first(batch.begin(), batch.begin() + 90);
  const std::vector<uint8_t> second(batch.begin() + 90, batch.end());
  EXPECT_EQ(first, RunReference<uint8_t>(sources[0], Output(6, 5)));
  EXPECT_EQ(second, RunReference<uint8_t>(sources[1], Output(6, 5)));
}

}  // namespace
}  // namespace wds::gpu
