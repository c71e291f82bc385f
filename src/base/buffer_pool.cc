// BufferPool: size-classed free lists over a HostAllocator, shared with the
// deleters of the Buffers it hands out.
#include "wds/base/buffer_pool.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "wds/internal/base/strings.h"

namespace wds {
namespace {

constexpr size_t kMinGranule = 4096;

// Block is one idle allocation of a size class, stamped with when it was
// released so that the oldest is evicted first.
struct Block {
  void* data;
  uint64_t released_at;
};

}  // namespace

// State is everything the pool's Buffers need after the BufferPool is gone.
// Deallocation happens outside `mu` (cudaFreeHost may synchronise the device).
struct BufferPool::State {
  State(std::shared_ptr<HostAllocator> a, BufferPoolOptions o)
      : allocator(std::move(a)), options(o) {}

  const std::shared_ptr<HostAllocator> allocator;
  const BufferPoolOptions options;

  // std::mutex rather than absl::Mutex so that ThreadSanitizer sees it (see
  // ErrorCounters).
  std::mutex mu;
  bool open = true;                          // guarded by mu
  std::map<size_t, std::deque<Block>> idle;  // by size class; guarded by mu
  uint64_t clock = 0;                        // guarded by mu
  BufferPoolStats stats;                     // guarded by mu

  // TakeIdle returns a cached block of `size_class`, or null.
  void* TakeIdle(size_t size_class) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = idle.find(size_class);
    if (it == idle.end() || it->second.empty()) return nullptr;
    void* data = it->second.back().data;  // the most recent is warmest in cache
    it->second.pop_back();
    if (it->second.empty()) idle.erase(it);
    stats.cached_bytes -= size_class;
    stats.live_bytes += size_class;
    ++stats.reuses;
    return data;
  }

  void CountAllocation(size_t size_class) {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.allocations;
    stats.live_bytes += size_class;
    stats.peak_bytes = std::max(stats.peak_bytes, stats.live_bytes + stats.cached_bytes);
  }

  // Release takes a block back from a dropped Buffer: it is cached, or freed
  // when the pool is gone or the cache would exceed its cap (evicting older
  // blocks first when that makes room).
  void Release(void* data, size_t size_class) {
    std::vector<std::pair<void*, size_t>> to_free;
    {
      std::lock_guard<std::mutex> lock(mu);
      stats.live_bytes -= size_class;
      if (!open || size_class > options.max_cached_bytes) {
        to_free.emplace_back(data, size_class);
      } else {
        while (stats.cached_bytes + size_class > options.max_cached_bytes) {
          to_free.push_back(EvictOldestLocked());
        }
        idle[size_class].push_back(Block{data, ++clock});
        stats.cached_bytes += size_class;
      }
      stats.frees += static_cast<int64_t>(to_free.size());
    }
    for (const auto& [p, size] : to_free) allocator->Deallocate(p, size);
  }

  // TakeAllIdle empties the cache (closing the pool when `close`) and returns
  // what the caller must free.
  std::vector<std::pair<void*, size_t>> TakeAllIdle(bool close) {
    std::vector<std::pair<void*, size_t>> out;
    std::lock_guard<std::mutex> lock(mu);
    if (close) open = false;
    for (auto& [size_class, blocks] : idle) {
      for (const Block& b : blocks) out.emplace_back(b.data, size_class);
    }
    idle.clear();
    stats.cached_bytes = 0;
    stats.frees += static_cast<int64_t>(out.size());
    return out;
  }

 private:
  // EvictOldestLocked removes the longest-idle block. REQUIRES: mu held and
  // the cache not empty.
  std::pair<void*, size_t> EvictOldestLocked() {
    auto oldest = idle.begin();
    for (auto it = idle.begin(); it != idle.end(); ++it) {
      if (it->second.front().released_at < oldest->second.front().released_at) oldest = it;
    }
    const size_t size_class = oldest->first;
    void* data = oldest->second.front().data;
    oldest->second.pop_front();
    if (oldest->second.empty()) idle.erase(oldest);
    stats.cached_bytes -= size_class;
    return {data, size_class};
  }
};

BufferPool::BufferPool(std::shared_ptr<HostAllocator> allocator, BufferPoolOptions options)
    : state_(std::make_shared<State>(std::move(allocator), options)) {}

BufferPool::~BufferPool() {
  for (const auto& [p, size] : state_->TakeAllIdle(/*close=*/true)) {
    state_->allocator->Deallocate(p, size);
  }
}

void BufferPool::Trim() {
  for (const auto& [p, size] : state_->TakeAllIdle(/*close=*/false)) {
    state_->allocator->Deallocate(p, size);
  }
}

size_t BufferPool::SizeClass(size_t bytes, size_t classes_per_doubling) {
  if (bytes <= kMinGranule) return kMinGranule;
  // A granule of 1/N of the request's power of two keeps the waste under 1/N
  // with N classes per doubling.
  size_t top = size_t{1} << (63 - __builtin_clzll(static_cast<unsigned long long>(bytes)));
  const size_t granule = std::max(kMinGranule, top / std::max<size_t>(classes_per_doubling, 1));
  if (bytes > SIZE_MAX - granule) return bytes;
  return (bytes + granule - 1) / granule * granule;
}

absl::StatusOr<Buffer> BufferPool::Acquire(size_t bytes) {
  const size_t size_class = SizeClass(bytes, state_->options.classes_per_doubling);
  void* data = state_->TakeIdle(size_class);
  if (data == nullptr) {
    absl::StatusOr<void*> fresh = state_->allocator->Allocate(size_class);
    if (!fresh.ok()) {
      return absl::ResourceExhaustedError(
          Cat("buffer pool (", state_->allocator->name(), "): ", ToStd(fresh.status().message())));
    }
    data = *fresh;
    state_->CountAllocation(size_class);
  }
  std::shared_ptr<const void> owner(data, [state = state_, size_class](const void* p) {
    state->Release(const_cast<void*>(p), size_class);
  });
  return Buffer::View(std::move(owner), static_cast<const uint8_t*>(data), bytes);
}

BufferPoolStats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

bool BufferPool::pinned() const { return state_->allocator->pinned(); }

const HostAllocator& BufferPool::allocator() const { return *state_->allocator; }

}  // namespace wds
