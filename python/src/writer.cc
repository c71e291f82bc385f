// TarWriter and ShardWriter for Python: the Python layer encodes each
// sample's values into bytes (the reference's encoders); these write them,
// without the GIL, through the core's writers.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "opener.h"
#include "py_ref.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/tar/shard_roller.h"
#include "wds/internal/tar/tar_grouping.h"
#include "wds/tar/shard_writer.h"
#include "wds/tar/tar_writer.h"

namespace wdspy {
namespace {

using Members = std::vector<std::pair<std::string, py::bytes>>;

wds::TarCompression ParseCompression(const std::string& name) {
  if (name.empty() || name == "none") return wds::TarCompression::kNone;
  if (name == "gz") return wds::TarCompression::kGzip;
  if (name == "zst") return wds::TarCompression::kZstd;
  throw py::value_error("compression must be none, gz or zst, got " + name);
}

wds::TarWriterOptions TarOptions(const std::string& compression, int level, int64_t mtime,
                                 int threads) {
  wds::TarWriterOptions options;
  options.compression = ParseCompression(compression);
  options.level = level;
  options.mtime = mtime;
  options.threads = threads;
  return options;
}

// BytesView views a bytes object (kept alive by the caller) as a Buffer.
wds::Buffer BytesView(const py::bytes& b) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  PyBytes_AsStringAndSize(b.ptr(), &data, &size);
  return wds::Buffer::View(nullptr, reinterpret_cast<const uint8_t*>(data),
                           static_cast<size_t>(size));
}

class TarWriter {
 public:
  TarWriter(const std::string& path, const std::string& compression, int level, int64_t mtime,
            int threads) {
    auto w = wds::TarWriter::Create(path, TarOptions(compression, level, mtime, threads));
    ThrowIfError(w.status());
    writer_ = ProcessLocal<wds::TarWriter>(*std::move(w));
  }

  // WriteMembers writes (name, data) members in the given order; returns the
  // data bytes written.
  int64_t WriteMembers(const Members& members) {
    wds::TarWriter* w = Writer();
    const int64_t before = w->bytes_written();
    absl::Status status;
    {
      ScopedGilRelease release;
      for (const auto& [name, data] : members) {
        status = w->WriteMember(name, BytesView(data).view());
        if (!status.ok()) break;
      }
    }
    ThrowIfError(status);
    return w->bytes_written() - before;
  }

  void Close() {
    if (!writer_) return;
    absl::Status status;
    {
      ScopedGilRelease release;
      status = writer_->Close();
    }
    writer_.reset();
    ThrowIfError(status);
  }

 private:
  wds::TarWriter* Writer() {
    if (!writer_) throw py::value_error("the TarWriter is closed");
    return writer_.get();
  }

  ProcessLocal<wds::TarWriter> writer_;
};

class ShardWriter {
 public:
  ShardWriter(std::string pattern, int64_t maxcount, int64_t maxsize,
              const std::string& compression, int level, int64_t mtime, int threads,
              int64_t first_shard, bool index, py::object on_close, py::handle remote,
              bool upload_in_background) {
    wds::ShardWriterOptions options;
    options.maxcount = maxcount;
    options.maxsize = maxsize;
    options.tar = TarOptions(compression, level, mtime, threads);
    options.first_shard = first_shard;
    options.write_index = index;
    options.upload_in_background = upload_in_background;
    if (wds::IsRemoteUrl(pattern)) options.remote = RemoteAccess::FromPython(remote)->options();
    if (!on_close.is_none()) {
      auto callback = std::make_shared<PyRef>(on_close);
      options.on_close = [callback](const wds::ShardInfo& shard) -> absl::Status {
        ScopedGil gil;
        if (!gil) return PythonIsExiting();
        try {
          callback->get()(shard.path, shard.samples, shard.data_bytes, shard.file_bytes);
          return absl::OkStatus();
        } catch (py::error_already_set& e) {
          return StorePythonError(e);
        }
      };
    }
    if (maxcount <= 0 || maxsize <= 0) {
      throw py::value_error(
          wds::Cat("maxcount and maxsize must be > 0, got ", maxcount, " and ", maxsize));
    }
    auto w = wds::ShardWriter::Create(std::move(pattern), std::move(options));
    ThrowIfError(w.status());
    writer_ = ProcessLocal<wds::ShardWriter>(*std::move(w));
  }

  void Write(const std::string& key, const Members& fields) {
    if (!writer_) throw py::value_error("the ShardWriter is closed");
    wds::Sample sample;
    sample.Append(std::string(wds::kKeyField), key);
    for (const auto& [name, data] : fields) sample.Set(name, BytesView(data));
    Run([&] { return writer_->Write(sample); });
  }

  void Close() {
    if (!writer_) return;
    absl::Status status;
    try {
      Run([&] { return writer_->Close(); });
    } catch (...) {
      shards_ = writer_->shards_written();
      samples_ = writer_->samples_written();
      writer_.reset();
      throw;
    }
    shards_ = writer_->shards_written();
    samples_ = writer_->samples_written();
    writer_.reset();
    ThrowIfError(status);
  }

  int64_t shards() const { return writer_ ? writer_->shards_written() : shards_; }
  int64_t samples() const { return writer_ ? writer_->samples_written() : samples_; }

 private:
  // Run calls `step` without the GIL, running Python's signal handlers while
  // it waits (an s3:// shard's upload): Ctrl-C ends the wait, the shard is
  // not published, and the handler's exception is raised.
  template <typename F>
  void Run(F step) {
    absl::Status status;
    SignalCheck signals;
    {
      ScopedGilRelease release;
      wds::ScopedInterruptCheck check(signals.check());
      status = step();
    }
    // An on_close that raised before another error (the shard before a
    // failed write) must not be raised for a later, unrelated one.
    if (status.code() != absl::StatusCode::kAborted) ClearPythonError();
    signals.RethrowIfRaised();
    ThrowIfError(status);
  }

  ProcessLocal<wds::ShardWriter> writer_;
  int64_t shards_ = 0;
  int64_t samples_ = 0;
};

// ShardRoller applies the core's rolling rule to shards that Python writes
// itself, one TarWriter per shard (pipe: patterns, opener=), so that they
// roll over where the native ShardWriter's would.
class ShardRoller {
 public:
  ShardRoller(int64_t maxcount, int64_t maxsize) : roller_(maxcount, maxsize) {
    if (maxcount <= 0 || maxsize <= 0) {
      throw py::value_error(
          wds::Cat("maxcount and maxsize must be > 0, got ", maxcount, " and ", maxsize));
    }
  }

  // Add accounts a sample of (member name, size) members; returns whether it
  // starts a new shard (true for the first sample).
  bool Add(const std::vector<std::pair<std::string, int64_t>>& members) {
    int64_t footprint = 0;
    for (const auto& [name, size] : members) footprint += wds::MemberFootprint(name, size);
    return roller_.Add(footprint);
  }

 private:
  wds::ShardRoller roller_;
};

}  // namespace

void RegisterWriters(py::module_& m) {
  py::class_<TarWriter>(m, "TarWriter", "The core's TarWriter (members as given).")
      .def(py::init<const std::string&, const std::string&, int, int64_t, int>(), py::arg("path"),
           py::arg("compression") = "none", py::arg("level") = -1, py::arg("mtime") = 0,
           py::arg("threads") = 1)
      .def("write_members", &TarWriter::WriteMembers, py::arg("members"))
      .def("close", &TarWriter::Close);
  py::class_<ShardWriter>(m, "ShardWriter", "The core's ShardWriter.")
      .def(py::init<std::string, int64_t, int64_t, const std::string&, int, int64_t, int, int64_t,
                    bool, py::object, py::handle, bool>(),
           py::arg("pattern"), py::kw_only(), py::arg("maxcount"), py::arg("maxsize"),
           py::arg("compression") = "none", py::arg("level") = -1, py::arg("mtime") = 0,
           py::arg("threads") = 1, py::arg("first_shard") = 0, py::arg("index") = false,
           py::arg("on_close") = py::none(), py::arg("remote") = py::none(),
           py::arg("upload_in_background") = true)
      .def("write", &ShardWriter::Write, py::arg("key"), py::arg("fields"))
      .def("close", &ShardWriter::Close)
      .def_property_readonly("shards_written", &ShardWriter::shards)
      .def_property_readonly("samples_written", &ShardWriter::samples);
  py::class_<ShardRoller>(m, "ShardRoller", "The core's shard rolling rule.")
      .def(py::init<int64_t, int64_t>(), py::arg("maxcount"), py::arg("maxsize"))
      .def("add", &ShardRoller::Add, py::arg("members"),
           "Accounts a sample's (member name, size) pairs; True if it starts a new shard.");
  m.def(
      "is_writable_key", [](const std::string& key) { return wds::IsWritableKey(key); },
      py::arg("key"),
      "Whether members '<key>.<field>' read back under `key`: a non-empty basename "
      "without a dot.");
}

}  // namespace wdspy
