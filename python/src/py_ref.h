// PyRef: a reference to a Python object that native code may hold and drop
// on any thread, with or without the GIL.
//
//   wds::Buffer b = BytesView(bytes_object);  // or Buffer::View(KeepAlive(o), ...)
//   // b may cross native stages and worker threads; when its last copy
//   // goes, the object is released under the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "absl/status/status.h"
#include "wds/base/buffer.h"

namespace wdspy {

namespace py = pybind11;

// PyRef owns one reference. Destroying it on a thread that holds the GIL
// releases the reference at once; on one that does not (a native thread),
// the next Python thread that comes back from native code in this module
// (the end of a ScopedGilRelease) releases it. While the interpreter is
// finalizing the reference is leaked instead, since no Python code may run
// then.
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

// ScopedGil holds the GIL for its scope, on any thread, as
// py::gil_scoped_acquire does, and is safe across os.fork(): a thread without
// a Python thread state makes one (deleted at the scope's end). Before
// CPython 3.12 it does so holding a lock that the fork handlers hold across
// a fork (kGuardThreadStates): the child of 3.11 deletes the other threads'
// states under the runtime's lock before it resets that lock, so a fork
// while another thread is inside PyThreadState_New (which holds it) leaves
// the child deadlocked in os.fork (CPython gh-112275, fixed in 3.12 and in
// late 3.11 releases, which a module built for 3.11 cannot tell apart; from
// 3.13 the forking thread holds the runtime's lock itself across the fork,
// and such a lock of ours would deadlock it). Under the same lock it deletes
// the thread state: 3.11 frees it after releasing the GIL, and under
// tracemalloc that free takes tracemalloc's table lock, which a fork
// meanwhile would leave held in the child (its first allocation then waits
// forever). Native code takes the GIL with ScopedGil only.
//
// Once the interpreter is exiting (the module's atexit hook has run) a
// native thread (one without a Python thread state) is refused: the scope is
// false, no Python may run in it, and callers answer PythonIsExiting().
//
//   ScopedGil gil;
//   if (!gil) return PythonIsExiting();
class ScopedGil {
 public:
  ScopedGil();
  ~ScopedGil();
  ScopedGil(const ScopedGil&) = delete;
  ScopedGil& operator=(const ScopedGil&) = delete;

  explicit operator bool() const { return !refused_; }

 private:
  bool held_before_ = false;
  bool refused_ = false;
  PyThreadState* made_ = nullptr;  // the thread state this scope made
};

// PythonIsExiting is the error of a call into Python that ScopedGil refused
// (CANCELLED: a stream ends, as on an interrupt); CutShortByExit is whether
// `status` is such an error, the interpreter exiting.
absl::Status PythonIsExiting();
bool CutShortByExit(const absl::Status& status);

// PythonIsClosing: ClosePythonGate has run (the interpreter is exiting).
bool PythonIsClosing();

// ClosePythonGate is the module's atexit hook: from then on ScopedGil
// refuses native threads; it waits (GIL released, at most 5 s) for those
// inside Python to leave. REQUIRES: the GIL is held.
void ClosePythonGate();

// ScopedGilRelease releases the GIL for its scope, as py::gil_scoped_release
// does, but its destructor may throw: while the interpreter finalizes,
// CPython (before 3.14) ends a daemon thread that takes the GIL back by
// unwinding its stack (pthread_exit), and that unwinding may not leave a
// noexcept destructor (std::terminate: the process would abort at exit). A
// thread being ended that way inside the scope (a ScopedGil in an interrupt
// check) leaves without the GIL. REQUIRES: the GIL is held.
class ScopedGilRelease {
 public:
  ScopedGilRelease() : state_(PyEval_SaveThread()) {}
  ~ScopedGilRelease() noexcept(false);
  ScopedGilRelease(const ScopedGilRelease&) = delete;
  ScopedGilRelease& operator=(const ScopedGilRelease&) = delete;

 private:
  PyThreadState* state_;
};

// Whether ScopedGil makes thread states under a lock held across forks.
inline constexpr bool kGuardThreadStates = PY_VERSION_HEX < 0x030C0000;

// The fork handlers' side of ScopedGil. WaitForThreadStatesBeforeFork comes
// first: it waits for any thread making a thread state (with the GIL
// released while it waits: under tracemalloc, making one takes the GIL) and
// keeps others from starting. LockGateForFork comes last. After the fork
// (in the parent and in the child, whose only thread is the forking one),
// UnlockThreadStatesAfterFork lets them go on.
void WaitForThreadStatesBeforeFork();
void LockGateForFork();
void UnlockThreadStatesAfterFork(bool in_child);

}  // namespace wdspy
