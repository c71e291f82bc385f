// Collation (the reference's default_collation_fn, typed): numbers to arrays,
// texts and bytes to lists, arrays stacked (or padded) into pooled blocks.
#include "batch/collate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "base/value_kind.h"
#include "stages/transform_stream.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// Where names a sample of the batch for messages: "<url>: key <key>" or, for
// samples without a key (tuples), its position in the batch.
std::string Where(const Sample& sample, size_t index) {
  const std::string who =
      sample.key().empty() ? Cat("sample ", index, " of the batch") : Cat("key ", sample.key());
  return sample.url().empty() ? who : Cat(sample.url(), ": ", who);
}

absl::Status CollateError(const std::vector<Sample>& samples, size_t index, std::string_view field,
                          std::string_view detail) {
  return absl::InvalidArgumentError(
      Cat(Where(samples[index], index), ": ", kBatchedStage, ": field ", field, ": ", detail));
}

// Column gathers one field's values across the batch.
struct Column {
  std::string_view name;
  std::vector<const Value*> values;
};

// CheckSameFields requires every sample to have the first sample's fields: the
// same count for tuples, the same set of names for dicts.
absl::Status CheckSameFields(const std::vector<Sample>& samples) {
  const Sample& first = samples[0];
  for (size_t i = 1; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    if (s.is_tuple() != first.is_tuple()) {
      return absl::InvalidArgumentError(Cat(Where(s, i), ": ", kBatchedStage, ": a ",
                                            s.is_tuple() ? "tuple" : "dict", " in a batch of ",
                                            first.is_tuple() ? "tuples" : "dicts"));
    }
    if (first.is_tuple() && s.size() != first.size()) {
      return absl::InvalidArgumentError(Cat(Where(s, i), ": ", kBatchedStage, ": a tuple of ",
                                            s.size(), " values in a batch of ", first.size(),
                                            "-tuples"));
    }
    if (first.is_tuple()) continue;
    for (const Sample::Field& field : first) {
      if (!s.Has(field.first)) {
        return CollateError(samples, i, field.first,
                            Cat("missing; the batch's first sample (", Where(first, 0),
                                ") has it; fields here: ", FieldNames(s)));
      }
    }
    if (s.size() != first.size()) {
      for (const Sample::Field& field : s) {
        if (!first.Has(field.first)) {
          return CollateError(samples, i, field.first,
                              Cat("not in the batch's first sample (", Where(first, 0), ")"));
        }
      }
    }
  }
  return absl::OkStatus();
}

// -------------------------------------------------------------- numbers

absl::StatusOr<Value> CollateNumbers(const std::vector<Sample>& samples, const Column& column,
                                     BufferPool& pool) {
  bool any_double = false;
  for (size_t i = 0; i < column.values.size(); ++i) {
    const Value& v = *column.values[i];
    if (std::holds_alternative<double>(v)) {
      any_double = true;
    } else if (!std::holds_alternative<int64_t>(v)) {
      return CollateError(samples, i, column.name,
                          Cat("holds ", ValueKindName(v), " but the batch's first sample holds ",
                              ValueKindName(*column.values[0])));
    }
  }
  const int64_t n = static_cast<int64_t>(column.values.size());
  Array out;
  out.dtype = any_double ? DType::kFloat64 : DType::kInt64;
  out.shape = {n};
  WDS_ASSIGN_OR_RETURN(out.data, pool.Acquire(out.nbytes()));
  for (int64_t i = 0; i < n; ++i) {
    const Value& v = *column.values[i];
    if (any_double) {
      const double d = std::holds_alternative<double>(v)
                           ? std::get<double>(v)
                           : static_cast<double>(std::get<int64_t>(v));
      out.mutable_data<double>()[i] = d;
    } else {
      out.mutable_data<int64_t>()[i] = std::get<int64_t>(v);
    }
  }
  return Value(std::move(out));
}

// ---------------------------------------------------------- texts, bytes

template <typename T, typename List>
absl::StatusOr<Value> CollateList(const std::vector<Sample>& samples, const Column& column) {
  List out;
  out.reserve(column.values.size());
  for (size_t i = 0; i < column.values.size(); ++i) {
    const T* v = std::get_if<T>(column.values[i]);
    if (v == nullptr) {
      return CollateError(
          samples, i, column.name,
          Cat("holds ", ValueKindName(*column.values[i]), " but the batch's first sample holds ",
              ValueKindName(*column.values[0])));
    }
    out.push_back(*v);
  }
  return Value(std::move(out));
}

// ---------------------------------------------------------------- arrays

uint16_t FloatToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mantissa = x & 0x7fffffu;
  const int exponent = static_cast<int>((x >> 23) & 0xffu);
  if (exponent == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
  const int e = exponent - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);
  uint32_t shift = 13;
  uint32_t half = 0;
  if (e <= 0) {  // a subnormal half (or zero)
    if (e < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    shift = static_cast<uint32_t>(14 - e);
    half = mantissa >> shift;
  } else {
    half = (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  }
  // Round to nearest, ties to even; a carry into the exponent is correct.
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

template <typename T>
bool FitsInteger(double v) {
  return std::floor(v) == v && v >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
         v <= static_cast<double>(std::numeric_limits<T>::max()) &&
         // max() of 64-bit types rounds up to 2^63 / 2^64 as a double.
         v < std::ldexp(1.0, std::numeric_limits<T>::digits);
}

template <typename T>
std::optional<std::vector<uint8_t>> IntegerBytes(double v) {
  if (!FitsInteger<T>(v)) return std::nullopt;
  const T t = static_cast<T>(v);
  std::vector<uint8_t> bytes(sizeof(T));
  std::memcpy(bytes.data(), &t, sizeof(T));
  return bytes;
}

template <typename T>
std::vector<uint8_t> FloatBytes(T t) {
  std::vector<uint8_t> bytes(sizeof(T));
  std::memcpy(bytes.data(), &t, sizeof(T));
  return bytes;
}

// PadElement is `value` as one element of `dtype`, or nullopt when the dtype
// cannot hold it exactly (integers) or at all (bool: only 0 and 1).
std::optional<std::vector<uint8_t>> PadElement(DType dtype, double value) {
  switch (dtype) {
    case DType::kBool:
      if (value != 0.0 && value != 1.0) return std::nullopt;
      return std::vector<uint8_t>{static_cast<uint8_t>(value)};
    case DType::kUInt8:
      return IntegerBytes<uint8_t>(value);
    case DType::kInt8:
      return IntegerBytes<int8_t>(value);
    case DType::kUInt16:
      return IntegerBytes<uint16_t>(value);
    case DType::kInt16:
      return IntegerBytes<int16_t>(value);
    case DType::kUInt32:
      return IntegerBytes<uint32_t>(value);
    case DType::kInt32:
      return IntegerBytes<int32_t>(value);
    case DType::kUInt64:
      return IntegerBytes<uint64_t>(value);
    case DType::kInt64:
      return IntegerBytes<int64_t>(value);
    case DType::kFloat16:
      return FloatBytes(FloatToHalf(static_cast<float>(value)));
    case DType::kFloat32:
      return FloatBytes(static_cast<float>(value));
    case DType::kFloat64:
      return FloatBytes(value);
  }
  return std::nullopt;
}

void Fill(uint8_t* dst, size_t count, const std::vector<uint8_t>& element) {
  const size_t item = element.size();
  if (std::all_of(element.begin(), element.end(), [](uint8_t b) { return b == 0; })) {
    std::memset(dst, 0, count * item);
    return;
  }
  for (size_t i = 0; i < count; ++i) std::memcpy(dst + i * item, element.data(), item);
}

// CopyPadded copies `src` (C order, `shape`) into the corner of `dst` (C order,
// `padded`, already filled), one innermost row at a time.
void CopyPadded(const uint8_t* src, const std::vector<int64_t>& shape, uint8_t* dst,
                const std::vector<int64_t>& padded, size_t item) {
  const size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(dst, src, item);
    return;
  }
  const size_t row_bytes = static_cast<size_t>(shape[rank - 1]) * item;
  size_t rows = 1;
  for (size_t k = 0; k + 1 < rank; ++k) rows *= static_cast<size_t>(shape[k]);
  if (rows == 0 || row_bytes == 0) return;
  std::vector<int64_t> index(rank - 1, 0);
  for (size_t r = 0; r < rows; ++r) {
    size_t offset = 0;  // destination row start, in elements
    for (size_t k = 0; k + 1 < rank; ++k) offset = offset * padded[k] + index[k];
    offset *= static_cast<size_t>(padded[rank - 1]);
    std::memcpy(dst + offset * item, src + r * row_bytes, row_bytes);
    for (size_t k = rank - 1; k-- > 0;) {
      if (++index[k] < shape[k]) break;
      index[k] = 0;
    }
  }
}

// ArrayColumn checks the arrays of one column and finds the collated shape.
absl::StatusOr<std::vector<int64_t>> CollatedShape(const std::vector<Sample>& samples,
                                                   const Column& column,
                                                   const BatchOptions& options) {
  const Array* first = std::get_if<Array>(column.values[0]);
  std::vector<int64_t> shape = first->shape;
  for (size_t i = 1; i < column.values.size(); ++i) {
    const Array* a = std::get_if<Array>(column.values[i]);
    if (a == nullptr) {
      return CollateError(samples, i, column.name,
                          Cat("holds ", ValueKindName(*column.values[i]),
                              " but the batch's first sample holds an array"));
    }
    if (a->dtype != first->dtype) {
      return CollateError(samples, i, column.name,
                          Cat("dtype ", DTypeName(a->dtype), " differs from ",
                              DTypeName(first->dtype), " of the batch's first sample"));
    }
    if (a->shape == first->shape) continue;
    if (!options.pad || a->shape.size() != shape.size()) {
      return CollateError(
          samples, i, column.name,
          Cat("shape ", ShapeString(a->shape), " differs from ", ShapeString(first->shape),
              " of the batch's first sample",
              options.pad ? " (padding needs equal ranks)" : " (set BatchOptions.pad to pad)"));
    }
    for (size_t k = 0; k < shape.size(); ++k) shape[k] = std::max(shape[k], a->shape[k]);
  }
  return shape;
}

bool AllShaped(const Column& column, const std::vector<int64_t>& shape) {
  return std::all_of(column.values.begin(), column.values.end(),
                     [&shape](const Value* v) { return std::get<Array>(*v).shape == shape; });
}

absl::StatusOr<Array> CollateArrays(const std::vector<Sample>& samples, const Column& column,
                                    const BatchOptions& options, BufferPool& pool,
                                    BatchSlots* slots) {
  WDS_ASSIGN_OR_RETURN(std::vector<int64_t> shape, CollatedShape(samples, column, options));
  const DType dtype = std::get<Array>(*column.values[0]).dtype;
  std::optional<std::vector<uint8_t>> pad;
  if (options.pad) {
    pad = PadElement(dtype, options.pad_value);
    if (!pad.has_value()) {
      return CollateError(
          samples, 0, column.name,
          Cat("pad_value ", options.pad_value, " does not fit dtype ", DTypeName(dtype)));
    }
  }
  Array out;
  out.dtype = dtype;
  out.shape.reserve(shape.size() + 1);
  out.shape.push_back(static_cast<int64_t>(column.values.size()));
  out.shape.insert(out.shape.end(), shape.begin(), shape.end());
  if (slots != nullptr && AllShaped(column, shape)) {
    if (std::optional<Buffer> block = slots->InPlace(column.values)) {
      out.data = *std::move(block);
      return out;
    }
  }
  WDS_ASSIGN_OR_RETURN(out.data, pool.Acquire(out.nbytes()));
  const size_t item = DTypeSize(dtype);
  size_t slot = item;
  for (int64_t d : shape) slot *= static_cast<size_t>(d);
  uint8_t* dst = out.data.mutable_data();
  for (size_t i = 0; i < column.values.size(); ++i, dst += slot) {
    const Array& a = std::get<Array>(*column.values[i]);
    if (a.shape == shape) {
      if (slot > 0) std::memcpy(dst, a.data.data(), slot);
      continue;
    }
    Fill(dst, slot / item, *pad);
    CopyPadded(a.data.data(), a.shape, dst, shape, item);
  }
  return out;
}

// Lengths is the "<name>.lengths" array of a padded field: each sample's shape.
absl::StatusOr<Array> Lengths(const Column& column, BufferPool& pool) {
  const size_t rank = std::get<Array>(*column.values[0]).shape.size();
  Array out;
  out.dtype = DType::kInt64;
  out.shape = {static_cast<int64_t>(column.values.size()), static_cast<int64_t>(rank)};
  WDS_ASSIGN_OR_RETURN(out.data, pool.Acquire(out.nbytes()));
  int64_t* dst = out.mutable_data<int64_t>();
  for (const Value* v : column.values) {
    const std::vector<int64_t>& shape = std::get<Array>(*v).shape;
    dst = std::copy(shape.begin(), shape.end(), dst);
  }
  return out;
}

absl::StatusOr<Value> CollateColumn(const std::vector<Sample>& samples, const Column& column,
                                    const BatchOptions& options, BufferPool& pool,
                                    BatchSlots* slots) {
  const Value& first = *column.values[0];
  if (std::holds_alternative<int64_t>(first) || std::holds_alternative<double>(first)) {
    return CollateNumbers(samples, column, pool);
  }
  if (std::holds_alternative<std::string>(first)) {
    return CollateList<std::string, TextList>(samples, column);
  }
  if (std::holds_alternative<Buffer>(first)) return CollateList<Buffer, BytesList>(samples, column);
  if (std::holds_alternative<Array>(first)) {
    WDS_ASSIGN_OR_RETURN(Array a, CollateArrays(samples, column, options, pool, slots));
    return Value(std::move(a));
  }
  return CollateError(samples, 0, column.name,
                      Cat("holds ", ValueKindName(first), ", which cannot be collated again"));
}

Column GetColumn(const std::vector<Sample>& samples, size_t position) {
  const Sample& first = samples[0];
  Column column{first[position].first, {}};
  column.values.reserve(samples.size());
  for (const Sample& s : samples) {
    column.values.push_back(first.is_tuple() ? &s[position].second : s.Find(column.name));
  }
  return column;
}

}  // namespace

absl::StatusOr<Batch> Collate(const std::vector<Sample>& samples, const BatchOptions& options,
                              BufferPool& pool, BatchSlots* slots) {
  WDS_RETURN_IF_ERROR(CheckSameFields(samples));
  const Sample& first = samples[0];
  Batch batch;
  batch.set_is_tuple(first.is_tuple());
  std::vector<Sample::Field> lengths;
  for (size_t position = 0; position < first.size(); ++position) {
    const Column column = GetColumn(samples, position);
    WDS_ASSIGN_OR_RETURN(Value value, CollateColumn(samples, column, options, pool, slots));
    if (options.pad && std::holds_alternative<Array>(*column.values[0])) {
      std::string name = Cat(column.name, kLengthsSuffix);
      if (first.Has(name)) {
        return CollateError(samples, 0, column.name,
                            Cat("padding adds the field ", name, ", which the sample already has"));
      }
      WDS_ASSIGN_OR_RETURN(Array a, Lengths(column, pool));
      lengths.emplace_back(std::move(name), std::move(a));
    }
    batch.Append(std::string(column.name), std::move(value));
  }
  for (Sample::Field& field : lengths)
    batch.Append(std::move(field.first), std::move(field.second));
  return batch;
}

}  // namespace wds
