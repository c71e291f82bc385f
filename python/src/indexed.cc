// Random access to a shard's samples for webdataset_cpp.wids: wds::IndexedShard
// (a local file, or a remote one by ranged requests), whose reads fill Python
// bytes objects with the GIL released; a batch of samples is read by several
// threads at once when it has remote ones, since each of those waits on a
// round trip.
#include <fcntl.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "opener.h"
#include "py_ref.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/concurrently.h"
#include "wds/internal/base/strings.h"
#include "wds/io/remote.h"
#include "wds/tar/indexed_shard.h"

namespace wdspy {
namespace {

absl::StatusOr<std::unique_ptr<wds::IndexedShard>> OpenShard(
    const std::string& url, const std::shared_ptr<const RemoteAccess>& remote) {
  if (remote == nullptr) {
    const int fd = open(url.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, url, wds::Cat(url, ": cannot open"));
    return wds::IndexedShard::Open(url, fd);
  }
  absl::StatusOr<wds::RemoteOpener> reader = remote->Reader(url);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<std::unique_ptr<wds::IndexedShard>> shard = wds::IndexedShard::Open(url, *reader);
  if (!shard.ok()) return RemoteStatus(shard.status(), url);
  return shard;
}

class IndexedShard {
 public:
  // A remote URL (http(s), s3, gs) is read by ranged requests with the
  // options `remote` (RemoteOptions._native()); anything else is a local path.
  IndexedShard(const std::string& url, py::handle remote) {
    if (wds::IsRemoteUrl(url)) remote_ = RemoteAccess::FromPython(remote);
    absl::StatusOr<std::unique_ptr<wds::IndexedShard>> shard;
    SignalCheck signals;
    {
      ScopedGilRelease release;
      wds::ScopedInterruptCheck check(signals.check());
      shard = OpenShard(url, remote_);
    }
    signals.RethrowIfRaised();
    if (!shard.ok()) RaiseStatus(shard.status(), Phase::kData);
    shard_ = *std::move(shard);
    pid_ = getpid();
  }
  ~IndexedShard() {
    // A forked child leaves the parent's remote shard (and its connections) alone.
    if (remote_ != nullptr && pid_ != getpid()) (void)shard_.release();
  }
  // (An open shard of open_shards.)
  IndexedShard(std::shared_ptr<const RemoteAccess> remote, std::unique_ptr<wds::IndexedShard> shard)
      : remote_(std::move(remote)), shard_(std::move(shard)), pid_(getpid()) {}
  IndexedShard(const IndexedShard&) = delete;
  IndexedShard& operator=(const IndexedShard&) = delete;

  int64_t size() const { return shard_->size(); }
  const std::string& url() const { return shard_->url(); }

  // Native is this process's shard: in a process forked after a remote
  // shard was opened, a copy reading through the child's own connections
  // (the same index and version; no request). A local shard's descriptor
  // serves both. REQUIRES: the GIL is held (it orders these calls).
  absl::StatusOr<const wds::IndexedShard*> Native() {
    if (remote_ == nullptr || pid_ == getpid()) return shard_.get();
    absl::StatusOr<wds::RemoteOpener> reader = remote_->Reader(url());
    if (!reader.ok()) return reader.status();
    std::unique_ptr<wds::IndexedShard> copy = shard_->ForOpener(*reader);
    (void)shard_.release();  // the parent's
    shard_ = std::move(copy);
    pid_ = getpid();
    return shard_.get();
  }

 private:
  std::shared_ptr<const RemoteAccess> remote_;  // null for a local file
  std::unique_ptr<wds::IndexedShard> shard_;
  pid_t pid_ = 0;  // the process shard_ belongs to
};

// A Read is one sample of a batch: where it comes from, and the bytes
// objects its members go into.
struct Read {
  py::object owner;  // keeps `shard` alive while the GIL is released
  IndexedShard* shard = nullptr;
  int64_t index = 0;
  const wds::IndexedShard* native = nullptr;
  std::vector<py::bytes> data;
  std::vector<char*> dests;
  absl::Status status;
};

// RunConcurrently is wds::RunConcurrently with the caller's thread
// watching Python's signals: a Ctrl-C stops every thread at its next wait,
// and the jobs not begun are not run. REQUIRES: the GIL is not held.
void RunConcurrently(size_t n, int threads, SignalCheck& signals,
                     const std::function<void(size_t)>& job) {
  wds::ScopedInterruptCheck check(signals.check());
  wds::RunConcurrently(n, threads, job);
}

// ReadAll runs every read, `threads` at a time when some are remote (a local
// read does not wait on a round trip). REQUIRES: the GIL is not held.
void ReadAll(std::vector<Read>& reads, int threads, SignalCheck& signals) {
  const bool remote = std::any_of(reads.begin(), reads.end(),
                                  [](const Read& read) { return read.native->remote(); });
  RunConcurrently(reads.size(), remote ? threads : 1, signals, [&](size_t r) {
    Read& read = reads[r];
    try {
      read.status = read.native->ReadMembers(read.index, read.dests);
    } catch (const std::exception& e) {
      read.status = absl::ResourceExhaustedError(
          wds::Cat(read.native->url(), ": sample ", read.index, ": ", e.what()));
    }
  });
}

// OpenShards opens remote `urls` with the options `remote`, `threads` at a
// time (each open waits on two round trips, or a scan); the first failure
// (in URL order) raises.
std::vector<std::unique_ptr<IndexedShard>> OpenShards(const std::vector<std::string>& urls,
                                                      py::handle remote, int threads) {
  for (const std::string& url : urls) {
    if (!wds::IsRemoteUrl(url)) {
      throw py::value_error(wds::Cat("open_shards: ", url, " is not a remote URL"));
    }
  }
  std::shared_ptr<const RemoteAccess> access = RemoteAccess::FromPython(remote);
  std::vector<absl::StatusOr<std::unique_ptr<wds::IndexedShard>>> opened;
  opened.reserve(urls.size());
  for (size_t i = 0; i < urls.size(); ++i) opened.emplace_back(absl::CancelledError("not opened"));
  SignalCheck signals;
  {
    ScopedGilRelease release;
    RunConcurrently(urls.size(), threads, signals, [&](size_t i) {
      try {
        opened[i] = OpenShard(urls[i], access);
      } catch (const std::exception& e) {
        opened[i] = absl::ResourceExhaustedError(wds::Cat(urls[i], ": ", e.what()));
      }
    });
  }
  signals.RethrowIfRaised();
  std::vector<std::unique_ptr<IndexedShard>> out;
  for (size_t i = 0; i < urls.size(); ++i) {
    if (!opened[i].ok()) RaiseStatus(opened[i].status(), Phase::kData);
    out.push_back(std::make_unique<IndexedShard>(access, *std::move(opened[i])));
  }
  return out;
}

// ReadSamples returns [(key, [(field, bytes), ...]), ...] of `items`, each
// (shard, sample index), fields in tar order with their case; the first
// failed read (in item order) raises.
py::list ReadSamples(const py::sequence& items, int threads) {
  std::vector<Read> reads;
  reads.reserve(items.size());
  for (py::handle item : items) {
    auto [owner, i] = item.cast<std::pair<py::object, int64_t>>();
    if (!py::isinstance<IndexedShard>(owner)) {
      throw py::type_error(wds::Cat("read_samples: an item's shard is ",
                                    std::string(py::str(py::type::of(owner).attr("__name__"))),
                                    ", not an IndexedShard"));
    }
    auto* shard = owner.cast<IndexedShard*>();
    if (i < 0 || i >= shard->size()) {
      throw py::index_error(wds::Cat(shard->url(), ": sample ", i, " of ", shard->size()));
    }
    reads.emplace_back();
    reads.back().owner = std::move(owner);
    reads.back().shard = shard;
    reads.back().index = i;
  }
  for (Read& read : reads) {
    absl::StatusOr<const wds::IndexedShard*> native = read.shard->Native();
    if (!native.ok()) RaiseStatus(native.status(), Phase::kData);
    read.native = *native;
  }
  for (Read& read : reads) {
    const wds::IndexSample& sample = read.native->index().samples[static_cast<size_t>(read.index)];
    for (const wds::IndexMember& m : sample.members) {
      PyObject* bytes = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(m.size));
      if (bytes == nullptr) throw py::error_already_set();
      read.data.push_back(py::reinterpret_steal<py::bytes>(bytes));
      read.dests.push_back(PyBytes_AS_STRING(bytes));
    }
  }
  SignalCheck signals;
  {
    // The bytes objects are this call's alone until it returns.
    ScopedGilRelease release;
    ReadAll(reads, threads, signals);
  }
  signals.RethrowIfRaised();
  for (const Read& read : reads) {
    if (read.status.ok()) continue;
    RaiseStatus(read.native->remote() ? RemoteStatus(read.status, read.shard->url()) : read.status,
                Phase::kData);
  }
  py::list out(reads.size());
  for (size_t r = 0; r < reads.size(); ++r) {
    Read& read = reads[r];
    const wds::IndexSample& sample = read.native->index().samples[static_cast<size_t>(read.index)];
    py::list fields(sample.members.size());
    for (size_t j = 0; j < sample.members.size(); ++j) {
      fields[j] = py::make_tuple(sample.members[j].field, std::move(read.data[j]));
    }
    out[r] = py::make_tuple(py::str(std::string(read.native->Key(read.index))), std::move(fields));
  }
  return out;
}

}  // namespace

void RegisterIndexed(py::module_& m) {
  py::class_<IndexedShard>(m, "IndexedShard",
                           "Random access to the samples of an uncompressed shard, indexed by "
                           "its .idx sidecar or a header scan: a local file, or a remote URL "
                           "read by ranged requests with the options `remote`.")
      .def(py::init<const std::string&, py::handle>(), py::arg("url"),
           py::arg("remote") = py::none())
      .def("__len__", &IndexedShard::size)
      .def(
          "read",
          [](IndexedShard& self, int64_t i) {
            py::list items;
            items.append(py::make_tuple(py::cast(&self, py::return_value_policy::reference), i));
            return ReadSamples(items, 1)[0].cast<py::tuple>();
          },
          py::arg("i"),
          "(key, [(field, bytes), ...]) of sample i; each member's tar header is checked.");
  m.def("open_shards", &OpenShards, py::arg("urls"), py::arg("remote") = py::none(),
        py::arg("threads") = 16,
        "[IndexedShard, ...] of remote `urls` read by ranges with the options `remote`, opened "
        "`threads` at a time.");
  m.def("read_samples", &ReadSamples, py::arg("items"), py::arg("threads") = 16,
        "[(key, [(field, bytes), ...]), ...] of `items`, (IndexedShard, sample index) pairs; "
        "remote samples are read `threads` at a time.");
}

}  // namespace wdspy
