// Tests of the GPU decode path on a device: the fused resize kernel against
// its CPU reference (ResizeBatchOnHost, itself checked against the CPU
// resampler in gpu_decode_test), and, where nvJPEG was found, that its
// hardware backend initialises. Built where nvcc is; every case that needs a
// device skips without one (scripts/gpu_check.sh counts skips as failures).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu/output_spec.h"
#include "gpu/resize_kernel.h"
#include "gpu/resize_math.h"
#include "gtest/gtest.h"
#include "image/decode_plan.h"

#if WDS_WITH_NVJPEG
#include <nvjpeg.h>
#endif

namespace wds::gpu {
namespace {

bool HaveDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define SKIP_WITHOUT_DEVICE()                            \
  do {                                                   \
    if (!HaveDevice()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

struct HostImage {
  int width;
  int height;
  std::vector<uint8_t> pixels;  // RGB
};

HostImage Picture(int width, int height, int salt) {
  HostImage image{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  for (size_t i = 0; i < image.pixels.size(); ++i) {
    image.pixels[i] = static_cast<uint8_t>((i * 2654435761u + salt * 97) >> 13);
  }
  return image;
}

struct Case {
  DType dtype;
  bool channels_first;
  bool normalize;
};

size_t SampleSize(DType dtype) {
  return dtype == DType::kUInt8 ? 1 : dtype == DType::kFloat16 ? 2 : 4;
}

// RunBoth resizes `images` with `plans` on the device and on the host into
// width x height outputs; returns {device bytes, host bytes}.
void RunBoth(const std::vector<HostImage>& images,
             const std::vector<image_internal::DecodePlan>& plans, const GpuOutput& output,
             std::vector<uint8_t>& device_out, std::vector<uint8_t>& host_out) {
  const int n = static_cast<int>(images.size());
  std::vector<ResizeSource> host_sources;
  std::vector<ResizeSource> device_sources;
  std::vector<void*> allocations;
  for (int i = 0; i < n; ++i) {
    host_sources.push_back(
        MakeResizeSource(plans[i], images[i].pixels.data(), int64_t{images[i].width} * 3));
    void* pixels = nullptr;
    ASSERT_CUDA(cudaMalloc(&pixels, images[i].pixels.size()));
    allocations.push_back(pixels);
    ASSERT_CUDA(cudaMemcpy(pixels, images[i].pixels.data(), images[i].pixels.size(),
                           cudaMemcpyHostToDevice));
    device_sources.push_back(host_sources.back());
    device_sources.back().pixels = static_cast<const uint8_t*>(pixels);
  }
  const size_t bytes =
      static_cast<size_t>(n) * output.width * output.height * 3 * SampleSize(output.dtype);
  host_out.assign(bytes, 0);
  device_out.assign(bytes, 0xab);
  ResizeBatchOnHost(host_sources.data(), n, MakeResizeTarget(output, host_out.data()));
  void* sources = nullptr;
  void* target = nullptr;
  ASSERT_CUDA(cudaMalloc(&sources, sizeof(ResizeSource) * n));
  ASSERT_CUDA(cudaMalloc(&target, bytes));
  ASSERT_CUDA(
      cudaMemcpy(sources, device_sources.data(), sizeof(ResizeSource) * n, cudaMemcpyHostToDevice));
  ASSERT_EQ(LaunchResizeBatch(static_cast<const ResizeSource*>(sources), n,
                              MakeResizeTarget(output, target), nullptr),
            0);
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_CUDA(cudaMemcpy(device_out.data(), target, bytes, cudaMemcpyDeviceToHost));
  for (void* p : allocations) cudaFree(p);
  cudaFree(sources);
  cudaFree(target);
}

image_internal::DecodePlan Plan(const HostImage& image, ImageRect crop, bool flip) {
  image_internal::DecodePlan plan;
  plan.width = image.width;
  plan.height = image.height;
  plan.crop = crop;
  plan.flip = flip;
  return plan;
}

TEST(ResizeKernelTest, ZeroImagesLaunchNothing) {
  // No device needed: nothing is enqueued.
  EXPECT_EQ(LaunchResizeBatch(nullptr, 0, ResizeTarget{}, nullptr), 0);
}

// The kernel is compiled without FMA contraction (--fmad=false), so it runs
// the reference's float operations: the same bytes are expected.
TEST(ResizeKernelTest, EqualsTheHostReferenceForEveryLayoutAndDtype) {
  SKIP_WITHOUT_DEVICE();
  const std::vector<HostImage> images = {Picture(500, 375, 1), Picture(97, 61, 2),
                                         Picture(640, 480, 3)};
  const std::vector<image_internal::DecodePlan> plans = {Plan(images[0], {62, 0, 375, 375}, false),
                                                         Plan(images[1], {10, 5, 60, 40}, true),
                                                         Plan(images[2], {0, 0, 640, 480}, false)};
  const Case cases[] = {{DType::kUInt8, false, false},  {DType::kUInt8, true, false},
                        {DType::kFloat32, true, false}, {DType::kFloat32, false, true},
                        {DType::kFloat16, true, true},  {DType::kFloat16, false, false}};
  for (auto [w, h] : {std::pair{224, 224}, std::pair{150, 90}, std::pair{700, 500}}) {
    for (const Case& c : cases) {
      GpuOutput output;
      output.width = w;
      output.height = h;
      output.dtype = c.dtype;
      output.channels_first = c.channels_first;
      if (c.normalize)
        output.normalize = Normalize{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
      std::vector<uint8_t> device;
      std::vector<uint8_t> host;
      RunBoth(images, plans, output, device, host);
      if (HasFatalFailure()) return;
      size_t differing = 0;
      for (size_t i = 0; i < host.size(); ++i) differing += device[i] != host[i];
      EXPECT_EQ(differing, 0u) << w << "x" << h << " dtype " << static_cast<int>(c.dtype)
                               << (c.channels_first ? " NCHW" : " NHWC")
                               << (c.normalize ? " normalized" : "") << ": " << differing << " of "
                               << host.size() << " bytes differ";
    }
  }
}

TEST(ResizeKernelTest, LargeBatchOfSmallImagesFillsEverySlot) {
  SKIP_WITHOUT_DEVICE();
  std::vector<HostImage> images;
  std::vector<image_internal::DecodePlan> plans;
  for (int i = 0; i < 256; ++i) {
    images.push_back(Picture(40 + i % 7, 30 + i % 5, i));
    plans.push_back(Plan(images.back(), {i % 3, i % 2, 35, 25}, i % 2 == 1));
  }
  GpuOutput output;
  output.width = 32;
  output.height = 32;
  std::vector<uint8_t> device;
  std::vector<uint8_t> host;
  RunBoth(images, plans, output, device, host);
  EXPECT_EQ(device, host);
}

#if WDS_WITH_NVJPEG
// The GPU machines (A100, H100, H200) have JPEG engines, which only
// nvJPEG's hardware backend reaches.
TEST(NvjpegTest, HardwareBackendInitialises) {
  SKIP_WITHOUT_DEVICE();
  nvjpegHandle_t handle = nullptr;
  const nvjpegStatus_t status =
      nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, 0, &handle);
  EXPECT_EQ(status, NVJPEG_STATUS_SUCCESS)
      << "NVJPEG_STATUS_ARCH_MISMATCH is -7 or 7: " << static_cast<int>(status);
  if (status == NVJPEG_STATUS_SUCCESS) EXPECT_EQ(nvjpegDestroy(handle), NVJPEG_STATUS_SUCCESS);
}

TEST(NvjpegTest, GpuHybridBackendInitialises) {
  SKIP_WITHOUT_DEVICE();
  nvjpegHandle_t handle = nullptr;
  ASSERT_EQ(nvjpegCreateEx(NVJPEG_BACKEND_GPU_HYBRID, nullptr, nullptr, 0, &handle),
            NVJPEG_STATUS_SUCCESS);
  EXPECT_EQ(nvjpegDestroy(handle), NVJPEG_STATUS_SUCCESS);
}
#endif

}  // namespace
}  // namespace wds::gpu
