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
#include "wds/internal/strings.h"

namespace wdspy {
namespace {

constexpr char kErrnoPayload[] = "webdataset_cpp/errno";
constexpr char kPathPayload[] = "webdataset_cpp/path";
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
  kDecodingError
};

// ProjectException returns webdataset_cpp.errors.<class>, imported once and
// kept for the process's lifetime. REQUIRES: the GIL is held (it guards the
// slots).
py::handle ProjectException(ProjectClass which) {
  static constexpr const char* kNames[] = {"DataError", "ShardReadError", "CommandError",
                                           "PipeShardError", "DecodingError"};
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

py::object PendingException(const absl::Status& status) {
  PendingError error = std::move(*pending);
  pending.reset();
  py::object original = py::reinterpret_borrow<py::object>(error.exception.get());
  if (error.field.empty()) return original;
  py::dict kwargs;
  kwargs["url"] = error.url.empty() ? py::none() : py::object(py::str(error.url));
  kwargs["key"] = py::str(error.key);
  kwargs["k"] = py::str(error.field);
  kwargs["message"] = py::str(Message(status));
  py::object wrapped = ProjectException(ProjectClass::kDecodingError)(**kwargs);
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
    case absl::StatusCode::kAborted:
      return Make(ProjectException(ProjectClass::kDataError), message);
    case absl::StatusCode::kInvalidArgument:
      return Make(PyExc_ValueError, message);
    default:
      return Make(TypeFor(status.code(), phase), message);
  }
}

// DecodeSite is where a native decoder failed: the decode stage's message
// is "<url>: key <key>: field <field>: <what>" (wds::SampleError; no url
// part for samples without one). A key holding ": " is not recognised.
struct DecodeSite {
  std::string url;
  std::string key;
  std::string field;
};

std::optional<DecodeSite> DecodeSiteOf(std::string_view message) {
  constexpr std::string_view kKey = "key ", kField = ": field ";
  DecodeSite site;
  size_t key_at = 0;
  if (message.substr(0, kKey.size()) != kKey) {
    const size_t at = message.find(": key ");
    if (at == std::string_view::npos) return std::nullopt;
    site.url = std::string(message.substr(0, at));
    key_at = at + 2;
  }
  key_at += kKey.size();
  const size_t field_at = message.find(kField, key_at);
  if (field_at == std::string_view::npos) return std::nullopt;
  const size_t field_end = message.find(": ", field_at + kField.size());
  if (field_end == std::string_view::npos) return std::nullopt;
  site.key = std::string(message.substr(key_at, field_at - key_at));
  if (site.key.find(": ") != std::string::npos) return std::nullopt;  // "batched: field ..."
  site.field =
      std::string(message.substr(field_at + kField.size(), field_end - field_at - kField.size()));
  return site;
}

bool NamesASample(std::string_view message) {
  return message.substr(0, 4) == "key " || message.find(": key ") != std::string_view::npos;
}

py::object DecodingException(const DecodeSite& site, const std::string& message) {
  py::dict kwargs;
  kwargs["url"] = site.url.empty() ? py::none() : py::object(py::str(site.url));
  kwargs["key"] = py::str(site.key);
  kwargs["k"] = py::str(site.field);
  kwargs["message"] = py::str(message);
  return ProjectException(ProjectClass::kDecodingError)(**kwargs);
}

// ReaderErrorClass is the class of a tar reader's or decompressor's error (a
// DataLoss, or "not a tar archive", naming no sample; for a pipe: shard it
// may be a failed command's, whose exit status comes after its output), else
// DataError.
ProjectClass ReaderErrorClass(absl::StatusCode code, const std::string& message) {
  const bool unreadable = (code == absl::StatusCode::kDataLoss && !NamesASample(message)) ||
                          (code == absl::StatusCode::kInvalidArgument &&
                           message.find(": not a tar archive (") != std::string::npos);
  if (!unreadable) return ProjectClass::kDataError;
  return message.compare(0, 5, "pipe:") == 0 ? ProjectClass::kPipeShardError
                                             : ProjectClass::kShardReadError;
}

// DataException is the exception of a data error (one TypeFor gives
// DataError), of the class the reference raises for that kind of failure.
// The core's statuses say what went wrong, not which layer failed, so its
// fixed phrases decide: a pipe: command's exit status, a decoder's failure
// (the decode stage's message) and the reader's errors (ReaderErrorClass).
py::object DataException(const absl::Status& status, Phase phase) {
  const std::string message = Message(status);
  if (message.find(": command failed with ") != std::string::npos) {
    return Make(ProjectException(ProjectClass::kCommandError), message);
  }
  if (phase == Phase::kData) {
    if (std::optional<DecodeSite> site = DecodeSiteOf(message)) {
      return DecodingException(*site, message);
    }
  }
  return Make(ProjectException(ReaderErrorClass(status.code(), message)), message);
}

}  // namespace

absl::Status ErrnoStatus(int err, std::string_view path, std::string_view what) {
  absl::Status status = absl::ErrnoToStatus(err, wds::ToAbsl(what));
  status.SetPayload(kErrnoPayload, absl::Cord(std::to_string(err)));
  status.SetPayload(kPathPayload, absl::Cord(wds::ToAbsl(path)));
  return status;
}

absl::Status RemoteStatus(absl::Status status, std::string_view url) {
  if (status.ok() || absl::IsCancelled(status)) return status;
  status.SetPayload(kRemotePayload, absl::Cord(wds::ToAbsl(url)));
  return status;
}

absl::Status StorePythonError(py::error_already_set& e, std::string_view field) {
  std::string text = py::repr(e.value());
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
  if (status.code() == absl::StatusCode::kAborted && pending.has_value()) {
    return PendingException(status);
  }
  if (auto url = status.GetPayload(kRemotePayload)) {
    return RemoteException(status, std::string(*url), phase);
  }
  if (auto err = status.GetPayload(kErrnoPayload)) {
    auto path = status.GetPayload(kPathPayload);
    const int number = std::stoi(std::string(*err));
    return OsError(number, std::strerror(number), path ? std::string(*path) : "");
  }
  py::handle type = TypeFor(status.code(), phase);
  if (type.is(ProjectException(ProjectClass::kDataError))) return DataException(status, phase);
  return Make(type, Message(status));
}

void RaiseStatus(const absl::Status& status, Phase phase) {
  py::object exception = ExceptionFromStatus(status, phase);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
  throw py::error_already_set();
}

SignalCheck::~SignalCheck() {
  if (!raised() || !PythonIsUsable()) return;
  py::gil_scoped_acquire gil;
  Py_XDECREF(type_);
  Py_XDECREF(value_);
  Py_XDECREF(trace_);
}

wds::InterruptCheck SignalCheck::check() {
  return [this]() -> absl::Status {
    if (!raised()) {
      if (!PythonIsUsable()) return absl::OkStatus();
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() == 0) return absl::OkStatus();
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
