// Writing files so that their final name only ever holds a whole file.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace wds {

// TemporaryPath is the name a file is written under before it is renamed to
// `path`: "<path>.<pid>.tmp".
std::string TemporaryPath(std::string_view path);

// WriteFileAtomically writes `data` to `path` through a temporary file of
// its own ("<path>.<n>.<pid>.tmp", n counting the calls in this process),
// renamed into place; on error the temporary file is removed and the error
// names `path`. Threads may write one path at once: the last rename wins.
[[nodiscard]] absl::Status WriteFileAtomically(const std::string& path, std::string_view data);

}  // namespace wds
