#include "opener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <set>
#include <string>

#include "errors.h"
#include "wds/internal/strings.h"
#include "wds/interrupt.h"

namespace wdspy {
namespace {

// The registry of descriptors opened here. Heap-allocated and never freed:
// it must outlive every stream, including those destroyed at exit.
struct Registry {
  std::mutex mu;
  std::set<int> fds;
};

Registry& Fds() {
  static auto* registry = new Registry;
  return *registry;
}

int Register(int fd) {
  std::lock_guard<std::mutex> lock(Fds().mu);
  Fds().fds.insert(fd);
  return fd;
}

void CloseRegistered(int fd) {
  {
    std::lock_guard<std::mutex> lock(Fds().mu);
    Fds().fds.erase(fd);
  }
  close(fd);
}

// ReadFd reads once. A descriptor that may have no data for a long time (a
// FIFO: `may_block`) is first polled in slices while the thread has an
// interrupt check (wds/interrupt.h), which is also asked after EINTR.
absl::StatusOr<size_t> ReadFd(int fd, void* buffer, size_t size, const std::string& url,
                              bool may_block) {
  if (may_block && wds::InterruptCheckInstalled()) {
    pollfd p{fd, POLLIN, 0};
    while (true) {
      const int ready = poll(&p, 1, static_cast<int>(wds::kInterruptCheckInterval.count()));
      if (ready > 0 || (ready < 0 && errno != EINTR)) break;  // read() reports errors
      absl::Status go_on = wds::CheckInterrupt();
      if (!go_on.ok()) return go_on;
    }
  }
  while (true) {
    const ssize_t n = read(fd, buffer, size);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return ErrnoStatus(errno, url, wds::Cat(url, ": read failed"));
    absl::Status go_on = wds::CheckInterrupt();
    if (!go_on.ok()) return go_on;
  }
}

// LocalFile reads a local file; a regular file skips by seeking.
class LocalFile : public wds::ByteStream {
 public:
  LocalFile(std::string url, int fd, int64_t size) : url_(std::move(url)), fd_(fd), size_(size) {}
  ~LocalFile() override { CloseRegistered(fd_); }

  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    return ReadFd(fd_, buffer, size, url_, /*may_block=*/size_ < 0);
  }
  absl::StatusOr<int64_t> Skip(int64_t size) override {
    if (size_ < 0 || size <= 0) return 0;
    const off_t position = lseek(fd_, 0, SEEK_CUR);
    if (position < 0) return ErrnoStatus(errno, url_, wds::Cat(url_, ": lseek failed"));
    const int64_t skipped = std::min<int64_t>(size, std::max<int64_t>(0, size_ - position));
    if (lseek(fd_, static_cast<off_t>(skipped), SEEK_CUR) < 0) {
      return ErrnoStatus(errno, url_, wds::Cat(url_, ": lseek failed"));
    }
    return skipped;
  }
  absl::Status Finish() override { return absl::OkStatus(); }
  const std::string& url() const override { return url_; }

 private:
  std::string url_;
  int fd_;
  int64_t size_;
};

absl::StatusOr<std::unique_ptr<wds::ByteStream>> OpenLocal(std::string url, std::string path) {
  int fd;
  // Opening a FIFO waits for a writer: a signal may interrupt that wait.
  while ((fd = open(path.c_str(), O_RDONLY | O_CLOEXEC)) < 0 && errno == EINTR) {
    absl::Status go_on = wds::CheckInterrupt();
    if (!go_on.ok()) return go_on;
  }
  if (fd < 0) return ErrnoStatus(errno, path, wds::Cat("cannot open ", path));
  struct stat st;
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    const int err = S_ISDIR(st.st_mode) ? EISDIR : errno;
    close(fd);
    return ErrnoStatus(err, path, wds::Cat("cannot read ", path));
  }
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  const int64_t size = S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : -1;
  return std::make_unique<LocalFile>(std::move(url), Register(fd), size);
}

// ShellQuote quotes `s` for /bin/sh.
std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\'');
  return out;
}

absl::StatusOr<std::unique_ptr<wds::ByteStream>> Open(std::string_view url) {
  if (url == "-" || wds::StartsWith(url, "pipe:")) return wds::OpenUrl(url);
  if (wds::StartsWith(url, "http://") || wds::StartsWith(url, "https://")) {
    // The reference package's gopen reads http(s) the same way.
    return wds::OpenUrl(wds::Cat(
        "pipe:curl --connect-timeout 30 --retry 30 --retry-delay 2 -f -s -L ", ShellQuote(url)));
  }
  std::string_view path = url;
  if (wds::StartsWith(path, "file://")) {
    path.remove_prefix(7);
  } else if (wds::StartsWith(path, "file:")) {
    path.remove_prefix(5);
  } else if (const size_t scheme = path.find("://");
             scheme != std::string_view::npos && path.find('/') > scheme) {
    return absl::UnimplementedError(
        wds::Cat(url, ": no handler for the URL scheme \"", path.substr(0, scheme),
                 "\" (local paths, file:, pipe:, http:, https: and - are read)"));
  }
  return OpenLocal(std::string(url), std::string(path));
}

}  // namespace

wds::Opener PythonOpener() { return Open; }

void BeforeFork() { Fds().mu.lock(); }

void AfterForkInParent() { Fds().mu.unlock(); }

void AfterForkInChild() {
  // The forking thread held the lock; it is the child's only thread.
  for (int fd : Fds().fds) close(fd);
  Fds().fds.clear();
  Fds().mu.unlock();
}

size_t OpenShardDescriptors() {
  std::lock_guard<std::mutex> lock(Fds().mu);
  return Fds().fds.size();
}

}  // namespace wdspy
