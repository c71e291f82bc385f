#include "convert.h"

#include <pybind11/numpy.h>

#include <cstring>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <variant>

#include "arrays.h"
#include "gpu.h"
#include "py_ref.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"

namespace wdspy {
namespace {

// Opaque is the storage an opaque Buffer points to: its address identifies
// it in the registry of live opaque values.
struct Opaque {
  PyRef object;
};

std::mutex& RegistryMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}

std::unordered_set<const void*>& Registry() {
  static auto* registry = new std::unordered_set<const void*>;
  return *registry;
}

py::object JsonLoads() {
  static PyObject* fn = nullptr;
  if (fn == nullptr) fn = py::object(py::module_::import("json").attr("loads")).release().ptr();
  return py::reinterpret_borrow<py::object>(fn);
}

py::object BytesToPython(const wds::Buffer& buffer) {
  if (py::handle object = OpaqueObject(buffer)) return py::reinterpret_borrow<py::object>(object);
  return py::reinterpret_steal<py::object>(PyBytes_FromStringAndSize(
      reinterpret_cast<const char*>(buffer.data()), static_cast<Py_ssize_t>(buffer.size())));
}

py::object TextToPython(const std::string& text, int kind) {
  py::str s = ToPyStr(text);
  if (kind & kJson) return JsonLoads()(s);
  return std::move(s);
}

py::object ArrayToPython(wds::Array&& array, int kind) {
  if (std::optional<bool> b = AsPythonBool(array)) return py::bool_(*b);
  if (kind & kTorch) return ArrayToTorch(std::move(array));
  return ArrayToNumpy(std::move(array));
}

}  // namespace

void NameSet::Add(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (names_.insert(name).second) ++version_;
}

bool NameSet::Contains(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return names_.count(name) > 0;
}

size_t NameSet::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return names_.size();
}

int64_t NameSet::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

FieldKinds::FieldKinds(py::object fn, std::vector<std::shared_ptr<NameSet>> names)
    : fn_(fn), names_(std::move(names)) {}

int FieldKinds::Of(const std::string& name) {
  if (!fn_ || fn_.get().is_none()) return kPlain;
  int64_t version = 0;
  for (const auto& names : names_) version += names->version();
  if (version != version_) {
    cache_.clear();
    version_ = version;
  }
  auto it = cache_.find(name);
  if (it != cache_.end()) return it->second;
  const int kind = fn_.get()(ToPyStr(name)).cast<int>();
  cache_.emplace(name, kind);
  return kind;
}

py::str ToPyStr(std::string_view text) {
  PyObject* s =
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "surrogateescape");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

wds::Buffer OpaqueBuffer(py::handle object) {
  auto* opaque = new Opaque{PyRef(object)};
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    Registry().insert(opaque);
  }
  std::shared_ptr<const void> owner(opaque, [](const void* p) {
    {
      std::lock_guard<std::mutex> lock(RegistryMutex());
      Registry().erase(p);
    }
    delete static_cast<const Opaque*>(p);
  });
  return wds::Buffer::View(std::move(owner), reinterpret_cast<const uint8_t*>(opaque),
                           sizeof(Opaque));
}

bool IsOpaque(const wds::Buffer& buffer) {
  if (buffer.size() != sizeof(Opaque)) return false;
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return Registry().count(buffer.data()) > 0;
}

py::handle OpaqueObject(const wds::Buffer& buffer) {
  if (!IsOpaque(buffer)) return py::handle();
  return reinterpret_cast<const Opaque*>(buffer.data())->object.get();
}

py::object ValueToPython(wds::Value&& value, int kind) {
  // The cases below are Value's alternatives by index: a new one must be added here.
  static_assert(std::variant_size_v<wds::Value> == 8);
  switch (value.index()) {
    case 0:
      return BytesToPython(std::get<wds::Buffer>(value));
    case 1:
      return TextToPython(std::get<std::string>(value), kind);
    case 2:
      return py::int_(std::get<int64_t>(value));
    case 3:
      return py::float_(std::get<double>(value));
    case 4:
      return ArrayToPython(std::get<wds::Array>(std::move(value)), kind);
    case 5: {
      const wds::TextList& texts = std::get<wds::TextList>(value);
      py::list out(texts.size());
      for (size_t i = 0; i < texts.size(); ++i) out[i] = TextToPython(texts[i], kind);
      return std::move(out);
    }
    case 6: {
      const wds::BytesList& items = std::get<wds::BytesList>(value);
      py::list out(items.size());
      for (size_t i = 0; i < items.size(); ++i) out[i] = BytesToPython(items[i]);
      return std::move(out);
    }
    default:
      return ObjectToPython(std::get<wds::ObjectRef>(std::move(value)));
  }
}

namespace {

// FieldToPython is ValueToPython, except that a column of GPU jobs becomes a
// GpuJobs object carrying the batch's keys and URLs.
py::object FieldToPython(wds::Value&& value, int kind, const wds::Sample& sample) {
  if (wds::IsGpuJobColumn(value)) {
    const auto [keys, urls] = wds::BatchKeysAndUrls(sample);
    return GpuJobsToPython(std::get<wds::BytesList>(std::move(value)), keys, urls);
  }
  return ValueToPython(std::move(value), kind);
}

}  // namespace

py::object SampleToPython(wds::Sample&& sample, FieldKinds* kinds) {
  auto kind_of = [&](const std::string& name) { return kinds ? kinds->Of(name) : kPlain; };
  if (sample.is_tuple()) {
    py::tuple out(sample.size());
    for (size_t i = 0; i < sample.size(); ++i) {
      out[i] = FieldToPython(std::move(sample[i].second), kind_of(sample[i].first), sample);
    }
    return std::move(out);
  }
  py::dict out;
  for (wds::Sample::Field& field : sample) {
    const int kind = wds::IsMetadataField(field.first) ? kPlain : kind_of(field.first);
    out[ToPyStr(field.first)] = FieldToPython(std::move(field.second), kind, sample);
  }
  return std::move(out);
}

wds::Value ValueFromPython(py::handle object, bool* is_tensor) {
  *is_tensor = false;
  PyObject* p = object.ptr();
  if (PyBytes_CheckExact(p)) return BytesView(object);
  if (PyUnicode_Check(p)) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(p, &size);
    if (text != nullptr) return std::string(text, static_cast<size_t>(size));
    PyErr_Clear();  // lone surrogates: keep the object itself
    return OpaqueBuffer(object);
  }
  if (PyBool_Check(p)) return PythonBool(p == Py_True);
  if (PyLong_Check(p)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
    if (overflow == 0 && !(v == -1 && PyErr_Occurred())) return static_cast<int64_t>(v);
    PyErr_Clear();
    return OpaqueBuffer(object);
  }
  if (PyFloat_Check(p)) return PyFloat_AS_DOUBLE(p);
  if (std::optional<wds::Array> array = ArrayFromPython(object, is_tensor)) {
    return *std::move(array);
  }
  return OpaqueBuffer(object);
}

absl::StatusOr<wds::Sample> SampleFromPython(py::handle object, NameSet* tensor_names) {
  wds::Sample sample;
  auto add = [&](std::string name, py::handle value) {
    bool is_tensor = false;
    wds::Value v = ValueFromPython(value, &is_tensor);
    if (is_tensor && tensor_names != nullptr) tensor_names->Add(name);
    sample.Append(std::move(name), std::move(v));
  };
  if (PyDict_Check(object.ptr())) {
    for (auto item : py::reinterpret_borrow<py::dict>(object)) {
      if (!PyUnicode_Check(item.first.ptr())) {
        return absl::InvalidArgumentError(wds::Cat("a sample's field names must be str, got ",
                                                   py::repr(item.first).cast<std::string>()));
      }
      add(item.first.cast<std::string>(), item.second);
    }
    return sample;
  }
  if (PyTuple_Check(object.ptr()) || PyList_Check(object.ptr())) {
    sample.set_is_tuple(true);
    py::sequence items = py::reinterpret_borrow<py::sequence>(object);
    for (size_t i = 0; i < items.size(); ++i) add(std::to_string(i), items[i]);
    return sample;
  }
  return absl::InvalidArgumentError(
      wds::Cat("native stages take samples that are dicts or tuples, got ",
               py::str(py::type::of(object).attr("__name__")).cast<std::string>()));
}

void RegisterConvert(py::module_& m) {
  py::class_<NameSet, std::shared_ptr<NameSet>>(m, "NameSet",
                                                "Field names that entered native stages as "
                                                "torch tensors (thread-safe).")
      .def(py::init<>())
      .def("add", &NameSet::Add)
      .def("__contains__", &NameSet::Contains)
      .def("__len__", &NameSet::size)
      .def_property_readonly("version", &NameSet::version);
}

}  // namespace wdspy
