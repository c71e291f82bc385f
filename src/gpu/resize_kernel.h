// The GPU path's fused resize/crop/flip/normalize step: decoded RGB images
// (nvJPEG's interleaved output, one per batch slot) become the batch tensor in
// one kernel launch, written in place. ResizeBatchOnHost does the same on the
// CPU with the CPU path's resampler, whose float operations the kernel
// repeats (resize_math.h): the same bytes. It is the host decoder's, and the
// reference the device test compares the kernel with.
#pragma once

#include <cstdint>

// Declared, not included: nvcc compiles this header, and Abseil's headers
// are no business of the kernel's.
namespace wds::image_internal {
struct DecodePlan;
}  // namespace wds::image_internal

namespace wds::gpu {

struct GpuOutput;

// ResizeSource is one decoded image and the region of it its output shows.
struct ResizeSource {
  const uint8_t* pixels = nullptr;  // interleaved RGB, `pitch` bytes a row
  int64_t pitch = 0;
  int width = 0;
  int height = 0;
  // The region (the plan's crop, in the source's pixels) and the flip.
  double x = 0, y = 0, region_width = 0, region_height = 0;
  int flip = 0;
};

// ResizeTarget is the batch tensor: `count` images of width x height x 3
// (channels_first: [B, 3, H, W], else [B, H, W, 3]) of dtype kUInt8,
// kFloat32 or kFloat16, contiguous.
struct ResizeTarget {
  void* data = nullptr;
  int width = 0;
  int height = 0;
  int dtype = 0;  // a ResizeDType
  int channels_first = 0;
  // Float outputs are (v / 255 - mean[c]) / std[c] for the rounded sample v
  // (NormalizedSample), which is the CPU path's v / 255 when not normalizing.
  float mean[3] = {0, 0, 0};
  float std[3] = {1, 1, 1};
};

enum ResizeDType : int { kResizeUInt8 = 0, kResizeFloat32 = 1, kResizeFloat16 = 2 };

// MakeResizeTarget fills a target for `output` (whose width and height must
// be set) writing to `data`.
ResizeTarget MakeResizeTarget(const GpuOutput& output, void* data);

// MakeResizeSource is the source showing `crop` of a width x height image at
// `pixels`, mirrored when `flip`.
ResizeSource MakeResizeSource(int width, int height, int crop_x, int crop_y, int crop_width,
                              int crop_height, bool flip, const uint8_t* pixels, int64_t pitch);

// MakeResizeSource is the source for a plan of the full-size decode of
// `pixels` (the GPU decodes at full size: no DCT scaling).
ResizeSource MakeResizeSource(const image_internal::DecodePlan& plan, const uint8_t* pixels,
                              int64_t pitch);

// ResizeBatchOnHost writes `count` images from host `sources` into host
// `target`, the bytes the kernel writes. REQUIRES: no ScratchScope
// (image/scratch.h) is open on the calling thread; it opens its own.
void ResizeBatchOnHost(const ResizeSource* sources, int count, const ResizeTarget& target);

// LaunchResizeBatch enqueues the kernel on `stream` (a cudaStream_t): device
// `sources` (an array of `count`) with device pixels, device target. Returns
// the cudaError_t of the launch as an int (0: success). Defined only where
// the kernels are built (WDS_WITH_CUDA_KERNELS, resize_kernel.cu).
int LaunchResizeBatch(const ResizeSource* sources, int count, const ResizeTarget& target,
                      void* stream);

}  // namespace wds::gpu
