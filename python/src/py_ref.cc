#include "py_ref.h"

#include <cxxabi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

namespace wdspy {
namespace {

// Held while a thread makes or deletes its Python thread state, and across a fork
// (kGuardThreadStates only).
std::mutex& ThreadStateMutex() {
  static auto* mu = new std::mutex;  // never destroyed: threads may outlive exit
  return *mu;
}

// The references that threads without the GIL let go of, released by the
// next Python thread that comes back from native code (DropDeferred in
// ~ScopedGilRelease, a point where it holds no native lock).
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

// The way into Python for native threads (those without a Python thread
// state): counted, and closed by the module's atexit hook (ClosePythonGate),
// which waits for the threads inside to leave. After it, no native thread
// makes a thread state or waits for the GIL here: CPython 3.11 aborts on a
// thread state made while it finalizes, and ends a thread that waits for the
// GIL then.
struct Gate {
  std::mutex mu;  // also held across a fork
  std::condition_variable left;
  int inside = 0;
  bool closed = false;
};

Gate& PythonGate() {
  static auto* gate = new Gate;  // never destroyed, as above
  return *gate;
}

// This thread's scopes inside the gate (a forked child's only thread keeps
// its own).
thread_local int inside_here = 0;

// How long ClosePythonGate waits for the threads inside.
constexpr std::chrono::seconds kGateWait(5);

void LeaveGate() {
  --inside_here;
  Gate& gate = PythonGate();
  std::lock_guard<std::mutex> lock(gate.mu);
  --gate.inside;
  gate.left.notify_all();
}

// Set on a thread that CPython is ending (pthread_exit) because it asked for
// the GIL while the interpreter finalizes: its stack is being unwound, and
// the GIL is not to be asked for again on the way.
thread_local bool this_thread_is_ending = false;

// TakeGil is PyEval_RestoreThread(state), noting a thread being ended.
void TakeGil(PyThreadState* state) {
  try {
    PyEval_RestoreThread(state);
  } catch (const abi::__forced_unwind&) {
    this_thread_is_ending = true;
    throw;
  }
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
    // A native thread: it makes a thread state, through the gate. (A Python
    // thread has one, and CPython itself ends it if it asks for the GIL
    // while the interpreter finalizes.)
    {
      Gate& gate = PythonGate();
      std::lock_guard<std::mutex> lock(gate.mu);
      if (gate.closed) {
        refused_ = true;
        return;
      }
      ++gate.inside;
    }
    ++inside_here;
    std::unique_lock<std::mutex> lock(ThreadStateMutex(), std::defer_lock);
    if constexpr (kGuardThreadStates) lock.lock();
    state = made_ = PyThreadState_New(PyInterpreterState_Main());
  }
  try {
    TakeGil(state);
  } catch (...) {
    if (made_ != nullptr) LeaveGate();
    throw;
  }
}

ScopedGil::~ScopedGil() {
  if (held_before_ || refused_) return;
  if (made_ == nullptr) {
    PyEval_SaveThread();
    return;
  }
  PyThreadState_Clear(made_);
  // Deleting a thread state frees it, and under 3.11's tracemalloc that free
  // takes tracemalloc's table lock without the GIL (PyThreadState_DeleteCurrent
  // frees after releasing the GIL): a fork meanwhile would leave that lock
  // held in the child, whose first allocation would wait for it forever. So
  // the state is deleted under the lock the fork waits for, which the GIL's
  // holders never wait for: the GIL goes first, and PyThreadState_Delete
  // needs none.
  PyEval_SaveThread();
  {
    std::unique_lock<std::mutex> lock(ThreadStateMutex(), std::defer_lock);
    if constexpr (kGuardThreadStates) lock.lock();
    PyThreadState_Delete(made_);
  }
  LeaveGate();
}

constexpr char kExitingText[] = "the Python interpreter is exiting";

absl::Status PythonIsExiting() { return absl::CancelledError(kExitingText); }

bool CutShortByExit(const absl::Status& status) {
  return absl::IsCancelled(status) &&
         status.message().find(kExitingText) != absl::string_view::npos && PythonIsClosing();
}

bool PythonIsClosing() {
  Gate& gate = PythonGate();
  std::lock_guard<std::mutex> lock(gate.mu);
  return gate.closed;
}

void ClosePythonGate() {
  Gate& gate = PythonGate();
  // The calling thread's own scopes (a hook run from inside one) are not
  // waited for.
  {
    std::lock_guard<std::mutex> lock(gate.mu);
    gate.closed = true;
    if (gate.inside == inside_here) return;
  }
  ScopedGilRelease release;  // the threads inside may wait for the GIL to leave
  std::unique_lock<std::mutex> lock(gate.mu);
  // Bounded: a call into Python that never returns must not hold the exit.
  gate.left.wait_for(lock, kGateWait, [&] { return gate.inside == inside_here; });
}

ScopedGilRelease::~ScopedGilRelease() noexcept(false) {
  if (this_thread_is_ending) return;  // it would be ended again, inside unwinding
  TakeGil(state_);
  DropDeferred();
}

void WaitForThreadStatesBeforeFork() {
  if constexpr (!kGuardThreadStates) return;
  if (ThreadStateMutex().try_lock()) return;
  // A thread is making its thread state, and may need the GIL for it
  // (tracemalloc traces the allocation under the GIL). The GIL's holders
  // never wait for this lock, so it is taken back holding the lock. No lock
  // of this module is held yet (the other handlers come after this one), so
  // the Python code that runs meanwhile waits for none of them. (A fork by
  // a thread without the GIL, native code's, just waits.)
  if (!PyGILState_Check()) {
    ThreadStateMutex().lock();
    return;
  }
  PyThreadState* state = PyEval_SaveThread();
  ThreadStateMutex().lock();
  PyEval_RestoreThread(state);
}

void LockGateForFork() {
  PythonGate().mu.lock();
  DeferredReleases().mu.lock();
}

void UnlockThreadStatesAfterFork(bool in_child) {
  DeferredReleases().mu.unlock();
  if constexpr (kGuardThreadStates) ThreadStateMutex().unlock();
  if (in_child) {  // the other threads are not here, nor is any exit
    PythonGate().inside = inside_here;
    PythonGate().closed = false;
  }
  PythonGate().mu.unlock();
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
