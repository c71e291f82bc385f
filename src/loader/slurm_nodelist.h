// SLURM host lists, for the rendezvous address of rank 0.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace wds {

// FirstHostOfNodeList expands the first host of a SLURM host list:
// "node[003-005,007],gpu1" -> "node003", "rack[2-3]-n[08-09]" -> "rack2-n08",
// "a,b" -> "a". Bracket groups hold comma-separated numbers or low-high ranges
// (low <= high, zero padding kept). A malformed or empty list is an
// InvalidArgument error quoting it.
[[nodiscard]] absl::StatusOr<std::string> FirstHostOfNodeList(std::string_view nodelist);

}  // namespace wds
