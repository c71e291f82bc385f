// AlignedHostAllocator and the choice between it and pinned memory.
//
// Loader memory is a few large batch blocks and many member buffers of a
// similar size, recycled by a BufferPool. Taking it straight from the kernel
// in 2 MiB-aligned mappings advised for transparent huge pages makes a block's
// first touch one fault per 2 MiB instead of one per 4 KiB, and spares the TLB
// while a decoder writes a 36 MB batch; malloc would hand out 4 KiB pages and
// trim them back to the kernel whenever the heap's top frees, so a shuffle
// buffer refilling would fault them in again.
#include "base/host_allocator.h"

#include <sys/mman.h>

#include <cassert>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "wds/base/buffer_pool.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// kPageSize aligns batch storage to pages: DMA engines like it, and the
// pool's size classes are page multiples, so nothing is wasted.
constexpr size_t kPageSize = 4096;
// kHugePage is the x86-64 transparent huge page size; slabs are this big and
// this aligned, so that each can be one huge page.
constexpr size_t kHugePage = size_t{2} << 20;
// Blocks from kOwnMapping up get a mapping of their own; smaller ones are
// carved from slabs of blocks of one size.
constexpr size_t kOwnMapping = size_t{1} << 20;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// MapAligned maps `bytes` (a multiple of kPageSize) at a kHugePage-aligned
// address. A slab (exactly one huge page) is advised for huge pages whole; a
// larger block all but its last huge page, which a request rounded up to the
// block's size class rarely fills: with 4 KiB pages there, only the part a
// request touches becomes resident. Returns null when the kernel refuses.
void* MapAligned(size_t bytes) {
  const size_t span = bytes + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(start, kHugePage);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = aligned + bytes;
  if (start + span > end) munmap(reinterpret_cast<void*>(end), start + span - end);
  void* p = reinterpret_cast<void*>(aligned);
  // Only a hint: kernels without THP, or with it off, ignore it harmlessly.
  const size_t advised = bytes == kHugePage ? bytes : (bytes - 1) / kHugePage * kHugePage;
  if (advised > 0) madvise(p, advised, MADV_HUGEPAGE);
  return p;
}

// PageAllocator hands out page-aligned blocks: a mapping of its own for a
// large block, the next free stretch of the current 2 MiB slab for a small
// one. A slab goes back to the kernel when its last block is freed and blocks
// are no longer carved from it. Blocks are not reused here: the BufferPool
// above recycles them by size class, so a slab is only ever carved once.
// Thread-safe: one mutex, taken only when a pool misses its cache.
class PageAllocator final : public HostAllocator {
 public:
  ~PageAllocator() override {
    for (const auto& [base, live] : slabs_) munmap(reinterpret_cast<void*>(base), kHugePage);
  }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    bytes = RoundUp(bytes == 0 ? 1 : bytes, kPageSize);
    void* p = bytes >= kOwnMapping ? MapAligned(bytes) : FromSlab(bytes);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(Cat("cannot allocate ", bytes, " bytes of host memory"));
    }
    return p;
  }

  void Deallocate(void* p, size_t bytes) override {
    bytes = RoundUp(bytes == 0 ? 1 : bytes, kPageSize);
    if (bytes >= kOwnMapping) {
      munmap(p, bytes);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    const uintptr_t base = reinterpret_cast<uintptr_t>(p) & ~(kHugePage - 1);
    auto it = slabs_.find(base);
    assert(it != slabs_.end());
    if (--it->second == 0 && base != current_) {
      munmap(reinterpret_cast<void*>(base), kHugePage);
      slabs_.erase(it);
    }
  }

  bool pinned() const override { return false; }
  std::string_view name() const override { return "aligned"; }

 private:
  void* FromSlab(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_ == 0 || used_ + bytes > kHugePage) {
      // A full slab is released once its blocks are.
      if (current_ != 0 && slabs_[current_] == 0) {
        munmap(reinterpret_cast<void*>(current_), kHugePage);
        slabs_.erase(current_);
      }
      void* fresh = MapAligned(kHugePage);
      current_ = reinterpret_cast<uintptr_t>(fresh);
      used_ = 0;
      if (fresh == nullptr) return nullptr;
      slabs_[current_] = 0;
    }
    void* p = reinterpret_cast<void*>(current_ + used_);
    used_ += bytes;
    ++slabs_[current_];
    return p;
  }

  std::mutex mu_;
  // slabs_ counts the live blocks of each slab, by base address; current_ is
  // the slab blocks are carved from (0: none) and used_ how much of it is.
  std::unordered_map<uintptr_t, int64_t> slabs_;  // guarded by mu_
  uintptr_t current_ = 0;                         // guarded by mu_
  size_t used_ = 0;                               // guarded by mu_
};

}  // namespace

std::shared_ptr<HostAllocator> AlignedHostAllocator() { return std::make_shared<PageAllocator>(); }

absl::StatusOr<BatchAllocator> DefaultBatchAllocator(bool pin_memory, int device) {
  if (!pin_memory) return BatchAllocator{AlignedHostAllocator(), ""};
  absl::StatusOr<std::shared_ptr<HostAllocator>> pinned = PinnedHostAllocator(device);
  if (pinned.ok()) return BatchAllocator{*std::move(pinned), ""};
  if (pinned.status().code() != absl::StatusCode::kFailedPrecondition) return pinned.status();
  return BatchAllocator{
      AlignedHostAllocator(),
      Cat("pin_memory was requested but pinned memory is unavailable (",
          ToStd(pinned.status().message()), "); batches use ordinary aligned host memory")};
}

}  // namespace wds
