// .npy files: the header parser and the array it describes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "wds/base/buffer.h"
#include "wds/decode/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto array = wds::DecodeNpy(wds::Buffer::Copy(std::string_view(reinterpret_cast<const char*>(data), size)));
  if (array.ok() && array->data.size() < array->nbytes()) __builtin_trap();
  return 0;
}
