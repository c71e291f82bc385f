// RouteImage and PlanGpuImage.
#include "gpu/image_route.h"

#include <optional>
#include <utility>

#include "wds/internal/base/strings.h"

namespace wds::gpu {
namespace {

using image_internal::JpegHeader;

// StandardSubsampling is true when the chroma planes are 1x1 and luma's
// factors are one of the layouts nvJPEG's hardware and hybrid decoders take.
bool StandardSubsampling(const JpegHeader& h) {
  if (h.sampling[1][0] != 1 || h.sampling[1][1] != 1 || h.sampling[2][0] != 1 ||
      h.sampling[2][1] != 1) {
    return false;
  }
  const int x = h.sampling[0][0];
  const int y = h.sampling[0][1];
  return (x == 1 && y == 1) || (x == 2 && y == 1) || (x == 2 && y == 2) || (x == 1 && y == 2) ||
         (x == 4 && y == 1);
}

std::string SamplingText(const JpegHeader& h) {
  std::string out;
  for (int i = 0; i < h.components && i < 4; ++i) {
    out += Cat(i == 0 ? "" : ",", h.sampling[i][0], "x", h.sampling[i][1]);
  }
  return out;
}

RouteDecision Cpu(std::string reason) { return {ImageRoute::kCpu, std::move(reason), {}}; }

// JpegReason is why the CPU decodes a JPEG with a readable header, or empty.
std::string JpegReason(const JpegHeader& h) {
  if (h.cmyk) return "CMYK JPEG";
  if (h.arithmetic) return "arithmetic-coded JPEG";
  if (h.precision != 8) return Cat(h.precision, "-bit JPEG");
  if (h.components != 1 && h.components != 3) return Cat(h.components, "-component JPEG");
  if (h.components == 3 && !StandardSubsampling(h)) {
    return Cat("chroma subsampling ", SamplingText(h));
  }
  return "";
}

}  // namespace

bool HardwareDecodes(const JpegHeader& header) {
  const bool subsampled_411 = header.components == 3 && header.sampling[0][0] == 4;
  return !header.progressive && !subsampled_411;
}

RouteDecision RouteImage(std::string_view data) {
  const std::optional<ImageFormat> format = SniffImageFormat(data);
  if (!format.has_value()) return Cpu("not a JPEG");
  if (*format != ImageFormat::kJpeg) return Cpu(std::string(ImageFormatName(*format)));
  absl::StatusOr<JpegHeader> header = image_internal::ReadJpegHeader(data);
  if (!header.ok()) return Cpu(Cat("unreadable JPEG header: ", ToStd(header.status().message())));
  RouteDecision decision{ImageRoute::kGpu, JpegReason(*header), *header};
  // nvJPEG decodes a JPEG cut short without an error, filling in the rest
  // (seen on an H100): one whose last scan has no end-of-image marker after
  // it goes to the CPU decoder, which reports the truncation. An EOI can only
  // be a marker: in scan data 0xFF is followed by 0x00 or a restart marker.
  // The last scan's: an EXIF thumbnail before the image has scans of its own.
  const size_t scan = data.rfind("\xff\xda");
  const size_t eoi = data.rfind("\xff\xd9");
  if (decision.reason.empty() && (scan == std::string_view::npos ||
                                  eoi == std::string_view::npos || eoi < scan)) {
    decision.reason = "no end-of-image marker after the scan (truncated?)";
  }
  if (!decision.reason.empty()) decision.route = ImageRoute::kCpu;
  return decision;
}

GpuImagePlan PlanGpuImage(std::string_view data, const ImageSpec& spec,
                          const ImageDecodeOptions& options, Rng& rng) {
  GpuImagePlan out;
  out.decision = RouteImage(data);
  if (out.decision.route != ImageRoute::kGpu) return out;
  out.info.format = ImageFormat::kJpeg;
  image_internal::DecodeRequest request{spec, options, rng, out.info, nullptr, {}};
  out.plan =
      image_internal::MakePlan(out.decision.header.width, out.decision.header.height, request);
  return out;
}

}  // namespace wds::gpu
