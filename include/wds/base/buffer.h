// Buffer: an immutable, reference-counted run of bytes.
//
// Bytes read from a tar member are read once into a Buffer; every later stage
// shares it by copying the Buffer (a pointer copy, never a byte copy). A Buffer
// may also view memory owned by something else (a pool slot, a decoded image)
// by holding a reference to that owner.
//
//   wds::Buffer b = wds::Buffer::Allocate(n);
//   std::memcpy(b.mutable_data(), src, n);   // fill before sharing
//   wds::Buffer head = b.Slice(0, 4);         // shares b's storage
//
// Thread safety: a Buffer is a value; distinct Buffer objects sharing storage
// may be used from different threads (the reference count is atomic).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace wds {

class Buffer {
 public:
  // Buffer() is empty: data() may be null and size() is 0.
  Buffer() = default;

  // Allocate returns `size` uninitialised bytes owned by the new Buffer.
  static Buffer Allocate(size_t size);
  // Copy returns a new Buffer holding a copy of `bytes`.
  static Buffer Copy(std::string_view bytes);
  // View shares `owner`, which must keep [data, data + size) alive.
  static Buffer View(std::shared_ptr<const void> owner, const uint8_t* data, size_t size);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }

  // mutable_data is for filling a freshly allocated buffer.
  // REQUIRES: no other Buffer shares this storage yet.
  uint8_t* mutable_data() { return const_cast<uint8_t*>(data_); }

  // Slice shares this buffer's storage. REQUIRES: offset + size <= this->size().
  Buffer Slice(size_t offset, size_t size) const;

  // use_count is the number of Buffers (and other owners) sharing the storage.
  long use_count() const { return owner_.use_count(); }

 private:
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace wds
