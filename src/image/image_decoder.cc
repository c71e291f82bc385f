// DecodeImage, the image FieldDecoder and the decode stage for an image spec.
#include <memory>
#include <utility>

#include "image/codecs.h"
#include "wds/image/image.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/base/worker_wiring.h"

namespace wds {
namespace {

constexpr std::string_view kImageExtensions[] = {"jpg", "jpeg", "png", "webp"};

// HexPrefix shows the first bytes of `data` for a message: "3c 68 74 6d".
std::string HexPrefix(std::string_view data) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : data.substr(0, 8)) {
    if (!out.empty()) out.push_back(' ');
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

}  // namespace

std::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kWebp:
      return "WebP";
  }
  return "image";
}

std::optional<ImageFormat> SniffImageFormat(std::string_view data) {
  if (StartsWith(data, "\xff\xd8\xff")) return ImageFormat::kJpeg;
  if (StartsWith(data, "\x89PNG\r\n\x1a\n")) return ImageFormat::kPng;
  if (data.size() >= 12 && StartsWith(data, "RIFF") && data.substr(8, 4) == "WEBP") {
    return ImageFormat::kWebp;
  }
  return std::nullopt;
}

bool IsImageExtension(std::string_view extension) {
  for (std::string_view e : kImageExtensions) {
    if (EqualsIgnoreCase(extension, e)) return true;
  }
  return false;
}

absl::StatusOr<Array> DecodeImage(std::string_view data, const ImageSpec& spec,
                                  const ImageDecodeOptions& options, Rng& rng,
                                  ImageDecodeInfo* info) {
  return DecodeImageInto(data, spec, options, rng, info, nullptr, {});
}

absl::StatusOr<Array> DecodeImageInto(std::string_view data, const ImageSpec& spec,
                                      const ImageDecodeOptions& options, Rng& rng,
                                      ImageDecodeInfo* info, OutputSlots* slots,
                                      std::string_view field) {
  WDS_RETURN_IF_ERROR(ValidateImageDecodeOptions(options));
  const std::optional<ImageFormat> format = SniffImageFormat(data);
  if (!format.has_value()) {
    return absl::InvalidArgumentError(Cat("not a JPEG, PNG or WebP image (", data.size(),
                                          " bytes, starting ", HexPrefix(data), ")"));
  }
  ImageDecodeInfo local;
  ImageDecodeInfo& report = info != nullptr ? *info : local;
  report = ImageDecodeInfo{};
  report.format = *format;
  image_internal::DecodeRequest request{spec, options, rng, report, slots, field};
  switch (*format) {
    case ImageFormat::kJpeg:
      return image_internal::DecodeJpeg(data, request);
    case ImageFormat::kPng:
      return image_internal::DecodePng(data, request);
    case ImageFormat::kWebp:
      return image_internal::DecodeWebp(data, request);
  }
  return absl::InternalError("unhandled image format");
}

absl::StatusOr<FieldDecoder> ImageDecoder(std::string_view spec, ImageDecodeOptions options) {
  WDS_ASSIGN_OR_RETURN(const ImageSpec parsed, ParseImageSpec(spec));
  WDS_RETURN_IF_ERROR(ValidateImageDecodeOptions(options));
  return FieldDecoder([parsed, options](
                          std::string_view field, const Buffer& data,
                          DecodeContext& ctx) -> absl::StatusOr<std::optional<Value>> {
    if (!IsImageExtension(FieldExtension(field))) return std::nullopt;
    OutputSlots* slots = ctx.worker != nullptr ? WiringOf(*ctx.worker).output_slots.get() : nullptr;
    WDS_ASSIGN_OR_RETURN(Array image, DecodeImageInto(data.view(), parsed, options, *ctx.rng,
                                                      nullptr, slots, field));
    return Value(std::move(image));
  });
}

StageFactory DecodeStage(std::string_view image_spec, ImageDecodeOptions image,
                         DecodeOptions options) {
  absl::StatusOr<FieldDecoder> images = ImageDecoder(image_spec, std::move(image));
  if (!images.ok()) {
    return FailingStage(
        absl::Status(images.status().code(), Cat("decode: ", ToStd(images.status().message()))));
  }
  std::vector<FieldDecoder> decoders = {*std::move(images)};
  for (FieldDecoder& basic : BasicDecoders()) decoders.push_back(std::move(basic));
  return DecodeStage(std::move(decoders), std::move(options));
}

}  // namespace wds
