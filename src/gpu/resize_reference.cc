// The CPU reference of the fused resize kernel, and the host-side set-up of
// its arguments.
#include "gpu/output_spec.h"
#include "gpu/resize_kernel.h"
#include "gpu/resize_math.h"
#include "image/decode_plan.h"

namespace wds::gpu {
namespace {

int64_t OutputIndex(const ResizeTarget& t, int n, int c, int x, int y) {
  const int64_t plane = int64_t{t.width} * t.height;
  if (t.channels_first) return (int64_t{n} * 3 + c) * plane + int64_t{y} * t.width + x;
  return ((int64_t{n} * t.height + y) * t.width + x) * 3 + c;
}

void Store(const ResizeTarget& t, int64_t index, int c, uint8_t v) {
  switch (t.dtype) {
    case kResizeUInt8:
      static_cast<uint8_t*>(t.data)[index] = v;
      return;
    case kResizeFloat32:
      static_cast<float*>(t.data)[index] = NormalizedSample(v, t.mean[c], t.std[c]);
      return;
    default:
      static_cast<uint16_t*>(t.data)[index] =
          FloatToHalfBits(NormalizedSample(v, t.mean[c], t.std[c]));
  }
}

}  // namespace

ResizeTarget MakeResizeTarget(const GpuOutput& output, void* data) {
  ResizeTarget t;
  t.data = data;
  t.width = output.width;
  t.height = output.height;
  t.dtype = output.dtype == DType::kUInt8     ? kResizeUInt8
            : output.dtype == DType::kFloat16 ? kResizeFloat16
                                              : kResizeFloat32;
  t.channels_first = output.channels_first ? 1 : 0;
  for (int c = 0; c < 3; ++c) {
    t.mean[c] = output.normalize.mean[c];
    t.std[c] = output.normalize.std[c];
  }
  return t;
}

ResizeSource MakeResizeSource(int width, int height, int crop_x, int crop_y, int crop_width,
                              int crop_height, bool flip, const uint8_t* pixels, int64_t pitch) {
  ResizeSource s;
  s.pixels = pixels;
  s.pitch = pitch;
  s.width = width;
  s.height = height;
  s.x = crop_x;
  s.y = crop_y;
  s.region_width = crop_width;
  s.region_height = crop_height;
  s.flip = flip ? 1 : 0;
  return s;
}

ResizeSource MakeResizeSource(const image_internal::DecodePlan& plan, const uint8_t* pixels,
                              int64_t pitch) {
  return MakeResizeSource(plan.width, plan.height, plan.crop.x, plan.crop.y, plan.crop.width,
                          plan.crop.height, plan.flip, pixels, pitch);
}

void ResizeBatchOnHost(const ResizeSource* sources, int count, const ResizeTarget& target) {
  for (int n = 0; n < count; ++n) {
    const ResizeSource& s = sources[n];
    for (int y = 0; y < target.height; ++y) {
      const AxisTap ty = MakeAxisTap(s.y, s.region_height, target.height, y);
      for (int x = 0; x < target.width; ++x) {
        const int from = s.flip ? target.width - 1 - x : x;
        const AxisTap tx = MakeAxisTap(s.x, s.region_width, target.width, from);
        float sums[3];
        ResampledPixel(s.pixels, s.pitch, tx, ty, sums);
        for (int c = 0; c < 3; ++c)
          Store(target, OutputIndex(target, n, c, x, y), c, RoundToByte(sums[c]));
      }
    }
  }
}

}  // namespace wds::gpu
