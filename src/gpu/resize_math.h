// The arithmetic of the GPU path's fused resize/crop/normalize kernel, as
// inline functions that nvcc compiles for the device (resize_kernel.cu) and
// the host compiler for the tests and benchmarks that compare with it. They
// repeat the CPU path's resampler (src/image/resample.cc, MakeTaps and the
// passes), which ResizeBatchOnHost runs, operation for operation and in the
// same order, so all three give the same bytes: area averaging when
// shrinking, bilinear between pixel centres when enlarging, vertical sums
// first, then horizontal, in float; uint8 results round half up. Neither side
// may contract a multiply-add into an FMA (CMakeLists.txt).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define WDS_HOST_DEVICE __host__ __device__
#else
#define WDS_HOST_DEVICE
#endif

namespace wds::gpu {

// AxisTap says which source samples, with which weights, make output sample
// j along one axis of a region [origin, origin + extent) resampled to `out`.
struct AxisTap {
  int start = 0;  // first source index
  int count = 0;  // number of source samples
  // Shrinking: weight(k) = overlap of [a, b) with source pixel k, over sum.
  // Enlarging: weights w0 and w1 of samples start and start + 1.
  bool shrink = false;
  double a = 0, b = 0, sum = 1;
  int base = 0;
  float w0 = 1, w1 = 0;
};

WDS_HOST_DEVICE inline double MinD(double x, double y) { return x < y ? x : y; }
WDS_HOST_DEVICE inline double MaxD(double x, double y) { return x > y ? x : y; }

// MakeAxisTap is MakeTaps of resample.cc for one output index.
WDS_HOST_DEVICE inline AxisTap MakeAxisTap(double origin, double extent, int out, int j) {
  const double scale = extent / out;
  const int base = static_cast<int>(floor(origin));
  const double frac = origin - base;
  const int last = static_cast<int>(ceil(frac + extent)) - 1;
  AxisTap t;
  t.base = base;
  if (scale >= 1) {
    constexpr double kNegligible = 1e-9;
    t.shrink = true;
    t.a = frac + j * scale;
    t.b = frac + (j + 1) * scale;
    int k0 = static_cast<int>(floor(t.a));
    int k1 = static_cast<int>(ceil(t.b)) - 1;
    if (k1 > last) k1 = last;
    if (k0 < k1 && k0 + 1 - t.a < kNegligible) ++k0;
    if (k0 < k1 && t.b - k1 < kNegligible) --k1;
    double sum = 0;
    for (int k = k0; k <= k1; ++k) sum += MinD(t.b, k + 1.0) - MaxD(t.a, static_cast<double>(k));
    t.sum = sum;
    t.start = base + k0;
    t.count = k1 - k0 + 1;
  } else {
    const double centre = frac + (j + 0.5) * scale - 0.5;
    int k = static_cast<int>(floor(centre));
    double f = centre - k;
    if (k < 0) k = 0, f = 0;
    if (k >= last) k = last, f = 0;
    t.start = base + k;
    t.count = f > 0 ? 2 : 1;
    t.w0 = static_cast<float>(1 - f);
    t.w1 = static_cast<float>(f);
  }
  return t;
}

// TapWeight is the weight of the i-th source sample of `t` (i < t.count).
WDS_HOST_DEVICE inline float TapWeight(const AxisTap& t, int i) {
  if (!t.shrink) return i == 0 ? t.w0 : t.w1;
  const int k = t.start - t.base + i;
  return static_cast<float>((MinD(t.b, k + 1.0) - MaxD(t.a, static_cast<double>(k))) / t.sum);
}

// ResampledPixel is output pixel (x, y)'s channel sums (not yet rounded) of
// an interleaved RGB source, `pitch` bytes a row.
WDS_HOST_DEVICE inline void ResampledPixel(const uint8_t* src, int64_t pitch, const AxisTap& tx,
                                           const AxisTap& ty, float out[3]) {
  out[0] = out[1] = out[2] = 0;
  for (int i = 0; i < tx.count; ++i) {
    const uint8_t* column = src + static_cast<int64_t>(tx.start + i) * 3;
    float sum[3] = {0, 0, 0};
    for (int r = 0; r < ty.count; ++r) {
      const uint8_t* p = column + (ty.start + r) * pitch;
      const float w = TapWeight(ty, r);
      sum[0] += w * static_cast<float>(p[0]);
      sum[1] += w * static_cast<float>(p[1]);
      sum[2] += w * static_cast<float>(p[2]);
    }
    const float w = TapWeight(tx, i);
    out[0] += w * sum[0];
    out[1] += w * sum[1];
    out[2] += w * sum[2];
  }
}

// RoundToByte is the CPU resampler's rounding: half up, saturating.
WDS_HOST_DEVICE inline uint8_t RoundToByte(float v) {
  v = v + 0.5f;
  v = v < 0 ? 0 : (v > 255.0f ? 255.0f : v);
  return static_cast<uint8_t>(static_cast<int32_t>(v));
}

// NormalizedSample is a float output: the CPU path's v / 255, then the
// optional normalization.
WDS_HOST_DEVICE inline float NormalizedSample(uint8_t v, float mean, float std) {
  return (static_cast<float>(v) / 255.0f - mean) / std;
}

// FloatToHalfBits is IEEE binary16 of v, rounded to nearest even (what
// __float2half_rn gives on the device).
inline uint16_t FloatToHalfBits(float v) {
  uint32_t x;
  static_assert(sizeof(x) == sizeof(v));
  __builtin_memcpy(&x, &v, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflows to infinity
  if (x < 0x38800000u) {                                               // subnormal or zero in half
    if (x < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t mantissa = (x & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(x >> 23);  // 14 .. 24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((x >> 13) - (112u << 10));
  const uint32_t rest = x & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

}  // namespace wds::gpu
