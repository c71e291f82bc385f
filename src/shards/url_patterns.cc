// Brace expansion and "::" lists of shard URLs (the reference's rules).
#include "shards/url_patterns.h"

#include <cassert>
#include <charconv>
#include <cstdio>
#include <utility>

#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/shards/shard_list.h"

namespace wds {
namespace {

using Names = std::vector<std::string>;

// Expansion recurses once per nesting level; this bounds the stack it needs.
constexpr size_t kMaxDepth = 100;

uint64_t TotalBytes(const Names& names) {
  uint64_t bytes = 0;
  for (const std::string& s : names) bytes += s.size();
  return bytes;
}

// CheckBalanced rejects a stray '}', an unclosed '{' or absurd nesting, naming
// the position, so that the expansion below can assume every group is closed.
absl::Status CheckBalanced(std::string_view p) {
  std::vector<size_t> open;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\') {
      ++i;
    } else if (p[i] == '{') {
      open.push_back(i);
      if (open.size() > kMaxDepth) {
        return absl::InvalidArgumentError(
            Cat("'{' at position ", i, " nests deeper than ", kMaxDepth, " levels"));
      }
    } else if (p[i] == '}') {
      if (open.empty()) {
        return absl::InvalidArgumentError(
            Cat("unbalanced braces: '}' at position ", i, " has no matching '{'"));
      }
      open.pop_back();
    }
  }
  if (!open.empty()) {
    return absl::InvalidArgumentError(
        Cat("unbalanced braces: '{' at position ", open.front(), " is never closed"));
  }
  return absl::OkStatus();
}

// SplitTopLevel splits a group body at the commas outside nested groups.
std::vector<std::string_view> SplitTopLevel(std::string_view body) {
  std::vector<std::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '\\') {
      ++i;
    } else if (body[i] == '{') {
      ++depth;
    } else if (body[i] == '}') {
      --depth;
    } else if (body[i] == ',' && depth == 0) {
      items.push_back(body.substr(start, i - start));
      start = i + 1;
    }
  }
  items.push_back(body.substr(start));
  return items;
}

// Unescape drops the backslash of each escape pair, in place. Like the
// reference (a regex whose '.' skips newlines), a backslash before a newline
// stays.
void Unescape(std::string& s) {
  size_t out = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] != '\n') ++i;
    s[out++] = s[i];
  }
  s.resize(out);
}

std::vector<std::string_view> SplitDots(std::string_view body) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  for (size_t dots; (dots = body.find("..", start)) != std::string_view::npos; start = dots + 2) {
    fields.push_back(body.substr(start, dots - start));
  }
  fields.push_back(body.substr(start));
  return fields;
}

bool IsDigits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

bool IsSignedDigits(std::string_view s) {
  return IsDigits(!s.empty() && s[0] == '-' ? s.substr(1) : s);
}

bool IsLetter(std::string_view s) {
  return s.size() == 1 && ((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z'));
}

// ParseStep reads a range step: its sign is ignored, 0 means 1, and a step too
// large to represent is as good as any step beyond the range.
uint64_t ParseStep(std::optional<std::string_view> field) {
  if (!field) return 1;
  std::string_view digits = field->substr((*field)[0] == '-' ? 1 : 0);
  uint64_t step = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  (void)ptr;
  if (ec == std::errc::result_out_of_range) return UINT64_MAX;
  return step == 0 ? 1 : step;
}

// RangeCount is how many values RangeValues(from, to, step) lists.
uint64_t RangeCount(int64_t from, int64_t to, uint64_t step) {
  const uint64_t span = from <= to ? uint64_t(to) - uint64_t(from) : uint64_t(from) - uint64_t(to);
  return span / step + 1;
}

// RangeValues lists from, from +- step, ... up to `to` inclusive, in either
// direction. REQUIRES: RangeCount(from, to, step) values fit in memory.
std::vector<int64_t> RangeValues(int64_t from, int64_t to, uint64_t step) {
  const bool up = from <= to;
  const uint64_t count = RangeCount(from, to, step);
  std::vector<int64_t> values;
  values.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t offset = i * step;
    values.push_back(static_cast<int64_t>(up ? uint64_t(from) + offset : uint64_t(from) - offset));
  }
  return values;
}

// Padded endpoints ("007", "-05") make every number as wide as the wider
// endpoint; "0" and "-0" alone do not count as padded.
bool IsPadded(std::string_view s) {
  if (s == "0" || s == "-0") return false;
  return s[0] == '0' || (s.size() > 1 && s[0] == '-' && s[1] == '0');
}

// Padded prints `v` zero-padded to `width` characters, the sign first (as
// Python's "{:0{width}d}", so for any width).
std::string Padded(int64_t v, size_t width) {
  char digits[24];
  const int n = std::snprintf(digits, sizeof(digits), "%lld", static_cast<long long>(v));
  std::string out(digits, static_cast<size_t>(n));
  if (out.size() < width) out.insert(v < 0 ? 1 : 0, width - out.size(), '0');
  return out;
}

// CharRange lists a range of letters: A-Z then a-z, so "{Y..b}" is Y Z a b.
Names CharRange(char from, char to, std::optional<std::string_view> step) {
  constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  Names out;
  for (int64_t v :
       RangeValues(int64_t(kAlphabet.find(from)), int64_t(kAlphabet.find(to)), ParseStep(step))) {
    out.emplace_back(1, kAlphabet[v]);
  }
  return out;
}

// Expander expands patterns within its limits.
class Expander {
 public:
  explicit Expander(ExpansionLimits limits) : limits_(limits) {}

  // Pattern is the product of the literal runs and top-level groups of `p`.
  // REQUIRES: CheckBalanced(p) is ok.
  absl::StatusOr<Names> Pattern(std::string_view p) const {
    Names out{""};
    size_t literal = 0;
    int depth = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == '\\') {
        ++i;
      } else if (p[i] == '{' && depth++ == 0) {
        WDS_RETURN_IF_ERROR(AppendEach(out, {std::string(p.substr(literal, i - literal))}));
        literal = i + 1;
      } else if (p[i] == '}' && --depth == 0) {
        WDS_ASSIGN_OR_RETURN(Names group, Group(p.substr(literal, i - literal)));
        WDS_RETURN_IF_ERROR(AppendEach(out, group));
        literal = i + 1;
      }
    }
    WDS_RETURN_IF_ERROR(AppendEach(out, {std::string(p.substr(literal))}));
    // The reference unescapes each (sub)pattern's joined result, so text
    // inside a group is unescaped once more per level of nesting: "{a\\\\,b}"
    // gives "a\" and "b". Matching that keeps patterns portable between the two.
    for (std::string& s : out) Unescape(s);
    return out;
  }

  // CheckAppend says whether `names` more names of `bytes` bytes may join a
  // list that holds `have_names` of `have_bytes`.
  absl::Status CheckAppend(uint64_t have_names, uint64_t have_bytes, uint64_t names,
                           uint64_t bytes) const {
    if (have_names + names > limits_.names) return TooManyNames();
    if (have_bytes + bytes > limits_.bytes) return TooManyBytes();
    return absl::OkStatus();
  }

 private:
  absl::Status TooManyNames() const {
    return absl::InvalidArgumentError(Cat("it expands to more than ", limits_.names, " names"));
  }

  absl::Status TooManyBytes() const {
    return absl::InvalidArgumentError(
        Cat("it expands to more than ", limits_.bytes, " bytes of names"));
  }

  absl::StatusOr<Names> IntRange(std::string_view from, std::string_view to,
                                 std::optional<std::string_view> step) const {
    int64_t a = 0, b = 0;
    for (auto [text, value] : {std::pair{from, &a}, std::pair{to, &b}}) {
      if (std::from_chars(text.data(), text.data() + text.size(), *value).ec != std::errc()) {
        return absl::InvalidArgumentError(Cat("range endpoint ", text, " does not fit in 64 bits"));
      }
    }
    const size_t width = IsPadded(from) || IsPadded(to) ? std::max(from.size(), to.size()) : 0;
    const uint64_t step_size = ParseStep(step);
    // No name is longer than the longer endpoint as written (the padding is
    // that long, and the values lie between the endpoints), so the names'
    // bytes are known before they are made.
    const uint64_t count = RangeCount(a, b, step_size);
    if (count > limits_.names) return TooManyNames();
    if (count * std::max(from.size(), to.size()) > limits_.bytes) return TooManyBytes();
    Names out;
    out.reserve(count);
    for (int64_t v : RangeValues(a, b, step_size)) out.push_back(Padded(v, width));
    return out;
  }

  // Range expands "{1..3}", "{a..e..2}" and the like; nullopt when `body` is
  // not a range.
  std::optional<absl::StatusOr<Names>> Range(std::string_view body) const {
    std::vector<std::string_view> f = SplitDots(body);
    if (f.size() < 2 || f.size() > 3) return std::nullopt;
    std::optional<std::string_view> step;
    if (f.size() == 3) {
      if (!IsSignedDigits(f[2])) return std::nullopt;
      step = f[2];
    }
    if (IsSignedDigits(f[0]) && IsSignedDigits(f[1])) return IntRange(f[0], f[1], step);
    if (IsLetter(f[0]) && IsLetter(f[1])) return CharRange(f[0][0], f[1][0], step);
    return std::nullopt;
  }

  // Group expands the body of one brace group: a range, a comma list, or else
  // literal text kept in its braces (its nested groups still expand).
  absl::StatusOr<Names> Group(std::string_view body) const {
    if (auto range = Range(body)) return *std::move(range);
    std::vector<std::string_view> items = SplitTopLevel(body);
    Names out;
    if (items.size() == 1) {
      WDS_ASSIGN_OR_RETURN(out, Pattern(body));
      for (std::string& s : out) s = Cat('{', s, '}');
      return out;
    }
    uint64_t bytes = 0;
    for (std::string_view item : items) {
      WDS_ASSIGN_OR_RETURN(Names names, Pattern(item));
      const uint64_t item_bytes = TotalBytes(names);
      WDS_RETURN_IF_ERROR(CheckAppend(out.size(), bytes, names.size(), item_bytes));
      bytes += item_bytes;
      for (std::string& s : names) out.push_back(std::move(s));
    }
    return out;
  }

  // AppendEach replaces `prefixes` by their product with `suffixes`, the left
  // side varying slowest.
  absl::Status AppendEach(Names& prefixes, const Names& suffixes) const {
    // Each prefix appears once per suffix and each suffix once per prefix.
    // Both factors are within the limits (at most 2^32 names and bytes), so no
    // product below overflows 64 bits.
    const uint64_t bytes =
        TotalBytes(prefixes) * suffixes.size() + TotalBytes(suffixes) * prefixes.size();
    WDS_RETURN_IF_ERROR(CheckAppend(0, 0, uint64_t{prefixes.size()} * suffixes.size(), bytes));
    if (suffixes.size() == 1) {
      for (std::string& p : prefixes) p += suffixes[0];
      return absl::OkStatus();
    }
    Names out;
    out.reserve(prefixes.size() * suffixes.size());
    for (const std::string& p : prefixes) {
      for (const std::string& s : suffixes) out.push_back(p + s);
    }
    prefixes = std::move(out);
    return absl::OkStatus();
  }

  ExpansionLimits limits_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandBraces(std::string_view pattern,
                                                      ExpansionLimits limits) {
  absl::Status balanced = CheckBalanced(pattern);
  absl::StatusOr<Names> names = balanced.ok() ? Expander(limits).Pattern(pattern) : balanced;
  if (!names.ok()) {
    return absl::InvalidArgumentError(
        Cat("brace pattern \"", pattern, "\": ", ToStd(names.status().message())));
  }
  return names;
}

absl::StatusOr<std::vector<std::string>> ExpandUrls(std::string_view urls, ExpansionLimits limits) {
  const Expander list(limits);
  std::vector<std::string> out;
  uint64_t bytes = 0;
  size_t start = 0;
  while (true) {
    const size_t sep = urls.find("::", start);
    std::string_view part = urls.substr(start, sep == std::string_view::npos ? sep : sep - start);
    if (part.empty()) {
      return absl::InvalidArgumentError(
          Cat("shard list \"", urls, "\" has an empty URL at position ", start));
    }
    WDS_ASSIGN_OR_RETURN(std::vector<std::string> names, ExpandBraces(part, limits));
    const uint64_t part_bytes = TotalBytes(names);
    if (absl::Status fits = list.CheckAppend(out.size(), bytes, names.size(), part_bytes);
        !fits.ok()) {
      return absl::InvalidArgumentError(
          Cat("shard list \"", urls.substr(0, 200), "\": ", ToStd(fits.message())));
    }
    bytes += part_bytes;
    for (std::string& name : names) {
      if (name.empty()) {
        return absl::InvalidArgumentError(Cat("brace pattern \"", part, "\" yields an empty URL"));
      }
      out.push_back(std::move(name));
    }
    if (sep == std::string_view::npos) return out;
    start = sep + 2;
  }
}

absl::StatusOr<std::vector<std::string>> ExpandUrls(std::string_view urls) {
  return ExpandUrls(urls, ExpansionLimits{});
}

}  // namespace wds
