// MakeDirectories, RemoveTree, BaseName, ParentDirectory.
#include "wds/internal/io/directories.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

#include <string>

#include "wds/internal/base/strings.h"

namespace wds {

absl::Status MakeDirectories(std::string_view path) {
  std::string partial;
  size_t at = 0;
  while (at <= path.size()) {
    size_t slash = path.find('/', at);
    if (slash == std::string_view::npos) slash = path.size();
    partial.assign(path.substr(0, slash));
    at = slash + 1;
    if (partial.empty()) continue;  // the root
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::ErrnoToStatus(errno, Cat("cannot create directory ", partial));
    }
  }
  struct stat st {};
  if (!path.empty() && (stat(std::string(path).c_str(), &st) != 0 || !S_ISDIR(st.st_mode))) {
    return absl::FailedPreconditionError(Cat(path, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

namespace {

int RemoveOne(const char* path, const struct stat* /*st*/, int /*type*/, struct FTW* /*ftw*/) {
  return remove(path) == 0 ? 0 : errno;
}

}  // namespace

absl::Status RemoveTree(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 && errno == ENOENT) return absl::OkStatus();
  const int rc = nftw(path.c_str(), RemoveOne, 16, FTW_DEPTH | FTW_PHYS);
  if (rc != 0) return absl::ErrnoToStatus(rc > 0 ? rc : errno, Cat("cannot remove ", path));
  return absl::OkStatus();
}

std::string_view BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view ParentDirectory(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return {};
  return slash == 0 ? path.substr(0, 1) : path.substr(0, slash);
}

}  // namespace wds
