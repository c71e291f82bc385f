// MakeJob and ReadJob: the GPU job's wire format, read and written field by
// field (little-endian), so no struct layout is part of it; PackGpuJobs and
// UnpackGpuJobs: a column of jobs as one byte string.
#include "gpu/gpu_job.h"

#include <cstring>
#include <vector>

#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"

namespace wds::gpu {
namespace {

constexpr char kMagic[8] = {'W', 'D', 'S', 'G', 'P', 'U', 'J', '1'};
// The flags byte follows the magic and the kind; kPinnedFlag is its bit for
// JobHeader::pinned.
constexpr size_t kFlagsAt = 9;
constexpr uint8_t kPinnedFlag = 8;

void Put32(uint8_t*& p, uint32_t v) {
  for (int i = 0; i < 4; ++i) *p++ = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t*& p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{*p++} << (8 * i);
  return v;
}
void Put64(uint8_t*& p, uint64_t v) {
  Put32(p, static_cast<uint32_t>(v));
  Put32(p, static_cast<uint32_t>(v >> 32));
}
uint64_t Get64(const uint8_t*& p) {
  const uint64_t low = Get32(p);
  return low | uint64_t{Get32(p)} << 32;
}
void PutFloat(uint8_t*& p, float f) {
  uint32_t v;
  std::memcpy(&v, &f, 4);
  Put32(p, v);
}
float GetFloat(const uint8_t*& p) {
  const uint32_t v = Get32(p);
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}

}  // namespace

void AppendSite(std::string& out, std::string_view url, std::string_view key,
                std::string_view field) {
  if (!url.empty()) out.append(url).append(": ");
  out.append("key ").append(key).append(": field ").append(field);
}

JobHeader WholeJpegJob(int32_t width, int32_t height, bool hardware) {
  JobHeader h;
  h.kind = JobKind::kJpeg;
  h.hardware = hardware;
  h.width = width;
  h.height = height;
  h.crop = {0, 0, width, height};
  h.output.width = width;
  h.output.height = height;
  return h;
}

Buffer MakeJob(const JobHeader& h, std::string_view payload, BufferPool* pool) {
  const size_t size = kJobHeaderBytes + payload.size() + h.site.size();
  absl::StatusOr<Buffer> pooled;  // default: an error without a message, no allocation
  if (pool != nullptr) pooled = pool->Acquire(size);
  Buffer job = pooled.ok() ? *std::move(pooled) : Buffer::Allocate(size);
  uint8_t* p = job.mutable_data();
  std::memset(p, 0, kJobHeaderBytes);
  std::memcpy(p, kMagic, 8);
  p += 8;
  *p++ = static_cast<uint8_t>(h.kind);
  const bool pinned = pooled.ok() && pool->pinned();
  *p++ = static_cast<uint8_t>((h.hardware ? 1 : 0) | (h.flip ? 2 : 0) |
                              (h.output.channels_first ? 4 : 0) | (pinned ? kPinnedFlag : 0));
  *p++ = static_cast<uint8_t>(h.output.dtype);
  *p++ = 0;
  for (int32_t v : {h.width, h.height, h.crop.x, h.crop.y, h.crop.width, h.crop.height,
                    h.output.width, h.output.height}) {
    Put32(p, static_cast<uint32_t>(v));
  }
  for (int c = 0; c < 3; ++c) PutFloat(p, h.output.normalize.mean[c]);
  for (int c = 0; c < 3; ++c) PutFloat(p, h.output.normalize.std[c]);
  Put32(p, static_cast<uint32_t>(h.site.size()));  // the header's last 4 bytes; the site ends the job
  p = job.mutable_data() + kJobHeaderBytes;
  if (!payload.empty()) std::memcpy(p, payload.data(), payload.size());
  if (!h.site.empty()) std::memcpy(p + payload.size(), h.site.data(), h.site.size());
  return job;
}

std::optional<JobHeader> ReadJob(const Buffer& job, std::string_view* payload) {
  if (job.size() < kJobHeaderBytes || std::memcmp(job.data(), kMagic, 8) != 0) return std::nullopt;
  const uint8_t* p = job.data() + 8;
  JobHeader h;
  const uint8_t kind = *p++;
  if (kind != static_cast<uint8_t>(JobKind::kJpeg) && kind != static_cast<uint8_t>(JobKind::kPixels))
    return std::nullopt;
  h.kind = static_cast<JobKind>(kind);
  const uint8_t flags = *p++;
  h.hardware = (flags & 1) != 0;
  h.flip = (flags & 2) != 0;
  h.output.channels_first = (flags & 4) != 0;
  h.pinned = (flags & kPinnedFlag) != 0;
  const uint8_t dtype = *p++;
  if (dtype != static_cast<uint8_t>(DType::kUInt8) && dtype != static_cast<uint8_t>(DType::kFloat32) &&
      dtype != static_cast<uint8_t>(DType::kFloat16)) {
    return std::nullopt;
  }
  h.output.dtype = static_cast<DType>(dtype);
  ++p;
  int32_t* fields[] = {&h.width,     &h.height,       &h.crop.x,       &h.crop.y,
                       &h.crop.width, &h.crop.height, &h.output.width, &h.output.height};
  for (int32_t* f : fields) *f = static_cast<int32_t>(Get32(p));
  for (int c = 0; c < 3; ++c) h.output.normalize.mean[c] = GetFloat(p);
  for (int c = 0; c < 3; ++c) h.output.normalize.std[c] = GetFloat(p);
  const size_t site_length = Get32(p);
  if (site_length > job.size() - kJobHeaderBytes) return std::nullopt;
  for (int32_t side : {h.width, h.height, h.output.width, h.output.height}) {
    if (side <= 0 || side > kMaxJobSide) return std::nullopt;
  }
  if (h.crop.x < 0 || h.crop.y < 0 || h.crop.width <= 0 || h.crop.height <= 0 ||
      h.crop.x > h.width - h.crop.width || h.crop.y > h.height - h.crop.height) {
    return std::nullopt;
  }
  const auto* body = reinterpret_cast<const char*>(job.data()) + kJobHeaderBytes;
  const size_t payload_length = job.size() - kJobHeaderBytes - site_length;
  h.site = std::string_view(body + payload_length, site_length);
  if (payload != nullptr) *payload = std::string_view(body, payload_length);
  return h;
}

std::optional<std::pair<int, int>> JpegFrameSize(std::string_view jpeg) {
  const auto* p = reinterpret_cast<const uint8_t*>(jpeg.data());
  const size_t n = jpeg.size();
  if (n < 4 || p[0] != 0xff || p[1] != 0xd8) return std::nullopt;
  size_t at = 2;
  while (at + 4 <= n) {
    if (p[at] != 0xff) return std::nullopt;
    const uint8_t marker = p[at + 1];
    if (marker == 0xff) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0xda || marker == 0xd9) return std::nullopt;  // scan or end: no frame
    const size_t length = size_t{p[at + 2]} << 8 | p[at + 3];
    const bool frame = marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 &&
                       marker != 0xcc;
    if (frame) {
      if (length < 7 || at + 9 > n) return std::nullopt;
      const int height = p[at + 5] << 8 | p[at + 6];
      const int width = p[at + 7] << 8 | p[at + 8];
      return std::make_pair(width, height);
    }
    at += 2 + length;
  }
  return std::nullopt;
}

}  // namespace wds::gpu

namespace wds {

size_t GpuJobsPackedSize(const BytesList& jobs) {
  size_t size = 8 * (1 + jobs.size());
  for (const Buffer& job : jobs) size += job.size();
  return size;
}

void PackGpuJobs(const BytesList& jobs, uint8_t* out) {
  gpu::Put64(out, jobs.size());
  for (const Buffer& job : jobs) gpu::Put64(out, job.size());
  for (const Buffer& job : jobs) {
    if (job.size() > 0) std::memcpy(out, job.data(), job.size());
    // The copy lies in ordinary memory, whatever the original did.
    if (job.size() > gpu::kFlagsAt) out[gpu::kFlagsAt] &= static_cast<uint8_t>(~gpu::kPinnedFlag);
    out += job.size();
  }
}

absl::StatusOr<BytesList> UnpackGpuJobs(const Buffer& packed) {
  auto malformed = [&](auto&&... what) {
    return absl::InvalidArgumentError(
        Cat("packed GPU jobs (", packed.size(), " bytes): ", what...));
  };
  const uint8_t* p = packed.data();
  if (packed.size() < 8) return malformed("too short for the count");
  const uint64_t count = gpu::Get64(p);
  if (count > (packed.size() - 8) / 8) return malformed("a count of ", count, " jobs");
  size_t left = packed.size() - 8 * (1 + count);  // the jobs' bytes
  std::vector<size_t> lengths(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t length = gpu::Get64(p);
    if (length > left) return malformed("job ", i, "'s length ", length, " passes the end");
    lengths[i] = length;
    left -= length;
  }
  if (left != 0) return malformed(left, " bytes after the last job");
  BytesList jobs;
  jobs.reserve(count);
  size_t at = 8 * (1 + count);
  for (size_t i = 0; i < count; ++i) {
    Buffer job = packed.Slice(at, lengths[i]);
    if (!gpu::ReadJob(job, nullptr).has_value()) return malformed("job ", i, " is not a GPU job");
    jobs.push_back(std::move(job));
    at += lengths[i];
  }
  return jobs;
}

}  // namespace wds
