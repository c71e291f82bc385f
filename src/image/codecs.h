// The image codecs: JPEG (libjpeg-turbo), PNG (libspng), WebP (libwebp).
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "image/decode_plan.h"
#include "wds/base/array.h"

namespace wds::image_internal {

// JpegHeader is what a JPEG's markers say, read by libjpeg without decoding
// any pixel (the GPU path routes images by it).
struct JpegHeader {
  int width = 0;
  int height = 0;
  int components = 0;
  int precision = 8;  // bits per sample
  bool progressive = false;
  bool arithmetic = false;  // arithmetic instead of Huffman coding
  bool adobe = false;       // an Adobe APP14 marker was seen
  bool cmyk = false;        // CMYK or YCCK colour space
  // sampling is each component's horizontal and vertical sampling factor.
  int sampling[4][2] = {};
};

// ReadJpegHeader reads the markers up to the first scan with the decoders'
// own libjpeg setup. Errors as DecodeImage's: InvalidArgument for a variant
// libjpeg cannot decode (12-bit, lossless), DataLoss for a corrupt header.
[[nodiscard]] absl::StatusOr<JpegHeader> ReadJpegHeader(std::string_view data);

// The codecs. Each reads its header, calls MakePlan and decodes.
[[nodiscard]] absl::StatusOr<Array> DecodeJpeg(std::string_view data, DecodeRequest& request);
[[nodiscard]] absl::StatusOr<Array> DecodePng(std::string_view data, DecodeRequest& request);
[[nodiscard]] absl::StatusOr<Array> DecodeWebp(std::string_view data, DecodeRequest& request);

}  // namespace wds::image_internal

namespace wds {

// DecodeImageInto is DecodeImage offering `slots`, if not null, the output
// (as field `field`) once its shape is known from the header; an image that
// fails to decode leaves what it was given partly written.
[[nodiscard]] absl::StatusOr<Array> DecodeImageInto(std::string_view data, const ImageSpec& spec,
                                                    const ImageDecodeOptions& options, Rng& rng,
                                                    ImageDecodeInfo* info, OutputSlots* slots,
                                                    std::string_view field);

}  // namespace wds
