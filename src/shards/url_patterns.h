// Brace expansion of one URL pattern (no "::" lists), the part of ExpandUrls
// (wds/shard_list.h, which documents the rules) that each list item goes
// through.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace wds {

// ExpandBraces expands the brace groups of `pattern`; errors are
// InvalidArgument naming the pattern.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ExpandBraces(std::string_view pattern);

}  // namespace wds
