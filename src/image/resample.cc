// Resampling (area averaging when shrinking, bilinear when enlarging) and
// the copy of a decoded window into the output.
#include "image/resample.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define WDS_RESAMPLE_AVX2 1
#else
#define WDS_RESAMPLE_AVX2 0
#endif

namespace wds::image_internal {

SimdLevel BestSimdLevel() {
#if WDS_RESAMPLE_AVX2
  static const SimdLevel level =
      __builtin_cpu_supports("avx2") ? SimdLevel::kAvx2 : SimdLevel::kBaseline;
  return level;
#else
  return SimdLevel::kBaseline;
#endif
}

namespace {

template <typename T>
[[gnu::always_inline]] inline T RoundSample(float v) {
  v = std::min(std::max(v + 0.5f, 0.0f), static_cast<float>(kMaxSample<T>));
  return static_cast<T>(static_cast<int32_t>(v));
}

bool IsWhole(double v) { return v == std::floor(v); }

bool LayoutMatches(PixelLayout layout, int channels) {
  return (layout == PixelLayout::kGray && channels == 1) ||
         (layout == PixelLayout::kRgb && channels == 3) ||
         (layout == PixelLayout::kRgba && channels == 4);
}

// Taps say which source samples, with which weights, make each output sample
// along one axis.
struct Taps {
  int32_t* start = nullptr;  // first source index per output index
  int32_t* count = nullptr;
  float* weights = nullptr;  // `stride` per output index
  int stride = 0;
};

// MakeTaps maps `out` output samples onto [origin, origin + extent) of the
// source axis: a box filter over the covered fraction of each source pixel
// when shrinking, linear interpolation between pixel centres when enlarging
// (clamped to the region's pixels). Positions are computed from the
// fractional part of `origin` only, so that the same region seen from windows
// that differ by whole pixels gets exactly the same weights.
Taps MakeTaps(double origin, double extent, int out, ScratchScope& scratch) {
  const double scale = extent / out;
  const int base = static_cast<int>(std::floor(origin));
  const double frac = origin - base;
  const int last = static_cast<int>(std::ceil(frac + extent)) - 1;  // relative to base
  Taps taps;
  taps.stride = scale > 1 ? static_cast<int>(std::ceil(scale)) + 1 : 2;
  taps.start = scratch.Take<int32_t>(out);
  taps.count = scratch.Take<int32_t>(out);
  taps.weights = scratch.Take<float>(static_cast<size_t>(out) * taps.stride);
  std::fill(taps.weights, taps.weights + static_cast<ptrdiff_t>(out) * taps.stride, 0.0f);
  constexpr double kNegligible = 1e-9;
  for (int j = 0; j < out; ++j) {
    float* w = taps.weights + static_cast<ptrdiff_t>(j) * taps.stride;
    if (scale >= 1) {
      const double a = frac + j * scale;
      const double b = frac + (j + 1) * scale;
      int k0 = static_cast<int>(std::floor(a));
      int k1 = std::min(last, static_cast<int>(std::ceil(b)) - 1);
      if (k0 < k1 && k0 + 1 - a < kNegligible) ++k0;
      if (k0 < k1 && b - k1 < kNegligible) --k1;
      auto overlap = [&](int k) {
        return std::min(b, k + 1.0) - std::max(a, static_cast<double>(k));
      };
      double sum = 0;
      for (int k = k0; k <= k1; ++k) sum += overlap(k);
      for (int k = k0; k <= k1; ++k) w[k - k0] = static_cast<float>(overlap(k) / sum);
      taps.start[j] = base + k0;
      taps.count[j] = k1 - k0 + 1;
    } else {
      const double centre = frac + (j + 0.5) * scale - 0.5;
      int k = static_cast<int>(std::floor(centre));
      double f = centre - k;
      if (k < 0) k = 0, f = 0;
      if (k >= last) k = last, f = 0;
      taps.start[j] = base + k;
      taps.count[j] = f > 0 ? 2 : 1;
      w[0] = static_cast<float>(1 - f);
      w[1] = static_cast<float>(f);
    }
  }
  return taps;
}

// VerticalPass sums `n` samples from each of the tap rows of output row j.
// Up to three rows are summed in one sweep, so `out` is written once.
template <typename T>
[[gnu::always_inline]] inline void VerticalPass(const T* first_row, size_t stride,
                                                const float* weights, int count, ptrdiff_t n,
                                                float* out) {
  const T* r0 = first_row;
  const float w0 = weights[0];
  if (count == 1) {
    for (ptrdiff_t i = 0; i < n; ++i) out[i] = w0 * static_cast<float>(r0[i]);
    return;
  }
  const T* r1 = r0 + stride;
  const float w1 = weights[1];
  if (count == 2) {
    for (ptrdiff_t i = 0; i < n; ++i) {
      out[i] = w0 * static_cast<float>(r0[i]) + w1 * static_cast<float>(r1[i]);
    }
    return;
  }
  const T* r2 = r1 + stride;
  const float w2 = weights[2];
  for (ptrdiff_t i = 0; i < n; ++i) {
    out[i] = w0 * static_cast<float>(r0[i]) + w1 * static_cast<float>(r1[i]) +
             w2 * static_cast<float>(r2[i]);
  }
  for (int t = 3; t < count; ++t) {
    const T* row = first_row + stride * t;
    const float w = weights[t];
    for (ptrdiff_t i = 0; i < n; ++i) out[i] += w * static_cast<float>(row[i]);
  }
}

// Float4 holds one pixel's channels (and padding), so that the horizontal
// pass handles RGB and RGBA pixels as one vector.
typedef float Float4 __attribute__((vector_size(16)));

[[gnu::always_inline]] inline Float4 Load4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// StorePixel truncates four non-negative sums (already + 0.5) into samples,
// saturating at the maximum (only rounding can push a sum of non-negative
// weights that add up to 1 past it).
[[gnu::always_inline]] inline void StorePixel(Float4 v, uint8_t* out) {
#if defined(__SSE2__)
  __m128i i = _mm_cvttps_epi32(reinterpret_cast<__m128>(v));
  i = _mm_packs_epi32(i, i);
  i = _mm_packus_epi16(i, i);
  const int32_t word = _mm_cvtsi128_si32(i);
  std::memcpy(out, &word, sizeof(word));
#else
  v = v > 255.0f ? 255.0f : v;
  for (int c = 0; c < 4; ++c) out[c] = static_cast<uint8_t>(static_cast<int32_t>(v[c]));
#endif
}

[[gnu::always_inline]] inline void StorePixel(Float4 v, uint16_t* out) {
  v = v > 65535.0f ? 65535.0f : v;
  for (int c = 0; c < 4; ++c) out[c] = static_cast<uint16_t>(static_cast<int32_t>(v[c]));
}

// HorizontalPass resamples one row of column sums (tap starts relative to
// it). Every output takes K taps (taps past its count weigh 0), so the loop
// has no data-dependent branches; K = 0 means taps.stride. It reads up to
// taps.stride * C + 1 floats past the last column, which must be zeros, and
// for RGB writes one sample past the last pixel.
template <int C, int K, typename T>
[[gnu::always_inline]] inline void HorizontalPass(const float* sums, const Taps& taps,
                                                  int out_width, T* out) {
  const int k = K > 0 ? K : taps.stride;
  for (int j = 0; j < out_width; ++j) {
    const float* p = sums + static_cast<ptrdiff_t>(taps.start[j]) * C;
    const float* w = taps.weights + static_cast<ptrdiff_t>(j) * taps.stride;
    if constexpr (C == 1) {
      float acc = 0;
      for (int t = 0; t < k; ++t) acc += w[t] * p[t];
      out[j] = RoundSample<T>(acc);
    } else {
      Float4 acc = {0, 0, 0, 0};
      for (int t = 0; t < k; ++t) acc += w[t] * Load4(p + t * C);
      StorePixel(acc + 0.5f, out + j * C);  // RGB: writes one sample too many
    }
  }
}

template <int C, typename T>
[[gnu::always_inline]] inline void HorizontalPassFor(const float* sums, const Taps& taps,
                                                     int out_width, T* out) {
  switch (taps.stride) {
    case 2:
      return HorizontalPass<C, 2>(sums, taps, out_width, out);
    case 3:
      return HorizontalPass<C, 3>(sums, taps, out_width, out);
    case 4:
      return HorizontalPass<C, 4>(sums, taps, out_width, out);
    default:
      return HorizontalPass<C, 0>(sums, taps, out_width, out);
  }
}

// ResampleRows is the resampler itself, inlined into one function per
// instruction set below.
template <typename T>
[[gnu::always_inline]] inline void ResampleRows(const WindowPixels<T>& window,
                                                const WindowRegion& region, const DecodePlan& plan,
                                                OutputWriter& writer, ScratchScope& scratch) {
  const int channels = plan.spec.channels;
  Taps x = MakeTaps(region.x, region.width, plan.out_width, scratch);
  const Taps y = MakeTaps(region.y, region.height, plan.out_height, scratch);
  // Only the columns the horizontal taps reach are summed vertically.
  const int first_column = x.start[0];
  const int end_column = x.start[plan.out_width - 1] + x.count[plan.out_width - 1];
  for (int j = 0; j < plan.out_width; ++j) x.start[j] -= first_column;
  const ptrdiff_t n = static_cast<ptrdiff_t>(end_column - first_column) * channels;
  const ptrdiff_t padding = static_cast<ptrdiff_t>(x.stride) * channels + 1;
  float* sums = scratch.Take<float>(n + padding);
  std::fill(sums + n, sums + n + padding, 0.0f);
  T* out = scratch.Take<T>(static_cast<size_t>(plan.out_width) * channels + 1);
  for (int j = 0; j < plan.out_height; ++j) {
    const T* first_row =
        window.data + window.stride * y.start[j] + static_cast<ptrdiff_t>(first_column) * channels;
    VerticalPass(first_row, window.stride, y.weights + static_cast<ptrdiff_t>(j) * y.stride,
                 y.count[j], n, sums);
    switch (channels) {
      case 1:
        HorizontalPassFor<1>(sums, x, plan.out_width, out);
        break;
      case 3:
        HorizontalPassFor<3>(sums, x, plan.out_width, out);
        break;
      default:
        HorizontalPassFor<4>(sums, x, plan.out_width, out);
        break;
    }
    writer.WriteRow(j, out);
  }
}

// The same code compiled for two instruction sets. GCC vectorises the
// vertical pass 8 floats wide with AVX2 and keeps every operation and its
// order, so both give the same bytes (ResampleTest checks); no FMA, which
// would round differently.
#if WDS_RESAMPLE_AVX2
__attribute__((target("avx2"))) void ResampleAvx2(const WindowPixels<uint8_t>& window,
                                                  const WindowRegion& region,
                                                  const DecodePlan& plan, OutputWriter& writer,
                                                  ScratchScope& scratch) {
  ResampleRows(window, region, plan, writer, scratch);
}
#endif

void Resample(const WindowPixels<uint8_t>& window, const WindowRegion& region,
              const DecodePlan& plan, OutputWriter& writer, ScratchScope& scratch,
              SimdLevel level) {
#if WDS_RESAMPLE_AVX2
  if (level == SimdLevel::kAvx2 && BestSimdLevel() == SimdLevel::kAvx2) {
    return ResampleAvx2(window, region, plan, writer, scratch);
  }
#endif
  ResampleRows(window, region, plan, writer, scratch);
}

// 16-bit images (PNG only) are rare enough to keep to the baseline.
void Resample(const WindowPixels<uint16_t>& window, const WindowRegion& region,
              const DecodePlan& plan, OutputWriter& writer, ScratchScope& scratch, SimdLevel) {
  ResampleRows(window, region, plan, writer, scratch);
}

// Converted returns the part of `window` that `region` reaches, in the
// spec's channels, and moves `region` by the whole pixels cut off.
template <typename T>
WindowPixels<T> Converted(const WindowPixels<T>& window, WindowRegion& region, int channels,
                          ScratchScope& scratch) {
  const int x0 = static_cast<int>(std::floor(region.x));
  const int y0 = static_cast<int>(std::floor(region.y));
  const int x1 = static_cast<int>(std::ceil(region.x + region.width));
  const int y1 = static_cast<int>(std::ceil(region.y + region.height));
  WindowPixels<T> out;
  out.width = x1 - x0;
  out.height = y1 - y0;
  out.stride = static_cast<size_t>(out.width) * channels;
  out.layout = channels == 1   ? PixelLayout::kGray
               : channels == 3 ? PixelLayout::kRgb
                               : PixelLayout::kRgba;
  T* pixels = scratch.Take<T>(out.stride * out.height);
  const ptrdiff_t in_channels = LayoutChannels(window.layout);
  for (int y = y0; y < y1; ++y) {
    ConvertRow(window.layout, window.data + window.stride * y + x0 * in_channels, out.width,
               channels, pixels + out.stride * (y - y0));
  }
  out.data = pixels;
  region.x -= x0;
  region.y -= y0;
  return out;
}

}  // namespace

template <typename T>
void WriteOutput(const WindowPixels<T>& window, const WindowRegion& region, const DecodePlan& plan,
                 OutputWriter& writer, ScratchScope& scratch, SimdLevel level) {
  assert(region.x >= 0 && region.x + region.width <= window.width);
  assert(region.y >= 0 && region.y + region.height <= window.height);
  const int channels = plan.spec.channels;
  WindowRegion r = region;
  const WindowPixels<T> pixels =
      LayoutMatches(window.layout, channels) ? window : Converted(window, r, channels, scratch);
  const bool copy =
      IsWhole(r.x) && IsWhole(r.y) && r.width == plan.out_width && r.height == plan.out_height;
  if (!copy) return Resample(pixels, r, plan, writer, scratch, level);
  const T* origin =
      pixels.data + pixels.stride * static_cast<size_t>(r.y) + static_cast<size_t>(r.x) * channels;
  for (int y = 0; y < plan.out_height; ++y) writer.WriteRow(y, origin + pixels.stride * y);
}

template void WriteOutput<uint8_t>(const WindowPixels<uint8_t>&, const WindowRegion&,
                                   const DecodePlan&, OutputWriter&, ScratchScope&, SimdLevel);
template void WriteOutput<uint16_t>(const WindowPixels<uint16_t>&, const WindowRegion&,
                                    const DecodePlan&, OutputWriter&, ScratchScope&, SimdLevel);

Array ResampleImage(const uint8_t* pixels, int width, int height, int channels,
                    const WindowRegion& region, int out_width, int out_height, SimdLevel level) {
  DecodePlan plan;
  plan.spec = ImageSpec{channels, DType::kUInt8, false};
  plan.width = width;
  plan.height = height;
  plan.out_width = out_width;
  plan.out_height = out_height;
  OutputWriter writer(plan);
  ScratchScope scratch;
  WindowPixels<uint8_t> window;
  window.data = pixels;
  window.stride = static_cast<size_t>(width) * channels;
  window.width = width;
  window.height = height;
  window.layout = channels == 1   ? PixelLayout::kGray
                  : channels == 3 ? PixelLayout::kRgb
                                  : PixelLayout::kRgba;
  WriteOutput(window, region, plan, writer, scratch, level);
  return std::move(writer).Take();
}

}  // namespace wds::image_internal
