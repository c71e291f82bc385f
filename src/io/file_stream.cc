// FileStream: reads, and skips by seeking, an open file.
#include "io/file_stream.h"

#include <poll.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "wds/base/interrupt.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// WaitReadable blocks until `fd` has data, end of file or an error, or the
// thread's interrupt check says to give up.
absl::Status WaitReadable(int fd) {
  pollfd p{fd, POLLIN, 0};
  while (true) {
    const int ready = poll(&p, 1, InterruptPollTimeout());
    if (ready > 0) return absl::OkStatus();
    if (ready < 0 && errno != EINTR) return absl::OkStatus();  // read() reports it
    WDS_RETURN_IF_ERROR(CheckInterrupt());
  }
}

class FileStream : public ByteStream {
 public:
  FileStream(std::string url, UniqueFd fd, int64_t size, std::string what, bool locked)
      : url_(std::move(url)),
        fd_(std::move(fd)),
        size_(size),
        what_(std::move(what)),
        locked_(locked) {}
  ~FileStream() override {
    if (locked_) (void)flock(fd_.get(), LOCK_UN);
  }

  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    return ReadFd(fd_.get(), buffer, size, url_, what_, /*may_block=*/size_ < 0);
  }
  absl::StatusOr<int64_t> Skip(int64_t size) override {
    if (size_ < 0 || size <= 0) return 0;
    const off_t position = lseek(fd_.get(), 0, SEEK_CUR);
    if (position < 0) return absl::ErrnoToStatus(errno, Cat(url_, ": ", what_, "lseek failed"));
    const int64_t skipped = std::min<int64_t>(size, std::max<int64_t>(0, size_ - position));
    if (lseek(fd_.get(), static_cast<off_t>(skipped), SEEK_CUR) < 0) {
      return absl::ErrnoToStatus(errno, Cat(url_, ": ", what_, "lseek failed"));
    }
    return skipped;
  }
  absl::Status Finish() override { return absl::OkStatus(); }
  const std::string& url() const override { return url_; }

 private:
  std::string url_;
  UniqueFd fd_;
  int64_t size_;
  std::string what_;
  bool locked_;
};

}  // namespace

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

int InterruptPollTimeout() {
  return InterruptCheckInstalled() ? static_cast<int>(kInterruptCheckInterval.count()) : -1;
}

absl::StatusOr<size_t> ReadFd(int fd, void* buffer, size_t size, std::string_view url,
                              std::string_view what, bool may_block) {
  if (may_block && InterruptCheckInstalled()) WDS_RETURN_IF_ERROR(WaitReadable(fd));
  while (true) {
    const ssize_t n = read(fd, buffer, size);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      WDS_RETURN_IF_ERROR(WaitReadable(fd));
    } else if (errno == EINTR) {
      WDS_RETURN_IF_ERROR(CheckInterrupt());
    } else {
      return absl::ErrnoToStatus(errno, Cat(url, ": ", what, "read failed"));
    }
  }
}

std::unique_ptr<ByteStream> MakeFileStream(std::string url, UniqueFd fd, int64_t size,
                                           std::string what, bool locked) {
  return std::make_unique<FileStream>(std::move(url), std::move(fd), size, std::move(what), locked);
}

}  // namespace wds
