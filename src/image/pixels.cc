// Colour conversion between pixel layouts.
#include "image/pixels.h"

#include <cassert>
#include <cstdint>

namespace wds::image_internal {
namespace {

// Luma is ITU-R 601 in 16-bit fixed point (PIL's "L"); the weights sum to
// 65536, so gray stays gray exactly. Fits 32 bits for 16-bit samples.
inline uint32_t Luma(uint32_t r, uint32_t g, uint32_t b) {
  return (r * 19595 + g * 38470 + b * 7471 + 32768) >> 16;
}

struct Pixel {
  uint32_t r, g, b, a;
};

template <typename T, PixelLayout L>
inline Pixel Load(const T* p) {
  constexpr uint32_t kMax = kMaxSample<T>;
  if constexpr (L == PixelLayout::kGray) {
    return {p[0], p[0], p[0], kMax};
  } else if constexpr (L == PixelLayout::kGrayAlpha) {
    return {p[0], p[0], p[0], p[1]};
  } else if constexpr (L == PixelLayout::kRgb) {
    return {p[0], p[1], p[2], kMax};
  } else if constexpr (L == PixelLayout::kRgba) {
    return {p[0], p[1], p[2], p[3]};
  } else {
    // Adobe writes CMYK inverted (0 = full ink); djpeg's conversion assumes it.
    constexpr bool kInverted = L == PixelLayout::kAdobeCmyk;
    const uint64_t k = kInverted ? p[3] : kMax - p[3];
    auto channel = [&](uint32_t ink) {
      const uint64_t c = kInverted ? ink : kMax - ink;
      return static_cast<uint32_t>((c * k + kMax / 2) / kMax);
    };
    return {channel(p[0]), channel(p[1]), channel(p[2]), kMax};
  }
}

template <typename T, PixelLayout L, int C>
void ConvertPixels(const T* in, int width, T* out) {
  constexpr int kIn = L == PixelLayout::kGray        ? 1
                      : L == PixelLayout::kGrayAlpha ? 2
                      : L == PixelLayout::kRgb       ? 3
                                                     : 4;
  constexpr bool kGraySource = L == PixelLayout::kGray || L == PixelLayout::kGrayAlpha;
  for (int i = 0; i < width; ++i) {
    const Pixel px = Load<T, L>(in + i * kIn);
    T* q = out + i * C;
    if constexpr (C == 1) {
      q[0] = static_cast<T>(kGraySource ? px.r : Luma(px.r, px.g, px.b));
    } else {
      q[0] = static_cast<T>(px.r);
      q[1] = static_cast<T>(px.g);
      q[2] = static_cast<T>(px.b);
      if constexpr (C == 4) q[3] = static_cast<T>(px.a);
    }
  }
}

template <typename T, PixelLayout L>
void ConvertTo(const T* in, int width, int channels, T* out) {
  switch (channels) {
    case 1:
      return ConvertPixels<T, L, 1>(in, width, out);
    case 3:
      return ConvertPixels<T, L, 3>(in, width, out);
    default:
      assert(channels == 4);
      return ConvertPixels<T, L, 4>(in, width, out);
  }
}

}  // namespace

int LayoutChannels(PixelLayout layout) {
  switch (layout) {
    case PixelLayout::kGray:
      return 1;
    case PixelLayout::kGrayAlpha:
      return 2;
    case PixelLayout::kRgb:
      return 3;
    default:
      return 4;
  }
}

template <typename T>
void ConvertRow(PixelLayout layout, const T* in, int width, int channels, T* out) {
  switch (layout) {
    case PixelLayout::kGray:
      return ConvertTo<T, PixelLayout::kGray>(in, width, channels, out);
    case PixelLayout::kGrayAlpha:
      return ConvertTo<T, PixelLayout::kGrayAlpha>(in, width, channels, out);
    case PixelLayout::kRgb:
      return ConvertTo<T, PixelLayout::kRgb>(in, width, channels, out);
    case PixelLayout::kRgba:
      return ConvertTo<T, PixelLayout::kRgba>(in, width, channels, out);
    case PixelLayout::kCmyk:
      return ConvertTo<T, PixelLayout::kCmyk>(in, width, channels, out);
    case PixelLayout::kAdobeCmyk:
      return ConvertTo<T, PixelLayout::kAdobeCmyk>(in, width, channels, out);
  }
}

template void ConvertRow<uint8_t>(PixelLayout, const uint8_t*, int, int, uint8_t*);
template void ConvertRow<uint16_t>(PixelLayout, const uint16_t*, int, int, uint16_t*);

}  // namespace wds::image_internal
