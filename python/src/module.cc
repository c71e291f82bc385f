// webdataset_cpp._core: the compiled part of webdataset_cpp. It exposes a few
// coarse objects (sources, stages, chains, the Loader, writers) and
// conversions; webdataset_cpp/*.py builds the reference package's API on
// them.
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "chain.h"
#include "convert.h"
#include "py_ref.h"

namespace wdspy {
void RegisterLoader(py::module_& m);
void RegisterWriters(py::module_& m);
void RegisterShards(py::module_& m);
void RegisterFields(py::module_& m);
void RegisterSharedBatches(py::module_& m);
void RegisterRemote(py::module_& m);
void RegisterGpu(py::module_& m);
void RegisterIndexed(py::module_& m);
}  // namespace wdspy

PYBIND11_MODULE(_core, m) {
  m.doc() = "The native core of webdataset_cpp (use the webdataset_cpp package instead).";
  wdspy::RegisterArrays(m);
  wdspy::RegisterConvert(m);
  wdspy::RegisterChain(m);
  wdspy::RegisterLoader(m);
  wdspy::RegisterWriters(m);
  wdspy::RegisterShards(m);
  wdspy::RegisterFields(m);
  wdspy::RegisterSharedBatches(m);
  wdspy::RegisterRemote(m);
  wdspy::RegisterGpu(m);
  wdspy::RegisterIndexed(m);
  // From exit on, native threads no longer call into Python (ScopedGil).
  pybind11::module_::import("atexit").attr("register")(
      pybind11::cpp_function(&wdspy::ClosePythonGate));
}
