// GPU jobs (src/gpu/gpu_job.h) as a consumer meets them: bytes columns whose
// values may start with the job magic whatever made them (any bytes field of
// a shard can). The input is split before each "WDSGPUJ1"; the column is
// checked, laid out and, when it passes, decoded by the host decoder, which
// shares the checks of the device decoder. The input is also read as a
// packed column (UnpackGpuJobs, what a pickled GpuJobs carries).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "gpu/gpu_job.h"
#include "wds/gpu/gpu_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kMagic = "WDSGPUJ1";
  wds::BytesList jobs;
  size_t at = text.find(kMagic);
  while (at != std::string_view::npos && jobs.size() < 8) {
    const size_t next = text.find(kMagic, at + kMagic.size());
    jobs.push_back(wds::Buffer::Copy(text.substr(at, next == std::string_view::npos ? next : next - at)));
    at = next;
  }
  (void)wds::gpu::JpegFrameSize(text);
  // The input as a packed column (pickled GpuJobs), and the split jobs packed
  // and read back: every job that reads as one comes back the same size.
  (void)wds::UnpackGpuJobs(wds::Buffer::Copy(text));
  std::vector<uint8_t> packed(wds::GpuJobsPackedSize(jobs));
  wds::PackGpuJobs(jobs, packed.data());
  absl::StatusOr<wds::BytesList> back = wds::UnpackGpuJobs(wds::Buffer::Copy(
      std::string_view(reinterpret_cast<const char*>(packed.data()), packed.size())));
  bool all_jobs = true;
  for (const wds::Buffer& job : jobs) all_jobs = all_jobs && wds::gpu::ReadJob(job).has_value();
  if (back.ok() != all_jobs) __builtin_trap();
  for (size_t i = 0; back.ok() && i < jobs.size(); ++i) {
    if ((*back)[i].size() != jobs[i].size()) __builtin_trap();
  }
  if (jobs.empty()) return 0;
  (void)wds::IsGpuJobColumn(wds::Value(jobs));
  const wds::TextList keys(jobs.size(), "key");
  absl::StatusOr<wds::GpuBatchLayout> layout = wds::GpuJobLayout(jobs, &keys, nullptr);
  if (!layout.ok() || layout->nbytes() > (size_t{64} << 20)) return 0;
  auto decoder = wds::GpuBatchDecoder::Create(wds::GpuBatchDecoder::kHost);
  if (!decoder.ok()) __builtin_trap();
  std::vector<uint8_t> out(layout->nbytes());
  (void)(*decoder)->Decode(jobs, &keys, nullptr, out.data(), nullptr);
  return 0;
}
