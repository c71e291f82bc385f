// The image codecs: JPEG (libjpeg-turbo), PNG (libspng), WebP (libwebp).
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "image/decode_plan.h"
#include "wds/array.h"

namespace wds::image_internal {

// The codecs. Each reads its header, calls MakePlan and decodes.
[[nodiscard]] absl::StatusOr<Array> DecodeJpeg(std::string_view data, DecodeRequest& request);
[[nodiscard]] absl::StatusOr<Array> DecodePng(std::string_view data, DecodeRequest& request);
[[nodiscard]] absl::StatusOr<Array> DecodeWebp(std::string_view data, DecodeRequest& request);

}  // namespace wds::image_internal
