// Remote reading for Python: UrlReader, one URL's bytes (gopen reads remote
// URLs through it) opened by PythonOpener, so remote URLs get the core's
// resumed, retried reading and the shared cache; and the check of
// webdataset_cpp.RemoteOptions' values.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "opener.h"
#include "py_ref.h"
#include "wds/internal/base/strings.h"

namespace wdspy {
namespace {

// UrlReader reads one URL from its start. Waits release the GIL and run
// Python's signal handlers (Ctrl-C). At the end of the data the stream is
// finished, so a pipe: command's exit status is checked there.
class UrlReader {
 public:
  UrlReader(const std::string& url, py::handle remote) : url_(url) {
    wds::Opener open = PythonOpener(RemoteAccess::FromPython(remote));
    absl::StatusOr<std::unique_ptr<wds::ByteStream>> stream;
    SignalCheck signals;
    {
      ScopedGilRelease release;
      wds::ScopedInterruptCheck check(signals.check());
      stream = open(url);
    }
    signals.RethrowIfRaised();
    if (!stream.ok()) RaiseStatus(stream.status(), Phase::kData);
    stream_ = ProcessLocal<wds::ByteStream>(*std::move(stream));
  }

  // ReadInto fills up to len(buffer) bytes of a writable buffer; 0 at the end.
  size_t ReadInto(py::buffer buffer) {
    py::buffer_info info = buffer.request(/*writable=*/true);
    if (stream_.inherited()) {
      throw py::value_error(wds::Cat(url_, ": this reader was opened before the process forked; ",
                                     "open the URL again in this process"));
    }
    if (finished_) return 0;
    wds::ByteStream* stream = stream_.get();
    if (stream == nullptr) throw py::value_error(wds::Cat(url_, ": read of a closed reader"));
    const size_t size = static_cast<size_t>(info.size * info.itemsize);
    absl::StatusOr<size_t> n;
    absl::Status finished;
    SignalCheck signals;
    {
      ScopedGilRelease release;
      wds::ScopedInterruptCheck check(signals.check());
      n = stream->Read(info.ptr, size);
      if (n.ok() && *n == 0 && size > 0) finished = stream->Finish();
    }
    if (signals.raised()) {
      Close();
      signals.RethrowIfRaised();
    }
    if (!n.ok() || !finished.ok()) {
      Close();
      RaiseStatus(n.ok() ? finished : n.status(), Phase::kData);
    }
    if (*n == 0 && size > 0) finished_ = true;
    return *n;
  }

  // Close ends the stream now (a pipe: command is stopped).
  void Close() { stream_.reset(); }
  bool closed() const { return !stream_ && !stream_.inherited(); }
  const std::string& url() const { return url_; }

 private:
  std::string url_;
  ProcessLocal<wds::ByteStream> stream_;
  bool finished_ = false;
};

}  // namespace

void RegisterRemote(py::module_& m) {
  py::class_<UrlReader>(m, "UrlReader",
                        "The bytes of one URL (remote URLs through the native remote reader).")
      .def(py::init<const std::string&, py::handle>(), py::arg("url"),
           py::arg("remote") = py::none())
      .def("readinto", &UrlReader::ReadInto, py::arg("buffer"))
      .def("close", &UrlReader::Close)
      .def_property_readonly("closed", &UrlReader::closed)
      .def_property_readonly("url", &UrlReader::url);
  m.def("_set_python_schemes", &SetPythonSchemes, py::arg("schemes"), py::arg("python_default"),
        "Which URL schemes shards are opened with through gopen_schemes (its table calls this).");
  m.def(
      "check_remote_options", [](py::handle given) { RemoteAccess::Check(given); },
      py::arg("options"),
      "Raises TypeError / ValueError for an unknown name or a bad value in "
      "RemoteOptions._native().");
}

}  // namespace wdspy
