// NumPy .npy files <-> Array, without pickle.
//
//   absl::StatusOr<wds::Array> a = wds::DecodeNpy(sample.GetBytes("npy"));
//   std::string file = wds::EncodeNpy(*a);   // np.load() reads it back
//
// Read: format versions 1.0, 2.0 and 3.0; dtypes bool, int8..int64,
// uint8..uint64, float16/32/64 in any byte order ('<', '>', '|', '=', or
// none: native); big-endian data is byte-swapped and Fortran-order data
// transposed, so the result is always native-endian C order. Object arrays
// (pickle), structured, string, complex and datetime dtypes are
// InvalidArgument, as is a malformed header; data shorter than the shape says
// is DataLoss, longer is InvalidArgument.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "wds/base/array.h"
#include "wds/base/buffer.h"

namespace wds {

// DecodeNpy parses one .npy file. When the file's data is already native,
// C-ordered and aligned for its dtype, the Array shares `file`'s storage
// instead of copying it.
[[nodiscard]] absl::StatusOr<Array> DecodeNpy(const Buffer& file);

// EncodeNpy writes `array` as a version 1.0 .npy file (2.0 when the header
// needs it) in native byte order and C order.
std::string EncodeNpy(const Array& array);

}  // namespace wds
