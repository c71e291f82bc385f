// Arrays across the boundary, without copies.
//
// A native wds::Array reaches Python as a NumPy array whose `base` is a
// NativeArray: the object that owns the native storage (a pooled batch block,
// a decoded image, an npy member's bytes) and exposes it through the buffer
// protocol, __array_interface__ and DLPack (__dlpack__ / __dlpack_device__).
// A torch tensor is made with torch.from_dlpack(NativeArray): its DLPack
// capsule owns a copy of the Array, so the storage lives as long as any
// NumPy array, tensor or native stage refers to it.
//
// The other way, a C-contiguous NumPy array (or CPU tensor) entering a native
// stage becomes an Array viewing its memory and holding a reference to it.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

#include "wds/base/array.h"

namespace wdspy {

namespace py = pybind11;

// NativeArray owns native array storage for Python. Immutable; the storage
// is shared by reference counts that any thread may drop.
struct NativeArray {
  wds::Array array;
};

void RegisterArrays(py::module_& m);

// ArrayToNumpy returns an ndarray viewing `array` (base: a NativeArray).
// REQUIRES: the GIL is held (also for the functions below).
py::object ArrayToNumpy(wds::Array array);
// ArrayToTorch returns a torch tensor sharing `array`'s storage (DLPack).
py::object ArrayToTorch(wds::Array array);

// ArrayFromPython views an ndarray or a CPU torch tensor as an Array (an
// ndarray that is not C-contiguous is copied first); nullopt for anything
// else, or a dtype the core has no DType for. `is_tensor` reports a tensor.
std::optional<wds::Array> ArrayFromPython(py::handle object, bool* is_tensor = nullptr);

// PythonBool is the Array a Python bool becomes in a native stage: a 0-d bool
// array over static storage, so that it turns back into a bool (collated, a
// bool array, as the reference's default collation makes).
wds::Array PythonBool(bool value);
// AsPythonBool returns the bool if `array` is one that PythonBool made.
std::optional<bool> AsPythonBool(const wds::Array& array);

}  // namespace wdspy
