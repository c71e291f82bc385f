// RouteImage and PlanGpuImage.
#include "gpu/image_route.h"

#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
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

// MarkerAfterScan is true for the markers that may end a scan's
// entropy-coded data: the end of the image, another scan, and the tables,
// restart interval, line count and comments that may come between scans.
bool MarkerAfterScan(uint8_t m) {
  return m == 0xd9 || m == 0xda || m == 0xc4 || m == 0xdb || m == 0xdd || m == 0xdc ||
         m == 0xfe || (m >= 0xe0 && m <= 0xef);
}

std::string Hex(uint8_t b) { return absl::StrCat(absl::Hex(b, absl::kZeroPad2)); }

// WalkScans walks a JPEG's marker segments from SOI to EOI by their lengths
// (an EXIF thumbnail inside APP1 is skipped whole), counting the scans. In a
// scan's entropy-coded data a 0xFF may only be stuffed (FF 00), a fill byte or
// a restart marker until the marker that ends the scan. `problem` is why the
// CPU decoder should take the JPEG instead: nvJPEG decodes a truncated JPEG
// without an error (seen on an H100), and a stray marker in a scan would fail
// only at the consumer, after the handler's chance.
struct ScanWalk {
  int scans = 0;
  std::string problem;
};

ScanWalk WalkScans(std::string_view jpeg) {
  const auto* p = reinterpret_cast<const uint8_t*>(jpeg.data());
  const size_t n = jpeg.size();
  constexpr const char* kTruncated = "no end-of-image marker after the scan (truncated?)";
  ScanWalk walk;
  size_t at = 2;  // after SOI
  bool in_scan = false;
  while (true) {
    if (in_scan) {
      const void* ff = at < n ? std::memchr(p + at, 0xff, n - at) : nullptr;
      if (ff == nullptr) break;
      at = static_cast<size_t>(static_cast<const uint8_t*>(ff) - p);
      if (at + 1 >= n) break;
      const uint8_t b = p[at + 1];
      if (b == 0x00 || (b >= 0xd0 && b <= 0xd7)) {
        at += 2;
        continue;
      }
      if (b == 0xff) {  // a fill byte
        ++at;
        continue;
      }
      if (!MarkerAfterScan(b)) {
        walk.problem = Cat("marker 0xff", Hex(b), " inside scan ", walk.scans, " (corrupt?)");
        return walk;
      }
      in_scan = false;
    }
    if (at + 2 > n) break;
    if (p[at] != 0xff) {
      walk.problem = Cat("no marker where one should be, at byte ", at, " (corrupt?)");
      return walk;
    }
    const uint8_t marker = p[at + 1];
    if (marker == 0xff) {
      ++at;
      continue;
    }
    if (marker == 0xd9) {  // EOI: what follows (trailers) does not matter
      if (walk.scans == 0) walk.problem = "an end-of-image marker before any scan (corrupt?)";
      return walk;
    }
    // Segments are 0xc0-0xfe but for RSTn, SOI and EOI (libjpeg skips what
    // else it meets, and its header may then differ from this walk's).
    if (marker < 0xc0 || (marker >= 0xd0 && marker <= 0xd8)) {
      walk.problem = Cat("marker 0xff", Hex(marker), " outside a scan (corrupt?)");
      return walk;
    }
    if (at + 4 > n) break;
    const size_t length = size_t{p[at + 2]} << 8 | p[at + 3];
    if (length < 2) {
      walk.problem = Cat("a marker segment of length ", length, " (corrupt?)");
      return walk;
    }
    at += 2 + length;
    if (at > n) break;
    if (marker == 0xda) {
      ++walk.scans;
      in_scan = true;
    }
  }
  walk.problem = kTruncated;
  return walk;
}

// HardwareDecodes is true for the JPEG headers nvJPEG's hardware backend
// takes: not progressive, not 4:1:1 subsampled (RouteDecision::hardware also
// asks for a single scan).
bool HardwareDecodes(const JpegHeader& header) {
  const bool subsampled_411 = header.components == 3 && header.sampling[0][0] == 4;
  return !header.progressive && !subsampled_411;
}

}  // namespace

RouteDecision RouteImage(std::string_view data) {
  const std::optional<ImageFormat> format = SniffImageFormat(data);
  if (!format.has_value()) return Cpu("not a JPEG");
  if (*format != ImageFormat::kJpeg) return Cpu(std::string(ImageFormatName(*format)));
  absl::StatusOr<JpegHeader> header = image_internal::ReadJpegHeader(data);
  if (!header.ok()) return Cpu(Cat("unreadable JPEG header: ", ToStd(header.status().message())));
  RouteDecision decision{ImageRoute::kGpu, JpegReason(*header), *header};
  if (decision.reason.empty()) {
    const ScanWalk walk = WalkScans(data);
    decision.reason = walk.problem;
    decision.scans = walk.scans;
    // The JPEG engines take one scan; a baseline JPEG of several scans (one
    // per component) goes to GPU-hybrid, as progressive ones do.
    decision.hardware = HardwareDecodes(*header) && walk.scans == 1;
  }
  if (!decision.reason.empty()) decision.route = ImageRoute::kCpu;
  return decision;
}

GpuImagePlan PlanGpuImage(std::string_view data, const ImageSpec& spec,
                          const ImageDecodeOptions& options, Rng& rng) {
  GpuImagePlan out;
  out.decision = RouteImage(data);
  if (out.decision.route != ImageRoute::kGpu) {
    out.plan = absl::UnknownError("routed to the CPU");  // not per GPU image: it allocates
    return out;
  }
  out.info.format = ImageFormat::kJpeg;
  image_internal::DecodeRequest request{spec, options, rng, out.info, nullptr, {}};
  out.plan =
      image_internal::MakePlan(out.decision.header.width, out.decision.header.height, request);
  return out;
}

}  // namespace wds::gpu
