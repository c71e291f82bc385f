// Image output specs, decode options and the decode plan (crop geometry).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "image/image_rows.h"
#include "wds/internal/strings.h"
#include "wds/image.h"

namespace wds {
namespace {

struct NamedSpec {
  std::string_view name;
  ImageSpec spec;
};

constexpr NamedSpec kSpecs[] = {
    {"l8", {1, DType::kUInt8, false}},         {"rgb8", {3, DType::kUInt8, false}},
    {"rgba8", {4, DType::kUInt8, false}},      {"l", {1, DType::kFloat32, false}},
    {"rgb", {3, DType::kFloat32, false}},      {"rgba", {4, DType::kFloat32, false}},
    {"torchl8", {1, DType::kUInt8, true}},     {"torchrgb8", {3, DType::kUInt8, true}},
    {"torchrgba8", {4, DType::kUInt8, true}},  {"torchl", {1, DType::kFloat32, true}},
    {"torchrgb", {3, DType::kFloat32, true}},  {"torch", {3, DType::kFloat32, true}},
    {"torchrgba", {4, DType::kFloat32, true}},
};

constexpr std::string_view kPilSpecs[] = {"pill", "pil", "pilrgb", "pilrgba"};

struct NamedMode {
  std::string_view name;
  ResizeMode mode;
};

constexpr NamedMode kModes[] = {
    {"none", ResizeMode::kNone},
    {"stretch", ResizeMode::kStretch},
    {"center_crop", ResizeMode::kCenterCrop},
    {"random_resized_crop", ResizeMode::kRandomResizedCrop},
};

constexpr int kMaxTargetSide = 65535;

absl::Status CheckResize(const ImageResize& r) {
  if (r.width < 1 || r.width > kMaxTargetSide || r.height < 1 || r.height > kMaxTargetSide) {
    return absl::InvalidArgumentError(Cat("image resize to ", r.width, "x", r.height,
                                          ": width and height must be in [1, ", kMaxTargetSide,
                                          "]"));
  }
  if (r.mode != ResizeMode::kRandomResizedCrop) return absl::OkStatus();
  if (!(r.min_scale > 0 && r.min_scale <= r.max_scale && r.max_scale <= 1)) {
    return absl::InvalidArgumentError(Cat("random_resized_crop scale range [", r.min_scale, ", ",
                                          r.max_scale, "] must satisfy 0 < min <= max <= 1"));
  }
  if (!(r.min_ratio > 0 && r.min_ratio <= r.max_ratio && std::isfinite(r.max_ratio))) {
    return absl::InvalidArgumentError(Cat("random_resized_crop ratio range [", r.min_ratio, ", ",
                                          r.max_ratio, "] must satisfy 0 < min <= max"));
  }
  return absl::OkStatus();
}

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

absl::StatusOr<ImageSpec> ParseImageSpec(std::string_view spec) {
  for (const NamedSpec& s : kSpecs) {
    if (s.name == spec) return s.spec;
  }
  for (std::string_view pil : kPilSpecs) {
    if (pil == spec) {
      return absl::InvalidArgumentError(Cat("image spec \"", spec,
                                            "\" makes PIL images, which only the Python package "
                                            "has; use an array spec such as rgb8 or torchrgb"));
    }
  }
  std::string known;
  for (const NamedSpec& s : kSpecs) known += Cat(known.empty() ? "" : ", ", s.name);
  return absl::InvalidArgumentError(
      Cat("unknown image spec \"", spec, "\" (specs are case-sensitive: ", known, ")"));
}

absl::StatusOr<ResizeMode> ParseResizeMode(std::string_view name) {
  for (const NamedMode& m : kModes) {
    if (m.name == name) return m.mode;
  }
  return absl::InvalidArgumentError(
      Cat("unknown resize mode \"", name, "\" (none, stretch, center_crop, random_resized_crop)"));
}

absl::Status ValidateImageDecodeOptions(const ImageDecodeOptions& options) {
  if (options.max_pixels <= 0) {
    return absl::InvalidArgumentError(Cat("max_pixels ", options.max_pixels, " must be > 0"));
  }
  if (!(options.hflip >= 0 && options.hflip <= 1)) {
    return absl::InvalidArgumentError(
        Cat("hflip probability ", options.hflip, " must be in [0, 1]"));
  }
  const ImageResize& r = options.resize;
  if (r.mode == ResizeMode::kNone) return absl::OkStatus();
  if (absl::Status s = CheckResize(r); !s.ok()) return s;
  if (int64_t{r.width} * r.height > options.max_pixels) {
    return absl::InvalidArgumentError(Cat("image resize to ", r.width, "x", r.height,
                                          " exceeds max_pixels ", options.max_pixels));
  }
  return absl::OkStatus();
}

namespace image_internal {

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

}  // namespace image_internal
}  // namespace wds
