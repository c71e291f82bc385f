// Counts heap allocations through the global operator new, so benchmarks can
// report allocations per item. Include it from exactly one translation unit of
// a benchmark binary: it replaces the global operator new and delete.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace wds::bench {

// AllocationCount is the number of operator new calls so far.
inline std::atomic<int64_t> g_allocation_count{0};
inline int64_t AllocationCount() { return g_allocation_count.load(std::memory_order_relaxed); }

}  // namespace wds::bench

void* operator new(size_t size) {
  wds::bench::g_allocation_count.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
