// PyRef: a reference to a Python object that native code may hold and drop
// on any thread, with or without the GIL.
//
//   wds::Buffer b = BytesView(bytes_object);  // or Buffer::View(KeepAlive(o), ...)
//   // b may cross native stages and worker threads; when its last copy
//   // goes, the object is released under the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "wds/base/buffer.h"

namespace wdspy {

namespace py = pybind11;

// PyRef owns one reference. Destroying it takes the GIL (the destructor may
// run on a native thread); while the interpreter is finalizing the reference
// is leaked instead, since no Python code may run then.
class PyRef {
 public:
  PyRef() = default;
  // REQUIRES: the GIL is held.
  explicit PyRef(py::handle object) : object_(object.inc_ref().ptr()) {}
  ~PyRef() { Reset(); }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  PyRef(PyRef&& other) noexcept : object_(other.object_) { other.object_ = nullptr; }
  PyRef& operator=(PyRef&& other) noexcept;

  // get borrows the object. REQUIRES: the GIL is held to use it.
  py::handle get() const { return object_; }
  explicit operator bool() const { return object_ != nullptr; }
  void Reset();

 private:
  PyObject* object_ = nullptr;
};

// KeepAlive returns an owner for wds::Buffer::View that holds `object`.
// REQUIRES: the GIL is held.
std::shared_ptr<const void> KeepAlive(py::handle object);

// BytesView is a Buffer viewing the contents of the bytes object `bytes`,
// which it keeps alive. REQUIRES: `bytes` is a bytes object; the GIL is held.
wds::Buffer BytesView(py::handle bytes);

// PythonIsUsable is false while the interpreter is finalizing (or gone), when
// no thread may take the GIL.
bool PythonIsUsable();

}  // namespace wdspy
