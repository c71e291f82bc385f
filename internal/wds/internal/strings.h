// Internal string helpers.
//
// Debian's Abseil is built with its own absl::string_view (not std::string_view),
// so absl::StrCat does not take std::string_view. Cat concatenates anything
// string-like or numeric instead:
//   absl::DataLossError(Cat(url, ": member ", name, " at offset ", offset, " is truncated"))
#pragma once

#include <charconv>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace wds {
namespace internal {

template <typename T>
void AppendPiece(std::string& out, const T& value) {
  if constexpr (std::is_same_v<T, char>) {
    out.push_back(value);
  } else if constexpr (std::is_same_v<T, bool>) {
    out.append(value ? "true" : "false");
  } else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), static_cast<long long>(value));
    (void)ec;
    out.append(buf, end);
  } else if constexpr (std::is_floating_point_v<T>) {
    out.append(std::to_string(value));
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out.append(std::string_view(value));
  } else {
    static_assert(std::is_convertible_v<const T&, absl::string_view>, "Cat: unsupported type");
    absl::string_view v(value);
    out.append(v.data(), v.size());
  }
}

}  // namespace internal

template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (internal::AppendPiece(out, args), ...);
  return out;
}

// ToStd views an absl::string_view (e.g. Status::message()) as std::string_view.
inline std::string_view ToStd(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace wds
