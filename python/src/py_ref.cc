#include "py_ref.h"

namespace wdspy {

bool PythonIsUsable() { return Py_IsInitialized() && !_Py_IsFinalizing(); }

PyRef& PyRef::operator=(PyRef&& other) noexcept {
  if (this != &other) {
    Reset();
    object_ = other.object_;
    other.object_ = nullptr;
  }
  return *this;
}

void PyRef::Reset() {
  PyObject* object = object_;
  object_ = nullptr;
  if (object == nullptr || !PythonIsUsable()) return;
  py::gil_scoped_acquire gil;
  Py_DECREF(object);
}

std::shared_ptr<const void> KeepAlive(py::handle object) { return std::make_shared<PyRef>(object); }

wds::Buffer BytesView(py::handle bytes) {
  return wds::Buffer::View(KeepAlive(bytes),
                           reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(bytes.ptr())),
                           static_cast<size_t>(PyBytes_GET_SIZE(bytes.ptr())));
}

}  // namespace wdspy
