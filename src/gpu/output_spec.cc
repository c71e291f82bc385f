// ResolveGpuOutput: the specs and options the GPU decode path serves.
#include "gpu/output_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds::gpu {
namespace {

constexpr std::string_view kServed = "rgb8, rgb, torchrgb8, torchrgb, torch";

absl::Status Refuse(std::string_view what) {
  return absl::InvalidArgumentError(Cat("decode on cuda: ", what));
}

absl::Status CheckNormalize(const Normalize& n) {
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(n.mean[c]) || !std::isfinite(n.std[c]) || !(n.std[c] > 0)) {
      // absl::StrCat prints floats as %g: "0.5", "nan".
      return Refuse(absl::StrCat("normalize channel ", c, " has mean ", n.mean[c], " and std ",
                                 n.std[c], "; both must be finite and std > 0"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GpuOutput> ResolveGpuOutput(std::string_view spec, const ImageDecodeOptions& image,
                                           const GpuDecodeOptions& gpu) {
  absl::StatusOr<ImageSpec> parsed = ParseImageSpec(spec);
  if (!parsed.ok()) return Refuse(ToStd(parsed.status().message()));
  if (absl::Status s = ValidateImageDecodeOptions(image); !s.ok())
    return Refuse(ToStd(s.message()));
  if (parsed->channels != 3) {
    return Refuse(Cat("image spec \"", spec, "\" has ", parsed->channels,
                      parsed->channels == 1 ? " channel" : " channels",
                      "; the GPU path makes 3-channel outputs (", kServed, ")"));
  }
  const bool is_float = parsed->dtype == DType::kFloat32;
  if (!is_float && gpu.float16) {
    return Refuse(
        Cat("float16 output needs a float spec (rgb, torchrgb, torch), not \"", spec, "\""));
  }
  if (!is_float && gpu.normalize.has_value()) {
    return Refuse(Cat("normalize needs a float spec (rgb, torchrgb, torch), not \"", spec, "\""));
  }
  GpuOutput out;
  out.dtype = is_float ? (gpu.float16 ? DType::kFloat16 : DType::kFloat32) : DType::kUInt8;
  out.channels_first = parsed->channels_first;
  if (image.resize.mode != ResizeMode::kNone) {
    out.width = image.resize.width;
    out.height = image.resize.height;
  }
  if (gpu.normalize.has_value()) {
    WDS_RETURN_IF_ERROR(CheckNormalize(*gpu.normalize));
    out.normalize = *gpu.normalize;
  }
  return out;
}

}  // namespace wds::gpu
