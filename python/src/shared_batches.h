// Batches that cross from a torch DataLoader worker to the main process
// without a copy.
//
// torch's DataLoader sends each batch from a worker to the main process by
// copying every tensor storage into a fresh shared-memory segment, which the
// main process maps anew for every batch (first-touch page faults on both
// sides). Inside a DataLoader worker, a chain's batch blocks come instead
// from a SharedBlocks pool: each block is an anonymous shared file (memfd)
// mapped by the worker and reused from batch to batch, so the decoder writes
// into pages that are already there. When torch pickles a storage that lies
// in such a block, webdataset_cpp's reducer (python/webdataset_cpp/_shared.py)
// sends a descriptor instead of the bytes:
//
//   worker:  blocks.lend(storage.data_ptr(), storage.nbytes(), storage)
//            -> (pid, fd, inode, map_bytes, offset); the block's `held` count
//               in its header grows by one and the storage is kept alive
//   main:    AttachShared(pid, fd, inode, map_bytes, offset, nbytes)
//            -> a uint8 tensor over the main process's mapping of the block
//               (mapped once per block, by /proc/<pid>/fd/<fd>, and cached);
//               when its storage is freed, `held` drops by one
//   worker:  blocks.sweep() before each batch drops the storages whose block
//            is no longer held; the block then returns to the pool for reuse
//
// Blocks beyond the pool's byte limit come from ordinary memory, and batches
// in them take torch's own path (a copy). Nothing is named in /dev/shm: the
// files have no name, and their pages go when the last process mapping them
// does (a SIGKILLed worker leaves nothing behind; batches the main process
// holds stay valid).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "py_ref.h"
#include "wds/base/array.h"
#include "wds/base/buffer_pool.h"

namespace wdspy {

namespace py = pybind11;

class SharedMemoryAllocator;
struct GpuJobs;

// SharedBlockStats counts a worker's shared blocks (tests, benchmarks).
struct SharedBlockStats {
  int64_t regions = 0;       // shared files mapped now
  int64_t shared_bytes = 0;  // their mapped bytes
  int64_t fallbacks = 0;     // allocations served by ordinary memory (limit reached)
  int64_t lent = 0;          // storages lent to another process so far
  int64_t in_flight = 0;     // storages lent and not yet released
};

// SharedBlocks is a DataLoader worker's pool of shared batch blocks, bounded
// by `limit_bytes` of shared memory. Made once per worker process; used under
// the GIL (the pool itself is thread-safe).
class SharedBlocks {
 public:
  explicit SharedBlocks(size_t limit_bytes);

  // pool is the BufferPool a chain's batched stage takes its blocks from.
  const std::shared_ptr<wds::BufferPool>& pool() const { return pool_; }

  // Lend describes the shared block holding [address, address + nbytes) for
  // another process, counts one more holder in its header and keeps `owner`
  // (the storage) until that holder releases it; nullopt when the range is
  // not inside one shared block (the caller then falls back to a copy).
  std::optional<py::tuple> Lend(uintptr_t address, size_t nbytes, py::handle owner);

  // LendGpuJobs packs a column of GPU jobs (PackGpuJobs) into a shared block
  // and lends it as Lend does: the arguments of attach_gpu_jobs, (pid, fd,
  // inode, map_bytes, offset, nbytes, keys, urls); nullopt when the pool's
  // limit leaves no shared block (the caller then pickles the bytes).
  std::optional<py::tuple> LendGpuJobs(const GpuJobs& jobs);

  // Sweep drops the owners of blocks that no other process holds any more.
  void Sweep();

  SharedBlockStats stats() const;

 private:
  struct Loan {
    PyRef owner;
    const void* header;
  };
  std::shared_ptr<SharedMemoryAllocator> allocator_;
  std::shared_ptr<wds::BufferPool> pool_;
  std::vector<Loan> loans_;
  int64_t lent_ = 0;
};

// AttachShared maps (once per block and process, cached) the block another
// process lent and returns an Array of `nbytes` uint8 at `offset` in it,
// whose last reference releases the loan. Errors: OSError when the block
// cannot be mapped (its worker is gone, or /proc is not readable), ValueError
// for a descriptor that does not describe a lent block.
// REQUIRES: the GIL is held.
wds::Array AttachShared(int64_t pid, int fd, uint64_t inode, size_t map_bytes, size_t offset,
                        size_t nbytes);

// Fork handlers (with those of opener.h): before a fork, the mappings of
// blocks whose workers are gone are dropped (a child would keep their memory
// alive) and the cache's lock is held across the fork.
void SharedMappingsBeforeFork();
void SharedMappingsAfterFork();

void RegisterSharedBatches(py::module_& m);

}  // namespace wdspy
