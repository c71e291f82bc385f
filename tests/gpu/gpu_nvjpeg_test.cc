// Tests of NvjpegBatchDecoder on a GPU machine: nvJPEG's pixels against the
// CPU decoder's, within ±2 per channel (nvJPEG's IDCT and upsampling differ
// from libjpeg-turbo's), for the JPEG variants RouteImage sends to the GPU.
// Built only with WDS_WITH_NVJPEG; every case skips without a device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "gpu/image_route.h"
#include "gpu/nvjpeg_decoder.h"
#include "gpu/staging.h"
#include "gtest/gtest.h"
#include "jpeg_variants.h"
#include "wds/base/buffer_pool.h"
#include "wds/base/random.h"
#include "wds/image/image.h"

namespace wds::gpu {
namespace {

using gpu_testing::EncodeJpeg;
using gpu_testing::JpegRecipe;

bool HaveDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

struct Variant {
  std::string name;
  JpegRecipe recipe;
};

std::vector<Variant> Variants() {
  std::vector<Variant> v;
  auto add = [&](std::string name, auto change) {
    JpegRecipe r;
    r.width = 203;  // not a multiple of any MCU size
    r.height = 117;
    change(r);
    v.push_back({std::move(name), r});
  };
  add("4:4:4", [](JpegRecipe& r) { r.luma_h = r.luma_v = 1; });
  add("4:2:2", [](JpegRecipe& r) { r.luma_h = 2, r.luma_v = 1; });
  add("4:2:0", [](JpegRecipe&) {});
  add("gray", [](JpegRecipe& r) { r.components = 1; });
  add("restart markers", [](JpegRecipe& r) { r.restart_rows = 1; });
  add("progressive", [](JpegRecipe& r) { r.progressive = true; });
  add("4:1:1", [](JpegRecipe& r) { r.luma_h = 4, r.luma_v = 1; });
  add("a scan per component", [](JpegRecipe& r) { r.scan_per_component = true; });
  return v;
}

TEST(NvjpegBatchDecoderTest, PixelsAreTheCpuDecodersWithinTwo) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<NvjpegBatchDecoder>> decoder = NvjpegBatchDecoder::Create(4);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  std::cout << "hardware backend: " << ((*decoder)->hardware() ? "yes" : "no") << "\n";
  const std::vector<Variant> variants = Variants();
  std::vector<std::string> jpegs;
  std::vector<std::string_view> views;
  for (const Variant& v : variants) jpegs.push_back(EncodeJpeg(v.recipe));
  for (const std::string& j : jpegs) views.push_back(j);
  StagingPool pool(AlignedHostAllocator(), 1);
  absl::StatusOr<GatheredBatch> batch = GatherEncoded(pool, views);
  ASSERT_TRUE(batch.ok()) << batch.status();
  std::vector<NvjpegInput> inputs;
  std::vector<RouteDecision> decisions;
  std::vector<NvjpegOutput> outputs;
  std::vector<void*> device;
  for (size_t i = 0; i < jpegs.size(); ++i) {
    const RouteDecision d = RouteImage(jpegs[i]);
    ASSERT_EQ(d.route, ImageRoute::kGpu) << variants[i].name << ": " << d.reason;
    inputs.push_back({batch->buffer.data() + batch->offsets[i], batch->lengths[i],
                      d.hardware});
    decisions.push_back(d);
    const size_t pitch = static_cast<size_t>(d.header.width) * 3;
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, pitch * d.header.height), cudaSuccess);
    device.push_back(p);
    outputs.push_back({static_cast<uint8_t*>(p), pitch});
  }
  const std::vector<bool> decoded = (*decoder)->Decode(inputs, outputs, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (size_t i = 0; i < jpegs.size(); ++i) {
    EXPECT_TRUE(decoded[i]) << variants[i].name;
    const int w = decisions[i].header.width;
    const int h = decisions[i].header.height;
    std::vector<uint8_t> gpu(outputs[i].pitch * h);
    ASSERT_EQ(cudaMemcpy(gpu.data(), device[i], gpu.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    Rng rng(1);
    absl::StatusOr<Array> cpu = DecodeImage(jpegs[i], *ParseImageSpec("rgb8"), {}, rng);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    int worst = 0;
    for (size_t k = 0; k < static_cast<size_t>(w) * h * 3; ++k) {
      worst = std::max(worst, std::abs(int{gpu[k]} - int{cpu->data_as<uint8_t>()[k]}));
    }
    EXPECT_LE(worst, 2) << variants[i].name << ": largest difference " << worst;
    cudaFree(device[i]);
  }
}

}  // namespace
}  // namespace wds::gpu
