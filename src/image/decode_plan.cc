// MakePlan: the output size, crop geometry and flip of one decode.
#include "image/decode_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "wds/internal/base/strings.h"

namespace wds::image_internal {
namespace {

// RoundedRatio is round(n * num / den) for positive values, half up.
int RoundedRatio(int64_t n, int64_t num, int64_t den) {
  return static_cast<int>((2 * n * num + den) / (2 * den));
}

ImageRect Centred(int width, int height, int w, int h) {
  w = std::clamp(w, 1, width);
  h = std::clamp(h, 1, height);
  return {(width - w) / 2, (height - h) / 2, w, h};
}

// CenterCrop is the largest centred region with the aspect ratio tw:th.
ImageRect CenterCrop(int width, int height, int tw, int th) {
  if (int64_t{width} * th > int64_t{height} * tw) {
    return Centred(width, height, RoundedRatio(height, tw, th), height);
  }
  return Centred(width, height, width, RoundedRatio(width, th, tw));
}

// RandomResizedCrop follows torchvision's RandomResizedCrop.get_params.
ImageRect RandomResizedCrop(int width, int height, const ImageResize& r, Rng& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_min = std::log(r.min_ratio);
  const double log_max = std::log(r.max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (r.min_scale + (r.max_scale - r.min_scale) * rng.Uniform());
    const double aspect = std::exp(log_min + (log_max - log_min) * rng.Uniform());
    const double w = std::round(std::sqrt(target * aspect));
    const double h = std::round(std::sqrt(target / aspect));
    if (w >= 1 && w <= width && h >= 1 && h <= height) {
      const int iw = static_cast<int>(w);
      const int ih = static_cast<int>(h);
      const int y = static_cast<int>(rng.Below(static_cast<uint64_t>(height - ih) + 1));
      const int x = static_cast<int>(rng.Below(static_cast<uint64_t>(width - iw) + 1));
      return {x, y, iw, ih};
    }
  }
  const double ratio = static_cast<double>(width) / height;
  if (ratio < r.min_ratio) {
    return Centred(width, height, width, static_cast<int>(std::lround(width / r.min_ratio)));
  }
  if (ratio > r.max_ratio) {
    return Centred(width, height, static_cast<int>(std::lround(height * r.max_ratio)), height);
  }
  return {0, 0, width, height};
}

}  // namespace

absl::StatusOr<DecodePlan> MakePlan(int width, int height, DecodeRequest& request) {
  const ImageDecodeOptions& options = request.options;
  const std::string_view format = ImageFormatName(request.info.format);
  if (width < 1 || height < 1) {
    return absl::DataLossError(Cat("corrupt ", format, ": image is ", width, "x", height));
  }
  const int64_t pixels = int64_t{width} * height;
  if (pixels > options.max_pixels) {
    return absl::ResourceExhaustedError(Cat(format, " image is ", width, "x", height, " (", pixels,
                                            " pixels), more than max_pixels ", options.max_pixels));
  }
  DecodePlan plan;
  plan.spec = request.spec;
  plan.width = width;
  plan.height = height;
  plan.crop = {0, 0, width, height};
  plan.out_width = width;
  plan.out_height = height;
  const ImageResize& r = options.resize;
  if (r.mode != ResizeMode::kNone) {
    plan.out_width = r.width;
    plan.out_height = r.height;
  }
  if (r.mode == ResizeMode::kCenterCrop) plan.crop = CenterCrop(width, height, r.width, r.height);
  if (r.mode == ResizeMode::kRandomResizedCrop) {
    plan.crop = RandomResizedCrop(width, height, r, request.rng);
  }
  plan.flip = options.hflip >= 1 || (options.hflip > 0 && request.rng.Uniform() < options.hflip);
  ImageDecodeInfo& info = request.info;
  info.width = width;
  info.height = height;
  info.crop = plan.crop;
  info.flipped = plan.flip;
  return plan;
}

}  // namespace wds::image_internal
