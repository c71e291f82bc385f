#include "shared_batches.h"

#include <fcntl.h>
#include <pybind11/stl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <utility>

#include "arrays.h"
#include "errors.h"
#include "gpu.h"
#include "py_ref.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"

namespace wdspy {
namespace {

// BlockHeader opens every shared file; the block's data starts a page later,
// so it is page-aligned (more than kHostAlignment).
struct BlockHeader {
  uint64_t magic;
  // held counts the storages over this block alive in other processes.
  std::atomic<uint32_t> held;
  // retired is set when the worker frees the block: a cached mapping of it
  // in the main process can go once nothing there uses it.
  std::atomic<uint32_t> retired;
  uint64_t data_bytes;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "the header's counters are shared between processes");

constexpr uint64_t kMagic = 0x6b636f6c62736477;  // "wdsblock", little-endian
constexpr size_t kHeaderBytes = 4096;
constexpr auto kSweepInterval = std::chrono::seconds(1);

// Mapping failures carry their errno and path for the OSError they become.
constexpr char kErrnoPayload[] = "webdataset_cpp/shared-errno";
constexpr char kPathPayload[] = "webdataset_cpp/shared-path";

absl::Status MapFailure(int err, const std::string& path, std::string_view what) {
  absl::Status status(absl::StatusCode::kUnavailable, wds::Cat(what, ": ", std::strerror(err)));
  status.SetPayload(kErrnoPayload, absl::Cord(std::to_string(err)));
  status.SetPayload(kPathPayload, absl::Cord(path));
  return status;
}

// RaiseMapFailure raises OSError(errno, message, path) (FileNotFoundError
// and so on by errno) for a MapFailure, ValueError otherwise.
[[noreturn]] void RaiseMapFailure(const absl::Status& status) {
  auto err = status.GetPayload(kErrnoPayload);
  if (!err.has_value()) RaiseStatus(status, Phase::kSetup);
  const std::string path(*status.GetPayload(kPathPayload));
  PyObject* exception =
      PyObject_CallFunction(PyExc_OSError, "isO", std::stoi(std::string(*err)),
                            std::string(status.message()).c_str(), py::str(path).ptr());
  if (exception == nullptr) throw py::error_already_set();
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception)), exception);
  Py_DECREF(exception);
  throw py::error_already_set();
}

size_t PageRound(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

}  // namespace

// SharedMemoryAllocator hands out blocks in memfd files while their mapped
// bytes stay within `limit`, ordinary memory beyond. Thread-safe.
class SharedMemoryAllocator : public wds::HostAllocator {
 public:
  struct Region {
    int fd = -1;
    uint8_t* base = nullptr;
    size_t map_bytes = 0;
    size_t data_bytes = 0;
    uint64_t inode = 0;
    BlockHeader* header() const { return reinterpret_cast<BlockHeader*>(base); }
    uint8_t* data() const { return base + kHeaderBytes; }
  };

  explicit SharedMemoryAllocator(size_t limit)
      : limit_(limit), fallback_(wds::AlignedHostAllocator()) {}

  ~SharedMemoryAllocator() override {
    for (auto& [address, region] : regions_) Unmap(region);
  }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    const size_t map_bytes = kHeaderBytes + PageRound(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shared_bytes_ + map_bytes <= limit_) {
        std::optional<Region> region = MakeRegion(bytes, map_bytes);
        if (region.has_value()) {
          shared_bytes_ += map_bytes;
          regions_.emplace(reinterpret_cast<uintptr_t>(region->data()), *region);
          return region->data();
        }
      }
      ++fallbacks_;
    }
    return fallback_->Allocate(bytes);
  }

  void Deallocate(void* p, size_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
      if (it != regions_.end()) {
        shared_bytes_ -= it->second.map_bytes;
        Unmap(it->second);
        regions_.erase(it);
        return;
      }
    }
    fallback_->Deallocate(p, bytes);
  }

  bool pinned() const override { return false; }
  std::string_view name() const override { return "shared(memfd)"; }

  // Find returns the region whose data holds [address, address + nbytes).
  std::optional<Region> Find(uintptr_t address, size_t nbytes) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.upper_bound(address);
    if (it == regions_.begin()) return std::nullopt;
    --it;
    const Region& region = it->second;
    if (address + nbytes > it->first + region.data_bytes) return std::nullopt;
    return region;
  }

  void Count(SharedBlockStats& stats) const {
    std::lock_guard<std::mutex> lock(mu_);
    stats.regions = static_cast<int64_t>(regions_.size());
    stats.shared_bytes = static_cast<int64_t>(shared_bytes_);
    stats.fallbacks = fallbacks_;
  }

 private:
  // MakeRegion creates and maps one shared file; nullopt when the system
  // refuses (no memfd, out of memory): the caller falls back.
  static std::optional<Region> MakeRegion(size_t data_bytes, size_t map_bytes) {
    const int fd = memfd_create("webdataset_cpp-batch", MFD_CLOEXEC);
    if (fd < 0) return std::nullopt;
    struct stat st;
    if (ftruncate(fd, static_cast<off_t>(map_bytes)) != 0 || fstat(fd, &st) != 0) {
      close(fd);
      return std::nullopt;
    }
    void* base = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      close(fd);
      return std::nullopt;
    }
    Region region{fd, static_cast<uint8_t*>(base), map_bytes, data_bytes,
                  static_cast<uint64_t>(st.st_ino)};
    BlockHeader* header = new (base) BlockHeader{};
    header->magic = kMagic;
    header->data_bytes = data_bytes;
    return region;
  }

  static void Unmap(const Region& region) {
    region.header()->retired.store(1, std::memory_order_release);
    munmap(region.base, region.map_bytes);
    close(region.fd);
  }

  const size_t limit_;
  const std::shared_ptr<wds::HostAllocator> fallback_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Region> regions_;  // by data address
  size_t shared_bytes_ = 0;
  int64_t fallbacks_ = 0;
};

SharedBlocks::SharedBlocks(size_t limit_bytes)
    : allocator_(std::make_shared<SharedMemoryAllocator>(limit_bytes)),
      pool_(std::make_shared<wds::BufferPool>(allocator_, wds::BufferPoolOptions{limit_bytes, 8})) {
}

std::optional<py::tuple> SharedBlocks::Lend(uintptr_t address, size_t nbytes, py::handle owner) {
  if (nbytes == 0) return std::nullopt;
  std::optional<SharedMemoryAllocator::Region> region = allocator_->Find(address, nbytes);
  if (!region.has_value()) return std::nullopt;
  region->header()->held.fetch_add(1, std::memory_order_acq_rel);
  loans_.push_back(Loan{PyRef(owner), region->header()});
  ++lent_;
  return py::make_tuple(static_cast<int64_t>(getpid()), region->fd, region->inode,
                        region->map_bytes, address - reinterpret_cast<uintptr_t>(region->base));
}

std::optional<py::tuple> SharedBlocks::LendGpuJobs(const GpuJobs& jobs) {
  const size_t size = wds::GpuJobsPackedSize(jobs.jobs);
  absl::StatusOr<wds::Buffer> block = pool_->Acquire(size);
  // Past the limit the pool gives ordinary memory: the caller pickles the
  // bytes, so nothing is packed here.
  if (!block.ok() || !allocator_->Find(reinterpret_cast<uintptr_t>(block->data()), size)) {
    return std::nullopt;
  }
  {
    ScopedGilRelease release;  // the block is not shared yet
    wds::PackGpuJobs(jobs.jobs, block->mutable_data());
  }
  // What can fail comes before the loan: a loan is counted in the block.
  py::list keys = TextsToPython(jobs.keys);
  py::list urls = TextsToPython(jobs.urls);
  const auto address = reinterpret_cast<uintptr_t>(block->data());
  wds::Array packed;  // the loan's owner keeps the block
  packed.dtype = wds::DType::kUInt8;
  packed.shape = {static_cast<int64_t>(size)};
  packed.data = *std::move(block);
  std::optional<py::tuple> lent = Lend(address, size, py::cast(NativeArray{std::move(packed)}));
  if (!lent.has_value()) return std::nullopt;
  return py::make_tuple((*lent)[0], (*lent)[1], (*lent)[2], (*lent)[3], (*lent)[4], size,
                        std::move(keys), std::move(urls));
}

void SharedBlocks::Sweep() {
  size_t kept = 0;
  for (size_t i = 0; i < loans_.size(); ++i) {
    const auto* header = static_cast<const BlockHeader*>(loans_[i].header);
    // acquire: what the other process wrote into the block happens before
    // the decoder overwrites it.
    if (header->held.load(std::memory_order_acquire) != 0) {
      if (kept != i) loans_[kept] = std::move(loans_[i]);
      ++kept;
    }
  }
  loans_.resize(kept);
}

SharedBlockStats SharedBlocks::stats() const {
  SharedBlockStats stats;
  allocator_->Count(stats);
  stats.lent = lent_;
  stats.in_flight = static_cast<int64_t>(loans_.size());
  return stats;
}

namespace {

// Mapping is the main process's mapping of one lent block, shared by the
// cache and every lease on it.
struct Mapping {
  int64_t pid = 0;
  int fd = -1;
  uint64_t inode = 0;
  uint64_t device = 0;
  uint8_t* base = nullptr;
  size_t bytes = 0;
  std::atomic<int64_t> leases{0};

  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { munmap(base, bytes); }

  BlockHeader* header() const { return reinterpret_cast<BlockHeader*>(base); }

  // InUseByWorker is whether the worker still has the block (it is alive,
  // has not freed it, and its descriptor still names this file).
  bool InUseByWorker() const {
    if (header()->retired.load(std::memory_order_acquire) != 0) return false;
    struct stat st;
    const std::string path = wds::Cat("/proc/", pid, "/fd/", fd);
    return stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_ino) == inode &&
           static_cast<uint64_t>(st.st_dev) == device;
  }
};

// MappingCache keeps this process's mappings of lent blocks, so that a block
// the worker reuses is not mapped again (and its pages not faulted in again).
// A mapping is dropped when nothing here uses it and its worker no longer
// has the block. Heap-allocated and never freed: leases may be released
// during interpreter shutdown.
class MappingCache {
 public:
  absl::StatusOr<std::shared_ptr<Mapping>> Get(int64_t pid, int fd, uint64_t inode,
                                               size_t map_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    SweepLocked();
    auto it = mappings_.find({pid, inode});
    if (it != mappings_.end()) {
      if (it->second->bytes != map_bytes) {
        return absl::InvalidArgumentError(wds::Cat("shared batch block ", inode, " of worker ", pid,
                                                   " has ", it->second->bytes, " bytes, not ",
                                                   map_bytes));
      }
      return it->second;
    }
    auto mapping = Map(pid, fd, inode, map_bytes);
    if (mapping.ok()) mappings_[{pid, inode}] = *mapping;
    return mapping;
  }

  // Released is called when the last lease on `mapping` went: a block its
  // worker no longer has is unmapped, and with it the unused mappings of a
  // worker that is gone.
  void Released(const std::shared_ptr<Mapping>& mapping) {
    const bool gone = !mapping->InUseByWorker();
    std::lock_guard<std::mutex> lock(mu_);
    if (!gone) {
      SweepLocked();
      return;
    }
    for (auto it = mappings_.begin(); it != mappings_.end();) {
      const bool same_worker = it->second->pid == mapping->pid;
      if (it->second == mapping ||
          (same_worker && it->second->leases.load() == 0 && !it->second->InUseByWorker())) {
        it = mappings_.erase(it);
      } else {
        ++it;
      }
    }
  }

  py::list Describe() {
    // Python objects are made after the lock is let go: making them may run
    // the garbage collector, and a tensor it frees releases its lease here.
    std::vector<std::shared_ptr<Mapping>> mappings;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [key, m] : mappings_) mappings.push_back(m);
    }
    py::list out;
    for (const std::shared_ptr<Mapping>& m : mappings) {
      py::dict d;
      d["pid"] = m->pid;
      d["inode"] = m->inode;
      d["address"] = reinterpret_cast<uintptr_t>(m->base) + kHeaderBytes;
      d["bytes"] = m->header()->data_bytes;
      d["leases"] = m->leases.load();
      d["held"] = m->header()->held.load();
      out.append(d);
    }
    return out;
  }

  // LockForFork drops the unused mappings of blocks their workers no longer
  // have, so that a child forked now (the next epoch's DataLoader workers)
  // does not keep their memory alive, and holds the lock across the fork.
  void LockForFork() {
    mu_.lock();
    last_sweep_ = {};
    SweepLocked();
  }
  void UnlockAfterFork() { mu_.unlock(); }

 private:
  static absl::StatusOr<std::shared_ptr<Mapping>> Map(int64_t pid, int fd, uint64_t inode,
                                                      size_t map_bytes) {
    const std::string path = wds::Cat("/proc/", pid, "/fd/", fd);
    const std::string what =
        wds::Cat("cannot map the batch memory of DataLoader worker ", pid, " (", path, ")");
    const int file = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (file < 0 && (errno == EACCES || errno == EPERM)) {
      return MapFailure(errno, path,
                        wds::Cat(what,
                                 " (where /proc/<pid>/fd is closed to this process, set "
                                 "WDS_SHARED_BATCH_BYTES=0: batches then take torch's own "
                                 "transfer)"));
    }
    if (file < 0) return MapFailure(errno, path, what);
    struct stat st;
    if (fstat(file, &st) != 0) {
      const int err = errno;
      close(file);
      return MapFailure(err, path, what);
    }
    if (static_cast<uint64_t>(st.st_ino) != inode || static_cast<size_t>(st.st_size) < map_bytes) {
      close(file);
      return MapFailure(ESTALE, path, wds::Cat(what, ": the worker no longer has that block"));
    }
    void* base = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
    const int err = errno;
    close(file);
    if (base == MAP_FAILED) return MapFailure(err, path, what);
    auto mapping = std::make_shared<Mapping>();
    mapping->pid = pid;
    mapping->fd = fd;
    mapping->inode = inode;
    mapping->device = static_cast<uint64_t>(st.st_dev);
    mapping->base = static_cast<uint8_t*>(base);
    mapping->bytes = map_bytes;
    if (mapping->header()->magic != kMagic) {
      return absl::InvalidArgumentError(wds::Cat(path, " is not a webdataset_cpp batch block"));
    }
    return mapping;
  }

  // SweepLocked drops, at most once per kSweepInterval, the unused mappings
  // of blocks their workers no longer have (a worker that exited, or freed
  // the block).
  void SweepLocked() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sweep_ < kSweepInterval) return;
    last_sweep_ = now;
    for (auto it = mappings_.begin(); it != mappings_.end();) {
      if (it->second->leases.load() == 0 && !it->second->InUseByWorker()) {
        it = mappings_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::mutex mu_;
  std::map<std::pair<int64_t, uint64_t>, std::shared_ptr<Mapping>> mappings_;
  std::chrono::steady_clock::time_point last_sweep_{};
};

MappingCache& Cache() {
  static auto* cache = new MappingCache;
  return *cache;
}

// Lease is one storage's hold on a lent block: releasing it tells the worker
// (through the block's header) that this holder is done. Only the process
// that attached releases: a forked child dropping an inherited tensor must
// not.
struct Lease {
  std::shared_ptr<Mapping> mapping;
  pid_t owner = getpid();

  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  explicit Lease(std::shared_ptr<Mapping> m) : mapping(std::move(m)) { ++mapping->leases; }
  ~Lease() {
    if (getpid() != owner) return;
    // release: our reads and writes of the block happen before the worker's
    // next use of it.
    mapping->header()->held.fetch_sub(1, std::memory_order_release);
    if (--mapping->leases == 0) Cache().Released(mapping);
  }
};

}  // namespace

void SharedMappingsBeforeFork() { Cache().LockForFork(); }
void SharedMappingsAfterFork() { Cache().UnlockAfterFork(); }

wds::Array AttachShared(int64_t pid, int fd, uint64_t inode, size_t map_bytes, size_t offset,
                        size_t nbytes) {
  if (offset < kHeaderBytes || nbytes > map_bytes || offset > map_bytes - nbytes) {
    throw py::value_error(wds::Cat("shared batch block: ", nbytes, " bytes at offset ", offset,
                                   " do not fit in ", map_bytes));
  }
  absl::StatusOr<std::shared_ptr<Mapping>> mapping = Cache().Get(pid, fd, inode, map_bytes);
  if (!mapping.ok()) RaiseMapFailure(mapping.status());
  auto lease = std::make_shared<Lease>(*std::move(mapping));
  const uint8_t* data = lease->mapping->base + offset;
  wds::Array array;
  array.dtype = wds::DType::kUInt8;
  array.shape = {static_cast<int64_t>(nbytes)};
  array.data = wds::Buffer::View(std::move(lease), data, nbytes);
  return array;
}

void RegisterSharedBatches(py::module_& m) {
  py::class_<SharedBlocks, std::shared_ptr<SharedBlocks>>(
      m, "SharedBlocks",
      "A DataLoader worker's pool of batch blocks in shared memory (see _shared.py).")
      .def(py::init<size_t>(), py::arg("limit_bytes"))
      .def(
          "lend",
          [](SharedBlocks& self, uintptr_t address, size_t nbytes, py::handle owner) {
            return self.Lend(address, nbytes, owner);
          },
          py::arg("address"), py::arg("nbytes"), py::arg("owner"),
          "(pid, fd, inode, map_bytes, offset) of the shared block holding the range, counting "
          "one more holder and keeping `owner` until it is released; None if not shared.")
      .def("lend_gpu_jobs", &SharedBlocks::LendGpuJobs, py::arg("jobs"),
           "The arguments of attach_gpu_jobs for `jobs` packed into a shared block, lent as by "
           "lend; None when no shared block is left.")
      .def("sweep", &SharedBlocks::Sweep, "Drops what no other process holds any more.")
      .def_property_readonly("stats", [](const SharedBlocks& self) {
        const SharedBlockStats s = self.stats();
        py::dict d;
        d["regions"] = s.regions;
        d["shared_bytes"] = s.shared_bytes;
        d["fallbacks"] = s.fallbacks;
        d["lent"] = s.lent;
        d["in_flight"] = s.in_flight;
        return d;
      });
  m.def(
      "attach_shared",
      [](int64_t pid, int fd, uint64_t inode, size_t map_bytes, size_t offset, size_t nbytes) {
        return ArrayToTorch(AttachShared(pid, fd, inode, map_bytes, offset, nbytes));
      },
      py::arg("pid"), py::arg("fd"), py::arg("inode"), py::arg("map_bytes"), py::arg("offset"),
      py::arg("nbytes"),
      "A uint8 torch tensor over a block a DataLoader worker lent (mapped once, cached).");
  m.def(
      "attach_gpu_jobs",
      [](int64_t pid, int fd, uint64_t inode, size_t map_bytes, size_t offset, size_t nbytes,
         py::handle keys, py::handle urls) {
        const wds::Array packed = AttachShared(pid, fd, inode, map_bytes, offset, nbytes);
        return GpuJobsFromPacked(packed.data, keys, urls);
      },
      py::arg("pid"), py::arg("fd"), py::arg("inode"), py::arg("map_bytes"), py::arg("offset"),
      py::arg("nbytes"), py::arg("keys"), py::arg("urls"),
      "The GpuJobs a DataLoader worker lent (lend_gpu_jobs), over its block (mapped once, "
      "cached).");
  m.def(
      "shared_mappings", [] { return Cache().Describe(); },
      "This process's cached mappings of lent blocks: pid, inode, address, bytes, leases "
      "(storages here), held (storages in every process).");
}

}  // namespace wdspy
