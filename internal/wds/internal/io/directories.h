// Directories through POSIX calls, not std::filesystem: LibTorch 2.x's
// libtorch.so exports its own copy of std::filesystem (from a static
// libstdc++fs), which the dynamic linker binds first in any program linked
// with it, and whose remove_all jumps to a null address on Ubuntu 24.04
// (seen on the GPU machines: every wds::torch test died in TempDir's
// destructor). Code that LibTorch programs link (wds::core, wds-train, the
// test utilities) uses these instead.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace wds {

// MakeDirectories creates `path` and its missing parents (mkdir -p), mode
// 0755. Errors: the failing mkdir's errno, naming the directory.
[[nodiscard]] absl::Status MakeDirectories(std::string_view path);

// RemoveTree removes `path` and everything under it, not following symbolic
// links; a missing path is not an error. Errors: the first failure's errno.
[[nodiscard]] absl::Status RemoveTree(const std::string& path);

// BaseName is the last component of `path` ("a/b.tar" -> "b.tar").
std::string_view BaseName(std::string_view path);

// ParentDirectory is `path` without its last component ("" for "b.tar").
std::string_view ParentDirectory(std::string_view path);

}  // namespace wds
