// Samples across the boundary.
//
// Native -> Python (SampleToPython), as the reference package gives them:
//   bytes (a tar member, copied into a bytes object), str, int, float,
//   numpy.ndarray (a view, see arrays.h), lists of str / bytes (collated),
//   and any Python object that entered a native stage (opaque, see below).
// A dict sample keeps its field order; a tuple sample becomes a tuple.
// FieldKinds may turn a field into a torch tensor (decoded with a torch*
// spec) or parse it as JSON (a natively decoded .json field).
//
// Python -> native (SampleFromPython), for native stages fed by Python code:
// dicts and tuples (lists) of bytes (viewed, not copied), str, int, float,
// bool, ndarrays and CPU tensors (viewed); every other value (None, dicts,
// lists, PIL images, ...) travels through native stages as an opaque value and
// comes out as the very same object (collated: a list of them).
#pragma once

#include <pybind11/pybind11.h>

#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "py_ref.h"
#include "wds/base/sample.h"

namespace wdspy {

namespace py = pybind11;

// Field kinds: how a field's native value is shown to Python.
enum FieldKind : int { kPlain = 0, kTorch = 1, kJson = 2 };

// NameSet is a thread-safe set of field names (those that entered a native
// stage as torch tensors); `version` grows with every new name.
class NameSet {
 public:
  void Add(const std::string& name);
  bool Contains(const std::string& name) const;
  size_t size() const;
  int64_t version() const;

 private:
  mutable std::mutex mu_;
  std::set<std::string> names_;
  int64_t version_ = 0;
};

// FieldKinds asks a Python function name -> FieldKind bitmask once per name
// (again when one of `names` grew, since the function may consult them).
// Not thread-safe: one per iterator, used under the GIL.
class FieldKinds {
 public:
  FieldKinds(py::object fn, std::vector<std::shared_ptr<NameSet>> names);
  int Of(const std::string& name);

 private:
  PyRef fn_;
  std::vector<std::shared_ptr<NameSet>> names_;
  int64_t version_ = -1;
  std::unordered_map<std::string, int> cache_;
};

void RegisterConvert(py::module_& m);

// SampleToPython converts `sample` (consumed). `kinds` may be null.
// REQUIRES: the GIL is held (also below).
py::object SampleToPython(wds::Sample&& sample, FieldKinds* kinds);
py::object ValueToPython(wds::Value&& value, int kind);

// SampleFromPython converts a dict or a tuple / list; names of fields that
// held torch tensors are added to `tensor_names` (may be null).
absl::StatusOr<wds::Sample> SampleFromPython(py::handle object, NameSet* tensor_names);
wds::Value ValueFromPython(py::handle object, bool* is_tensor);

// Opaque values: a Python object inside a native stage, as a Buffer.
wds::Buffer OpaqueBuffer(py::handle object);
// OpaqueObject returns the object `buffer` stands for, or a null handle.
py::handle OpaqueObject(const wds::Buffer& buffer);
bool IsOpaque(const wds::Buffer& buffer);

// ToPyStr decodes UTF-8 (undecodable bytes as surrogates, as Python does for
// file names).
py::str ToPyStr(std::string_view text);

}  // namespace wdspy
