// The GPU job: what a worker hands the consumer in place of a decoded image
// (wds/gpu/gpu_decode.h). A fixed little-endian header, then the payload: the
// encoded JPEG (kind kJpeg) or interleaved RGB pixels at the output size
// (kind kPixels, decoded by the CPU decoder in the worker); then the site,
// "<url>: key <key>: field <field>", so that an error at the consumer names
// the shard, key and field whatever columns the batch kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "gpu/output_spec.h"
#include "image/decode_plan.h"
#include "wds/base/buffer.h"
#include "wds/base/buffer_pool.h"

namespace wds::gpu {

enum class JobKind : uint8_t { kJpeg = 1, kPixels = 2 };

// JobHeader is the header's content.
struct JobHeader {
  JobKind kind = JobKind::kJpeg;
  bool hardware = false;  // kJpeg: nvJPEG's hardware backend takes it
  bool flip = false;
  // pinned: the job lies in page-locked memory (MakeJob took it from a pinned
  // pool), so a device consumer can read it in place. Set by MakeJob, read
  // by ReadJob; MakeJob ignores what its argument says. A copy of a job's
  // bytes keeps the bit: the device decoder then reads pageable memory in
  // place, which is correct (as with stage_inputs false), only slower.
  bool pinned = false;
  int32_t width = 0;  // of the payload image (the JPEG, or the pixels)
  int32_t height = 0;
  ImageRect crop;  // of the payload image; the whole image for kPixels
  GpuOutput output;  // width and height set: this image's output size
  // site is where the image came from, as the CPU path's errors name it
  // ("<url>: key <key>: field <field>"); empty when unknown. ReadJob's points
  // into the job.
  std::string_view site;
};

// AppendSite appends "<url>: key <key>: field <field>" to `out` ("key <key>:
// field <field>" without a URL): JobHeader::site, in the CPU path's words.
void AppendSite(std::string& out, std::string_view url, std::string_view key,
                std::string_view field);

// WholeJpegJob is the header of a kJpeg job that decodes a whole width x
// height JPEG at its own size, uint8 channels last: what the benchmarks feed
// the decoder. `hardware`: RouteDecision::hardware.
JobHeader WholeJpegJob(int32_t width, int32_t height, bool hardware);

// kJobHeaderBytes is the header's size on the wire.
inline constexpr size_t kJobHeaderBytes = 72;

// MakeJob writes a header, the payload and the site into one new buffer, from `pool`
// when given (job buffers are then recycled, not allocated and freed per
// image; a pinned pool makes a pinned job), else from the heap.
Buffer MakeJob(const JobHeader& header, std::string_view payload, BufferPool* pool = nullptr);

// ReadJob parses `job`'s header; nullopt when it is not a GPU job (no magic,
// too short, an unknown kind, a size beyond kMaxJobSide, a crop outside the
// image, a site longer than the job). `payload` receives what lies between
// the header and the site. A header is not trusted beyond that:
// any bytes field can start with the magic, so the decoders also check the
// JPEG's own size (JpegFrameSize) and the pixels' length against it.

std::optional<JobHeader> ReadJob(const Buffer& job, std::string_view* payload = nullptr);

// kJobPixelSpec is what the CPU decoder makes for a job: interleaved RGB
// (the pixels of a kPixels job, the CPU fallback of a kJpeg job).
inline const ImageSpec kJobPixelSpec{3, DType::kUInt8, false};

// kMaxJobSide bounds every width and height of a job.
inline constexpr int32_t kMaxJobSide = 1 << 15;

// JpegFrameSize is (width, height) from a JPEG's frame header (SOFn), found
// by walking its marker segments; nullopt when there is none before the scan
// or the data ends first.
std::optional<std::pair<int, int>> JpegFrameSize(std::string_view jpeg);

}  // namespace wds::gpu
