// Which device decodes each image of a batch on the GPU path, and the plan
// (size, crop, flip) of the images that go to nvJPEG. Host code only: it
// reads headers with the CPU decoders' libjpeg and draws crops with their
// MakePlan, so one seed gives the same crops whichever device decodes.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "image/codecs.h"
#include "image/decode_plan.h"
#include "wds/base/random.h"
#include "wds/image/image.h"

namespace wds::gpu {

// ImageRoute says who decodes one image. Every image nvJPEG's batched decode
// can take goes to the GPU: 8-bit Huffman JPEGs (baseline or progressive) of
// one component, or of three with standard chroma subsampling (4:4:4, 4:2:2,
// 4:2:0, 4:4:0, 4:1:1). Everything else is decoded by the CPU decoder, which
// also reports what is wrong with an image that cannot be decoded at all.
enum class ImageRoute { kGpu, kCpu };

// RouteDecision is ImageRoute with its reason and, for JPEGs whose header
// parsed, the header.
struct RouteDecision {
  ImageRoute route = ImageRoute::kCpu;
  // reason is empty for kGpu, else why the CPU decodes it: "PNG", "WebP",
  // "not a JPEG", "CMYK JPEG", "arithmetic-coded JPEG", "4-component JPEG",
  // "chroma subsampling 1x2,2x1,1x1", "unreadable JPEG header: <error>"
  // (12-bit, lossless and corrupt headers: the CPU decoder then fails on them
  // with its own error), or what the walk of its markers found: "no
  // end-of-image marker after the scan (truncated?)" (nvJPEG decodes
  // truncated JPEGs silently), "marker 0xff06 inside scan 1 (corrupt?)", ...
  // (the CPU decoder then decides, and its error meets the handler in the
  // worker, as on the CPU path).
  std::string reason;
  image_internal::JpegHeader header;  // valid when the header parsed
  int scans = 0;          // kGpu: how many scans the JPEG has
  bool hardware = false;  // kGpu: nvJPEG's hardware backend takes it (one scan)
};

// RouteImage inspects `data`'s signature and, for a JPEG, its header.
// Thread-safe.
RouteDecision RouteImage(std::string_view data);


// GpuImagePlan is one image's share of a GPU batch: its route and, when
// routed to the GPU, its decode plan.
struct GpuImagePlan {
  RouteDecision decision;
  // plan is MakePlan's result for a GPU-routed image (drawn from the rng),
  // or its error (max_pixels); UnknownError("routed to the CPU") for kCpu.
  absl::StatusOr<image_internal::DecodePlan> plan;
  ImageDecodeInfo info;
};

// PlanGpuImage routes `data` and, for a GPU image, draws its plan from `rng`
// through the CPU path's MakePlan. A CPU-routed image draws nothing here: its
// caller decodes it with DecodeImage on the same `rng`, at the same point of
// the batch, so the stream of draws is the CPU path's for any mix of routes.
// REQUIRES: options are valid (ValidateImageDecodeOptions).
GpuImagePlan PlanGpuImage(std::string_view data, const ImageSpec& spec,
                          const ImageDecodeOptions& options, Rng& rng);

}  // namespace wds::gpu
