#include "python_schemes.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "errors.h"
#include "py_ref.h"
#include "wds/internal/base/strings.h"

namespace wdspy {
namespace {

// kChunk is the least a read asks Python for: each read takes the GIL.
constexpr size_t kChunk = size_t{1} << 20;

// WithUrl appends `url` to the args of the exception being handled, as the
// reference's url_opener does, and keeps it for Python.
absl::Status WithUrl(py::error_already_set& e, const std::string& url) {
  try {
    py::object args = e.value().attr("args");
    e.value().attr("args") = py::tuple(args) + py::make_tuple(url);
  } catch (py::error_already_set&) {
    // Args that cannot be extended: the exception as it was.
  }
  return StorePythonError(e);
}

// OsErrorText is what an OSError says after its "[Errno n] ": its strerror
// and, when it has one, its file name ("No such file or directory: 'ais'").
std::string OsErrorText(py::handle error) {
  try {
    py::object strerror = error.attr("strerror");
    py::object filename = error.attr("filename");
    if (strerror.is_none()) return py::str(error).cast<std::string>();
    std::string text = py::str(strerror).cast<std::string>();
    if (!filename.is_none()) text += wds::Cat(": ", py::repr(filename).cast<std::string>());
    return text;
  } catch (py::error_already_set&) {
    return "(an OSError whose text cannot be read)";
  }
}

// PythonFileStream reads a Python file object; see OpenThroughPython.
class PythonFileStream : public wds::ByteStream {
 public:
  // REQUIRES: the GIL is held.
  PythonFileStream(std::string url, py::handle file)
      : url_(std::move(url)), file_(file), readinto_(py::hasattr(file, "readinto")) {}
  ~PythonFileStream() override {
    if (finished_ || !PythonIsUsable()) return;
    ScopedGil gil;
    if (!gil) return;  // exiting: the file object is leaked (PyRef)
    try {
      if (py::hasattr(file_.get(), "close")) file_.get().attr("close")();
    } catch (py::error_already_set&) {
      // Dropped unfinished: what its close says is not asked for.
    }
    file_.Reset();
  }

  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    if (size == 0) return 0;
    if (held_at_ == held_.size()) {
      ScopedGil gil;
      if (!gil) return PythonIsExiting();
      try {
        // A reader's usual 1 MiB goes straight into its buffer (one copy).
        if (size >= kChunk && readinto_) {
          try {
            return ReadInto(buffer, size);
          } catch (py::error_already_set& e) {
            // io.RawIOBase's own readinto, for a stream that defines read().
            if (!e.matches(PyExc_NotImplementedError)) throw;
            readinto_ = false;
          }
        }
        absl::Status filled = Fill(size);
        if (!filled.ok()) return filled;
      } catch (py::error_already_set& e) {
        return WithUrl(e, url_);
      }
      if (held_.empty()) return 0;
    }
    const size_t n = std::min(size, held_.size() - held_at_);
    std::memcpy(buffer, held_.data() + held_at_, n);
    held_at_ += n;
    return n;
  }

  absl::Status Finish() override {
    finished_ = true;
    ScopedGil gil;
    if (!gil) return PythonIsExiting();
    try {
      if (py::hasattr(file_.get(), "close")) file_.get().attr("close")();
      file_.Reset();
    } catch (py::error_already_set& e) {
      file_.Reset();
      return WithUrl(e, url_);
    }
    return absl::OkStatus();
  }

  const std::string& url() const override { return url_; }

 private:
  // ReadInto has the file object's readinto fill `buffer`. REQUIRES: the
  // GIL is held; throws py::error_already_set.
  absl::StatusOr<size_t> ReadInto(void* buffer, size_t size) {
    py::memoryview view = py::memoryview::from_memory(buffer, static_cast<py::ssize_t>(size));
    // The buffer is the caller's: released after the call, also when it
    // raises, the view the file object may have kept can no longer reach
    // it, as CPython's BufferedReader does after a raw stream's readinto (a
    // slice of the view it kept could: file objects must not keep them).
    struct Release {
      py::memoryview& view;
      ~Release() {
        PyObject* done = PyObject_CallMethod(view.ptr(), "release", nullptr);
        if (done == nullptr) PyErr_Clear();  // a slice still exported: nothing more to do
        Py_XDECREF(done);
      }
    } release{view};
    py::object n = file_.get().attr("readinto")(view);
    if (n.is_none()) return NoData("readinto");
    const Py_ssize_t count = PyNumber_AsSsize_t(n.ptr(), PyExc_OverflowError);
    if (count == -1 && PyErr_Occurred()) throw py::error_already_set();
    if (count < 0 || static_cast<size_t>(count) > size) {
      return absl::FailedPreconditionError(wds::Cat(
          url_, ": its file object's readinto() returned ", count, " for ", size, " bytes"));
    }
    return static_cast<size_t>(count);
  }

  // Fill replaces held_ with what read() returns for at least `size` bytes
  // (kChunk). REQUIRES: the GIL is held; throws py::error_already_set.
  absl::Status Fill(size_t size) {
    held_.clear();
    held_at_ = 0;
    py::object data = file_.get().attr("read")(std::max(size, kChunk));
    if (data.is_none()) return NoData("read");
    // bytes as a rule; any other bytes-like object is copied into one.
    auto bytes = py::reinterpret_steal<py::object>(PyBytes_FromObject(data.ptr()));
    if (!bytes) throw py::error_already_set();
    held_.assign(PyBytes_AS_STRING(bytes.ptr()),
                 static_cast<size_t>(PyBytes_GET_SIZE(bytes.ptr())));
    return absl::OkStatus();
  }

  absl::Status NoData(std::string_view method) const {
    return absl::FailedPreconditionError(
        wds::Cat(url_, ": its file object's ", method,
                 "() returned None (a non-blocking stream with no data; gopen handlers return "
                 "blocking ones)"));
  }

  std::string url_;
  PyRef file_;
  // What the last read() returned beyond what the caller took.
  std::string held_;
  size_t held_at_ = 0;
  // readinto_: the file object has a readinto that works.
  bool readinto_;
  bool finished_ = false;
};

}  // namespace

bool PythonRewrites() { return std::getenv("GOPEN_REWRITE") != nullptr; }

absl::StatusOr<std::string> RewrittenUrl(std::string_view url) {
  if (!PythonRewrites()) return std::string(url);
  ScopedGil gil;
  if (!gil) return PythonIsExiting();
  try {
    return py::module_::import("webdataset_cpp.gopen")
        .attr("rewrite_url")(std::string(url))
        .cast<std::string>();
  } catch (py::error_already_set& e) {
    return WithUrl(e, std::string(url));
  }
}

absl::StatusOr<std::unique_ptr<wds::ByteStream>> OpenThroughPython(std::string url,
                                                                   const std::string& opened,
                                                                   const std::string& scheme) {
  ScopedGil gil;
  if (!gil) return PythonIsExiting();
  try {
    py::object schemes = py::module_::import("webdataset_cpp.gopen").attr("gopen_schemes");
    py::object handler = schemes.attr("get")(scheme, schemes["__default__"]);
    py::object file = handler(opened, "rb", 8192);
    return std::make_unique<PythonFileStream>(std::move(url), file);
  } catch (py::error_already_set& e) {
    // A missing or forbidden file, as Python says it, is what the native
    // openers say: a sidecar looked for and absent, a shard that cannot be
    // opened (FileNotFoundError / PermissionError naming the URL).
    const bool missing = e.matches(PyExc_FileNotFoundError);
    if (missing || e.matches(PyExc_PermissionError)) {
      // Its own words (which file: a command's, say) stay in the message.
      const std::string said = OsErrorText(e.value());
      return ErrnoStatus(missing ? ENOENT : EACCES, url, wds::Cat(url, ": ", said), said);
    }
    return WithUrl(e, url);
  }
}

}  // namespace wdspy
