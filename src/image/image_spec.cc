// Image output specs and decode options.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "wds/image/image.h"
#include "wds/internal/base/strings.h"

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

}  // namespace wds
