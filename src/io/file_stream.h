// FileStream: the ByteStream of an open file descriptor, shared by OpenUrl's
// local files and the shard cache's complete copies.
//
//   UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
//   std::unique_ptr<ByteStream> s = MakeFileStream(path, std::move(fd), size, "");
//
// Thread safety: a stream is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "wds/io/byte_stream.h"

namespace wds {

// UniqueFd owns a file descriptor and closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Reset closes the descriptor held (close(2) is not retried on EINTR: on
  // Linux the descriptor is gone either way) and holds `fd` instead.
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// ReadFd reads once from `fd`, retrying interrupted reads and waiting on a
// descriptor someone else made non-blocking (standard input may be shared).
// `may_block` says the descriptor may have no data for a long time (not a
// regular file): with an interrupt check installed on the thread
// (wds/base/interrupt.h) it waits in poll(2) first, calling the check every
// kInterruptCheckInterval, so a Cancelled error ends a wait on a stalled
// command or FIFO. Errors name `url` and what is read (`what`, e.g. "its
// cached copy: ").
[[nodiscard]] absl::StatusOr<size_t> ReadFd(int fd, void* buffer, size_t size, std::string_view url,
                                            std::string_view what = "", bool may_block = false);

// InterruptPollTimeout is the poll(2) timeout of a wait that must call the
// thread's interrupt check: kInterruptCheckInterval when one is installed,
// else -1 (no timeout).
int InterruptPollTimeout();

// MakeFileStream takes ownership of `fd`, read from its current offset.
// `size` is the file's size for a regular file, which then skips by seeking
// (never past its end), else -1 (it cannot skip: FIFOs, devices). `what`
// prefixes error details, e.g. "its cached copy: ". `locked`: `fd` holds a
// flock (a cached copy's shared lock), released before the descriptor is
// closed, so that a child forked meanwhile, which shares the open file, does
// not keep it.
std::unique_ptr<ByteStream> MakeFileStream(std::string url, UniqueFd fd, int64_t size,
                                           std::string what = "", bool locked = false);

}  // namespace wds
