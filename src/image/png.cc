// PNG decoding through libspng: every colour type and bit depth, tRNS applied
// for RGBA outputs, 16-bit precision kept for float outputs.
#include <spng.h>

#include <memory>

#include "image/codecs.h"
#include "image/output_writer.h"
#include "image/pixels.h"
#include "image/resample.h"
#include "image/scratch.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds::image_internal {
namespace {

// Bounds what ancillary chunks (text, ICC profiles) may hold in memory.
constexpr size_t kChunkLimit = size_t{64} << 20;

struct SpngFree {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};
using SpngContext = std::unique_ptr<spng_ctx, SpngFree>;

absl::Status PngError(int code) {
  const std::string message = spng_strerror(code);
  switch (code) {
    case SPNG_EMEM:
    case SPNG_EOVERFLOW:
    case SPNG_ECHUNK_LIMITS:
    case SPNG_EUSER_WIDTH:
    case SPNG_EUSER_HEIGHT:
      return absl::ResourceExhaustedError(Cat("PNG: ", message));
    case SPNG_EIO:
    case SPNG_EOF:
    case SPNG_EIDAT_TOO_SHORT:
      return absl::DataLossError(Cat("truncated PNG: ", message));
    case SPNG_ESIGNATURE:
    case SPNG_EFMT:
      return absl::InvalidArgumentError(Cat("unsupported PNG: ", message));
    default:
      return absl::DataLossError(Cat("corrupt PNG: ", message));
  }
}

// Format is how libspng is asked to deliver the pixels.
struct Format {
  int spng_format;
  int flags;
  PixelLayout layout;
  bool sixteen_bit;
};

// ChooseFormat picks the libspng output closest to the spec. 16-bit samples
// stay 16-bit only for float outputs; libspng's 8-bit formats keep the high
// byte. Gray-only formats exist just for plain gray sources.
Format ChooseFormat(const spng_ihdr& ihdr, const ImageSpec& spec) {
  const bool gray = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE;
  if (ihdr.bit_depth == 16 && spec.dtype == DType::kFloat32) {
    if (spec.channels == 1 && gray) return {SPNG_FMT_GA16, 0, PixelLayout::kGrayAlpha, true};
    const int flags = spec.channels == 4 ? SPNG_DECODE_TRNS : 0;
    return {SPNG_FMT_RGBA16, flags, PixelLayout::kRgba, true};
  }
  if (spec.channels == 1 && gray && ihdr.bit_depth <= 8) {
    return {SPNG_FMT_G8, 0, PixelLayout::kGray, false};
  }
  if (spec.channels == 4) return {SPNG_FMT_RGBA8, SPNG_DECODE_TRNS, PixelLayout::kRgba, false};
  return {SPNG_FMT_RGB8, 0, PixelLayout::kRgb, false};
}

template <typename T>
void WriteImage(const uint8_t* pixels, const DecodePlan& plan, const Format& format,
                OutputWriter& writer, ScratchScope& scratch) {
  WindowPixels<T> window;
  window.data = reinterpret_cast<const T*>(pixels);
  window.width = plan.width;
  window.height = plan.height;
  window.layout = format.layout;
  window.stride = static_cast<size_t>(plan.width) * LayoutChannels(format.layout);
  WriteOutput(window, WholePixels(plan.crop), plan, writer, scratch);
}

}  // namespace

absl::StatusOr<Array> DecodePng(std::string_view data, DecodeRequest& request) {
  SpngContext ctx(spng_ctx_new(0));
  if (ctx == nullptr) return absl::ResourceExhaustedError("PNG: cannot create a decoder");
  spng_set_crc_action(ctx.get(), SPNG_CRC_ERROR, SPNG_CRC_DISCARD);
  spng_set_chunk_limits(ctx.get(), kChunkLimit, kChunkLimit);
  if (int r = spng_set_png_buffer(ctx.get(), data.data(), data.size()); r != 0) {
    return PngError(r);
  }
  spng_ihdr ihdr;
  if (int r = spng_get_ihdr(ctx.get(), &ihdr); r != 0) return PngError(r);
  WDS_ASSIGN_OR_RETURN(const DecodePlan plan, MakePlan(static_cast<int>(ihdr.width),
                                                       static_cast<int>(ihdr.height), request));
  const Format format = ChooseFormat(ihdr, plan.spec);
  size_t size = 0;
  if (int r = spng_decoded_image_size(ctx.get(), format.spng_format, &size); r != 0) {
    return PngError(r);
  }
  request.info.decoded_width = plan.width;
  request.info.decoded_height = plan.height;
  OutputWriter writer(plan, request.slots, request.field);
  if (plan.identity() && LayoutChannels(format.layout) == plan.spec.channels &&
      !format.sixteen_bit && writer.direct_rows() != nullptr) {
    if (int r = spng_decode_image(ctx.get(), writer.direct_rows(), size, format.spng_format,
                                  format.flags);
        r != 0) {
      return PngError(r);
    }
    return std::move(writer).Take();
  }
  ScratchScope scratch;
  uint8_t* pixels = scratch.Take<uint8_t>(size);
  if (int r = spng_decode_image(ctx.get(), pixels, size, format.spng_format, format.flags);
      r != 0) {
    return PngError(r);
  }
  if (format.sixteen_bit) {
    WriteImage<uint16_t>(pixels, plan, format, writer, scratch);
  } else {
    WriteImage<uint8_t>(pixels, plan, format, writer, scratch);
  }
  return std::move(writer).Take();
}

}  // namespace wds::image_internal
