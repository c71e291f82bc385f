// JPEG decoding through libjpeg-turbo's libjpeg API: DCT-scaled, cropped
// (jpeg_crop_scanline / jpeg_skip_scanlines) and full-size decodes share one
// path, so truncation and warnings are judged the same way everywhere.
#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>

// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "image/codecs.h"
#include "image/output_writer.h"
#include "image/pixels.h"
#include "image/resample.h"
#include "image/scratch.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds::image_internal {
namespace {

// Progressive JPEGs with thousands of scans take minutes to decode; tjbench's
// -limitscans uses the same bound.
constexpr int kMaxScans = 500;
// At a crop's left and right edges libjpeg's fancy upsampling has no
// neighbouring chroma, so the window's outermost columns differ from a full
// decode; decoding this many more columns each side keeps them out of use.
constexpr int kColumnMargin = 2;
constexpr int kBatchRows = 16;

struct JpegErrors {
  jpeg_error_mgr pub;  // first: libjpeg hands back a jpeg_error_mgr*
  std::jmp_buf jump;
  absl::StatusCode code = absl::StatusCode::kOk;
  const char* what = "";
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void Fail(j_common_ptr cinfo, absl::StatusCode code, const char* what) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  errors->code = code;
  errors->what = what;
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

bool IsUnsupportedVariant(int msg_code) {
  return msg_code == JERR_BAD_PRECISION || msg_code == JERR_CONVERSION_NOTIMPL ||
         msg_code == JERR_NOT_COMPILED || msg_code == JERR_SOF_UNSUPPORTED;
}

void OnError(j_common_ptr cinfo) {
  if (IsUnsupportedVariant(cinfo->err->msg_code)) {
    Fail(cinfo, absl::StatusCode::kInvalidArgument, "unsupported JPEG");
  }
  // A header beyond libjpeg's 65500-pixel sides is refused before anything
  // is allocated, like one beyond max_pixels.
  if (cinfo->err->msg_code == JERR_IMAGE_TOO_BIG) {
    Fail(cinfo, absl::StatusCode::kResourceExhausted, "JPEG image too large");
  }
  Fail(cinfo, absl::StatusCode::kDataLoss, "corrupt JPEG");
}

// Running out of data is an error; other warnings (extraneous bytes, a bad
// restart marker) leave a usable image, and PIL accepts them too.
void OnMessage(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    Fail(cinfo, absl::StatusCode::kDataLoss, "truncated JPEG");
  }
}

void OnProgress(j_common_ptr cinfo) {
  const auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->input_scan_number <= kMaxScans) return;
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  errors->code = absl::StatusCode::kResourceExhausted;
  errors->what = "JPEG";
  std::snprintf(errors->message, sizeof(errors->message), "more than %d scans", kMaxScans);
  std::longjmp(errors->jump, 1);
}

// JpegState owns the libjpeg decompressor. The Guarded* functions below run
// libjpeg calls under setjmp and return false after an error (see Error());
// they hold no objects with destructors, so longjmp skips nothing.
struct JpegState {
  jpeg_decompress_struct cinfo{};
  JpegErrors errors;
  jpeg_progress_mgr progress{};

  JpegState() {
    cinfo.err = jpeg_std_error(&errors.pub);
    errors.pub.error_exit = OnError;
    errors.pub.emit_message = OnMessage;
    progress.progress_monitor = OnProgress;
  }
  ~JpegState() { jpeg_destroy_decompress(&cinfo); }
  JpegState(const JpegState&) = delete;
  JpegState& operator=(const JpegState&) = delete;

  absl::Status Error() const {
    return absl::Status(errors.code, Cat(errors.what, ": ", errors.message));
  }
};

bool GuardedReadHeader(JpegState& s, std::string_view data) {
  if (setjmp(s.errors.jump)) return false;
  jpeg_create_decompress(&s.cinfo);
  s.cinfo.progress = &s.progress;
  jpeg_mem_src(&s.cinfo, reinterpret_cast<const unsigned char*>(data.data()),
               static_cast<unsigned long>(data.size()));
  jpeg_read_header(&s.cinfo, TRUE);
  return true;
}

bool GuardedStart(JpegState& s, J_COLOR_SPACE space, int scale) {
  if (setjmp(s.errors.jump)) return false;
  s.cinfo.out_color_space = space;
  s.cinfo.scale_num = static_cast<unsigned int>(scale);
  s.cinfo.scale_denom = 8;
  jpeg_start_decompress(&s.cinfo);
  return true;
}

bool GuardedCropColumns(JpegState& s, JDIMENSION* x, JDIMENSION* width) {
  if (setjmp(s.errors.jump)) return false;
  jpeg_crop_scanline(&s.cinfo, x, width);
  return true;
}

bool GuardedSkipRows(JpegState& s, JDIMENSION rows) {
  if (setjmp(s.errors.jump)) return false;
  jpeg_skip_scanlines(&s.cinfo, rows);
  return true;
}

bool GuardedReadRows(JpegState& s, JSAMPROW* rows, int count) {
  if (setjmp(s.errors.jump)) return false;
  for (int done = 0; done < count;) {
    const JDIMENSION got =
        jpeg_read_scanlines(&s.cinfo, rows + done, static_cast<JDIMENSION>(count - done));
    if (got == 0) ERREXIT(&s.cinfo, JERR_INPUT_EMPTY);
    done += static_cast<int>(got);
  }
  return true;
}

bool GuardedFinish(JpegState& s) {
  if (setjmp(s.errors.jump)) return false;
  jpeg_finish_decompress(&s.cinfo);
  return true;
}

// DctScale is the smallest M (of M/8) at which the crop still covers the
// output, so that resampling only ever shrinks, or 8 when the output is
// larger. Only 1/8, 2/8 and 4/8 are offered: libjpeg-turbo has SIMD inverse
// DCTs for them, while 3/8 is slower than 4/8 and 5/8 .. 7/8 are slower than
// a full-size decode.
int DctScale(const DecodePlan& plan) {
  for (int m : {1, 2, 4}) {
    if (int64_t{plan.crop.width} * m >= int64_t{8} * plan.out_width &&
        int64_t{plan.crop.height} * m >= int64_t{8} * plan.out_height) {
      return m;
    }
  }
  return 8;
}

struct ColourChoice {
  J_COLOR_SPACE space;
  PixelLayout layout;
};

// ChooseColour asks libjpeg for the spec's channels, except for CMYK, which
// libjpeg cannot turn into RGB.
ColourChoice ChooseColour(const jpeg_decompress_struct& cinfo, int channels) {
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    return {JCS_CMYK, cinfo.saw_Adobe_marker ? PixelLayout::kAdobeCmyk : PixelLayout::kCmyk};
  }
  if (channels == 1) return {JCS_GRAYSCALE, PixelLayout::kGray};
  if (channels == 3) return {JCS_RGB, PixelLayout::kRgb};
  return {JCS_EXT_RGBA, PixelLayout::kRgba};
}

// DecodeStraight reads the whole image into `out`, rows of `row_bytes`.
absl::Status DecodeStraight(JpegState& s, uint8_t* out, size_t row_bytes) {
  const int height = static_cast<int>(s.cinfo.output_height);
  JSAMPROW rows[kBatchRows];
  for (int y = 0; y < height; y += kBatchRows) {
    const int n = std::min(kBatchRows, height - y);
    for (int i = 0; i < n; ++i) rows[i] = out + static_cast<size_t>(y + i) * row_bytes;
    if (!GuardedReadRows(s, rows, n)) return s.Error();
  }
  if (!GuardedFinish(s)) return s.Error();
  return absl::OkStatus();
}

// Window is the part of the scaled image a crop decodes, and the plan's crop
// within it.
struct Window {
  JDIMENSION x = 0;
  JDIMENSION width = 0;
  int first_row = 0;
  int end_row = 0;
  WindowRegion region;
};

// PlanWindow maps the crop to scaled pixels (scaled pixel i covers source
// pixels [8i/M, 8(i+1)/M)) and narrows the decoder to the columns it needs
// (libjpeg widens them to iMCU boundaries).
absl::StatusOr<Window> PlanWindow(JpegState& s, const DecodePlan& plan, int scale) {
  const ImageRect& crop = plan.crop;
  const double x0 = crop.x * scale / 8.0;
  const double x1 = (crop.x + crop.width) * scale / 8.0;
  const double y0 = crop.y * scale / 8.0;
  const double y1 = (crop.y + crop.height) * scale / 8.0;
  const int scaled_width = static_cast<int>(s.cinfo.output_width);
  const int first_column = std::max(0, static_cast<int>(std::floor(x0)) - kColumnMargin);
  const int end_column = std::min(scaled_width, static_cast<int>(std::ceil(x1)) + kColumnMargin);
  Window w;
  w.x = static_cast<JDIMENSION>(first_column);
  w.width = static_cast<JDIMENSION>(end_column - first_column);
  if (first_column > 0 || end_column < scaled_width) {
    if (!GuardedCropColumns(s, &w.x, &w.width)) return s.Error();
  }
  w.first_row = static_cast<int>(std::floor(y0));
  w.end_row = std::min(static_cast<int>(s.cinfo.output_height), static_cast<int>(std::ceil(y1)));
  w.region = {x0 - w.x, y0 - w.first_row, x1 - x0, y1 - y0};
  return w;
}

// DecodeWindow decodes the window's rows into `pixels` (`stride` samples a
// row).
absl::Status DecodeWindow(JpegState& s, const Window& w, uint8_t* pixels, size_t stride) {
  if (w.first_row > 0 && !GuardedSkipRows(s, static_cast<JDIMENSION>(w.first_row))) {
    return s.Error();
  }
  JSAMPROW rows[kBatchRows];
  for (int y = w.first_row; y < w.end_row; y += kBatchRows) {
    const int n = std::min(kBatchRows, w.end_row - y);
    for (int i = 0; i < n; ++i) rows[i] = pixels + stride * (y - w.first_row + i);
    if (!GuardedReadRows(s, rows, n)) return s.Error();
  }
  // A decode that read every row also checks what follows the image data.
  if (s.cinfo.output_scanline == s.cinfo.output_height && !GuardedFinish(s)) return s.Error();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JpegHeader> ReadJpegHeader(std::string_view data) {
  JpegState s;
  if (!GuardedReadHeader(s, data)) return s.Error();
  const jpeg_decompress_struct& c = s.cinfo;
  JpegHeader header;
  header.width = static_cast<int>(c.image_width);
  header.height = static_cast<int>(c.image_height);
  header.components = c.num_components;
  header.precision = c.data_precision;
  header.progressive = c.progressive_mode != 0;
  header.arithmetic = c.arith_code != 0;
  header.adobe = c.saw_Adobe_marker != 0;
  header.cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  for (int i = 0; i < std::min(c.num_components, 4); ++i) {
    header.sampling[i][0] = c.comp_info[i].h_samp_factor;
    header.sampling[i][1] = c.comp_info[i].v_samp_factor;
  }
  return header;
}

absl::StatusOr<Array> DecodeJpeg(std::string_view data, DecodeRequest& request) {
  JpegState s;
  if (!GuardedReadHeader(s, data)) return s.Error();
  WDS_ASSIGN_OR_RETURN(const DecodePlan plan,
                       MakePlan(static_cast<int>(s.cinfo.image_width),
                                static_cast<int>(s.cinfo.image_height), request));
  const ColourChoice colour = ChooseColour(s.cinfo, plan.spec.channels);
  const int scale = plan.identity() ? 8 : DctScale(plan);
  if (!GuardedStart(s, colour.space, scale)) return s.Error();
  ImageDecodeInfo& info = request.info;
  info.dct_scale = scale;
  OutputWriter writer(plan, request.slots, request.field);
  // libjpeg produces the spec's channels itself for everything but CMYK.
  if (plan.identity() && colour.space != JCS_CMYK && writer.direct_rows() != nullptr) {
    info.decoded_width = plan.width;
    info.decoded_height = plan.height;
    WDS_RETURN_IF_ERROR(DecodeStraight(s, writer.direct_rows(),
                                       static_cast<size_t>(plan.width) * plan.spec.channels));
    return std::move(writer).Take();
  }
  WDS_ASSIGN_OR_RETURN(const Window window, PlanWindow(s, plan, scale));
  ScratchScope scratch;
  WindowPixels<uint8_t> pixels;
  pixels.width = static_cast<int>(window.width);
  pixels.height = window.end_row - window.first_row;
  pixels.layout = colour.layout;
  pixels.stride = static_cast<size_t>(pixels.width) * LayoutChannels(colour.layout);
  uint8_t* rows = scratch.Take<uint8_t>(pixels.stride * pixels.height);
  pixels.data = rows;
  info.decoded_width = pixels.width;
  info.decoded_height = pixels.height;
  WDS_RETURN_IF_ERROR(DecodeWindow(s, window, rows, pixels.stride));
  WriteOutput(pixels, window.region, plan, writer, scratch);
  return std::move(writer).Take();
}

}  // namespace wds::image_internal
