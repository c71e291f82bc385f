// GpuJobs and GpuBatchDecoder for Python (see gpu.cc).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "wds/base/sample.h"

namespace wdspy {
namespace py = pybind11;

// GpuJobs is a batch's column of GPU jobs with the batch's keys and URLs
// (for errors).
struct GpuJobs {
  wds::BytesList jobs;
  wds::TextList keys;
  wds::TextList urls;
};

// GpuJobsToPython wraps a job column. REQUIRES: the GIL is held.
py::object GpuJobsToPython(wds::BytesList jobs, const wds::TextList* keys,
                           const wds::TextList* urls);

// TextsToPython is keys or URLs as a list of str (undecodable bytes as
// surrogates, as every key reaches Python). REQUIRES: the GIL is held.
py::list TextsToPython(const wds::TextList& texts);

// GpuJobsFromPacked is a GpuJobs over PackGpuJobs' bytes in `packed` (its
// jobs are slices of it), with the keys and URLs of TextsToPython. Errors:
// ValueError naming what is malformed. REQUIRES: the GIL is held.
std::shared_ptr<GpuJobs> GpuJobsFromPacked(const wds::Buffer& packed, py::handle keys,
                                           py::handle urls);

// ObjectToPython wraps a ValueObject: PendingImages as a PendingImages
// object; any other is a TypeError naming it. REQUIRES: the GIL is held.
py::object ObjectToPython(wds::ObjectRef object);

void RegisterGpu(py::module_& m);

}  // namespace wdspy
