#include "wds/base/buffer.h"

#include <cassert>
#include <cstdlib>
#include <cstring>
#include <new>

namespace wds {

Buffer Buffer::Allocate(size_t size) {
  // One allocation for the bytes; the control block is the second. malloc(0)
  // may return null, so always ask for at least one byte.
  void* bytes = std::malloc(size == 0 ? 1 : size);
  if (bytes == nullptr) throw std::bad_alloc();
  std::shared_ptr<const void> owner(bytes, [](const void* p) { std::free(const_cast<void*>(p)); });
  return View(std::move(owner), static_cast<const uint8_t*>(bytes), size);
}

Buffer Buffer::Copy(std::string_view bytes) {
  Buffer b = Allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(b.mutable_data(), bytes.data(), bytes.size());
  return b;
}

Buffer Buffer::View(std::shared_ptr<const void> owner, const uint8_t* data, size_t size) {
  Buffer b;
  b.owner_ = std::move(owner);
  b.data_ = data;
  b.size_ = size;
  return b;
}

Buffer Buffer::Slice(size_t offset, size_t size) const {
  assert(offset <= size_ && size <= size_ - offset);
  return View(owner_, data_ + offset, size);
}

}  // namespace wds
