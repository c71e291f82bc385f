#include "errors.h"

#include <cerrno>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/cord.h"
#include "py_ref.h"
#include "wds/base/error_kind.h"
#include "wds/internal/base/strings.h"

namespace wdspy {
namespace {

constexpr char kErrnoPayload[] = "webdataset_cpp/errno";
constexpr char kPathPayload[] = "webdataset_cpp/path";
constexpr char kReasonPayload[] = "webdataset_cpp/reason";
constexpr char kRemotePayload[] = "webdataset_cpp/remote-url";

// PendingError is a Python exception on its way through native stages.
struct PendingError {
  PyRef exception;
  std::string field;  // set for a decoder's exception
  std::string url;
  std::string key;
};

thread_local std::optional<PendingError> pending;

// ProjectClass names the exception classes of webdataset_cpp.errors.
enum class ProjectClass {
  kDataError,
  kShardReadError,
  kCommandError,
  kPipeShardError,
  kDecodingError,
  kObjectChangedError
};

// ProjectException returns webdataset_cpp.errors.<class>, imported once and
// kept for the process's lifetime. REQUIRES: the GIL is held (it guards the
// slots).
py::handle ProjectException(ProjectClass which) {
  static constexpr const char* kNames[] = {"DataError",     "ShardReadError",
                                           "CommandError",  "PipeShardError",
                                           "DecodingError", "ObjectChangedError"};
  static PyObject* slots[std::size(kNames)] = {};
  const size_t i = static_cast<size_t>(which);
  if (slots[i] == nullptr) {
    slots[i] =
        py::object(py::module_::import("webdataset_cpp.errors").attr(kNames[i])).release().ptr();
  }
  return slots[i];
}

std::string Message(const absl::Status& status) {
  return std::string(wds::ToStd(status.message()));
}

py::object Make(py::handle type, const std::string& message) { return type(py::str(message)); }

// OsError is OSError(err, reason, path), which Python turns into the
// subclass for err (FileNotFoundError for ENOENT).
py::object OsError(int err, const std::string& reason, const std::string& path) {
  py::object exception = py::reinterpret_steal<py::object>(
      PyObject_CallFunction(PyExc_OSError, "isO", err, reason.c_str(), py::str(path).ptr()));
  if (!exception) throw py::error_already_set();
  return exception;
}

// DecodingException is the DecodingError(url, key, k, message) of a field
// that failed at `site`.
py::object DecodingException(const wds::FieldSite& site, const std::string& message) {
  py::dict kwargs;
  kwargs["url"] = site.url.empty() ? py::none() : py::object(py::str(site.url));
  kwargs["key"] = py::str(site.key);
  kwargs["k"] = py::str(site.field);
  kwargs["message"] = py::str(message);
  return ProjectException(ProjectClass::kDecodingError)(**kwargs);
}

py::object PendingException(const absl::Status& status) {
  PendingError error = std::move(*pending);
  pending.reset();
  py::object original = py::reinterpret_borrow<py::object>(error.exception.get());
  if (error.field.empty()) return original;
  py::object wrapped =
      DecodingException(wds::FieldSite{error.url, error.key, error.field}, Message(status));
  PyException_SetCause(wrapped.ptr(), original.inc_ref().ptr());
  return wrapped;
}

py::handle TypeFor(absl::StatusCode code, Phase phase) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return phase == Phase::kSetup ? PyExc_ValueError : ProjectException(ProjectClass::kDataError);
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kOutOfRange:
      return PyExc_ValueError;
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kResourceExhausted:
      return phase == Phase::kSetup && code != absl::StatusCode::kDataLoss
                 ? PyExc_ValueError
                 : ProjectException(ProjectClass::kDataError);
    case absl::StatusCode::kPermissionDenied:
      return PyExc_PermissionError;
    default:
      return PyExc_RuntimeError;
  }
}

// RemoteException is the exception of a RemoteStatus error (see errors.h).
py::object RemoteException(const absl::Status& status, const std::string& url, Phase phase) {
  const std::string message = Message(status);
  std::string reason = message;
  if (reason.size() > url.size() + 2 && reason.compare(0, url.size(), url) == 0 &&
      reason.compare(url.size(), 2, ": ") == 0) {
    reason.erase(0, url.size() + 2);
  }
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return OsError(ENOENT, reason, url);
    case absl::StatusCode::kPermissionDenied:
      return OsError(EACCES, reason, url);
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDeadlineExceeded:
      return Make(PyExc_ConnectionError, message);
    case absl::StatusCode::kDataLoss:
      return Make(ProjectException(ProjectClass::kDataError), message);
    case absl::StatusCode::kAborted: {
      py::object changed = Make(ProjectException(ProjectClass::kObjectChangedError), message);
      changed.attr("url") = py::str(url);
      return changed;
    }
    case absl::StatusCode::kInvalidArgument:
      return Make(PyExc_ValueError, message);
    default:
      return Make(TypeFor(status.code(), phase), message);
  }
}

// KindException is the exception of a status that the core marked with the
// kind of its failure (wds/base/error_kind.h), of the class the reference raises
// for that kind; nullopt for an unmarked status. The kind alone decides, never
// the message, which may be reworded.
std::optional<py::object> KindException(const absl::Status& status) {
  switch (wds::ErrorKindOf(status)) {
    case wds::ErrorKind::kCommandFailed:
      return Make(ProjectException(ProjectClass::kCommandError), Message(status));
    case wds::ErrorKind::kShardUnreadable: {
      // A pipe: shard's bad output may come from a command that failed: the
      // reader sees the output before the command's exit status.
      const bool pipe = wds::StartsWith(wds::ShardUrlOf(status).value_or(""), "pipe:");
      return Make(
          ProjectException(pipe ? ProjectClass::kPipeShardError : ProjectClass::kShardReadError),
          Message(status));
    }
    case wds::ErrorKind::kFieldDecode:
      return DecodingException(*wds::FieldSiteOf(status), Message(status));
    case wds::ErrorKind::kUnspecified:
      break;
  }
  return std::nullopt;
}

}  // namespace

absl::Status ErrnoStatus(int err, std::string_view path, std::string_view what,
                         std::string_view reason) {
  absl::Status status = absl::ErrnoToStatus(err, wds::ToAbsl(what));
  status.SetPayload(kErrnoPayload, absl::Cord(std::to_string(err)));
  status.SetPayload(kPathPayload, absl::Cord(wds::ToAbsl(path)));
  if (!reason.empty()) status.SetPayload(kReasonPayload, absl::Cord(wds::ToAbsl(reason)));
  return status;
}

absl::Status RemoteStatus(absl::Status status, std::string_view url) {
  if (status.ok() || absl::IsCancelled(status)) return status;
  status.SetPayload(kRemotePayload, absl::Cord(wds::ToAbsl(url)));
  return status;
}

// ExceptionText is an exception's repr, or its type's name where the repr
// itself raises (the error it raised is dropped).
std::string ExceptionText(py::handle exception) {
  try {
    return py::repr(exception);
  } catch (py::error_already_set&) {
    return wds::Cat("<", Py_TYPE(exception.ptr())->tp_name, " whose repr raised>");
  }
}

absl::Status StorePythonError(py::error_already_set& e, std::string_view field) {
  std::string text = ExceptionText(e.value());
  pending.emplace();
  pending->exception = PyRef(e.value());
  pending->field = std::string(field);
  if (e.trace()) PyException_SetTraceback(e.value().ptr(), e.trace().ptr());
  return absl::AbortedError(wds::ToAbsl(text));
}

void ClearPythonError() { pending.reset(); }

void NoteSample(std::string_view url, std::string_view key) {
  if (!pending.has_value() || pending->field.empty() || !pending->url.empty()) return;
  pending->url = std::string(url);
  pending->key = std::string(key);
}

py::object ExceptionFromStatus(const absl::Status& status, Phase phase) {
  // A stream cut short because the interpreter is exiting (a call into
  // Python refused then) ends the thread that consumes it without a word.
  if (CutShortByExit(status)) {
    return Make(PyExc_SystemExit, Message(status));
  }
  if (status.code() == absl::StatusCode::kAborted && pending.has_value()) {
    return PendingException(status);
  }
  if (std::optional<py::object> exception = KindException(status)) return *std::move(exception);
  if (auto url = status.GetPayload(kRemotePayload)) {
    return RemoteException(status, std::string(*url), phase);
  }
  if (auto err = status.GetPayload(kErrnoPayload)) {
    auto path = status.GetPayload(kPathPayload);
    const int number = std::stoi(std::string(*err));
    auto reason = status.GetPayload(kReasonPayload);
    return OsError(number, reason ? std::string(*reason) : std::strerror(number),
                   path ? std::string(*path) : "");
  }
  return Make(TypeFor(status.code(), phase), Message(status));
}

void RaiseStatus(const absl::Status& status, Phase phase) {
  py::object exception = ExceptionFromStatus(status, phase);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
  throw py::error_already_set();
}

SignalCheck::~SignalCheck() {
  if (!raised() || !PythonIsUsable()) return;
  ScopedGil gil;
  if (!gil) return;  // exiting: leaked
  Py_XDECREF(type_);
  Py_XDECREF(value_);
  Py_XDECREF(trace_);
}

wds::InterruptCheck SignalCheck::check() {
  return [this]() -> absl::Status {
    if (!raised()) {
      if (!PythonIsUsable()) return absl::OkStatus();
      ScopedGil gil;
      if (!gil || PyErr_CheckSignals() == 0) return absl::OkStatus();  // no handler runs at exit
      PyErr_Fetch(&type_, &value_, &trace_);
    }
    return absl::CancelledError("interrupted by a Python signal handler");
  };
}

void SignalCheck::RethrowIfRaised() {
  if (!raised()) return;
  PyErr_Restore(std::exchange(type_, nullptr), std::exchange(value_, nullptr),
                std::exchange(trace_, nullptr));
  throw py::error_already_set();
}

}  // namespace wdspy
