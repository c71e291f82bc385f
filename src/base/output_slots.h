// OutputSlots: memory that a downstream stage offers for decoded arrays.
//
//   Buffer storage = slots->Offer("jpg", DType::kUInt8, {224, 224, 3});
//   if (storage.empty()) { /* declined: allocate as usual */ }
//
// Batched offers each sample its slot in the batch's pooled (possibly pinned)
// block through the worker's wiring (WorkerContext::Wiring::output_slots, in
// wds/internal/base/worker_wiring.h), and image decoders write straight
// into it, so a decoded batch needs no collation copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "wds/base/array.h"
#include "wds/base/buffer.h"

namespace wds {

// OutputSlots lets the stage that will consume a decoded array offer the
// memory it is written to, so that it is produced in place instead of copied
// later.
//
// Thread safety: none needed; one stream's decoders call one OutputSlots.
class OutputSlots {
 public:
  virtual ~OutputSlots() = default;
  // Offer returns storage of exactly the byte size of a `dtype` array of
  // `shape`, for the field `field` of the sample being decoded, or an empty
  // Buffer to decline (the caller then allocates its own, as it does when
  // given storage of another size). The caller may write to the storage
  // until it hands the finished array on, and never after. Its bytes are
  // uninitialised.
  virtual Buffer Offer(std::string_view field, DType dtype, const std::vector<int64_t>& shape) = 0;
};

// MemorySlot offers one block of memory that the caller owns (a batch slot,
// scratch), whatever the field; the decoder declines storage of another size.
// The Array decoded into it does not own the block: neither it nor a copy of
// it may outlive the block.
class MemorySlot final : public OutputSlots {
 public:
  MemorySlot(void* data, size_t size) : data_(static_cast<uint8_t*>(data)), size_(size) {}
  Buffer Offer(std::string_view /*field*/, DType /*dtype*/,
               const std::vector<int64_t>& /*shape*/) override {
    return Buffer::View(nullptr, data_, size_);  // not owned
  }

 private:
  uint8_t* data_;
  size_t size_;
};

}  // namespace wds
