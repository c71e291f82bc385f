// Tar header numbers and checksums (tar/tar_header.h).
#include "tar/tar_header.h"

namespace wds {

std::optional<int64_t> TarHeaderNumber(const unsigned char* field, size_t width) {
  if (field[0] & 0x80) {
    int64_t value = field[0] & 0x7f;
    for (size_t i = 1; i < width; ++i) {
      if (value > (INT64_MAX >> 8)) return std::nullopt;
      value = (value << 8) | field[i];
    }
    return value;
  }
  size_t i = 0;
  while (i < width && field[i] == ' ') ++i;
  int64_t value = 0;
  bool digits = false;
  for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (value > (INT64_MAX >> 3)) return std::nullopt;
    value = value * 8 + (field[i] - '0');
    digits = true;
  }
  for (; i < width; ++i) {
    if (field[i] != ' ' && field[i] != '\0') return std::nullopt;
  }
  if (!digits) return std::nullopt;
  return value;
}

bool ValidTarHeader(const unsigned char* header) {
  constexpr size_t kHeaderSize = 512, kSumField = 148, kSumWidth = 8;
  int64_t sum = 0, signed_sum = 0;
  for (size_t i = 0; i < kHeaderSize; ++i) {
    const bool in_sum = i >= kSumField && i < kSumField + kSumWidth;
    sum += in_sum ? ' ' : header[i];
    signed_sum += in_sum ? ' ' : static_cast<signed char>(header[i]);
  }
  std::optional<int64_t> recorded = TarHeaderNumber(header + kSumField, kSumWidth);
  return recorded == sum || recorded == signed_sum;
}

}  // namespace wds
