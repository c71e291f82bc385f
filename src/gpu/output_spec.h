// What the GPU decode path can produce, resolved once when a pipeline is
// built: an image spec and decode options of the CPU path, plus what only the
// GPU path adds (float16 output, mean/std normalization). A request the GPU
// path cannot serve is refused then, naming the spec or option, never at the
// first batch.
#pragma once

#include <array>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "wds/base/array.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/image/image.h"

namespace wds::gpu {

using ::wds::GpuDecodeOptions;
using ::wds::Normalize;

// GpuOutput is the batch layout the fused kernel writes: [B, 3, H, W]
// (channels_first) or [B, H, W, 3], of `dtype`.
struct GpuOutput {
  DType dtype = DType::kUInt8;  // kUInt8, kFloat32 or kFloat16
  bool channels_first = false;
  // width x height of every image, or 0 x 0 for ResizeMode::kNone (each
  // image's own size; a batch then needs images of one size).
  int width = 0;
  int height = 0;
  Normalize normalize;  // identity unless options asked for one
};

// ResolveGpuOutput checks that the GPU path serves `spec` with `image` and
// `gpu`, and returns the layout. The GPU path serves the 3-channel specs
// (rgb8, rgb, torchrgb8, torchrgb, torch), every resize mode and hflip.
// Errors (InvalidArgument, starting "decode on cuda: "): an unknown spec or
// invalid options (as ParseImageSpec / ValidateImageDecodeOptions say), a
// gray or RGBA spec, float16 or normalize with a uint8 spec, a normalize
// value that is not finite or a std <= 0.
[[nodiscard]] absl::StatusOr<GpuOutput> ResolveGpuOutput(std::string_view spec,
                                                         const ImageDecodeOptions& image,
                                                         const GpuDecodeOptions& gpu);

}  // namespace wds::gpu
