#include "py_ref.h"

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

namespace wdspy {
namespace {

// Held while a thread makes its Python thread state, and across a fork.
std::mutex& ThreadStateMutex() {
  static auto* mu = new std::mutex;  // never destroyed: threads may outlive exit
  return *mu;
}

// The references that threads without the GIL let go of, released by the
// next thread that holds it in this module (DropDeferred).
struct Deferred {
  std::mutex mu;  // also held across a fork
  std::vector<PyObject*> objects;
  std::atomic<bool> any{false};
};

Deferred& DeferredReleases() {
  static auto* deferred = new Deferred;  // never destroyed, as above
  return *deferred;
}

// REQUIRES: the GIL is held.
void DropDeferred() {
  Deferred& deferred = DeferredReleases();
  if (!deferred.any.load(std::memory_order_acquire)) return;
  std::vector<PyObject*> objects;
  {
    // Never waited for with the GIL held: a fork handler holds it while
    // other handlers run Python code, which may pass the GIL to this thread.
    std::unique_lock<std::mutex> lock(deferred.mu, std::try_to_lock);
    if (!lock.owns_lock()) return;  // the next holder of the GIL drops them
    objects.swap(deferred.objects);
    deferred.any.store(false, std::memory_order_relaxed);
  }
  for (PyObject* object : objects) Py_DECREF(object);
}

}  // namespace

bool PythonIsUsable() { return Py_IsInitialized() && !_Py_IsFinalizing(); }

ScopedGil::ScopedGil() {
  if (PyGILState_Check()) {
    held_before_ = true;
    return;
  }
  PyThreadState* state = PyGILState_GetThisThreadState();
  if (state == nullptr) {
    // Needs no GIL: the fork handler, which holds the GIL, waits for this.
    std::lock_guard<std::mutex> lock(ThreadStateMutex());
    state = made_ = PyThreadState_New(PyInterpreterState_Main());
  }
  PyEval_RestoreThread(state);
  DropDeferred();
}

ScopedGil::~ScopedGil() {
  if (held_before_) return;
  if (made_ == nullptr) {
    PyEval_SaveThread();
    return;
  }
  // Deleted holding the GIL, which a forking thread holds: no fork overlaps.
  PyThreadState_Clear(made_);
  PyThreadState_DeleteCurrent();
}

ScopedGilRelease::~ScopedGilRelease() noexcept(false) {
  PyEval_RestoreThread(state_);
  DropDeferred();
}

void LockThreadStatesForFork() {
  ThreadStateMutex().lock();
  DeferredReleases().mu.lock();
}

void UnlockThreadStatesAfterFork() {
  DeferredReleases().mu.unlock();
  ThreadStateMutex().unlock();
}

PyRef& PyRef::operator=(PyRef&& other) noexcept {
  if (this != &other) {
    Reset();
    object_ = other.object_;
    other.object_ = nullptr;
  }
  return *this;
}

void PyRef::Reset() {
  PyObject* object = std::exchange(object_, nullptr);
  if (object == nullptr || !PythonIsUsable()) return;
  if (PyGILState_Check()) {
    Py_DECREF(object);
    return;
  }
  // Not waiting for the GIL here, where a destructor may be running: a
  // thread that waits for it while the interpreter finalizes is ended by
  // unwinding (see ScopedGilRelease), which may not leave a destructor.
  Deferred& deferred = DeferredReleases();
  std::lock_guard<std::mutex> lock(deferred.mu);
  deferred.objects.push_back(object);
  deferred.any.store(true, std::memory_order_release);
}

std::shared_ptr<const void> KeepAlive(py::handle object) { return std::make_shared<PyRef>(object); }

wds::Buffer BytesView(py::handle bytes) {
  return wds::Buffer::View(KeepAlive(bytes),
                           reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(bytes.ptr())),
                           static_cast<size_t>(PyBytes_GET_SIZE(bytes.ptr())));
}

}  // namespace wdspy
