// The LibTorch dtype of an Array's DType, the one mapping ToTensor uses.
#pragma once

#include <torch/types.h>

#include "wds/base/array.h"

namespace wds {

// ToTorchDType maps bool, (u)int8, int16/32/64 and float16/32/64 to the torch
// type of the same size and kind. Throws c10::TypeError for uint16/32/64.
torch::Dtype ToTorchDType(DType dtype);

}  // namespace wds
