// Errors between the native core and Python, in both directions.
//
// Native errors (absl::Status) become Python exceptions of the conventional
// type, their message naming the shard URL and member:
//
//   errno of a shard that cannot be opened  OSError subclass (FileNotFoundError, ...)
//   DataLoss, and data errors while iterating   webdataset_cpp.DataError (a ValueError)
//   InvalidArgument / FailedPrecondition at setup ValueError
//   anything else                               RuntimeError
//
// A failure that the core marked with its kind (wds/base/error_kind.h; the kind
// decides, not the message) is of the class the reference package raises for
// that failure (each also a DataError):
//
//   truncated or corrupt tar, gzip, zstd; not a tar   ShardReadError (a tarfile.ReadError)
//   a pipe: command's non-zero exit status            CommandError (an OSError)
//   a pipe: shard's output that is not a readable tar PipeShardError (both of the above)
//   a native decoder's failure                        DecodingError (url, key, k set)
//
// Errors of remote shards (RemoteStatus) follow the conventions of Python's
// own clients:
//
//   HTTP 404, 410 (NotFound)                   FileNotFoundError(ENOENT, reason, url)
//   HTTP 401, 403 (PermissionDenied)           PermissionError(EACCES, reason, url)
//   retries exhausted, TLS verification        ConnectionError (an OSError)
//   the object changed while read, bad ranges  webdataset_cpp.DataError
//   HTTP 400, a malformed URL or setting        ValueError
//
// where reason is the message after the URL ("HTTP 404 Not Found: <what the
// server said>").
//
// A Python exception raised by Python code that a native stage called (a
// Python stage feeding a native one, a Python decoder or handler) travels
// through the native stages as an Aborted Status, while the exception object
// itself waits in a per-thread slot; RaiseStatus raises that very object (a
// decoder's wrapped in webdataset_cpp.DecodingError), traceback included.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "wds/base/interrupt.h"

namespace wdspy {

namespace py = pybind11;

// Phase says whether an error met setting up (bad arguments: ValueError) or
// while reading data (bad data: DataError).
enum class Phase { kSetup, kData };

// ErrnoStatus is the error of a failed system call on `path`; it converts to
// OSError(err, strerror(err), path), so a missing shard is FileNotFoundError.
// A non-empty `reason` replaces strerror(err) there (what a Python handler
// said of the failure).
absl::Status ErrnoStatus(int err, std::string_view path, std::string_view what,
                         std::string_view reason = {});

// RemoteStatus marks `status` (unless ok or Cancelled) as the error of the
// remote URL `url`, for the exception types above; code and message stay.
absl::Status RemoteStatus(absl::Status status, std::string_view url);

// StorePythonError keeps the Python exception being handled (e) in this
// thread's slot and returns the Status that stands for it. `field`, when not
// empty, names the field a decoder was decoding (the exception is then
// raised as a DecodingError). REQUIRES: the GIL is held.
absl::Status StorePythonError(py::error_already_set& e, std::string_view field = {});

// ClearPythonError drops the slot's exception (a handler chose to go on).
void ClearPythonError();

// NoteSample records, for a decoder's exception in the slot, the sample it
// concerned (for DecodingError's url and key).
void NoteSample(std::string_view url, std::string_view key);

// ExceptionFromStatus returns the Python exception that `status` stands for,
// without raising it (handlers receive it). Consumes the slot's exception.
// REQUIRES: the GIL is held and !status.ok().
py::object ExceptionFromStatus(const absl::Status& status, Phase phase);

// RaiseStatus raises ExceptionFromStatus(status, phase).
[[noreturn]] void RaiseStatus(const absl::Status& status, Phase phase);

// SignalCheck lets a native call that released the GIL notice Python
// signals (Ctrl-C) while it waits on something that may stall (a pipe:
// command, a loader's workers): install check() around the call with a
// wds::ScopedInterruptCheck. Every kInterruptCheckInterval of waiting, and on
// EINTR, it takes the GIL and runs Python's signal handlers; when one raises
// (KeyboardInterrupt), the wait gives up with a Cancelled status and the
// exception is kept. After the call, RethrowIfRaised() raises it.
//
//   SignalCheck signals;
//   {
//     ScopedGilRelease release;
//     wds::ScopedInterruptCheck check(signals.check());
//     result = stream->Next();
//   }
//   signals.RethrowIfRaised();
class SignalCheck {
 public:
  SignalCheck() = default;
  SignalCheck(const SignalCheck&) = delete;
  SignalCheck& operator=(const SignalCheck&) = delete;
  ~SignalCheck();

  // check is the interrupt check; sticky once a handler raised.
  wds::InterruptCheck check();
  bool raised() const { return type_ != nullptr; }
  // RethrowIfRaised raises the kept exception. REQUIRES: the GIL is held.
  void RethrowIfRaised();

 private:
  PyObject* type_ = nullptr;
  PyObject* value_ = nullptr;
  PyObject* trace_ = nullptr;
};

// ThrowIfError raises for a non-ok status (setup phase).
inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) RaiseStatus(status, Phase::kSetup);
}

}  // namespace wdspy
