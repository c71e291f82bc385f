// Internal string helpers.
//
// Debian's Abseil is built with its own absl::string_view (not std::string_view),
// so its string functions do not take the std::string_view this project uses.
// These adapt them once: Cat concatenates anything string-like or numeric
// (absl::StrCat's job; integers and enums in decimal, unsigned ones as
// unsigned, a char as itself, bool as true/false),
//   absl::DataLossError(Cat(url, ": member ", name, " at offset ", offset, " is truncated"))
// and StartsWith, EndsWith, EqualsIgnoreCase and AsciiLower forward to
// Abseil's.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace wds {
namespace internal {

// AppendInteger writes `value` in decimal; unsigned types stay unsigned, so
// a uint64 seed of 2^63 or more does not print as negative.
template <typename T>
void AppendInteger(std::string& out, T value) {
  using Widest = std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>;
  char buf[24];  // 20 digits of 2^64-1, or a sign and 19 digits
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), static_cast<Widest>(value));
  (void)ec;
  out.append(buf, end);
}

template <typename T>
void AppendPiece(std::string& out, const T& value) {
  if constexpr (std::is_same_v<T, char>) {
    out.push_back(value);
  } else if constexpr (std::is_same_v<T, bool>) {
    out.append(value ? "true" : "false");
  } else if constexpr (std::is_enum_v<T>) {
    AppendInteger(out, static_cast<std::underlying_type_t<T>>(value));
  } else if constexpr (std::is_integral_v<T>) {
    AppendInteger(out, value);
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
// ToAbsl views a std::string_view as an absl::string_view.
inline absl::string_view ToAbsl(std::string_view s) { return {s.data(), s.size()}; }

inline bool StartsWith(std::string_view s, std::string_view prefix) {
  return absl::StartsWith(ToAbsl(s), ToAbsl(prefix));
}
inline bool EndsWith(std::string_view s, std::string_view suffix) {
  return absl::EndsWith(ToAbsl(s), ToAbsl(suffix));
}
// EqualsIgnoreCase compares ignoring the case of ASCII letters.
inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return absl::EqualsIgnoreCase(ToAbsl(a), ToAbsl(b));
}
// AsciiLower returns `s` with ASCII letters lower-cased; other bytes are kept.
inline std::string AsciiLower(std::string_view s) { return absl::AsciiStrToLower(ToAbsl(s)); }
// StripWhitespace is absl::StripAsciiWhitespace on std::string_view: `s`
// without leading and trailing ASCII white space (space, \t, \n, \v, \f, \r).
inline std::string_view StripWhitespace(std::string_view s) {
  return ToStd(absl::StripAsciiWhitespace(ToAbsl(s)));
}
// AsciiLowerInto sets `out` to AsciiLower(s), reusing its storage.
inline void AsciiLowerInto(std::string_view s, std::string& out) {
  out.assign(s.data(), s.size());
  absl::AsciiStrToLower(&out);
}

// Fnv1a folds `bytes` into the 64-bit FNV-1a hash `h` (start from
// kFnv1aOffset): the fingerprints of recipes, states and parameters.
inline constexpr uint64_t kFnv1aOffset = 14695981039346656037ull;
inline uint64_t Fnv1a(std::string_view bytes, uint64_t h = kFnv1aOffset) {
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}
// Fnv1aValue folds the 8 bytes of `value` (little end first) into `h`: a
// length or a count between strings, without formatting it.
inline uint64_t Fnv1aValue(uint64_t value, uint64_t h) {
  for (int i = 0; i < 8; ++i) h = (h ^ ((value >> (8 * i)) & 0xff)) * 1099511628211ull;
  return h;
}

}  // namespace wds
