#include "wds/base/array.h"

#include "wds/internal/base/strings.h"

namespace wds {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kBool, "bool", 1},       {DType::kUInt8, "uint8", 1},
    {DType::kInt8, "int8", 1},       {DType::kUInt16, "uint16", 2},
    {DType::kInt16, "int16", 2},     {DType::kUInt32, "uint32", 4},
    {DType::kInt32, "int32", 4},     {DType::kUInt64, "uint64", 8},
    {DType::kInt64, "int64", 8},     {DType::kFloat16, "float16", 2},
    {DType::kFloat32, "float32", 4}, {DType::kFloat64, "float64", 8},
};

const DTypeInfo& Info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

}  // namespace

size_t DTypeSize(DType dtype) { return Info(dtype).size; }
std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return absl::InvalidArgumentError(Cat("unknown dtype \"", name, "\""));
}

Array Array::Allocate(DType dtype, std::vector<int64_t> shape) {
  Array a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.data = Buffer::Allocate(a.nbytes());
  return a;
}

int64_t Array::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += Cat(i == 0 ? "" : ", ", shape[i]);
  return out + "]";
}

}  // namespace wds
