// The fused resize/crop/flip/normalize kernel: one thread per output pixel
// of one image (grid z = image), all three channels, written straight into
// the batch tensor. Arithmetic: resize_math.h, shared with the CPU reference.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "gpu/resize_kernel.h"
#include "gpu/resize_math.h"

namespace wds::gpu {
namespace {

constexpr int kBlock = 16;

__device__ void StoreSample(const ResizeTarget& t, int64_t index, int c, uint8_t v) {
  if (t.dtype == kResizeUInt8) {
    static_cast<uint8_t*>(t.data)[index] = v;
  } else if (t.dtype == kResizeFloat32) {
    static_cast<float*>(t.data)[index] = NormalizedSample(v, t.mean[c], t.std[c]);
  } else {
    static_cast<__half*>(t.data)[index] = __float2half_rn(NormalizedSample(v, t.mean[c], t.std[c]));
  }
}

__global__ void ResizeBatchKernel(const ResizeSource* sources, ResizeTarget target) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int n = blockIdx.z;
  if (x >= target.width || y >= target.height) return;
  const ResizeSource s = sources[n];
  const int from = s.flip ? target.width - 1 - x : x;
  const AxisTap tx = MakeAxisTap(s.x, s.region_width, target.width, from);
  const AxisTap ty = MakeAxisTap(s.y, s.region_height, target.height, y);
  float sums[3];
  ResampledPixel(s.pixels, s.pitch, tx, ty, sums);
  const int64_t plane = int64_t{target.width} * target.height;
  for (int c = 0; c < 3; ++c) {
    const int64_t index = target.channels_first
                              ? (int64_t{n} * 3 + c) * plane + int64_t{y} * target.width + x
                              : ((int64_t{n} * target.height + y) * target.width + x) * 3 + c;
    StoreSample(target, index, c, RoundToByte(sums[c]));
  }
}

}  // namespace

int LaunchResizeBatch(const ResizeSource* sources, int count, const ResizeTarget& target,
                      void* stream) {
  if (count <= 0 || target.width <= 0 || target.height <= 0) return 0;
  const dim3 block(kBlock, kBlock);
  const dim3 grid((target.width + kBlock - 1) / kBlock, (target.height + kBlock - 1) / kBlock,
                  count);
  // An error an earlier call left on this thread (one whose result was
  // ignored, or the caller's) is not this launch's.
  cudaGetLastError();
  ResizeBatchKernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(sources, target);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace wds::gpu
