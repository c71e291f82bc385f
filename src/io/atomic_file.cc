// TemporaryPath and WriteFileAtomically.
#include "wds/internal/io/atomic_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "wds/internal/base/strings.h"

namespace wds {

std::string TemporaryPath(std::string_view path) {
  return Cat(path, ".", static_cast<int64_t>(getpid()), ".tmp");
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view data) {
  // A call of its own: two threads writing one path must not share a temporary file. (The
  // process id stays last, where RemoveStaleTemporaries looks for it.)
  static std::atomic<int64_t> calls{0};
  const std::string temp = TemporaryPath(Cat(path, ".", calls.fetch_add(1)));
  FILE* f = std::fopen(temp.c_str(), "wb");
  if (f == nullptr) return absl::ErrnoToStatus(errno, Cat(path, ": cannot create"));
  const bool written = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  const int saved_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    std::remove(temp.c_str());
    return absl::ErrnoToStatus(written ? errno : saved_errno, Cat(path, ": cannot write"));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temp.c_str());
    return absl::ErrnoToStatus(rename_errno, Cat(path, ": cannot rename ", temp, " into place"));
  }
  return absl::OkStatus();
}

}  // namespace wds
