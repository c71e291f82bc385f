// BatchSlots: the slots of the batch being gathered, offered to the decoders
// upstream of one Batched stream.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/output_slots.h"
#include "wds/base/buffer.h"
#include "wds/base/buffer_pool.h"
#include "wds/base/sample.h"

namespace wds {

// BatchSlots offers the decoders upstream of one Batched stream the slots of
// the batch being gathered: sample i's array of a field is written straight
// into slot i of a pooled block, and a column whose arrays all sit in their
// own slots becomes the block itself, without a copy (InPlace).
//
// Each slot is handed out through an owner of its own, so a slot is offered
// again only after everything made in it is gone (a sample dropped after
// decoding). A slot still in use when it would be offered again, or after its
// batch, means a stage between the decoder and Batched holds samples back (a
// shuffle buffer, say); a block that collation could not use means a stage
// replaces the decoded arrays (a map that crops, say). Either way offers stop
// for good, so that no held sample pins a whole block and no batch takes a
// block it will not use.
class BatchSlots final : public OutputSlots {
 public:
  BatchSlots(size_t batch_size, std::shared_ptr<BufferPool> pool)
      : batch_size_(batch_size), pool_(std::move(pool)) {}

  // set_index names the batch position of the sample about to be pulled.
  void set_index(size_t index) { index_ = index; }

  Buffer Offer(std::string_view field, DType dtype, const std::vector<int64_t>& shape) override {
    if (!enabled_ || index_ >= batch_size_) return Buffer();
    Block* block = Find(field);
    if (block == nullptr) block = Open(field, dtype, shape);
    if (block == nullptr || block->dtype != dtype || block->shape != shape) return Buffer();
    std::weak_ptr<const void>& given = block->given[index_];
    if (!given.expired()) {
      enabled_ = false;
      return Buffer();
    }
    auto owner = std::make_shared<const Buffer>(block->storage);
    given = owner;
    return Buffer::View(std::move(owner), block->storage.data() + index_ * block->slot_bytes,
                        block->slot_bytes);
  }

  // InPlace is the collated array of `arrays` when arrays[i] is slot i of one
  // block for every i: a view of the block's first slots.
  std::optional<Buffer> InPlace(const std::vector<const Value*>& arrays) {
    const Array& first = std::get<Array>(*arrays[0]);
    for (Block& block : blocks_) {
      if (first.data.data() != block.storage.data()) continue;
      for (size_t i = 0; i < arrays.size(); ++i) {
        const Array& a = std::get<Array>(*arrays[i]);
        if (a.data.data() != block.storage.data() + i * block.slot_bytes ||
            a.data.size() != block.slot_bytes) {
          return std::nullopt;
        }
      }
      block.used = true;
      return block.storage.Slice(0, arrays.size() * block.slot_bytes);
    }
    return std::nullopt;
  }

  // Reset starts the next batch; REQUIRES: the last batch's samples are gone.
  void Reset() {
    for (const Block& block : blocks_) {
      if (!block.used) enabled_ = false;
      for (const std::weak_ptr<const void>& given : block.given) {
        if (!given.expired()) enabled_ = false;
      }
    }
    blocks_.clear();
  }

 private:
  struct Block {
    std::string field;
    DType dtype;
    std::vector<int64_t> shape;
    size_t slot_bytes;
    Buffer storage;
    std::vector<std::weak_ptr<const void>> given;  // per slot
    bool used = false;                             // collated in place
  };

  Block* Find(std::string_view field) {
    for (Block& block : blocks_) {
      if (block.field == field) return &block;
    }
    return nullptr;
  }

  Block* Open(std::string_view field, DType dtype, const std::vector<int64_t>& shape) {
    Array probe{dtype, shape, {}};
    const size_t slot_bytes = probe.nbytes();
    if (slot_bytes == 0) return nullptr;
    absl::StatusOr<Buffer> storage = pool_->Acquire(slot_bytes * batch_size_);
    if (!storage.ok()) return nullptr;
    blocks_.push_back({std::string(field), dtype, shape, slot_bytes, *std::move(storage),
                       std::vector<std::weak_ptr<const void>>(batch_size_), false});
    return &blocks_.back();
  }

  const size_t batch_size_;
  std::shared_ptr<BufferPool> pool_;
  std::vector<Block> blocks_;
  size_t index_ = 0;
  bool enabled_ = true;
};

}  // namespace wds
