// Staging of a batch's encoded images on the host before nvJPEG copies them to
// the device: a bounded pool of buffers from a HostAllocator (pinned where a
// device exists: PinnedHostAllocator), reused from batch to batch.
//
//   // Pinned where a device answers, else ordinary memory with a note:
//   WDS_ASSIGN_OR_RETURN(BatchAllocator a, DefaultBatchAllocator(/*pin_memory=*/true, device));
//   StagingPool pool(a.allocator, /*max_buffers=*/2);
//   WDS_ASSIGN_OR_RETURN(StagingBuffer buffer, pool.Acquire(bytes));
//   // gather the images into buffer.data(); keep `buffer` until the GPU has read it
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "wds/base/buffer_pool.h"

namespace wds::gpu {

class StagingPool;

// PooledSize is the size a pool of reused buffers (StagingPool, the device
// decoder's blocks) makes for a request of `bytes`: an eighth more, rounded up
// to a multiple of `granule`, so batches whose images vary a little in size
// share buffers instead of replacing them (freeing waits for the GPU).
inline size_t PooledSize(size_t bytes, size_t granule) {
  const size_t wanted = bytes + bytes / 8;
  return std::max<size_t>(1, (wanted + granule - 1) / granule) * granule;
}

// StagingBuffer is a lease of one pool buffer; it returns to its pool when
// destroyed (the pool may be gone by then). Move-only; not thread-safe.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(StagingBuffer&& other) noexcept;
  StagingBuffer& operator=(StagingBuffer&& other) noexcept;
  ~StagingBuffer();

  uint8_t* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  friend class StagingPool;
  struct Shared;
  StagingBuffer(std::shared_ptr<Shared> pool, uint8_t* data, size_t capacity)
      : pool_(std::move(pool)), data_(data), capacity_(capacity) {}
  void Release();

  std::shared_ptr<Shared> pool_;
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

// StagingPool holds at most `max_buffers` buffers, leased or idle. Buffers
// are made 1/8 larger than asked, in steps of kStagingGranule, grow when a
// batch needs more, and are never shrunk, so steady batches allocate nothing.
// Thread-safe.
class StagingPool {
 public:
  static constexpr size_t kStagingGranule = size_t{1} << 20;

  // REQUIRES: max_buffers >= 1.
  StagingPool(std::shared_ptr<HostAllocator> allocator, int max_buffers);
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // Acquire leases a buffer of at least `bytes`: the smallest idle one that
  // fits, else a new one (replacing the largest idle buffer that is too
  // small, when every buffer exists already). Errors: ResourceExhausted when
  // all max_buffers are leased, or the allocator's error.
  [[nodiscard]] absl::StatusOr<StagingBuffer> Acquire(size_t bytes);

  bool pinned() const;
  int leased() const;
  int buffers() const;            // leased + idle
  size_t reserved_bytes() const;  // capacity of all buffers
  int64_t allocations() const;    // calls to the allocator so far

 private:
  std::shared_ptr<StagingBuffer::Shared> shared_;
};

}  // namespace wds::gpu
