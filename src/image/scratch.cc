// ScratchScope: one arena per thread, reused from decode to decode.
#include "image/scratch.h"

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <memory>
#include <vector>

namespace wds::image_internal {
namespace {

constexpr size_t kScratchAlign = 64;
// A thread keeps at most this much scratch between decodes; bigger images get
// their scratch back from the allocator each time.
constexpr size_t kMaxRetainedScratch = size_t{16} << 20;

struct Arena {
  std::unique_ptr<std::byte[]> block;
  size_t capacity = 0;
  size_t used = 0;
  std::vector<std::unique_ptr<std::byte[]>> overflow;
  size_t overflow_bytes = 0;
  bool in_scope = false;
};

Arena& ThreadArena() {
  thread_local Arena arena;
  return arena;
}

}  // namespace

ScratchScope::ScratchScope() {
  Arena& arena = ThreadArena();
  assert(!arena.in_scope);
  arena.in_scope = true;
}

// Folds this decode's overflow into one block, so that the next decode of the
// same size takes everything from it.
ScratchScope::~ScratchScope() {
  Arena& arena = ThreadArena();
  if (!arena.overflow.empty()) {
    const size_t total = arena.used + arena.overflow_bytes;
    arena.overflow.clear();
    arena.overflow_bytes = 0;
    if (total <= kMaxRetainedScratch && total > arena.capacity) {
      arena.block.reset(new std::byte[total]);
      arena.capacity = total;
    }
  }
  arena.used = 0;
  arena.in_scope = false;
}

void* ScratchScope::TakeBytes(size_t bytes) {
  Arena& arena = ThreadArena();
  bytes = (std::max<size_t>(bytes, 1) + kScratchAlign - 1) & ~(kScratchAlign - 1);
  if (arena.capacity - arena.used >= bytes) {
    void* p = arena.block.get() + arena.used;
    arena.used += bytes;
    return p;
  }
  arena.overflow.emplace_back(new std::byte[bytes]);
  arena.overflow_bytes += bytes;
  return arena.overflow.back().get();
}

}  // namespace wds::image_internal
