// Brace expansion of one URL pattern (no "::" lists), the part of ExpandUrls
// (wds/shards/shard_list.h, which documents the rules) that each list item goes
// through.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace wds {

// ExpansionLimits bound what a pattern, or a whole "::" list, may expand to.
// More names, or more bytes of names, than the defaults is almost surely a
// typo ("{0..99999999999}", a range before a pasted blob) and would exhaust
// memory before anything could read it: a name costs its bytes and a
// string's ~40 bytes more, and expanding holds a product beside its factors.
// 2^22 names is three times the shards of the largest public WebDataset sets
// (~1.3 million); longer lists can be given as lists. Each is at most 2^32.
struct ExpansionLimits {
  uint64_t names = uint64_t{1} << 22;
  uint64_t bytes = uint64_t{1} << 27;
};

// ExpandBraces expands the brace groups of `pattern`; errors are
// InvalidArgument naming the pattern.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ExpandBraces(std::string_view pattern,
                                                                    ExpansionLimits limits = {});

// ExpandUrls is wds::ExpandUrls (wds/shards/shard_list.h) within `limits` (the
// fuzzer's are small, so that each input costs little).
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ExpandUrls(std::string_view urls,
                                                                  ExpansionLimits limits);

}  // namespace wds
