#include "tar/file_sink.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "wds/internal/base/strings.h"

namespace wds {

absl::Status CheckCompressionThreads(const std::string& path, int threads) {
  if (threads >= 1 && threads <= kMaxCompressionThreads) return absl::OkStatus();
  return absl::InvalidArgumentError(Cat(path, ": compression threads must be from 1 to ",
                                        kMaxCompressionThreads, ", got ", threads));
}

absl::StatusOr<FileOutput> FileOutput::Open(const std::string& path) {
  if (path == "-") return FileOutput(1, false);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return absl::ErrnoToStatus(errno, Cat(path, ": cannot create"));
  return FileOutput(fd, true);
}

FileOutput::FileOutput(FileOutput&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      owns_fd_(other.owns_fd_),
      failed_(other.failed_),
      error_number_(other.error_number_),
      error_message_(std::move(other.error_message_)) {}

FileOutput::~FileOutput() {
  if (owns_fd_ && fd_ >= 0) close(fd_);
}

bool FileOutput::Write(std::string_view data) {
  if (failed_) return false;
  while (!data.empty()) {
    const ssize_t n = write(fd_, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fail(n < 0 ? errno : EIO, "Write error");
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool FileOutput::Close() {
  if (failed_) return false;
  if (!owns_fd_ || fd_ < 0) return true;
  const int fd = std::exchange(fd_, -1);
  if (close(fd) != 0) return Fail(errno, "Close error");
  return true;
}

bool FileOutput::Fail(int error_number, std::string message) {
  if (!failed_) {
    failed_ = true;
    error_number_ = error_number;
    error_message_ = std::move(message);
  }
  return false;
}

}  // namespace wds
