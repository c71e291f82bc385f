// Per-thread scratch memory for image decodes.
#pragma once

#include <cstddef>

namespace wds::image_internal {

// ScratchScope hands out uninitialised memory for one decode from an arena
// that belongs to the calling thread and is reused by its next decode, so a
// thread decoding same-sized images allocates no scratch in steady state.
// Everything taken is released when the scope ends. Scopes do not nest.
class ScratchScope {
 public:
  ScratchScope();
  ~ScratchScope();
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;

  template <typename T>
  T* Take(size_t count) {
    return static_cast<T*>(TakeBytes(count * sizeof(T)));
  }

 private:
  void* TakeBytes(size_t bytes);
};

}  // namespace wds::image_internal
