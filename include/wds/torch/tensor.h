// Batch fields as LibTorch tensors, without copying.
//
// ToTensor views an Array's bytes as a torch::Tensor. The tensor aliases the
// batch's memory (pooled, and page-locked when the pool pins it) and its
// deleter holds a copy of the Array's Buffer: the memory stays valid after the
// Array, the batch and the pool are gone, and returns to its pool only when the
// last tensor using it (views included) is destroyed.
//
//   for (const wds::Sample& batch : loader) {   // ToTuple({"jpg", "cls"}).Batched(64)
//     torch::Tensor images = wds::ToTensor(*batch.GetArray("jpg"),
//                                          {.layout = wds::TensorLayout::kNCHW});
//     torch::Tensor labels = wds::ToTensor(*batch.GetArray("cls"));   // int64 [64]
//   }
//
// Writing through a tensor writes the batch's bytes (they are the same bytes);
// Buffers are immutable by contract, so only do that to a batch nobody else
// reads.
//
// Errors: the LibTorch layer (this header and prefetcher.h) throws, as LibTorch
// itself does, and never returns a Status:
//   c10::TypeError   a dtype or field with no tensor form (uint16/32/64, text)
//   c10::ValueError  a shape or layout that does not fit, a bad device
//   c10::IndexError  a field that is not there
// what_without_backtrace() holds the message. Errors of the batch source pass
// through unchanged (a Loader's errors as wds::LoaderError).
//
// Namespace: these are in `wds`, not `wds::torch`; a nested `wds::torch` would
// hide `::torch` from all code inside namespace wds. The CMake target is
// wds::torch.
//
// Thread safety: free functions; TensorBatch is a value type.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wds/base/array.h"
#include "wds/base/sample.h"

namespace wds {

// TensorLayout chooses the dimension order of an image batch's tensor.
enum class TensorLayout : uint8_t {
  // kAsStored keeps the Array's shape (NHWC for batches of HWC images).
  kAsStored,
  // kNCHW views a 4-D [N, H, W, C] Array as [N, C, H, W]: a permuted view of the
  // same bytes, no copy. The view is not contiguous; its strides are those of
  // torch::MemoryFormat::ChannelsLast, which convolutions take as is. Call
  // .contiguous() for a plain NCHW copy.
  kNCHW,
};

struct ToTensorOptions {
  TensorLayout layout = TensorLayout::kAsStored;
  // LibTorch 1.13 has no uint16/uint32/uint64 types. By default those dtypes
  // are a TypeError, so that ToTensor never copies behind the caller's back.
  // widen_unsigned copies uint16 into int32 and uint32 into int64 (lossless; the
  // result does not share the Array's memory). uint64 stays a TypeError.
  bool widen_unsigned = false;
};

// ToTensor returns a CPU tensor of the Array's shape sharing its bytes (see the
// header comment), or, for widened unsigned dtypes, a converted copy.
// Throws c10::TypeError for an unsigned dtype with no torch type, and
// c10::ValueError for a negative dimension, a Buffer smaller than the shape
// needs, or kNCHW on an Array that is not 4-D.
torch::Tensor ToTensor(const Array& array, const ToTensorOptions& options = {});

// ToTensor(sample, field) converts one field: an Array as above, an int64 to a
// 0-d int64 tensor, a double to a 0-d float64 tensor. Throws c10::IndexError
// when `field` is absent and c10::TypeError for bytes, text and lists, naming
// the field and the sample's key.
torch::Tensor ToTensor(const Sample& sample, std::string_view field,
                       const ToTensorOptions& options = {});

// TensorBatch is a batch's tensor fields, by position and by name, with the
// fields that stayed as they were (keys, urls, texts) in `rest`.
struct TensorBatch {
  std::vector<std::string> names;      // names[i] is the field of tensors[i]
  std::vector<torch::Tensor> tensors;  // in field order
  Sample rest;                         // every field not converted, in order

  size_t size() const { return tensors.size(); }
  // REQUIRES: i < size().
  const torch::Tensor& operator[](size_t i) const { return tensors[i]; }
  // at returns the tensor of field `name`; throws c10::IndexError if none.
  const torch::Tensor& at(std::string_view name) const;
};

// MadeTensors are tensors made by the caller for fields of a batch, by name.
using MadeTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// ToTensorBatch converts the fields of `batch`:
// - with `fields` empty, every non-metadata field that has a tensor form
//   (Array, int64, double), in field order; bytes, text and lists go to `rest`.
//   Positions count only the converted fields: a tuple batch (image, label)
//   gives tensors[0] and tensors[1].
// - with `fields` given, exactly those, in that order; a missing field is a
//   c10::IndexError and a field with no tensor form a c10::TypeError.
// options.layout = kNCHW applies to the fields that are 4-D Arrays (image
// batches); the other fields keep their shape.
// `made` holds tensors the caller already made for some fields (a GPU job
// column decoded on the device, DevicePrefetcher): where such a field is
// converted, its made tensor is taken as it is (no layout change) and its
// value is not looked at. A made name that is no field of the batch is a
// c10::IndexError.
TensorBatch ToTensorBatch(const Sample& batch, const std::vector<std::string>& fields = {},
                          const ToTensorOptions& options = {}, const MadeTensors& made = {});

// ToTensors is ToTensorBatch(batch, fields, options).tensors.
std::vector<torch::Tensor> ToTensors(const Sample& batch,
                                     const std::vector<std::string>& fields = {},
                                     const ToTensorOptions& options = {});

}  // namespace wds
