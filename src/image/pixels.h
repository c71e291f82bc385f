// Pixel layouts and colour conversion (the rules are in image.h).
#pragma once

#include <cstdint>
#include <limits>

namespace wds::image_internal {

// kMaxSample is the largest sample value of T.
template <typename T>
constexpr uint32_t kMaxSample = std::numeric_limits<T>::max();

// PixelLayout is the sample order of rows a codec produces.
enum class PixelLayout { kGray, kGrayAlpha, kRgb, kRgba, kCmyk, kAdobeCmyk };

// LayoutChannels is the number of samples per pixel of `layout`.
int LayoutChannels(PixelLayout layout);

// ConvertRow converts `width` pixels of `in` (in `layout`) to `channels` (1, 3
// or 4) samples per pixel in `out` (see image.h for the rules). CMYK layouts
// are 8-bit only. `in` and `out` must not overlap.
template <typename T>
void ConvertRow(PixelLayout layout, const T* in, int width, int channels, T* out);

}  // namespace wds::image_internal
