// Sample: the one dynamic record that flows through every pipeline stage.
//
// A Sample is an ordered small map from field name to Value, in the order the
// fields were added (tar order for freshly read samples). It maps 1:1 onto a
// Python dict; after ToTuple it is a tuple (is_tuple() is true, fields are in
// tuple order and named by the requested spec).
//
//   const wds::Buffer* jpg = sample.GetBytes("jpg");
//   int64_t label = *sample.GetInt("cls");
//   std::string_view key = sample.key();   // "__key__"
//
// Thread safety: a value type; not safe for concurrent mutation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "wds/base/array.h"
#include "wds/base/buffer.h"

namespace wds {

// ValueObject is a value that is none of the plain kinds below, made by the
// loader itself: the images a Loader's worker decoded on a GPU, which the
// consumer finishes into its batch tensor (wds::PendingImages,
// wds/gpu/gpu_decode.h). Copies of a Sample share it.
class ValueObject {
 public:
  virtual ~ValueObject() = default;
  // TypeName names it in messages ("images decoded on cuda:0, not yet finished").
  virtual std::string TypeName() const = 0;
};
using ObjectRef = std::shared_ptr<ValueObject>;

// Value is bytes (an undecoded field), text, an integer, a floating-point
// number, an array (decoded images, npy, collated numbers), in batches a list
// of texts or a list of bytes (collated string and bytes fields), or a
// ValueObject.
using TextList = std::vector<std::string>;
using BytesList = std::vector<Buffer>;
using Value =
    std::variant<Buffer, std::string, int64_t, double, Array, TextList, BytesList, ObjectRef>;

// kKeyField and kUrlField name the two fields every tar sample carries.
inline constexpr std::string_view kKeyField = "__key__";
inline constexpr std::string_view kUrlField = "__url__";

class Sample {
 public:
  using Field = std::pair<std::string, Value>;

  // Find returns the value of `name`, or nullptr. The pointer stays valid until
  // the sample is next modified.
  const Value* Find(std::string_view name) const;
  Value* Find(std::string_view name);
  bool Has(std::string_view name) const { return Find(name) != nullptr; }

  // Typed lookups: nullptr/nullopt when the field is absent or of another type.
  const Buffer* GetBytes(std::string_view name) const;
  const std::string* GetString(std::string_view name) const;
  std::optional<int64_t> GetInt(std::string_view name) const;
  const Array* GetArray(std::string_view name) const;

  // Set replaces the value of `name`, or appends the field at the end.
  void Set(std::string name, Value value);
  // Append adds a field without checking for an existing one.
  // REQUIRES: !Has(name).
  void Append(std::string name, Value value) {
    fields_.emplace_back(std::move(name), std::move(value));
  }
  // Reserve makes room for `n` fields without reallocating.
  void Reserve(size_t n) { fields_.reserve(n); }
  // Erase removes `name`; returns whether it was present.
  bool Erase(std::string_view name);

  // key and url are the "__key__" and "__url__" text fields ("" when absent).
  std::string_view key() const;
  std::string_view url() const;

  size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }
  const Field& operator[](size_t i) const { return fields_[i]; }
  Field& operator[](size_t i) { return fields_[i]; }
  std::vector<Field>::const_iterator begin() const { return fields_.begin(); }
  std::vector<Field>::const_iterator end() const { return fields_.end(); }
  std::vector<Field>::iterator begin() { return fields_.begin(); }
  std::vector<Field>::iterator end() { return fields_.end(); }

  bool is_tuple() const { return is_tuple_; }
  void set_is_tuple(bool t) { is_tuple_ = t; }

 private:
  std::vector<Field> fields_;
  bool is_tuple_ = false;
};

// IsMetadataField is true for names like "__key__" that stages pass through
// untouched (decoders skip them, renames never produce them).
bool IsMetadataField(std::string_view name);

}  // namespace wds
