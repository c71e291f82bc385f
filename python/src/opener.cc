#include "opener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "errors.h"
#include "wds/internal/strings.h"
#include "wds/interrupt.h"
#include "wds/remote.h"

namespace wdspy {
namespace {

// The registry of descriptors opened here. Heap-allocated and never freed:
// it must outlive every stream, including those destroyed at exit. Its lock
// also guards the RemoteAccess sessions (the fork handlers hold it).
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

// RemoteShard passes a remote stream through, marking its errors with its
// URL (RemoteStatus) for the Python exception types.
class RemoteShard : public wds::ByteStream {
 public:
  explicit RemoteShard(std::unique_ptr<wds::ByteStream> stream) : stream_(std::move(stream)) {}

  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    absl::StatusOr<size_t> n = stream_->Read(buffer, size);
    if (!n.ok()) return RemoteStatus(n.status(), url());
    return n;
  }
  absl::StatusOr<int64_t> Skip(int64_t size) override {
    absl::StatusOr<int64_t> n = stream_->Skip(size);
    if (!n.ok()) return RemoteStatus(n.status(), url());
    return n;
  }
  absl::Status Finish() override { return RemoteStatus(stream_->Finish(), url()); }
  const std::string& url() const override { return stream_->url(); }

 private:
  std::unique_ptr<wds::ByteStream> stream_;
};

// EnvironmentAccess is the environment's options and what is malformed there,
// not reading the variables in `skip` (fields the caller sets itself).
std::shared_ptr<const RemoteAccess> EnvironmentAccess(const std::vector<std::string>& skip = {}) {
  absl::StatusOr<wds::RemoteOptions> options = wds::RemoteOptions::ParseFromEnvironment(skip);
  if (!options.ok()) {
    return std::make_shared<RemoteAccess>(wds::RemoteOptions::FromEnvironment(), options.status());
  }
  return std::make_shared<RemoteAccess>(*std::move(options), absl::OkStatus());
}

// Variables of the environment that a given option replaces.
const char* VariableOf(const std::string& option) {
  if (option == "cache_dir") return "WDS_CACHE";
  if (option == "cache_size") return "WDS_CACHE_SIZE";
  if (option == "ca_file") return "CURL_CA_BUNDLE";
  if (option == "verify_tls") return "WDS_TLS_VERIFY";
  return nullptr;
}

absl::StatusOr<std::unique_ptr<wds::ByteStream>> Open(const RemoteAccess& remote,
                                                      std::string_view url) {
  if (url == "-" || wds::StartsWith(url, "pipe:")) return wds::OpenUrl(url);
  if (wds::IsRemoteUrl(url)) return remote.Open(url);
  std::string_view path = url;
  if (wds::StartsWith(path, "file://")) {
    path.remove_prefix(7);
  } else if (wds::StartsWith(path, "file:")) {
    path.remove_prefix(5);
  } else if (const size_t scheme = path.find("://");
             scheme != std::string_view::npos && path.find('/') > scheme) {
    return absl::UnimplementedError(
        wds::Cat(url, ": no handler for the URL scheme \"", path.substr(0, scheme),
                 "\" (local paths, file:, pipe:, -, http:, https:, s3: and gs: are read)"));
  }
  return OpenLocal(std::string(url), std::string(path));
}

// kMaxSeconds bounds every time option: beyond it a duration in milliseconds
// would come near overflowing the deadlines computed from it.
constexpr int64_t kMaxSeconds = 1'000'000'000;

// Seconds converts a Python number of seconds (at least `least`, and more
// than 0 when `positive`; at most kMaxSeconds) to a duration, rounding up to
// the duration's unit so that a small positive time never becomes zero.
template <typename Duration>
Duration Seconds(py::handle value, const char* name, int least, bool positive) {
  const double seconds = value.cast<double>();
  if (!(seconds >= least) || (positive && seconds <= 0) || seconds > kMaxSeconds) {
    throw py::value_error(wds::Cat("RemoteOptions: ", name, " must be ",
                                   positive ? "more than 0" : wds::Cat("at least ", least),
                                   " and at most ", kMaxSeconds, " seconds, got ",
                                   py::repr(value).cast<std::string>()));
  }
  return std::chrono::ceil<Duration>(std::chrono::duration<double>(seconds));
}

int64_t AtLeast(py::handle value, const char* name, int64_t least) {
  const int64_t n = value.cast<int64_t>();
  if (n < least) {
    throw py::value_error(
        wds::Cat("RemoteOptions: ", name, " must be at least ", least, ", got ", n));
  }
  return n;
}

// Apply sets the option `name` of `o` to `value`.
void Apply(wds::RemoteOptions& o, const std::string& name, py::handle value) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  if (name == "cache_dir") {
    o.cache_dir = value.cast<std::string>();
  } else if (name == "cache_size") {
    o.cache_size = AtLeast(value, "cache_size", 0);
  } else if (name == "ca_file") {
    o.ca_file = value.cast<std::string>();
  } else if (name == "verify_tls") {
    o.verify_tls = value.cast<bool>();
  } else if (name == "connect_timeout") {
    o.connect_timeout = Seconds<milliseconds>(value, "connect_timeout", 0, true);
  } else if (name == "stall_timeout") {
    o.stall_timeout = Seconds<milliseconds>(value, "stall_timeout", 0, true);
  } else if (name == "low_speed_limit") {
    o.low_speed_limit = AtLeast(value, "low_speed_limit", 0);
  } else if (name == "low_speed_time") {
    o.low_speed_time = Seconds<seconds>(value, "low_speed_time", 1, false);
  } else if (name == "max_attempts") {
    o.max_attempts = static_cast<int>(AtLeast(value, "max_attempts", 1));
  } else if (name == "max_retry_time") {
    o.max_retry_time = Seconds<milliseconds>(value, "max_retry_time", 0, false);
  } else {
    throw py::type_error(wds::Cat("RemoteOptions: no option named '", name, "'"));
  }
}

// ApplyAll applies the entries of a dict of options (None values: unset).
void ApplyAll(wds::RemoteOptions& o, py::handle given) {
  for (auto [name, value] : given.cast<py::dict>()) {
    if (!value.is_none()) Apply(o, name.cast<std::string>(), value);
  }
}

}  // namespace

RemoteAccess::RemoteAccess(wds::RemoteOptions options, absl::Status environment_error)
    : options_(std::move(options)), environment_error_(std::move(environment_error)) {}

std::shared_ptr<const RemoteAccess> RemoteAccess::FromPython(py::handle given) {
  if (given.is_none()) return EnvironmentAccess();
  // A malformed variable whose field is given does not matter.
  std::vector<std::string> skip;
  for (auto [name, value] : given.cast<py::dict>()) {
    const char* variable = VariableOf(name.cast<std::string>());
    if (variable != nullptr && !value.is_none()) skip.push_back(variable);
  }
  std::shared_ptr<const RemoteAccess> environment = EnvironmentAccess(skip);
  wds::RemoteOptions options = environment->options_;
  ApplyAll(options, given);
  return std::make_shared<RemoteAccess>(std::move(options), environment->environment_error_);
}

void RemoteAccess::Check(py::handle given) {
  wds::RemoteOptions options;
  ApplyAll(options, given);
}

wds::RemoteOpener RemoteAccess::Session() const {
  std::lock_guard<std::mutex> lock(Fds().mu);
  // Empty in the process that has not opened a remote URL yet, including a
  // forked child, which abandons (leaks) the parent's session.
  if (!session_) {
    session_ = ProcessLocal<wds::RemoteOpener>(std::make_unique<wds::RemoteOpener>(options_));
  }
  return *session_.get();
}

absl::StatusOr<std::unique_ptr<wds::ByteStream>> RemoteAccess::Open(std::string_view url) const {
  if (!environment_error_.ok()) {
    return RemoteStatus(
        absl::InvalidArgumentError(wds::Cat(url, ": ", wds::ToStd(environment_error_.message()))),
        url);
  }
  absl::StatusOr<std::unique_ptr<wds::ByteStream>> stream = Session().Open(url);
  if (!stream.ok()) return RemoteStatus(stream.status(), url);
  return std::make_unique<RemoteShard>(*std::move(stream));
}

wds::Opener PythonOpener(std::shared_ptr<const RemoteAccess> remote) {
  if (remote == nullptr) remote = EnvironmentAccess();
  return [remote = std::move(remote)](std::string_view url) { return Open(*remote, url); };
}

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
