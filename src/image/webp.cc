// WebP decoding through libwebp, which crops and scales while it decodes.
#include <webp/decode.h>

#include "image/codecs.h"
#include "image/output_writer.h"
#include "image/pixels.h"
#include "image/resample.h"
#include "image/scratch.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds::image_internal {
namespace {

absl::Status WebpError(VP8StatusCode code) {
  switch (code) {
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return absl::DataLossError("truncated WebP: not enough data");
    case VP8_STATUS_BITSTREAM_ERROR:
      return absl::DataLossError("corrupt WebP: bitstream error");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return absl::InvalidArgumentError("unsupported WebP: unsupported feature");
    case VP8_STATUS_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError("WebP: out of memory");
    case VP8_STATUS_INVALID_PARAM:
      return absl::InvalidArgumentError("WebP: invalid decoding parameter");
    default:
      return absl::InternalError(Cat("WebP: decoder status ", static_cast<int>(code)));
  }
}

// Frees libwebp's output buffer (a no-op for external memory) on every path.
struct DecoderConfig {
  WebPDecoderConfig config;
  ~DecoderConfig() { WebPFreeDecBuffer(&config.output); }
};

// ConfigureGeometry sets libwebp's crop and scale for the plan. libwebp starts
// crops at even offsets; the plan and the report follow it.
void ConfigureGeometry(DecodePlan& plan, WebPDecoderOptions& options, ImageDecodeInfo& info) {
  if (!(plan.crop == ImageRect{0, 0, plan.width, plan.height})) {
    plan.crop.x &= ~1;
    plan.crop.y &= ~1;
    info.crop = plan.crop;
    options.use_cropping = 1;
    options.crop_left = plan.crop.x;
    options.crop_top = plan.crop.y;
    options.crop_width = plan.crop.width;
    options.crop_height = plan.crop.height;
  }
  if (plan.out_width != plan.crop.width || plan.out_height != plan.crop.height) {
    options.use_scaling = 1;
    options.scaled_width = plan.out_width;
    options.scaled_height = plan.out_height;
  }
}

}  // namespace

absl::StatusOr<Array> DecodeWebp(std::string_view data, DecodeRequest& request) {
  DecoderConfig holder;
  WebPDecoderConfig& config = holder.config;
  if (!WebPInitDecoderConfig(&config)) return absl::InternalError("WebP: decoder version mismatch");
  const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
  if (VP8StatusCode r = WebPGetFeatures(bytes, data.size(), &config.input); r != VP8_STATUS_OK) {
    return WebpError(r);
  }
  if (config.input.has_animation) {
    return absl::InvalidArgumentError("unsupported WebP: animated WebP is not supported");
  }
  WDS_ASSIGN_OR_RETURN(DecodePlan plan, MakePlan(config.input.width, config.input.height, request));
  ConfigureGeometry(plan, config.options, request.info);
  request.info.decoded_width = plan.out_width;
  request.info.decoded_height = plan.out_height;
  const bool rgba = plan.spec.channels == 4;
  const int channels = rgba ? 4 : 3;
  OutputWriter writer(plan, request.slots, request.field);
  const bool direct = plan.spec.channels != 1 && writer.direct_rows() != nullptr;
  const size_t stride = static_cast<size_t>(plan.out_width) * channels;
  const size_t size = stride * plan.out_height;
  ScratchScope scratch;
  uint8_t* pixels = direct ? writer.direct_rows() : scratch.Take<uint8_t>(size);
  config.output.colorspace = rgba ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = pixels;
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = size;
  if (VP8StatusCode r = WebPDecode(bytes, data.size(), &config); r != VP8_STATUS_OK) {
    return WebpError(r);
  }
  if (!direct) {
    WindowPixels<uint8_t> window;
    window.data = pixels;
    window.stride = stride;
    window.width = plan.out_width;
    window.height = plan.out_height;
    window.layout = rgba ? PixelLayout::kRgba : PixelLayout::kRgb;
    const ImageRect whole{0, 0, plan.out_width, plan.out_height};
    WriteOutput(window, WholePixels(whole), plan, writer, scratch);
  }
  return std::move(writer).Take();
}

}  // namespace wds::image_internal
