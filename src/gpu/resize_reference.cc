// The fused resize kernel on the host (ResizeBatchOnHost: the CPU path's
// resampler, whose taps and float operations resize_math.h repeats for the
// kernel, so both give the same bytes), and the host-side set-up of the
// kernel's arguments.
#include <vector>

#include "base/output_slots.h"
#include "gpu/output_spec.h"
#include "gpu/resize_kernel.h"
#include "gpu/resize_math.h"
#include "image/decode_plan.h"
#include "image/output_writer.h"
#include "image/resample.h"
#include "image/scratch.h"

namespace wds::gpu {
namespace {

// Resample writes `s`'s region, flipped as it says, as width x height uint8
// samples (channels first or last) into `out`, with the CPU path's resampler.
void Resample(const ResizeSource& s, int width, int height, bool channels_first, void* out,
              image_internal::ScratchScope& scratch) {
  image_internal::DecodePlan plan;
  plan.spec = ImageSpec{3, DType::kUInt8, channels_first};
  plan.width = s.width;
  plan.height = s.height;
  plan.out_width = width;
  plan.out_height = height;
  plan.flip = s.flip != 0;
  MemorySlot slot(out, static_cast<size_t>(width) * height * 3);
  image_internal::OutputWriter writer(plan, &slot);
  image_internal::WindowPixels<uint8_t> window;
  window.data = s.pixels;
  window.stride = static_cast<size_t>(s.pitch);
  window.width = s.width;
  window.height = s.height;
  window.layout = image_internal::PixelLayout::kRgb;
  image_internal::WriteOutput(window, {s.x, s.y, s.region_width, s.region_height}, plan, writer,
                              scratch);
}

// StoreFloats writes image n's rounded samples (`bytes`, channels first or
// last as the target) as the target's floats: NormalizedSample of each, as
// float32 or float16, through a table of the 256 values per channel.
template <typename T>
void StoreFloats(const ResizeTarget& t, int n, const uint8_t* bytes) {
  T table[3][256];
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      const float f = NormalizedSample(static_cast<uint8_t>(v), t.mean[c], t.std[c]);
      if constexpr (sizeof(T) == 2) {
        table[c][v] = FloatToHalfBits(f);
      } else {
        table[c][v] = f;
      }
    }
  }
  const size_t plane = static_cast<size_t>(t.width) * t.height;
  T* out = static_cast<T*>(t.data) + n * plane * 3;
  if (t.channels_first) {
    for (int c = 0; c < 3; ++c) {
      for (size_t i = 0; i < plane; ++i) out[c * plane + i] = table[c][bytes[c * plane + i]];
    }
    return;
  }
  for (size_t i = 0; i < plane * 3; i += 3) {
    for (int c = 0; c < 3; ++c) out[i + c] = table[c][bytes[i + c]];
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
  const size_t samples = static_cast<size_t>(target.width) * target.height * 3;
  const bool channels_first = target.channels_first != 0;
  for (int n = 0; n < count; ++n) {
    image_internal::ScratchScope scratch;  // the thread's arena, reused image after image
    if (target.dtype == kResizeUInt8) {
      Resample(sources[n], target.width, target.height, channels_first,
               static_cast<uint8_t*>(target.data) + n * samples, scratch);
      continue;
    }
    uint8_t* bytes = scratch.Take<uint8_t>(samples);
    Resample(sources[n], target.width, target.height, channels_first, bytes, scratch);
    if (target.dtype == kResizeFloat32) {
      StoreFloats<float>(target, n, bytes);
    } else {
      StoreFloats<uint16_t>(target, n, bytes);
    }
  }
}

}  // namespace wds::gpu
