#include "arrays.h"

#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "py_ref.h"

namespace wdspy {
namespace {

constexpr uint8_t kTrue = 1;
constexpr uint8_t kFalse = 0;

std::vector<py::ssize_t> ByteStrides(const wds::Array& array) {
  std::vector<py::ssize_t> strides(array.shape.size());
  py::ssize_t stride = static_cast<py::ssize_t>(wds::DTypeSize(array.dtype));
  for (size_t i = array.shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= static_cast<py::ssize_t>(array.shape[i]);
  }
  return strides;
}

// BufferFormat is the struct-module format of a dtype (buffer protocol).
std::string BufferFormat(wds::DType dtype) {
  switch (dtype) {
    case wds::DType::kBool:
      return "?";
    case wds::DType::kUInt8:
      return "B";
    case wds::DType::kInt8:
      return "b";
    case wds::DType::kUInt16:
      return "H";
    case wds::DType::kInt16:
      return "h";
    case wds::DType::kUInt32:
      return "I";
    case wds::DType::kInt32:
      return "i";
    case wds::DType::kUInt64:
      return "Q";
    case wds::DType::kInt64:
      return "q";
    case wds::DType::kFloat16:
      return "e";
    case wds::DType::kFloat32:
      return "f";
    case wds::DType::kFloat64:
      return "d";
  }
  return "B";
}

// TypeString is the __array_interface__ typestr ("|u1", "<f4", ...).
std::string TypeString(wds::DType dtype) {
  const std::string size = std::to_string(wds::DTypeSize(dtype));
  switch (dtype) {
    case wds::DType::kBool:
      return "|b1";
    case wds::DType::kUInt8:
      return "|u1";
    case wds::DType::kInt8:
      return "|i1";
    case wds::DType::kFloat16:
    case wds::DType::kFloat32:
    case wds::DType::kFloat64:
      return "<f" + size;
    case wds::DType::kUInt16:
    case wds::DType::kUInt32:
    case wds::DType::kUInt64:
      return "<u" + size;
    default:
      return "<i" + size;
  }
}

DLDataType DLType(wds::DType dtype) {
  DLDataType t{};
  t.bits = static_cast<uint8_t>(8 * wds::DTypeSize(dtype));
  t.lanes = 1;
  switch (dtype) {
    case wds::DType::kFloat16:
    case wds::DType::kFloat32:
    case wds::DType::kFloat64:
      t.code = kDLFloat;
      break;
    case wds::DType::kBool:
    case wds::DType::kUInt8:
    case wds::DType::kUInt16:
    case wds::DType::kUInt32:
    case wds::DType::kUInt64:
      t.code = kDLUInt;
      break;
    default:
      t.code = kDLInt;
  }
  return t;
}

// DLPackContext is what a DLPack capsule owns: the Array (its storage) and
// the shape and strides the DLTensor points to.
struct DLPackContext {
  wds::Array array;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
};

void DeleteManaged(DLManagedTensor* managed) {
  delete static_cast<DLPackContext*>(managed->manager_ctx);
}

// A capsule nobody consumed still owns its tensor (the DLPack protocol: a
// consumer renames it "used_dltensor").
void DeleteCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

py::capsule ToDLPack(const wds::Array& array) {
  auto* context = new DLPackContext{array, array.shape, {}, {}};
  const std::vector<py::ssize_t> strides = ByteStrides(array);
  for (py::ssize_t s : strides) {
    context->strides.push_back(s / static_cast<py::ssize_t>(wds::DTypeSize(array.dtype)));
  }
  DLTensor& t = context->managed.dl_tensor;
  t.data = const_cast<uint8_t*>(array.data.data());
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int>(array.shape.size());
  t.dtype = DLType(array.dtype);
  t.shape = context->shape.data();
  t.strides = context->strides.data();
  t.byte_offset = 0;
  context->managed.manager_ctx = context;
  context->managed.deleter = DeleteManaged;
  PyObject* capsule = PyCapsule_New(&context->managed, "dltensor", DeleteCapsule);
  if (capsule == nullptr) {
    delete context;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

py::dict ArrayInterface(const wds::Array& array) {
  py::dict d;
  d["version"] = 3;
  d["shape"] = py::tuple(py::cast(array.shape));
  d["typestr"] = TypeString(array.dtype);
  d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(array.data.data()), false);
  d["strides"] = py::none();
  return d;
}

// NumpyDType returns numpy's dtype for `dtype`, made once.
py::dtype NumpyDType(wds::DType dtype) {
  static std::array<PyObject*, 12> cache{};
  PyObject*& slot = cache[static_cast<size_t>(dtype)];
  if (slot == nullptr) slot = py::dtype(std::string(wds::DTypeName(dtype))).release().ptr();
  return py::reinterpret_borrow<py::dtype>(slot);
}

std::optional<wds::DType> DTypeOf(const py::dtype& dtype) {
  // numpy's dtypes of native byte order are singletons: most arrays are
  // known by identity, without reading the name (a Python property, slow).
  for (size_t d = 0; d <= static_cast<size_t>(wds::DType::kFloat64); ++d) {
    if (dtype.ptr() == NumpyDType(static_cast<wds::DType>(d)).ptr()) {
      return static_cast<wds::DType>(d);
    }
  }
  // numpy names a dtype by kind and size whatever its byte order ("float32"
  // for '<f4' and '>f4'), as wds::DTypeName does.
  if (dtype.attr("byteorder").cast<std::string>() == ">") return std::nullopt;
  absl::StatusOr<wds::DType> parsed = wds::ParseDType(dtype.attr("name").cast<std::string>());
  if (!parsed.ok()) return std::nullopt;
  return *parsed;
}

py::object TorchFromDLPack() {
  static PyObject* fn = nullptr;
  if (fn == nullptr)
    fn = py::object(py::module_::import("torch").attr("from_dlpack")).release().ptr();
  return py::reinterpret_borrow<py::object>(fn);
}

bool IsTensor(py::handle object) {
  // torch is imported by whoever made a tensor; never import it here.
  PyObject* modules = PyImport_GetModuleDict();
  PyObject* torch = PyDict_GetItemString(modules, "torch");
  if (torch == nullptr) return false;
  static PyObject* tensor_type = nullptr;
  if (tensor_type == nullptr) {
    tensor_type =
        py::object(py::reinterpret_borrow<py::object>(torch).attr("Tensor")).release().ptr();
  }
  return PyObject_IsInstance(object.ptr(), tensor_type) == 1;
}

// SameNativeArray returns the Array of `array`'s NativeArray base when
// `array` views all of it, so a round trip through Python costs nothing.
std::optional<wds::Array> SameNativeArray(const py::array& array) {
  py::handle base = array.base();
  if (!base || !py::isinstance<NativeArray>(base)) return std::nullopt;
  const wds::Array& native = base.cast<const NativeArray&>().array;
  if (array.data() != native.data.data() ||
      array.ndim() != static_cast<py::ssize_t>(native.shape.size())) {
    return std::nullopt;
  }
  for (size_t i = 0; i < native.shape.size(); ++i) {
    if (array.shape(static_cast<py::ssize_t>(i)) != native.shape[i]) return std::nullopt;
  }
  if (!(array.flags() & py::array::c_style)) return std::nullopt;
  if (DTypeOf(array.dtype()) != native.dtype) return std::nullopt;
  return native;
}

std::optional<wds::Array> FromNumpy(py::array array) {
  if (std::optional<wds::Array> same = SameNativeArray(array)) return same;
  std::optional<wds::DType> dtype = DTypeOf(array.dtype());
  if (!dtype.has_value()) return std::nullopt;
  const int wanted = py::array::c_style | py::detail::npy_api::NPY_ARRAY_ALIGNED_;
  if ((array.flags() & wanted) != wanted) {
    array = py::module_::import("numpy").attr("ascontiguousarray")(array);
  }
  wds::Array out;
  out.dtype = *dtype;
  for (py::ssize_t i = 0; i < array.ndim(); ++i) out.shape.push_back(array.shape(i));
  const auto* data = static_cast<const uint8_t*>(array.data());
  out.data = wds::Buffer::View(KeepAlive(array), data, static_cast<size_t>(array.nbytes()));
  return out;
}

}  // namespace

void RegisterArrays(py::module_& m) {
  py::class_<NativeArray>(m, "NativeArray", py::buffer_protocol(), R"doc(
Native array storage shared with NumPy and torch without copying.

NumPy arrays that webdataset_cpp returns have a NativeArray as their ``base``;
it keeps the native buffer alive and exports it again through the buffer
protocol, ``__array_interface__`` and DLPack::

    arr = batch[0]                          # numpy.ndarray
    owner = arr.base                        # webdataset_cpp._core.NativeArray
    t = torch.from_dlpack(owner)            # shares arr's memory
)doc")
      .def_buffer([](NativeArray& self) {
        const wds::Array& a = self.array;
        return py::buffer_info(const_cast<uint8_t*>(a.data.data()),
                               static_cast<py::ssize_t>(wds::DTypeSize(a.dtype)),
                               BufferFormat(a.dtype), static_cast<py::ssize_t>(a.shape.size()),
                               std::vector<py::ssize_t>(a.shape.begin(), a.shape.end()),
                               ByteStrides(a), /*readonly=*/false);
      })
      .def_property_readonly("__array_interface__",
                             [](const NativeArray& self) { return ArrayInterface(self.array); })
      .def(
          "__dlpack__",
          [](const NativeArray& self, py::object stream) {
            if (!stream.is_none()) throw py::value_error("a CPU array takes no stream");
            return ToDLPack(self.array);
          },
          py::arg("stream") = py::none(),
          "A DLPack capsule whose tensor owns a reference to this storage.")
      .def("__dlpack_device__", [](const NativeArray&) { return py::make_tuple(1, 0); })
      .def_property_readonly(
          "shape", [](const NativeArray& self) { return py::tuple(py::cast(self.array.shape)); })
      .def_property_readonly(
          "dtype",
          [](const NativeArray& self) { return std::string(wds::DTypeName(self.array.dtype)); })
      .def_property_readonly("nbytes", [](const NativeArray& self) { return self.array.nbytes(); })
      .def_property_readonly("data_ptr",
                             [](const NativeArray& self) {
                               return reinterpret_cast<uintptr_t>(self.array.data.data());
                             })
      .def("__repr__", [](const NativeArray& self) {
        return "NativeArray(" + std::string(wds::DTypeName(self.array.dtype)) + ", " +
               wds::ShapeString(self.array.shape) + ")";
      });
}

py::object ArrayToNumpy(wds::Array array) {
  const std::vector<py::ssize_t> shape(array.shape.begin(), array.shape.end());
  const std::vector<py::ssize_t> strides = ByteStrides(array);
  const void* data = array.data.data();
  static const uint8_t kEmpty = 0;
  if (data == nullptr) data = &kEmpty;  // an empty array still needs an address
  py::object owner = py::cast(NativeArray{std::move(array)});
  return py::array(NumpyDType(owner.cast<const NativeArray&>().array.dtype), shape, strides, data,
                   owner);
}

py::object ArrayToTorch(wds::Array array) {
  if (array.dtype == wds::DType::kBool) {
    // DLPack 0.6 has no bool type: torch would see uint8.
    return py::module_::import("torch").attr("from_numpy")(ArrayToNumpy(std::move(array)));
  }
  py::object owner = py::cast(NativeArray{std::move(array)});
  return TorchFromDLPack()(owner);
}

std::optional<wds::Array> ArrayFromPython(py::handle object, bool* is_tensor) {
  if (is_tensor != nullptr) *is_tensor = false;
  if (py::isinstance<py::array>(object)) {
    return FromNumpy(py::reinterpret_borrow<py::array>(object));
  }
  if (!IsTensor(object)) return std::nullopt;
  py::object tensor = py::reinterpret_borrow<py::object>(object);
  if (tensor.attr("device").attr("type").cast<std::string>() != "cpu") return std::nullopt;
  py::object numpy;
  try {
    numpy = tensor.attr("detach")().attr("numpy")();
  } catch (py::error_already_set&) {
    return std::nullopt;  // a dtype NumPy lacks (bfloat16)
  }
  std::optional<wds::Array> array = FromNumpy(py::reinterpret_borrow<py::array>(numpy));
  if (array.has_value() && is_tensor != nullptr) *is_tensor = true;
  return array;
}

wds::Array PythonBool(bool value) {
  wds::Array a;
  a.dtype = wds::DType::kBool;
  const uint8_t* storage = value ? &kTrue : &kFalse;
  a.data = wds::Buffer::View(std::shared_ptr<const void>(), storage, 1);
  return a;
}

std::optional<bool> AsPythonBool(const wds::Array& array) {
  if (array.dtype != wds::DType::kBool || !array.shape.empty()) return std::nullopt;
  if (array.data.data() == &kTrue) return true;
  if (array.data.data() == &kFalse) return false;
  return std::nullopt;
}

}  // namespace wdspy
