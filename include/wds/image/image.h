// Image decoding: JPEG (libjpeg-turbo), PNG (libspng) and WebP (libwebp) to
// Arrays, optionally resized, cropped and flipped on the way.
//
//   wds::ImageDecodeOptions crop;
//   crop.resize = {wds::ResizeMode::kCenterCrop, 224, 224};
//   wds::Pipeline p = pipeline.Decode("rgb8", crop);        // images, then BasicDecoders
//   wds::StageFactory same = wds::DecodeStage("rgb8", crop);
//   absl::StatusOr<wds::FieldDecoder> images = wds::ImageDecoder("torchrgb", crop);  // by hand
//
// Output specs are the reference package's, case-sensitive:
//   l8 rgb8 rgba8                      uint8   [H, W] (l8) or [H, W, C]
//   l rgb rgba                         float32 in [0, 1], same shapes
//   torchl8 torchrgb8 torchrgba8       uint8   [H, W] (torchl8) or [C, H, W]
//   torchl torchrgb torch torchrgba    float32 in [0, 1], same shapes ("torch" is torchrgb)
// Gray outputs are 2-D, as in the reference. Float values are u8 / 255 (or, for
// 16-bit PNGs, u16 / 65535). The "pil*" specs make PIL images and exist only in
// the Python package.
//
// Colour conversions: gray is replicated to RGB; RGB(A) to gray is ITU-R 601
// luma, (19595 R + 38470 G + 7471 B + 32768) >> 16, which is PIL's "L"; a colour
// JPEG decoded to gray yields its Y plane (as djpeg -grayscale); alpha is 255
// (65535) where the image has none and is dropped where the spec has none (no
// compositing, as PIL's convert); CMYK JPEGs become RGB as djpeg does (Adobe
// inverted CMYK: R = C * K / 255, rounded). 16-bit PNG samples become 8-bit by
// keeping the high byte. EXIF orientation is not applied (neither does the
// reference).
//
// The codec is chosen by the content (JPEG, PNG or WebP signature), not by the
// field's extension, so a PNG stored as ".jpg" still decodes, as with PIL.
//
// Resizing never decodes more than it needs: JPEGs (libjpeg API) are decoded
// at the smallest DCT scale of 1/8, 1/4, 1/2 or 1 that still covers the
// target (libjpeg-turbo's other scales are slower than full size), and crops
// decode only the rows and iMCU columns they need; WebP crops and scales
// inside libwebp. The rest is resampled by area averaging (shrinking) or
// bilinear interpolation (enlarging), separably per axis. A JPEG crop stops
// reading after its last row, so truncation below it goes unnoticed.
//
// Thread safety: all functions are thread-safe; a FieldDecoder from
// ImageDecoder may be shared by any number of streams.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/base/array.h"
#include "wds/base/random.h"
#include "wds/decode/decode.h"

namespace wds {

// ImageSpec is a parsed output spec.
struct ImageSpec {
  int channels = 3;             // 1 (gray), 3 (RGB) or 4 (RGBA)
  DType dtype = DType::kUInt8;  // kUInt8 or kFloat32
  bool channels_first = false;  // CHW (torch*) instead of HWC
};

// ParseImageSpec parses one of the specs listed above; anything else, and the
// "pil*" specs, is InvalidArgument naming the spec.
[[nodiscard]] absl::StatusOr<ImageSpec> ParseImageSpec(std::string_view spec);

// ResizeMode says how the image becomes width x height:
//   kNone               keep the decoded size (width and height are ignored)
//   kStretch            the whole image, aspect ratio not kept
//   kCenterCrop         the largest centred region of the target's aspect
//                       ratio (offsets rounded down), then resized
//   kRandomResizedCrop  a random region (torchvision's RandomResizedCrop: area
//                       fraction in [min_scale, max_scale], aspect ratio
//                       log-uniform in [min_ratio, max_ratio], 10 tries, then a
//                       centred crop with the ratio clamped), then resized
enum class ResizeMode { kNone, kStretch, kCenterCrop, kRandomResizedCrop };

// ParseResizeMode accepts "none", "stretch", "center_crop" and "random_resized_crop".
[[nodiscard]] absl::StatusOr<ResizeMode> ParseResizeMode(std::string_view name);

// ImageResize: with a mode other than kNone, width and height are in
// [1, 65535]; 0 < min_scale <= max_scale <= 1; 0 < min_ratio <= max_ratio.
struct ImageResize {
  ResizeMode mode = ResizeMode::kNone;
  int width = 0;
  int height = 0;
  double min_scale = 0.08;
  double max_scale = 1.0;
  double min_ratio = 3.0 / 4.0;
  double max_ratio = 4.0 / 3.0;
};

struct ImageDecodeOptions {
  ImageResize resize;
  // hflip is the probability, in [0, 1], of mirroring the output left-right.
  // 0 and 1 draw no random number.
  double hflip = 0.0;
  // max_pixels bounds width * height of an encoded image (checked from its
  // header, before any pixel memory is allocated) and of the output:
  // ResourceExhausted naming the dimensions. Must be > 0.
  int64_t max_pixels = int64_t{1} << 28;
};

// ValidateImageDecodeOptions returns InvalidArgument naming the first option
// out of its bounds.
[[nodiscard]] absl::Status ValidateImageDecodeOptions(const ImageDecodeOptions& options);

enum class ImageFormat { kJpeg, kPng, kWebp };
std::string_view ImageFormatName(ImageFormat format);  // "JPEG", "PNG", "WebP"
// SniffImageFormat identifies an image by its signature.
std::optional<ImageFormat> SniffImageFormat(std::string_view data);

// ImageRect is a region of an image, in its pixels.
struct ImageRect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  bool operator==(const ImageRect& o) const {
    return x == o.x && y == o.y && width == o.width && height == o.height;
  }
};

// ImageDecodeInfo reports how an image was decoded.
struct ImageDecodeInfo {
  ImageFormat format = ImageFormat::kJpeg;
  int width = 0;  // of the encoded image
  int height = 0;
  // crop is the region of the encoded image that the output shows (the whole
  // image unless cropping). WebP crops start at even offsets (libwebp's rule).
  ImageRect crop;
  // dct_scale is M of the JPEG DCT scale M/8 used: 1, 2, 4 or 8 (full size;
  // also for other formats).
  int dct_scale = 8;
  // decoded_width x decoded_height is what the codec itself produced before
  // resampling: for a JPEG the scaled and cropped window, for WebP the
  // output (libwebp scales), for PNG the whole image.
  int decoded_width = 0;
  int decoded_height = 0;
  bool flipped = false;
};

// DecodeImage decodes `data` (JPEG, PNG or WebP, by signature) into an Array
// shaped by `spec`, drawing any randomness (random crops, flips) from `rng`:
// the crop first, then the flip. Errors: InvalidArgument for data that is not
// a supported image, an unsupported variant (e.g. animated WebP, 12-bit JPEG)
// or bad options; DataLoss for corrupt or truncated data; ResourceExhausted
// beyond max_pixels (or a progressive JPEG of more than 500 scans). `info`,
// if not null, receives the report.
[[nodiscard]] absl::StatusOr<Array> DecodeImage(std::string_view data, const ImageSpec& spec,
                                                const ImageDecodeOptions& options, Rng& rng,
                                                ImageDecodeInfo* info = nullptr);

// IsImageExtension is true for the extensions ImageDecoder accepts: jpg, jpeg,
// png and webp (ignoring case).
bool IsImageExtension(std::string_view extension);

// ImageDecoder returns a FieldDecoder that decodes fields whose extension
// (FieldExtension) IsImageExtension with DecodeImage and declines all others.
// An unknown spec or invalid options are an InvalidArgument setup error.
[[nodiscard]] absl::StatusOr<FieldDecoder> ImageDecoder(std::string_view spec,
                                                        ImageDecodeOptions options = {});

// DecodeStage(spec) decodes images by `image_spec`, then the other fields
// with BasicDecoders, like the reference's .decode("rgb8"). An unknown spec or
// invalid image options make it a FailingStage (InvalidArgument).
StageFactory DecodeStage(std::string_view image_spec, ImageDecodeOptions image = {},
                         DecodeOptions options = {});

}  // namespace wds
