#include "wds/torch/tensor.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <variant>

#include "torch/torch_dtype.h"
#include "torch/torch_errors.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// FieldRef names what is being converted, for messages only: a bare Array
// (sample == nullptr), or a field of a sample or batch.
struct FieldRef {
  const Sample* sample = nullptr;
  std::string_view field;
};

// Describe renders `field "jpg" of sample "k" (url)`; for a batch, whose
// __key__ and __url__ are lists, its first sample's key and url.
std::string Describe(const FieldRef& ref) {
  const Sample& sample = *ref.sample;
  std::string key = sample.key().empty() ? "" : Cat("sample \"", sample.key(), "\"");
  std::string url(sample.url());
  if (const Value* keys = sample.Find(kKeyField); keys != nullptr) {
    if (const auto* list = std::get_if<TextList>(keys); list != nullptr && !list->empty()) {
      key = Cat("batch from sample \"", list->front(), "\"");
    }
  }
  if (const Value* urls = sample.Find(kUrlField); urls != nullptr) {
    if (const auto* list = std::get_if<TextList>(urls); list != nullptr && !list->empty()) {
      url = list->front();
    }
  }
  std::string out = Cat("field \"", ref.field, "\"");
  if (!key.empty()) out += Cat(" of ", key);
  if (!url.empty()) out += Cat(" (", url, ")");
  return out;
}

// Prefix starts a message about `ref`.
std::string Prefix(const FieldRef& ref) {
  return ref.sample == nullptr ? std::string("ToTensor: ") : Cat("ToTensor: ", Describe(ref), ": ");
}

std::string_view KindName(const Value& value) {
  struct Visitor {
    std::string_view operator()(const Buffer&) { return "bytes"; }
    std::string_view operator()(const std::string&) { return "text"; }
    std::string_view operator()(int64_t) { return "int64"; }
    std::string_view operator()(double) { return "double"; }
    std::string_view operator()(const Array&) { return "array"; }
    std::string_view operator()(const TextList&) { return "text list"; }
    std::string_view operator()(const BytesList&) { return "bytes list"; }
    std::string_view operator()(const ObjectRef&) { return "object"; }
  };
  return std::visit(Visitor{}, value);
}

std::optional<torch::Dtype> MaybeTorchDType(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return torch::kBool;
    case DType::kUInt8:
      return torch::kUInt8;
    case DType::kInt8:
      return torch::kInt8;
    case DType::kInt16:
      return torch::kInt16;
    case DType::kInt32:
      return torch::kInt32;
    case DType::kInt64:
      return torch::kInt64;
    case DType::kFloat16:
      return torch::kFloat16;
    case DType::kFloat32:
      return torch::kFloat32;
    case DType::kFloat64:
      return torch::kFloat64;
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      break;
  }
  return std::nullopt;
}

torch::Dtype TorchDTypeOrThrow(DType dtype, const FieldRef& ref) {
  std::optional<torch::Dtype> out = MaybeTorchDType(dtype);
  if (!out) {
    ThrowTypeError(Cat(Prefix(ref), DTypeName(dtype),
                       " has no LibTorch dtype (no unsigned types wider than 8 bits); "
                       "ToTensorOptions.widen_unsigned converts uint16 and uint32"));
  }
  return *out;
}

void CheckStorage(const Array& array, const FieldRef& ref) {
  for (int64_t d : array.shape) {
    if (d < 0)
      ThrowValueError(Cat(Prefix(ref), "negative dimension in shape ", ShapeString(array.shape)));
  }
  if (array.data.size() < array.nbytes()) {
    ThrowValueError(Cat(Prefix(ref), DTypeName(array.dtype), " shape ", ShapeString(array.shape),
                        " needs ", array.nbytes(), " bytes but its buffer holds ",
                        array.data.size()));
  }
}

// Widen copies unsigned elements into the next wider signed type; elements are
// read with memcpy because a Buffer slice need not be aligned.
template <typename From, typename To>
torch::Tensor Widen(const Array& array, torch::Dtype dtype) {
  torch::Tensor out = torch::empty(array.shape, dtype);
  const uint8_t* src = array.data.data();
  To* dst = out.data_ptr<To>();
  const int64_t n = array.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    From v;
    std::memcpy(&v, src + i * sizeof(From), sizeof(From));
    dst[i] = static_cast<To>(v);
  }
  return out;
}

// View aliases the Array's bytes; the deleter's copy of the Buffer is what
// keeps them alive, and dropping it returns pooled storage to its pool.
torch::Tensor View(const Array& array, torch::Dtype dtype) {
  if (array.num_elements() == 0) return torch::empty(array.shape, dtype);
  void* data = const_cast<uint8_t*>(array.data.data());
  return at::from_blob(
      data, array.shape, [keep = array.data](void*) {}, torch::TensorOptions().dtype(dtype));
}

torch::Tensor ArrayToTensor(const Array& array, const ToTensorOptions& options,
                            const FieldRef& ref) {
  CheckStorage(array, ref);
  if (options.layout == TensorLayout::kNCHW && array.shape.size() != 4) {
    ThrowValueError(Cat(Prefix(ref), "layout NCHW needs a 4-D [N, H, W, C] array, got shape ",
                        ShapeString(array.shape)));
  }
  torch::Tensor out;
  if (options.widen_unsigned && array.dtype == DType::kUInt16) {
    out = Widen<uint16_t, int32_t>(array, torch::kInt32);
  } else if (options.widen_unsigned && array.dtype == DType::kUInt32) {
    out = Widen<uint32_t, int64_t>(array, torch::kInt64);
  } else {
    out = View(array, TorchDTypeOrThrow(array.dtype, ref));
  }
  return options.layout == TensorLayout::kNCHW ? out.permute({0, 3, 1, 2}) : out;
}

// ValueToTensor converts a value with a tensor form; nullopt for the others.
std::optional<torch::Tensor> ValueToTensor(const Value& value, const ToTensorOptions& options,
                                           const FieldRef& ref) {
  if (const auto* array = std::get_if<Array>(&value)) return ArrayToTensor(*array, options, ref);
  if (const auto* i = std::get_if<int64_t>(&value)) return torch::scalar_tensor(*i, torch::kInt64);
  if (const auto* d = std::get_if<double>(&value)) return torch::scalar_tensor(*d, torch::kFloat64);
  return std::nullopt;
}

// OptionsForBatchField applies kNCHW to image batches (4-D arrays) only.
ToTensorOptions OptionsForBatchField(const Value& value, const ToTensorOptions& options) {
  ToTensorOptions out = options;
  const auto* array = std::get_if<Array>(&value);
  if (array == nullptr || array->shape.size() != 4) out.layout = TensorLayout::kAsStored;
  return out;
}

torch::Tensor RequiredFieldTensor(const Sample& sample, std::string_view field,
                                  const ToTensorOptions& options) {
  const Value* value = sample.Find(field);
  const FieldRef ref{&sample, field};
  if (value == nullptr) ThrowIndexError(Cat(Prefix(ref), "no such field"));
  std::optional<torch::Tensor> out = ValueToTensor(*value, options, ref);
  if (!out && std::holds_alternative<ObjectRef>(*value)) {
    // PendingImages: finished by DevicePrefetcher (or the caller) into a
    // tensor it allocates, which ToTensorBatch then takes as made.
    ThrowTypeError(Cat(Prefix(ref), "the value is ", std::get<ObjectRef>(*value)->TypeName(),
                       ", with no tensor form of its own (DevicePrefetcher finishes it into a "
                       "tensor)"));
  }
  if (!out) {
    ThrowTypeError(Cat(Prefix(ref), "a ", KindName(*value),
                       " value has no tensor form (only arrays, int64 and double)"));
  }
  return *std::move(out);
}

}  // namespace

torch::Dtype ToTorchDType(DType dtype) { return TorchDTypeOrThrow(dtype, FieldRef{}); }

torch::Tensor ToTensor(const Array& array, const ToTensorOptions& options) {
  return ArrayToTensor(array, options, FieldRef{});
}

torch::Tensor ToTensor(const Sample& sample, std::string_view field,
                       const ToTensorOptions& options) {
  return RequiredFieldTensor(sample, field, options);
}

const torch::Tensor& TensorBatch::at(std::string_view name) const {
  auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) {
    std::string known;
    for (const std::string& n : names) known += Cat(known.empty() ? "" : ", ", n);
    ThrowIndexError(Cat("TensorBatch: no tensor field \"", name, "\" (fields: ", known, ")"));
  }
  return tensors[static_cast<size_t>(it - names.begin())];
}

TensorBatch ToTensorBatch(const Sample& batch, const std::vector<std::string>& fields,
                          const ToTensorOptions& options, const MadeTensors& made) {
  for (const auto& [name, tensor] : made) {
    if (batch.Find(name) == nullptr) {
      ThrowIndexError(Cat(Prefix(FieldRef{&batch, name}), "a tensor was made for it, but the "
                                                          "batch has no such field"));
    }
  }
  auto made_for = [&made](std::string_view name) -> const torch::Tensor* {
    for (const auto& [n, tensor] : made) {
      if (n == name) return &tensor;
    }
    return nullptr;
  };
  TensorBatch out;
  if (fields.empty()) {
    for (const auto& [name, value] : batch) {
      std::optional<torch::Tensor> tensor;
      if (const torch::Tensor* m = made_for(name)) {
        tensor = *m;
      } else if (!IsMetadataField(name)) {
        tensor = ValueToTensor(value, OptionsForBatchField(value, options), FieldRef{&batch, name});
      }
      if (tensor) {
        out.names.push_back(name);
        out.tensors.push_back(*std::move(tensor));
      } else {
        out.rest.Append(name, value);
      }
    }
    return out;
  }
  for (const std::string& name : fields) {
    if (const torch::Tensor* m = made_for(name)) {
      out.tensors.push_back(*m);
    } else {
      const Value* value = batch.Find(name);
      ToTensorOptions field_options = value ? OptionsForBatchField(*value, options) : options;
      out.tensors.push_back(RequiredFieldTensor(batch, name, field_options));
    }
    out.names.push_back(name);
  }
  for (const auto& [name, value] : batch) {
    if (std::find(fields.begin(), fields.end(), name) == fields.end()) out.rest.Append(name, value);
  }
  return out;
}

std::vector<torch::Tensor> ToTensors(const Sample& batch, const std::vector<std::string>& fields,
                                     const ToTensorOptions& options) {
  return ToTensorBatch(batch, fields, options).tensors;
}

}  // namespace wds
