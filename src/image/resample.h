// Turning a decoded window into the output: colour conversion, then a copy or
// a resampling of the plan's region.
#pragma once

#include <cstddef>
#include <cstdint>

#include "image/decode_plan.h"
#include "image/output_writer.h"
#include "image/pixels.h"
#include "image/scratch.h"
#include "wds/base/array.h"

namespace wds::image_internal {

// WindowRegion is the plan's crop in the coordinates of the window a codec
// decodes (pixel (0, 0) is the window's top-left; fractional after DCT
// scaling).
struct WindowRegion {
  double x = 0;
  double y = 0;
  double width = 0;
  double height = 0;
};

// WholePixels is `rect` as a window region.
inline WindowRegion WholePixels(const ImageRect& rect) {
  return {static_cast<double>(rect.x), static_cast<double>(rect.y), static_cast<double>(rect.width),
          static_cast<double>(rect.height)};
}

// WindowPixels are decoded rows in memory: `height` rows of `width` pixels in
// `layout`, `stride` samples apart.
template <typename T>
struct WindowPixels {
  const T* data = nullptr;
  size_t stride = 0;
  int width = 0;
  int height = 0;
  PixelLayout layout = PixelLayout::kRgb;
};

// SimdLevel is an instruction set the resampler can run on; both give the
// same bytes.
enum class SimdLevel { kBaseline, kAvx2 };

// BestSimdLevel is the best level this build and CPU support (checked once).
SimdLevel BestSimdLevel();

// WriteOutput turns `region` of a decoded window into the plan's output:
// colour conversion to the spec's channels, then a plain copy when the region
// maps 1:1 onto the output, else resampling of the region (area averaging per
// axis when shrinking, bilinear when enlarging; vertical pass first, one
// output row at a time). REQUIRES: the region lies inside the window.
template <typename T>
void WriteOutput(const WindowPixels<T>& window, const WindowRegion& region, const DecodePlan& plan,
                 OutputWriter& writer, ScratchScope& scratch, SimdLevel level = BestSimdLevel());

// ResampleImage resamples `region` of a uint8 HWC image (channels 1, 3 or 4)
// to out_width x out_height with the decoders' resampler. For tests and tools.
Array ResampleImage(const uint8_t* pixels, int width, int height, int channels,
                    const WindowRegion& region, int out_width, int out_height,
                    SimdLevel level = BestSimdLevel());

}  // namespace wds::image_internal
