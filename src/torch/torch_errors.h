// The exceptions of the LibTorch layer: LibTorch's own c10::Error subclasses,
// so that callers catch one family for tensors and for wds (see tensor.h).
#pragma once

#include <c10/util/Exception.h>

#include <string>

namespace wds {

[[noreturn]] inline void ThrowTypeError(std::string message) {
  C10_THROW_ERROR(TypeError, std::move(message));
}
[[noreturn]] inline void ThrowValueError(std::string message) {
  C10_THROW_ERROR(ValueError, std::move(message));
}
[[noreturn]] inline void ThrowIndexError(std::string message) {
  C10_THROW_ERROR(IndexError, std::move(message));
}

}  // namespace wds
