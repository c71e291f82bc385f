// JPEG, PNG and WebP decoding. The first two bytes choose the output spec and
// the geometry (full size, DCT-scaled stretch, centre crop, random resized
// crop, flip), the rest is the image. The image is also routed as the GPU
// path's workers route it (RouteImage: its header and the walk of its scans).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gpu/image_route.h"
#include "wds/base/random.h"
#include "wds/image/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const char* const kSpecs[] = {"rgb8", "l8", "rgba8", "torchrgb8", "rgb", "l"};
  const uint8_t spec_byte = data[0];
  const uint8_t geometry = data[1];
  auto spec = wds::ParseImageSpec(kSpecs[spec_byte % 6]);
  if (!spec.ok()) __builtin_trap();
  wds::ImageDecodeOptions options;
  // Small images decode through the same paths as large ones (and larger
  // headers take the max_pixels refusal): each run stays cheap under ASan.
  options.max_pixels = int64_t{1} << 18;
  static const wds::ResizeMode kModes[] = {wds::ResizeMode::kNone, wds::ResizeMode::kStretch,
                                           wds::ResizeMode::kCenterCrop,
                                           wds::ResizeMode::kRandomResizedCrop};
  options.resize.mode = kModes[geometry % 4];
  options.resize.width = 1 + (geometry >> 2) % 64;
  options.resize.height = 1 + (spec_byte >> 3) % 64;
  options.hflip = (geometry & 0x80) ? 0.5 : 0.0;
  wds::Rng rng(geometry);
  wds::ImageDecodeInfo info;
  const std::string_view image(reinterpret_cast<const char*>(data) + 2, size - 2);
  const wds::gpu::RouteDecision route = wds::gpu::RouteImage(image);
  if (route.route == wds::gpu::ImageRoute::kGpu && (!route.reason.empty() || route.scans < 1)) {
    __builtin_trap();
  }
  auto array = wds::DecodeImage(image, *spec, options, rng, &info);
  if (array.ok() && array->data.size() < array->nbytes()) __builtin_trap();
  return 0;
}
