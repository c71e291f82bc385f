// Array: a typed, C-contiguous n-dimensional array over a Buffer.
//
// Decoders produce Arrays (an rgb8 image is uint8 [H, W, 3]); collation stacks
// equal-shaped Arrays into one [B, ...] Array whose Buffer comes from a pool.
// An Array is a value: copying it shares the bytes.
//
//   wds::Array a = wds::Array::Allocate(wds::DType::kUInt8, {375, 500, 3});
//   uint8_t* pixels = a.mutable_data<uint8_t>();   // fill before sharing
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/base/buffer.h"

namespace wds {

enum class DType : uint8_t {
  kBool,
  kUInt8,
  kInt8,
  kUInt16,
  kInt16,
  kUInt32,
  kInt32,
  kUInt64,
  kInt64,
  kFloat16,
  kFloat32,
  kFloat64,
};

// DTypeSize is the size of one element in bytes.
size_t DTypeSize(DType dtype);
// DTypeName is numpy's name: "bool", "uint8", ..., "float16", "float32", "float64".
std::string_view DTypeName(DType dtype);
[[nodiscard]] absl::StatusOr<DType> ParseDType(std::string_view name);

struct Array {
  DType dtype = DType::kUInt8;
  std::vector<int64_t> shape;
  // data holds num_elements() * DTypeSize(dtype) bytes, C order (row-major).
  Buffer data;

  // Allocate returns an uninitialised array (malloc'd storage).
  static Array Allocate(DType dtype, std::vector<int64_t> shape);

  int64_t num_elements() const;
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype); }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data.data());
  }
  // REQUIRES: the storage is not shared yet (see Buffer::mutable_data).
  template <typename T>
  T* mutable_data() {
    return reinterpret_cast<T*>(data.mutable_data());
  }
};

// ShapeString renders a shape as "[375, 500, 3]" (for messages).
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace wds
