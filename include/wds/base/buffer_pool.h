// Host memory for batches: the allocator interface, the aligned allocator, and
// a pool that recycles batch buffers.
//
//   auto pool = std::make_shared<wds::BufferPool>(wds::AlignedHostAllocator());
//   absl::StatusOr<wds::Buffer> slot = pool->Acquire(64 * 224 * 224 * 3);
//   // ... fill slot->mutable_data(), share it; when the last copy of the
//   // Buffer (or an Array, or a tensor deleter holding one) drops, the storage
//   // goes back to the pool for the next Acquire of the same size class.
//
// Page-locked (CUDA pinned) batches come from the Loader: LoaderOptions::
// pin_memory. wds::core has no CUDA headers in its API: the pinned allocator
// is compiled only when the CUDA toolkit was found at build time, and chosen
// at run time only when a device is present.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "wds/base/buffer.h"

namespace wds {

// kHostAlignment is the alignment every HostAllocator guarantees (a cache
// line, and enough for any element type and for SIMD loads).
inline constexpr size_t kHostAlignment = 64;

// HostAllocator hands out host memory. Implementations are thread-safe.
class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  // Allocate returns `bytes` (>= 1) of uninitialised storage aligned to at
  // least kHostAlignment, or ResourceExhausted naming the size.
  [[nodiscard]] virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // Deallocate frees storage from Allocate(bytes) with the same `bytes`.
  virtual void Deallocate(void* p, size_t bytes) = 0;
  // pinned is true for page-locked memory that a GPU can copy from
  // asynchronously.
  virtual bool pinned() const = 0;
  // name is for logs and benchmark output: "aligned" or "cuda_pinned(device 3)".
  virtual std::string_view name() const = 0;
};

// AlignedHostAllocator returns an allocator of page-aligned (4096-byte)
// ordinary host memory, taken from the kernel in 2 MiB-aligned mappings
// advised for transparent huge pages: blocks of 1 MiB and more get a mapping
// of their own, smaller ones share 2 MiB slabs of blocks of their size (a
// slab is returned when its last block is). Meant to sit under a BufferPool,
// which recycles blocks by size class.
std::shared_ptr<HostAllocator> AlignedHostAllocator();

struct BufferPoolOptions {
  // max_cached_bytes bounds the idle storage the pool keeps for reuse (by
  // size class). Storage released beyond it is freed, oldest first.
  size_t max_cached_bytes = size_t{1} << 30;
  // classes_per_doubling (a power of two, >= 1) sets how finely sizes are
  // classed: between 2^k and 2^(k+1) bytes there are this many classes (but
  // none finer than 4 KiB), so a block is at most 1/classes_per_doubling
  // above its request. Few classes share storage between sizes that vary a
  // little (batches); many waste less on sizes that vary a lot (members).
  size_t classes_per_doubling = 8;
};

// BufferPoolStats counts storage allocations (new blocks from the allocator)
// against reuses of cached blocks; in a steady state only reuses grow.
struct BufferPoolStats {
  int64_t allocations = 0;  // blocks taken from the allocator
  int64_t reuses = 0;       // Acquires served from the cache
  int64_t frees = 0;        // blocks given back to the allocator
  size_t cached_bytes = 0;  // idle storage held for reuse
  size_t live_bytes = 0;    // storage held by Buffers still alive
  size_t peak_bytes = 0;    // the most live + cached storage held at once
};

// BufferPool recycles equal-sized batch buffers. Thread-safe.
//
// Sizes are rounded up to a size class (a multiple of 4 KiB, and by default
// at most 1/8 above the request for large sizes), so batches whose size varies a little
// still share storage. A Buffer from Acquire keeps the pool's shared state
// alive: Buffers may outlive the BufferPool object, and their storage is freed
// when they drop after the pool is gone.
class BufferPool {
 public:
  explicit BufferPool(std::shared_ptr<HostAllocator> allocator = AlignedHostAllocator(),
                      BufferPoolOptions options = {});
  // ~BufferPool frees the cached storage; live Buffers stay valid.
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // Acquire returns a Buffer of exactly `bytes` uninitialised bytes whose
  // storage comes from the cache when a block of the same size class is idle.
  // The storage returns to the pool when the Buffer's last copy (including
  // Slices, Arrays and anything else holding it) is destroyed.
  // Errors: ResourceExhausted when the allocator fails.
  [[nodiscard]] absl::StatusOr<Buffer> Acquire(size_t bytes);

  // Trim frees all cached storage.
  void Trim();

  BufferPoolStats stats() const;
  bool pinned() const;
  const HostAllocator& allocator() const;

  // SizeClass is the storage size Acquire(bytes) uses under
  // BufferPoolOptions::classes_per_doubling.
  static size_t SizeClass(size_t bytes, size_t classes_per_doubling = 8);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace wds
