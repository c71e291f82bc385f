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
#include "wds/io/remote_upload.h"

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

// Upload writes one s3:// or gs:// object (wds/io/remote_upload.h); gopen(url, "wb")
// wraps it. Sends release the GIL and run Python's signal handlers.
class Upload {
 public:
  Upload(const std::string& url, py::handle remote) : url_(url) {
    std::shared_ptr<const RemoteAccess> access = RemoteAccess::FromPython(remote);
    absl::StatusOr<std::unique_ptr<wds::RemoteUpload>> upload =
        wds::RemoteUpload::Create(url, access->options());
    if (!upload.ok()) RaiseStatus(upload.status(), Phase::kData);
    upload_ = ProcessLocal<wds::RemoteUpload>(*std::move(upload));
  }
  // An upload dropped unclosed is aborted (without the GIL).
  ~Upload() { AbortNow(); }
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;

  // Write sends (or gathers) the bytes of a buffer; returns how many.
  size_t Write(py::buffer buffer) {
    Busy busy(this);
    py::buffer_info info = buffer.request();
    if (!PyBuffer_IsContiguous(info.view(), 'C')) {
      throw py::value_error(wds::Cat(url_, ": write takes a contiguous buffer"));
    }
    const size_t size = static_cast<size_t>(info.size * info.itemsize);
    wds::RemoteUpload* upload = Get("write to");
    Run([&] { return upload->Write(std::string_view(static_cast<const char*>(info.ptr), size)); });
    return size;
  }

  // Close makes the object appear (a second Close does nothing).
  void Close() {
    if (closed_) return;
    Busy busy(this);
    wds::RemoteUpload* upload = Get("close");
    closed_ = true;
    Run([&] { return upload->Close(); });
  }

  // Abort gives the upload up; nothing appears.
  void Abort() {
    Busy busy(this);
    AbortNow();
  }

  bool closed() const { return closed_; }
  const std::string& url() const { return url_; }
  int64_t size() const { return upload_ ? upload_->size() : 0; }
  int parts() const { return upload_ ? upload_->parts() : 0; }
  std::string etag() const { return upload_ ? upload_->etag() : ""; }

 private:
  void AbortNow() {
    if (closed_ || upload_.inherited() || !upload_) return;
    closed_ = true;
    wds::RemoteUpload* upload = upload_.get();
    ScopedGilRelease release;
    upload->Abort();
  }

  // Busy marks a call in progress: the upload is not thread-safe, and a
  // call releases the GIL while it sends.
  class Busy {
   public:
    explicit Busy(Upload* self) : self_(self) {
      if (self_->busy_) {
        throw py::value_error(
            wds::Cat(self_->url_, ": the upload is in use by another call (another thread)"));
      }
      self_->busy_ = true;
    }
    ~Busy() { self_->busy_ = false; }

   private:
    Upload* self_;
  };

  wds::RemoteUpload* Get(const char* what) {
    if (upload_.inherited()) {
      throw py::value_error(wds::Cat(url_, ": this upload was started before the process ",
                                     "forked; start it again in this process"));
    }
    if (closed_ || !upload_) throw py::value_error(wds::Cat(url_, ": ", what, " a closed upload"));
    return upload_.get();
  }

  template <typename F>
  void Run(F send) {
    absl::Status status;
    SignalCheck signals;
    {
      ScopedGilRelease release;
      wds::ScopedInterruptCheck check(signals.check());
      status = send();
    }
    if (signals.raised()) {
      AbortNow();
      signals.RethrowIfRaised();
    }
    if (!status.ok()) {
      closed_ = true;  // the upload failed, and was aborted
      RaiseStatus(status, Phase::kData);
    }
  }

  std::string url_;
  ProcessLocal<wds::RemoteUpload> upload_;
  bool closed_ = false;
  bool busy_ = false;  // changed with the GIL held
};

}  // namespace

void RegisterRemote(py::module_& m) {
  py::class_<Upload>(m, "RemoteUpload",
                     "One s3:// or gs:// object written in-process (a PUT, or a multipart upload).")
      .def(py::init<const std::string&, py::handle>(), py::arg("url"),
           py::arg("remote") = py::none())
      .def("write", &Upload::Write, py::arg("data"))
      .def("close", &Upload::Close)
      .def("abort", &Upload::Abort)
      .def_property_readonly("closed", &Upload::closed)
      .def_property_readonly("url", &Upload::url)
      .def_property_readonly("size", &Upload::size)
      .def_property_readonly("parts", &Upload::parts)
      .def_property_readonly("etag", &Upload::etag);
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
