// The decode plan: what one image decode produces (size, crop, flip), fixed
// from the header before any pixel is decoded, and what a codec is given.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "base/output_slots.h"
#include "wds/base/random.h"
#include "wds/image/image.h"

namespace wds::image_internal {

// DecodeRequest is what a codec gets besides the bytes.
struct DecodeRequest {
  const ImageSpec& spec;
  const ImageDecodeOptions& options;
  Rng& rng;
  ImageDecodeInfo& info;
  // slots, if not null, is asked for the output's storage under `field`.
  OutputSlots* slots = nullptr;
  std::string_view field;
};

// DecodePlan is what one decode produces, fixed from the header before any
// pixel is decoded.
struct DecodePlan {
  ImageSpec spec;
  int width = 0;  // of the encoded image
  int height = 0;
  ImageRect crop;  // the region of the encoded image shown
  int out_width = 0;
  int out_height = 0;
  bool flip = false;

  // identity is true when the output is the whole image at its own size.
  bool identity() const {
    return crop == ImageRect{0, 0, width, height} && out_width == width && out_height == height;
  }
};

// MakePlan checks the encoded size against the options, draws the crop and the
// flip from request.rng, and fills request.info.
[[nodiscard]] absl::StatusOr<DecodePlan> MakePlan(int width, int height, DecodeRequest& request);

}  // namespace wds::image_internal
