// A batch's column of GPU jobs, parsed once: every header, every payload, and
// the layout of the batch array, for GpuBatchDecoder's implementations.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/output_slots.h"
#include "gpu/gpu_job.h"
#include "gpu/resize_kernel.h"
#include "wds/gpu/gpu_decode.h"

namespace wds::gpu {

struct JobColumn {
  GpuBatchLayout layout;
  GpuOutput output;  // the first job's (every job's) output
  std::vector<JobHeader> headers;
  std::vector<std::string_view> payloads;
  bool pinned = true;  // every job lies in page-locked memory (JobHeader::pinned)
};

// ParseJobColumn checks every job: a GPU job, of the first job's output, and
// a kPixels payload of width * height * 3 bytes. Errors: InvalidArgument
// naming the job (JobName).
[[nodiscard]] absl::StatusOr<JobColumn> ParseJobColumn(const BytesList& jobs, const TextList* keys,
                                                       const TextList* urls);

// JobName names job i: its site ("<url>: key <key>: field <field>") when it
// has one, else "<url>: key <key>" as far as the batch's keys and urls go,
// else "image <i> of the batch".
std::string JobName(size_t i, std::string_view site, const TextList* keys, const TextList* urls);

// JobError returns `status` with "decode on cuda: " and JobName in front of
// its message.
absl::Status JobError(const absl::Status& status, size_t i, std::string_view site,
                      const TextList* keys, const TextList* urls);

// SourceOf is the resize source of a job whose full decoded image is at
// `pixels` (interleaved RGB, width * 3 bytes a row).
ResizeSource SourceOf(const JobHeader& h, const uint8_t* pixels);

// DecodeJpegOnCpu decodes a kJpeg job's payload at full size to interleaved
// RGB with the CPU decoder, into what `slots` offers when it offers the right
// size. Errors: the CPU decoder's.
[[nodiscard]] absl::StatusOr<Array> DecodeJpegOnCpu(std::string_view jpeg,
                                                    OutputSlots* slots = nullptr);

// DecodeJobJpeg decodes kJpeg job i of `column` with DecodeJpegOnCpu. Errors:
// the CPU decoder's, or InvalidArgument when it decodes to another size than
// the job's header says; both name the job.
[[nodiscard]] absl::StatusOr<Array> DecodeJobJpeg(const JobColumn& column, size_t i,
                                                  OutputSlots* slots, const TextList* keys,
                                                  const TextList* urls);

}  // namespace wds::gpu
