// Random access to a local shard's samples for webdataset_cpp.wids:
// wds::IndexedShard, whose reads fill Python bytes objects with the GIL
// released.
#include <fcntl.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "wds/internal/base/strings.h"
#include "wds/tar/indexed_shard.h"

namespace wdspy {
namespace {

class IndexedShard {
 public:
  explicit IndexedShard(const std::string& path) {
    absl::StatusOr<std::unique_ptr<wds::IndexedShard>> shard;
    {
      py::gil_scoped_release release;
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      shard = fd < 0 ? ErrnoStatus(errno, path, wds::Cat(path, ": cannot open"))
                     : wds::IndexedShard::Open(path, fd);
    }
    if (!shard.ok()) RaiseStatus(shard.status(), Phase::kData);
    shard_ = *std::move(shard);
  }

  int64_t size() const { return shard_->size(); }

  // Read returns (key, [(field, bytes), ...]) of sample i, fields in tar
  // order with their case.
  py::tuple Read(int64_t i) const {
    if (i < 0 || i >= shard_->size()) {
      throw py::index_error(wds::Cat(shard_->url(), ": sample ", i, " of ", shard_->size()));
    }
    const wds::IndexSample& sample = shard_->index().samples[static_cast<size_t>(i)];
    std::vector<py::bytes> data;
    data.reserve(sample.members.size());
    for (const wds::IndexMember& m : sample.members) {
      PyObject* bytes = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(m.size));
      if (bytes == nullptr) throw py::error_already_set();
      data.push_back(py::reinterpret_steal<py::bytes>(bytes));
    }
    absl::Status status;
    {
      // The bytes objects are this call's alone until it returns.
      py::gil_scoped_release release;
      for (size_t j = 0; j < data.size() && status.ok(); ++j) {
        status = shard_->ReadMember(i, j, PyBytes_AS_STRING(data[j].ptr()));
      }
    }
    if (!status.ok()) RaiseStatus(status, Phase::kData);
    py::list fields(sample.members.size());
    for (size_t j = 0; j < sample.members.size(); ++j) {
      fields[j] = py::make_tuple(sample.members[j].field, std::move(data[j]));
    }
    return py::make_tuple(py::str(std::string(shard_->Key(i))), std::move(fields));
  }

 private:
  std::unique_ptr<wds::IndexedShard> shard_;
};

}  // namespace

void RegisterIndexed(py::module_& m) {
  py::class_<IndexedShard>(m, "IndexedShard",
                           "Random access to the samples of a local, uncompressed shard, "
                           "indexed by its .idx sidecar or a header scan.")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def("__len__", &IndexedShard::size)
      .def("read", &IndexedShard::Read, py::arg("i"),
           "(key, [(field, bytes), ...]) of sample i; each member's tar header is checked.");
}

}  // namespace wdspy
