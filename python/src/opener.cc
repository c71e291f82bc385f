#include "opener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <list>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "python_schemes.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/io/open_ahead.h"
#include "wds/io/remote.h"

namespace wdspy {
namespace {

// The registry of descriptors opened here. Heap-allocated and never freed:
// it must outlive every stream, including those destroyed at exit. Its lock
// also guards the RemoteAccess sessions, the list of RemoteAccesses and the
// schemes Python opens (the fork handlers hold it).
struct Registry {
  std::mutex mu;
  std::set<int> fds;
  // The schemes gopen_schemes hands to Python (SetPythonSchemes), and
  // whether its "__default__" opens the schemes it does not list.
  std::set<std::string, std::less<>> python_schemes;
  bool python_default = false;
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
// interrupt check (wds/base/interrupt.h), which is also asked after EINTR.
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

// Environment is the environment's options and what is malformed there, not
// reading the variables in `skip` (fields the caller sets itself).
std::pair<wds::RemoteOptions, absl::Status> Environment(const std::vector<std::string>& skip) {
  absl::StatusOr<wds::RemoteOptions> options = wds::RemoteOptions::ParseFromEnvironment(skip);
  if (!options.ok()) return {wds::RemoteOptions::FromEnvironment(), options.status()};
  return {*std::move(options), absl::OkStatus()};
}

// Field appends a length-prefixed value to a key, so that no two sequences
// of values give the same key.
template <typename T>
void Field(std::string& key, const T& value) {
  const std::string text = wds::Cat(value);
  key.append(wds::Cat(text.size(), ":", text));
}

void Field(std::string& key, const std::optional<wds::AwsCredentials>& c) {
  Field(key, c.has_value() ? 1 : 0);
  if (!c.has_value()) return;
  Field(key, c->access_key_id);
  Field(key, c->secret_access_key);
  Field(key, c->session_token);
}

// SessionKey is every field of the options (keep it so when RemoteOptions
// grows: two accesses share a session only when they would read alike) and
// the environment's error.
std::string SessionKey(const wds::RemoteOptions& o, const absl::Status& environment_error) {
  std::string key;
  Field(key, o.connect_timeout.count());
  Field(key, o.stall_timeout.count());
  Field(key, o.low_speed_limit);
  Field(key, o.low_speed_time.count());
  Field(key, o.read_ahead);
  Field(key, o.skip_by_request);
  Field(key, o.open_ahead);
  Field(key, o.max_attempts);
  Field(key, o.max_retry_time.count());
  Field(key, o.backoff_base.count());
  Field(key, o.backoff_cap.count());
  Field(key, o.ca_file);
  Field(key, int{o.verify_tls});
  Field(key, static_cast<int>(o.http_version));
  Field(key, o.user_agent);
  Field(key, o.http_headers.size());
  for (const auto& [name, value] : o.http_headers) {
    Field(key, name);
    Field(key, value);
  }
  Field(key, o.upload_part_size);
  Field(key, o.upload_concurrency);
  Field(key, o.s3_endpoint);
  Field(key, o.s3_region);
  Field(key, static_cast<int>(o.s3_addressing));
  Field(key, o.aws_credentials);
  Field(key, o.aws_profile);
  Field(key, o.aws_credentials_file);
  Field(key, o.gcs_endpoint);
  Field(key, o.gcs_token);
  Field(key, o.gcs_hmac);
  Field(key, o.cache_dir);
  Field(key, o.cache_size);
  Field(key, int{o.cache_revalidate});
  Field(key, int{o.cache_pipes});
  Field(key, environment_error.ToString());
  return key;
}

// The process's RemoteAccesses, most recently used first, so that every
// reader with the same options (each epoch's chain, each gopen, each shard
// grouped in Python, each count) shares one session: one connection from
// shard to shard. Heap-allocated and never freed, like the descriptor
// registry whose lock guards it. A forked child keeps the entries; their
// sessions are the parent's, which the child abandons (RemoteAccess::Session).
constexpr size_t kKeptAccesses = 8;
using AccessList = std::list<std::pair<std::string, std::shared_ptr<const RemoteAccess>>>;

AccessList& Accesses() {
  static auto* accesses = new AccessList;
  return *accesses;
}

// SharedAccess returns the process's RemoteAccess for these options, made at
// their first use. Beyond kKeptAccesses sets of options (credentials that
// changed, say) the least recently used is dropped here; readers that hold
// it keep it.
std::shared_ptr<const RemoteAccess> SharedAccess(wds::RemoteOptions options,
                                                 absl::Status environment_error) {
  std::string key = SessionKey(options, environment_error);
  std::shared_ptr<const RemoteAccess> dropped;  // released after the lock
  std::lock_guard<std::mutex> lock(Fds().mu);
  AccessList& list = Accesses();
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (it->first == key) {
      list.splice(list.begin(), list, it);
      return list.front().second;
    }
  }
  list.emplace_front(std::move(key), std::make_shared<RemoteAccess>(std::move(options),
                                                                    std::move(environment_error)));
  if (list.size() > kKeptAccesses) {
    dropped = std::move(list.back().second);
    list.pop_back();
  }
  return list.front().second;
}

// Variables of the environment that a given option replaces.
const char* VariableOf(const std::string& option) {
  if (option == "cache_dir") return "WDS_CACHE";
  if (option == "cache_size") return "WDS_CACHE_SIZE";
  if (option == "cache_pipes") return "WDS_CACHE_PIPES";
  if (option == "ca_file") return "CURL_CA_BUNDLE";
  if (option == "verify_tls") return "WDS_TLS_VERIFY";
  if (option == "open_ahead") return "WDS_OPEN_AHEAD";
  return nullptr;
}

// SchemeOf is the scheme gopen_schemes is asked about for `url`, in lower
// case: "pipe" for pipe:, the text before "://" when it is a scheme (a
// letter, then letters, digits, "+", "-" or "."), else "" (a local path,
// file:).
std::string SchemeOf(std::string_view url) {
  if (wds::StartsWith(url, "pipe:")) return "pipe";
  const size_t end = url.find("://");
  if (end == std::string_view::npos || end == 0 ||
      !std::isalpha(static_cast<unsigned char>(url[0]))) {
    return "";
  }
  const std::string_view scheme = url.substr(0, end);
  const bool valid = std::all_of(scheme.begin(), scheme.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
  });
  return valid ? wds::AsciiLower(scheme) : "";
}

// PythonScheme is the scheme of `url` when Python opens it (see
// python_schemes.h): one gopen_schemes hands to Python, or any scheme the
// native reader does not read while its "__default__" was replaced.
std::optional<std::string> PythonScheme(std::string_view url) {
  std::string scheme = SchemeOf(url);
  if (scheme.empty() || scheme == "file") return std::nullopt;
  std::lock_guard<std::mutex> lock(Fds().mu);
  if (Fds().python_schemes.count(scheme) != 0) return scheme;
  const bool native = scheme == "pipe" || wds::IsRemoteUrl(url);
  if (!native && Fds().python_default) return scheme;
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<wds::ByteStream>> Open(const RemoteAccess& remote,
                                                      std::string_view listed) {
  if (listed == "-") return wds::OpenUrl(listed);
  // A shard opened ahead of its turn, on a thread of its own, is left to its
  // turn when opening it calls Python: that thread would wait for the GIL,
  // which its reader may hold while it waits for that thread.
  if (wds::OpeningAhead() && (PythonRewrites() || PythonScheme(listed).has_value())) {
    return wds::OpenInTurn(listed);
  }
  absl::StatusOr<std::string> rewritten = RewrittenUrl(listed);
  if (!rewritten.ok()) return rewritten.status();
  const std::string_view url = *rewritten;
  if (std::optional<std::string> scheme = PythonScheme(url)) {
    return OpenThroughPython(std::string(listed), *rewritten, *scheme);
  }
  if (url == "-") return wds::OpenUrl(url);
  if (wds::StartsWith(url, "pipe:")) return remote.OpenCommand(url);
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
                 "\" (local paths, file:, pipe:, -, http:, https:, s3: and gs: are read natively; "
                 "register a reader of others in webdataset_cpp.gopen_schemes)"));
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
  } else if (name == "cache_pipes") {
    o.cache_pipes = value.cast<bool>();
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
  } else if (name == "upload_part_size") {
    o.upload_part_size = AtLeast(value, "upload_part_size", int64_t{5} << 20);
    // As RemoteUpload::Create checks it, but when the options are made.
    if (o.upload_part_size > (int64_t{5} << 30)) {
      throw py::value_error(wds::Cat("RemoteOptions: upload_part_size must be at most ",
                                     int64_t{5} << 30, " (S3's limit), got ", o.upload_part_size));
    }
  } else if (name == "upload_concurrency") {
    const int64_t concurrency = AtLeast(value, "upload_concurrency", 1);
    if (concurrency > 64) {
      throw py::value_error(
          wds::Cat("RemoteOptions: upload_concurrency must be at most 64, got ", concurrency));
    }
    o.upload_concurrency = static_cast<int>(concurrency);
  } else if (name == "open_ahead") {
    const int64_t ahead = AtLeast(value, "open_ahead", 0);
    if (ahead > wds::RemoteOptions::kMaxOpenAhead) {
      throw py::value_error(wds::Cat("RemoteOptions: open_ahead must be at most ",
                                     wds::RemoteOptions::kMaxOpenAhead, ", got ", ahead));
    }
    o.open_ahead = static_cast<int>(ahead);
  } else if (name == "http_headers") {
    o.http_headers.clear();
    for (py::handle pair : value) {
      auto [header, text] = pair.cast<std::pair<std::string, std::string>>();
      o.http_headers.emplace_back(std::move(header), std::move(text));
    }
    absl::Status valid = wds::CheckHttpHeaders(o.http_headers, "RemoteOptions");
    if (!valid.ok()) throw py::value_error(std::string(wds::ToStd(valid.message())));
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
  if (given.is_none()) {
    auto [options, error] = Environment({});
    return SharedAccess(std::move(options), std::move(error));
  }
  // A malformed variable whose field is given does not matter.
  std::vector<std::string> skip;
  for (auto [name, value] : given.cast<py::dict>()) {
    const char* variable = VariableOf(name.cast<std::string>());
    if (variable != nullptr && !value.is_none()) skip.push_back(variable);
  }
  auto [options, error] = Environment(skip);
  ApplyAll(options, given);
  return SharedAccess(std::move(options), std::move(error));
}

void RemoteAccess::Check(py::handle given) {
  wds::RemoteOptions options;
  ApplyAll(options, given);
}

std::shared_ptr<const RemoteAccess> RemoteAccess::Uncached() const {
  wds::RemoteOptions options = options_;
  options.cache_dir.clear();
  options.cache_size = 0;
  return SharedAccess(std::move(options), environment_error_);
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

absl::StatusOr<wds::RemoteOpener> RemoteAccess::Reader(std::string_view url) const {
  if (!environment_error_.ok()) {
    return RemoteStatus(
        absl::InvalidArgumentError(wds::Cat(url, ": ", wds::ToStd(environment_error_.message()))),
        url);
  }
  return Session();
}

absl::StatusOr<std::unique_ptr<wds::ByteStream>> RemoteAccess::Open(std::string_view url) const {
  absl::StatusOr<wds::RemoteOpener> reader = Reader(url);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<std::unique_ptr<wds::ByteStream>> stream = reader->Open(url);
  if (!stream.ok()) return RemoteStatus(stream.status(), url);
  return std::make_unique<RemoteShard>(*std::move(stream));
}

absl::StatusOr<std::unique_ptr<wds::ByteStream>> RemoteAccess::OpenCommand(
    std::string_view url) const {
  if (options_.cache_dir.empty() || !options_.cache_pipes) return wds::OpenUrl(url);
  return Session().Open(url);
}

wds::Opener PythonOpener(std::shared_ptr<const RemoteAccess> remote) {
  if (remote == nullptr) {
    auto [options, error] = Environment({});
    remote = SharedAccess(std::move(options), std::move(error));
  }
  return [remote = std::move(remote)](std::string_view url) { return Open(*remote, url); };
}

void SetPythonSchemes(const std::vector<std::string>& schemes, bool python_default) {
  std::lock_guard<std::mutex> lock(Fds().mu);
  Fds().python_schemes.clear();
  for (const std::string& s : schemes) Fds().python_schemes.insert(wds::AsciiLower(s));
  Fds().python_default = python_default;
}

void BeforeFork() {
  // First: a shard being opened ahead may need the registry's lock, and
  // holds libcurl's and OpenSSL's while it waits for its server.
  wds::WaitForAheadOpens();
  Fds().mu.lock();
}

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
