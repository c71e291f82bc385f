// ShardCache: the cache directory's protocol (see shard_cache.h).
#include "io/shard_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "io/file_stream.h"
#include "io/sigv4.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/io/atomic_file.h"
#include "wds/internal/io/directories.h"

namespace wds {
namespace {

constexpr std::string_view kPartSuffix = ".part";
constexpr std::string_view kMetaSuffix = ".meta";

int OpenFd(const std::string& path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

bool Lock(int fd, int operation) {
  while (flock(fd, operation) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

// Linked is true when `fd` is still the file at `path` (not unlinked or
// replaced since it was opened): a lock on it then guards that path.
bool Linked(int fd, const std::string& path) {
  struct stat a, b;
  return fstat(fd, &a) == 0 && stat(path.c_str(), &b) == 0 && a.st_ino == b.st_ino &&
         a.st_dev == b.st_dev;
}

bool IsHexName(std::string_view name) {
  return name.size() == 64 && std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// IsMetaTemp is true for "<hex>.meta.<pid>.tmp", a .meta being written
// (WriteFileAtomically's temporary file).
bool IsMetaTemp(std::string_view name) {
  constexpr std::string_view kTmp = ".tmp";
  if (!EndsWith(name, kTmp) || name.size() < 64 || !IsHexName(name.substr(0, 64))) return false;
  name.remove_prefix(64);
  if (!StartsWith(name, Cat(kMetaSuffix, "."))) return false;
  const std::string_view pid =
      name.substr(kMetaSuffix.size() + 1, name.size() - kMetaSuffix.size() - 1 - kTmp.size());
  return !pid.empty() &&
         std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// ReadMetaEtag returns the "etag" line of a .meta file ("" if absent).
std::string ReadMetaEtag(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (StartsWith(line, "etag ")) return line.substr(5);
  }
  return "";
}

// WriteFully writes all of `data` to `fd`; false on an error.
bool WriteFully(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t w = write(fd, data.data(), data.size());
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data.remove_prefix(static_cast<size_t>(w));
  }
  return true;
}

// PreadFully fills `out` from `fd`'s start; false on an error or an early end.
bool PreadFully(int fd, std::string& out) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// CloseUnlocked releases the flock `fd` may hold, then closes it. Closing
// alone is not enough: a lock belongs to the open file, which fork(2) shares
// with a child (a DataLoader starting its workers, say), so a child forked
// while a lock was held would keep it for as long as it lives: a download's
// exclusive lock, which becomes the complete copy's, would then block its
// readers, and the ledger's every download.
void CloseUnlocked(int fd) {
  (void)flock(fd, LOCK_UN);
  close(fd);
}

// TryRemoveUnused unlinks `path` (and `also`) when no one holds a lock on it.
bool TryRemoveUnused(const std::string& path, const std::string& also) {
  const int fd = OpenFd(path, O_RDONLY);
  if (fd < 0) return false;
  bool removed = false;
  if (flock(fd, LOCK_EX | LOCK_NB) == 0 && Linked(fd, path)) {
    removed = unlink(path.c_str()) == 0;
    if (removed && !also.empty()) unlink(also.c_str());
  }
  CloseUnlocked(fd);
  return removed;
}

// The ledger, kLedgerName in the cache directory, holds
// "bytes <n>\nscanned <t>\n": the complete files' total, and when a scan last
// ended (seconds since the epoch; 0: never). Its exclusive flock orders the
// directory's changes: a download's .meta, its rename into place and its
// count are one step under it, and a scan holds it throughout, so the total a scan writes
// is exact and a download adds to it only after.
constexpr const char* kLedgerName = ".size";
// kCleanupInterval: a process's first open scans a directory that no scan
// has visited for this long, for the .part files of killed downloads.
constexpr int64_t kCleanupInterval = 3600;
// A scan over the limit evicts down to limit - limit / kLowWaterFraction.
constexpr int64_t kLowWaterFraction = 10;

struct Ledger {
  int64_t bytes = 0;
  int64_t scanned = 0;
};

std::optional<Ledger> ParseLedger(std::string_view text) {
  // Field `prefix` of the line that starts at `text`, which moves past it.
  auto field = [&text](std::string_view prefix, int64_t* value) {
    const size_t end = text.find('\n');
    if (end == std::string_view::npos || !StartsWith(text, prefix)) return false;
    const std::string_view digits = text.substr(prefix.size(), end - prefix.size());
    text.remove_prefix(end + 1);
    return absl::SimpleAtoi(ToAbsl(digits), value);
  };
  Ledger ledger;
  if (!field("bytes ", &ledger.bytes) || !field("scanned ", &ledger.scanned) || !text.empty() ||
      ledger.bytes < 0 || ledger.scanned < 0) {
    return std::nullopt;
  }
  return ledger;
}

// kLedgerWait bounds the wait for the ledger's lock, far beyond any scan, so
// that a lock left held delays downloads instead of stopping them: a process
// killed while holding it keeps it locked for as long as a child it forked
// lives (the lock belongs to the open file, which the child shares).
constexpr auto kLedgerWait = std::chrono::seconds(60);

// LedgerLock is `dir`'s ledger (made empty when missing), open and locked
// exclusively, after waiting for a scan or a download's count in progress.
// Invalid when it cannot be: a directory not made yet, a ledger this user may
// not write (then every download with a limit scans, as if there were none),
// or a lock not had within kLedgerWait or before the thread's interrupt
// check (wds/base/interrupt.h) said to stop.
class LedgerLock {
 public:
  explicit LedgerLock(const std::string& dir)
      : fd_(OpenFd(Cat(dir, "/", kLedgerName), O_RDWR | O_CREAT, 0666)) {
    if (!fd_.valid()) return;
    const auto deadline = std::chrono::steady_clock::now() + kLedgerWait;
    auto pause = std::chrono::microseconds(100);
    while (flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
      if ((errno != EWOULDBLOCK && errno != EINTR) ||
          std::chrono::steady_clock::now() >= deadline || !CheckInterrupt().ok()) {
        fd_.Reset();
        return;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
    }
  }
  ~LedgerLock() {
    if (fd_.valid()) (void)flock(fd_.get(), LOCK_UN);  // see CloseUnlocked
  }
  LedgerLock(const LedgerLock&) = delete;
  LedgerLock& operator=(const LedgerLock&) = delete;

  // fd is the locked descriptor, -1 when invalid.
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
};

// ReadLedger reads the ledger locked as `fd`; nullopt when it is empty (just
// made) or unreadable (then a scan writes it anew).
std::optional<Ledger> ReadLedger(int fd) {
  char text[128];
  ssize_t n;
  do {
    n = pread(fd, text, sizeof(text), 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return std::nullopt;
  return ParseLedger(std::string_view(text, static_cast<size_t>(n)));
}

// WriteLedger writes the ledger locked as `fd`. A failure (a full disk)
// leaves it stale or unreadable, which the next scan, or the first download
// that reads it, mends.
void WriteLedger(int fd, const Ledger& ledger) {
  const std::string text = Cat("bytes ", ledger.bytes, "\nscanned ", ledger.scanned, "\n");
  ssize_t n;
  do {
    n = pwrite(fd, text.data(), text.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(text.size())) (void)ftruncate(fd, static_cast<off_t>(text.size()));
}

// AddBytes is a + b, at least 0 and at most the largest int64_t.
// REQUIRES: a >= 0 (so only a sum past the top can overflow).
int64_t AddBytes(int64_t a, int64_t b) {
  if (b > std::numeric_limits<int64_t>::max() - a) return std::numeric_limits<int64_t>::max();
  return std::max<int64_t>(0, a + b);
}

// Complete gives, at the end of a source's data, the .meta of a complete
// copy of `written` bytes, or nullopt.
using Complete = std::function<std::optional<std::string>(int64_t written)>;

// CachingStream passes a stream through while writing it to a locked .part
// file, renamed into place when the copy is complete: at the end of the data
// when `complete` says so (a remote object's announced length arrived), and
// with `after_finish` only once Finish() succeeded too (a command that exited
// 0). Any failure to write, and a stream dropped before its copy is complete,
// drop the .part and leave the stream uncached.
class CachingStream : public ByteStream {
 public:
  CachingStream(std::unique_ptr<ByteStream> source, Complete complete, bool after_finish, int fd,
                std::string part, std::string path, std::shared_ptr<ShardCache> cache)
      : source_(std::move(source)),
        complete_(std::move(complete)),
        after_finish_(after_finish),
        fd_(fd),
        part_(std::move(part)),
        path_(std::move(path)),
        cache_(std::move(cache)) {}
  ~CachingStream() override { Abandon(); }

  // Skip is not overridden: the caller reads what it skips, which the cache
  // file needs anyway; a later open of the URL reads it locally.

  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    if (fd_ >= 0) (void)Inherited();  // a forked child reads uncached: the copy is its parent's
    absl::StatusOr<size_t> n = source_->Read(buffer, size);
    if (!n.ok()) {
      Abandon();
      return n;
    }
    if (*n == 0) {
      ended_ = ended_ || size > 0;
      if (!after_finish_) Commit();
    } else if (fd_ >= 0) {
      Write(static_cast<const char*>(buffer), *n);
    }
    return n;
  }

  absl::Status Finish() override {
    if (fd_ >= 0) (void)Inherited();
    if (!after_finish_) return source_->Finish();
    // What the reader left goes into the copy before the source's Finish
    // would drop it.
    std::vector<char> sink;
    while (fd_ >= 0 && !ended_) {
      sink.resize(size_t{1} << 16);
      absl::StatusOr<size_t> n = Read(sink.data(), sink.size());
      if (!n.ok()) return n.status();
    }
    absl::Status finished = source_->Finish();
    finished.ok() ? Commit() : Abandon();
    return finished;
  }

  const std::string& url() const override { return source_->url(); }

 private:
  void Write(const char* data, size_t size) {
    if (!WriteFully(fd_, std::string_view(data, size))) {
      Abandon();
      return;
    }
    written_ += static_cast<int64_t>(size);
  }

  void Commit() {
    if (fd_ < 0 || Inherited()) return;
    // Only a complete copy is kept; it is on disk before its name says it
    // is complete.
    const std::optional<std::string> meta = complete_(written_);
    if (!meta.has_value() || fdatasync(fd_) != 0 ||
        !cache_->Install(fd_, part_, path_, *meta, written_)) {
      Abandon();
      return;
    }
    close(fd_);  // unlocked by Install
    fd_ = -1;
  }

  void Abandon() {
    if (fd_ < 0 || Inherited()) return;
    // Still locked by us, so the name is still ours to remove.
    unlink(part_.c_str());
    CloseUnlocked(fd_);
    fd_ = -1;
  }

  // Inherited is true in a child forked after the stream was made (a C++
  // program that forks and lets the child destroy what it inherited): the
  // download and its lock are the parent's, so the child only closes its
  // copy of the descriptor.
  bool Inherited() {
    if (getpid() == owner_) return false;
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return true;
  }

  std::unique_ptr<ByteStream> source_;
  const Complete complete_;
  const bool after_finish_;
  bool ended_ = false;  // the source's data ended
  int fd_;
  std::string part_;
  std::string path_;
  std::shared_ptr<ShardCache> cache_;
  int64_t written_ = 0;
  const pid_t owner_ = getpid();
};

// FirstOpenInProcess is true once per process for each cache directory. It
// is process-wide on purpose, like libcurl's global init: the directory is
// shared, and one clean-up per process is what keeps the cost of opening
// several openers (OpenUrl makes one per call) at a single scan.
bool FirstOpenInProcess(const std::string& dir) {
  static std::mutex mu;
  static auto* seen = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  return seen->insert(dir).second;
}

// OpenAtOffset returns a complete copy, open and locked as `fd`, positioned
// at `offset`; the stream unlocks it before closing it (see CloseUnlocked).
absl::StatusOr<std::unique_ptr<ByteStream>> OpenAtOffset(const std::string& url, UniqueFd fd,
                                                         int64_t size, int64_t offset) {
  if (offset > 0) {
    if (offset >= size) {
      (void)flock(fd.get(), LOCK_UN);  // see CloseUnlocked
      return absl::OutOfRangeError(Cat(url, ": offset ", offset, " is not before the end of its ",
                                       size, " bytes (cached copy)"));
    }
    if (lseek(fd.get(), static_cast<off_t>(offset), SEEK_SET) < 0) {
      const int error = errno;
      (void)flock(fd.get(), LOCK_UN);
      return absl::ErrnoToStatus(error, Cat(url, ": its cached copy: lseek failed"));
    }
  }
  return MakeFileStream(url, std::move(fd), size, "its cached copy: ", /*locked=*/true);
}

}  // namespace

ShardCache::ShardCache(std::string dir, int64_t size_limit)
    : dir_(std::move(dir)), size_limit_(size_limit) {}

std::string ShardCache::PathFor(const std::string& url) const {
  return Cat(dir_, "/", sigv4::Sha256Hex(url));
}

void ShardCache::ScanOnFirstUse() {
  if (!FirstOpenInProcess(dir_)) return;
  // A scan when the ledger says the directory is over this process's
  // limit, or was not scanned for a while (stale downloads), or cannot say:
  // not one per process, which a node's hundreds of workers starting
  // together over tens of thousands of shards could not afford.
  LedgerLock ledger(dir_);
  const std::optional<Ledger> known =
      ledger.fd() >= 0 ? ReadLedger(ledger.fd()) : std::optional<Ledger>();
  if (!known.has_value() || time(nullptr) - known->scanned >= kCleanupInterval ||
      (size_limit_ > 0 && known->bytes > size_limit_)) {
    Scan(ledger.fd(), "");
  }
}

absl::StatusOr<std::unique_ptr<ByteStream>> ShardCache::Open(const std::string& url, int64_t offset,
                                                             const OpenRemote& open_remote,
                                                             const Revalidate& revalidate) {
  return OpenThrough(
      url, offset,
      [&](int64_t at) -> absl::StatusOr<Source> {
        absl::StatusOr<std::unique_ptr<RemoteStream>> remote = open_remote(at);
        if (!remote.ok()) return remote.status();
        const RemoteStream* object = remote->get();
        // Complete: the object's announced length arrived whole.
        return Source{*std::move(remote), [object](int64_t written) -> std::optional<std::string> {
                        if (object->size() < 0 || written != object->size()) return std::nullopt;
                        return Cat("url ", object->url(), "\netag ", object->etag(), "\nsize ",
                                   written, "\n");
                      }};
      },
      revalidate);
}

absl::StatusOr<std::unique_ptr<ByteStream>> ShardCache::OpenCommand(const std::string& url,
                                                                    int64_t offset,
                                                                    const OpenStream& open) {
  return OpenThrough(
      url, offset,
      [&](int64_t at) -> absl::StatusOr<Source> {
        absl::StatusOr<std::unique_ptr<ByteStream>> stream = open(at);
        if (!stream.ok()) return stream.status();
        // Complete: read to its end, and the command exited 0 (after_finish).
        // An empty output is never kept: a command that printed nothing
        // and exited 0 (curl -s on an error) would stay failed until evicted.
        return Source{*std::move(stream),
                      [url](int64_t written) -> std::optional<std::string> {
                        if (written == 0) return std::nullopt;
                        return Cat("url ", url, "\netag \nsize ", written, "\n");
                      },
                      /*after_finish=*/true};
      },
      nullptr);
}

absl::StatusOr<std::unique_ptr<ByteStream>> ShardCache::OpenThrough(const std::string& url,
                                                                    int64_t offset,
                                                                    const OpenSource& open,
                                                                    const Revalidate& revalidate) {
  // The source alone, uncached.
  auto uncached = [&](int64_t at) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
    absl::StatusOr<Source> source = open(at);
    if (!source.ok()) return source.status();
    return std::move(source->stream);
  };
  ScanOnFirstUse();
  const std::string path = PathFor(url);
  const std::string part = Cat(path, kPartSuffix);
  std::optional<ObjectInfo> current;
  // A few rounds at most: each ends in a hit, a download, or a stream
  // around a download someone else is making.
  for (int round = 0; round < 3; ++round) {
    const int fd = OpenFd(path, O_RDONLY);
    if (fd >= 0) {
      struct stat st;
      if (Lock(fd, LOCK_SH) && Linked(fd, path) && fstat(fd, &st) == 0) {
        bool fresh = true;
        if (revalidate) {
          if (!current.has_value()) {
            absl::StatusOr<ObjectInfo> info = revalidate();
            if (!info.ok()) {
              CloseUnlocked(fd);
              return info.status();
            }
            current = *info;
          }
          const std::string etag = ReadMetaEtag(Cat(path, kMetaSuffix));
          fresh = !etag.empty() && etag == current->etag &&
                  (current->size < 0 || current->size == st.st_size);
        }
        if (fresh) {
          futimens(fd, nullptr);  // most recently used
          return OpenAtOffset(url, UniqueFd(fd), st.st_size, offset);
        }
      }
      CloseUnlocked(fd);
    }
    if (offset > 0) return uncached(offset);
    // An error shows as the open below failing, naming the file.
    (void)MakeDirectories(dir_);
    const int part_fd = OpenFd(part, O_RDWR | O_CREAT, 0644);
    if (part_fd < 0) {
      return absl::ErrnoToStatus(errno, Cat(url, ": cannot create ", part, " in the cache"));
    }
    if (flock(part_fd, LOCK_EX | LOCK_NB) != 0 || !Linked(part_fd, part)) {
      // Someone else is downloading it: read it from the source too.
      CloseUnlocked(part_fd);
      return uncached(0);
    }
    // Completed by another process between our look and our lock?
    if (!revalidate && access(path.c_str(), F_OK) == 0) {
      unlink(part.c_str());
      CloseUnlocked(part_fd);
      continue;
    }
    if (ftruncate(part_fd, 0) != 0) {
      unlink(part.c_str());
      CloseUnlocked(part_fd);
      return absl::ErrnoToStatus(errno, Cat(url, ": cannot truncate ", part));
    }
    absl::StatusOr<Source> source = open(0);
    if (!source.ok()) {
      unlink(part.c_str());
      CloseUnlocked(part_fd);
      return source.status();
    }
    return std::make_unique<CachingStream>(std::move(source->stream), std::move(source->complete),
                                           source->after_finish, part_fd, part, path,
                                           shared_from_this());
  }
  // Raced three times: read it from the source.
  return uncached(0);
}

bool ShardCache::Install(int part_fd, const std::string& part, const std::string& path,
                         const std::string& meta, int64_t bytes) {
  LedgerLock ledger(dir_);
  // The .meta and the data go in place together (a revalidating reader
  // between the two renames would see the old data with the new ETag).
  const std::string meta_path = Cat(path, kMetaSuffix);
  if (!WriteFileAtomically(meta_path, meta).ok()) return false;
  // A copy replaced (an object that changed, revalidated) leaves the count.
  struct stat old;
  const int64_t replaced = stat(path.c_str(), &old) == 0 ? old.st_size : 0;
  if (rename(part.c_str(), path.c_str()) != 0) {
    unlink(meta_path.c_str());
    return false;
  }
  // Readers of the copy need not wait for the count (or a scan).
  if (part_fd >= 0) (void)flock(part_fd, LOCK_UN);
  const std::string name(BaseName(path));
  std::optional<Ledger> known =
      ledger.fd() >= 0 ? ReadLedger(ledger.fd()) : std::optional<Ledger>();
  if (!known.has_value()) {
    // A new or unreadable ledger is written anew by a scan; without one (not
    // writable here), a scan only keeps the limit.
    if (ledger.fd() >= 0 || size_limit_ > 0) Scan(ledger.fd(), name);
    return true;
  }
  known->bytes = AddBytes(known->bytes, bytes - replaced);
  if (size_limit_ > 0 && known->bytes > size_limit_) {
    Scan(ledger.fd(), name);
  } else {
    WriteLedger(ledger.fd(), *known);
  }
  return true;
}

void ShardCache::Keep(const std::string& key, std::string_view version, std::string_view bytes) {
  if (version.find('\n') != std::string_view::npos) return;
  ScanOnFirstUse();
  if (!MakeDirectories(dir_).ok()) return;
  const std::string path = PathFor(key);
  const std::string part = Cat(path, kPartSuffix);
  const int fd = OpenFd(part, O_RDWR | O_CREAT, 0644);
  if (fd < 0) return;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 || !Linked(fd, part)) {
    CloseUnlocked(fd);  // another process is writing it
    return;
  }
  const std::string head = Cat(version, "\n");
  const int64_t size = static_cast<int64_t>(head.size() + bytes.size());
  if (ftruncate(fd, 0) != 0 || !WriteFully(fd, head) || !WriteFully(fd, bytes) ||
      fdatasync(fd) != 0 ||
      !Install(fd, part, path, Cat("url ", key, "\netag ", version, "\nsize ", size, "\n"), size)) {
    unlink(part.c_str());
    CloseUnlocked(fd);
    return;
  }
  close(fd);  // unlocked by Install
}

std::optional<std::string> ShardCache::Kept(const std::string& key, std::string_view version) {
  ScanOnFirstUse();
  const std::string path = PathFor(key);
  const int fd = OpenFd(path, O_RDONLY);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> kept;
  struct stat st;
  if (Lock(fd, LOCK_SH) && Linked(fd, path) && fstat(fd, &st) == 0) {
    std::string text(static_cast<size_t>(st.st_size), '\0');
    const size_t eol = PreadFully(fd, text) ? text.find('\n') : std::string::npos;
    if (eol != std::string::npos && std::string_view(text).substr(0, eol) == version) {
      text.erase(0, eol + 1);
      kept = std::move(text);
      futimens(fd, nullptr);  // most recently used
    }
  }
  CloseUnlocked(fd);
  return kept;
}

void ShardCache::Forget(const std::string& key) {
  const std::string path = PathFor(key);
  LedgerLock ledger(dir_);
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || unlink(path.c_str()) != 0) return;
  unlink(Cat(path, kMetaSuffix).c_str());
  std::optional<Ledger> known =
      ledger.fd() >= 0 ? ReadLedger(ledger.fd()) : std::optional<Ledger>();
  if (!known.has_value()) return;  // the next scan writes it anew
  known->bytes = AddBytes(known->bytes, -static_cast<int64_t>(st.st_size));
  WriteLedger(ledger.fd(), *known);
}

void ShardCache::Evict(const std::string& keep) {
  LedgerLock ledger(dir_);
  Scan(ledger.fd(), keep);
}

void ShardCache::Scan(int ledger, const std::string& keep) {
  struct Entry {
    std::string name;
    int64_t size;
    struct timespec mtime;
  };
  std::vector<Entry> complete;
  std::unordered_set<std::string> names;  // of the complete files
  std::vector<std::string> metas;
  int64_t total = 0;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return;
  const int dfd = dirfd(d);
  while (dirent* e = readdir(d)) {
    const std::string_view name = e->d_name;
    if (EndsWith(name, kPartSuffix) &&
        IsHexName(name.substr(0, name.size() - kPartSuffix.size()))) {
      TryRemoveUnused(Cat(dir_, "/", name), "");  // a download no live process is writing
    } else if (EndsWith(name, kMetaSuffix)) {
      metas.emplace_back(name.substr(0, name.size() - kMetaSuffix.size()));
    } else if (IsMetaTemp(name)) {
      // Written in microseconds: one this old is a killed process's. (Its
      // pid cannot tell: the writer may live in another pid namespace.)
      struct stat st;
      if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          time(nullptr) - st.st_mtim.tv_sec >= kCleanupInterval) {
        unlinkat(dfd, e->d_name, 0);
      }
    } else if (IsHexName(name)) {
      struct stat st;
      if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
        complete.push_back({std::string(name), static_cast<int64_t>(st.st_size), st.st_mtim});
        names.insert(complete.back().name);
        total = AddBytes(total, complete.back().size);
      }
    }
  }
  closedir(d);
  // A .meta whose data is gone and whose download is not running is left
  // from a process that died between the two. (The listing says which data
  // are gone; one completed since is looked for again.)
  for (const std::string& base : metas) {
    if (names.count(base) != 0) continue;
    const std::string data = Cat(dir_, "/", base);
    if (access(data.c_str(), F_OK) == 0) continue;
    const std::string part = Cat(data, kPartSuffix);
    if (access(part.c_str(), F_OK) != 0 || TryRemoveUnused(part, "")) {
      unlink(Cat(data, kMetaSuffix).c_str());
    }
  }
  if (size_limit_ > 0 && total > size_limit_) {
    std::sort(complete.begin(), complete.end(), [](const Entry& a, const Entry& b) {
      return std::make_pair(a.mtime.tv_sec, a.mtime.tv_nsec) <
             std::make_pair(b.mtime.tv_sec, b.mtime.tv_nsec);
    });
    // Down to the low-water mark, so that a full cache is scanned once per
    // tenth of it downloaded, not at every download.
    const int64_t low_water = size_limit_ - size_limit_ / kLowWaterFraction;
    for (const Entry& e : complete) {
      if (total <= low_water) break;
      if (e.name == keep) continue;
      const std::string path = Cat(dir_, "/", e.name);
      if (TryRemoveUnused(path, Cat(path, kMetaSuffix))) total -= e.size;
    }
  }
  if (ledger >= 0) WriteLedger(ledger, Ledger{total, static_cast<int64_t>(time(nullptr))});
}

}  // namespace wds
