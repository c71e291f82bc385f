// Opening shards for Python, and what a fork must not inherit.
//
// PythonOpener opens local paths and file: URLs itself (descriptors it keeps
// track of), hands "-" and pipe: URLs to wds::OpenUrl, and reads http://,
// https://, s3:// and gs:// URLs with the core's remote reader
// (wds/io/remote.h: resumed byte-exactly after faults, retried with backoff,
// signed for S3, optionally through the shared cache) as its RemoteAccess
// says. A file that cannot be opened is an errno error (FileNotFoundError
// in Python) naming it; a remote error carries its URL (RemoteStatus in
// errors.h), so that a 404 is FileNotFoundError too. As the reference's
// gopen, it first rewrites a URL by GOPEN_REWRITE when that is set, and
// hands a URL whose scheme webdataset_cpp.gopen_schemes gives to a Python
// handler to that handler (python_schemes.h).
//
// Fork safety (torch DataLoader workers are forked): no native thread exists
// unless a webdataset_cpp.Loader is being iterated, an s3:// upload has parts
// in flight (remote.cc's Upload), a shard source opens a remote shard ahead
// (RemoteOptions::open_ahead: a thread per open, while it waits for the
// server; a fork waits for it, and it never calls Python: an open that would
// is left to the shard's turn), a ShardWriter's shard is uploading (from
// the write that finishes it until the next shard's or close), or a call fans out remote
// reads (counts, wids batches: they release the GIL, and the fork handlers'
// locks are never held across a read), and a forked child must
// not use, destroy or keep what the parent's native objects own. So the
// child closes every shard descriptor this module opened, and every native
// object made before the fork (ProcessLocal) is abandoned in the child, never
// destroyed there: destroying it could kill the parent's pipe: commands or
// join threads that do not exist in the child. A RemoteAccess's libcurl
// session (its connections, TLS sessions and handles) is such an object: a
// child abandons the parent's and makes its own at its first remote open, so
// that it never writes to (or closes with a TLS alert) a connection the
// parent is using.
#pragma once

#include <pybind11/pybind11.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wds/io/byte_stream.h"
#include "wds/io/remote.h"

namespace wdspy {

namespace py = pybind11;

class RemoteAccess;

// PythonOpener opens URLs as described above; `remote` null means the
// RemoteAccess of the environment's options (RemoteAccess::FromPython(None)).
wds::Opener PythonOpener(std::shared_ptr<const RemoteAccess> remote = nullptr);

// SetPythonSchemes says which URL schemes Python opens (python_schemes.h):
// `schemes`, and, when `python_default`, every scheme not read natively.
// webdataset_cpp.gopen.gopen_schemes calls it at each change.
void SetPythonSchemes(const std::vector<std::string>& schemes, bool python_default);

// Fork handlers (pthread_atfork, in shards.cc): before waits for the shards
// being opened ahead (wds::WaitForAheadOpens), then takes the descriptor
// registry's lock so that no other thread holds it across the fork.
void BeforeFork();
void AfterForkInParent();
void AfterForkInChild();

// OpenShardDescriptors counts descriptors this module holds open (tests).
size_t OpenShardDescriptors();

// ProcessLocal owns a native object that belongs to the process that made
// it: in a forked child its destructor abandons the object (leaks it).
template <typename T>
class ProcessLocal {
 public:
  ProcessLocal() = default;
  explicit ProcessLocal(std::unique_ptr<T> object) : object_(std::move(object)), pid_(getpid()) {}
  ~ProcessLocal() { reset(); }
  ProcessLocal(ProcessLocal&&) = default;
  ProcessLocal& operator=(ProcessLocal&& other) {
    reset();
    object_ = std::move(other.object_);
    pid_ = other.pid_;
    return *this;
  }

  T* get() const { return inherited() ? nullptr : object_.get(); }
  T* operator->() const { return get(); }
  explicit operator bool() const { return get() != nullptr; }
  // inherited is true in a forked child of the process that made the object.
  bool inherited() const { return object_ != nullptr && pid_ != getpid(); }

  void reset() {
    if (inherited()) {
      (void)object_.release();
    } else {
      object_.reset();
    }
  }
  // take moves the object out (to destroy it elsewhere, e.g. without the GIL).
  std::unique_ptr<T> take() {
    if (inherited()) {
      (void)object_.release();
      return nullptr;
    }
    return std::move(object_);
  }

 private:
  std::unique_ptr<T> object_;
  pid_t pid_ = 0;
};

// RemoteAccess is how PythonOpener reads remote URLs: its options, and the
// libcurl session (connection pool, shared cache) that every stream opened
// through it in one process shares, made at the first remote open in each
// process (see fork safety above). FromPython gives one RemoteAccess per set
// of options per process, so that each epoch's chain, each gopen, each count
// and each shard grouped in Python reuse one connection. Thread-safe.
class RemoteAccess {
 public:
  // `environment_error` is what RemoteOptions::ParseFromEnvironment found
  // malformed (a WDS_CACHE_SIZE that is not a size): returned by the first
  // remote open, so that local reading does not depend on remote settings.
  RemoteAccess(wds::RemoteOptions options, absl::Status environment_error);

  // FromPython is the process's RemoteAccess (made at first use, the eight
  // most recently used kept) of the environment's options overridden by the
  // entries of `given` (a dict, as webdataset_cpp.RemoteOptions' _native()
  // makes it, or None): cache_dir, cache_size, cache_pipes, ca_file, verify_tls, connect_timeout,
  // stall_timeout, low_speed_limit, low_speed_time, max_attempts,
  // max_retry_time (times in seconds), upload_part_size, upload_concurrency, http_headers. An
  // unknown name is a TypeError, a value out of range a ValueError. REQUIRES: the GIL is held.
  static std::shared_ptr<const RemoteAccess> FromPython(py::handle given);
  // Check raises as FromPython would for `given`, reading no environment.
  static void Check(py::handle given);

  // Open opens a remote URL (IsRemoteUrl) through this process's session;
  // errors are RemoteStatus errors naming the URL.
  absl::StatusOr<std::unique_ptr<wds::ByteStream>> Open(std::string_view url) const;
  // OpenCommand runs a pipe: command, through the cache when these options
  // cache pipe: shards (RemoteOptions::cache_pipes with a cache_dir); errors
  // are the command's, as OpenUrl's.
  absl::StatusOr<std::unique_ptr<wds::ByteStream>> OpenCommand(std::string_view url) const;

  // Reader is this process's session for reading `url` yourself (ranged
  // reads); errors as Open's for a malformed environment.
  absl::StatusOr<wds::RemoteOpener> Reader(std::string_view url) const;

  const wds::RemoteOptions& options() const { return options_; }
  // Uncached is the process's RemoteAccess of these options without a cache
  // (for what may change under a URL, a dataset index). Not with the
  // descriptor registry's lock held.
  std::shared_ptr<const RemoteAccess> Uncached() const;

 private:
  wds::RemoteOpener Session() const;

  wds::RemoteOptions options_;
  absl::Status environment_error_;
  // session_ is guarded by the descriptor registry's lock, which the fork
  // handlers hold across a fork.
  mutable ProcessLocal<wds::RemoteOpener> session_;
};

}  // namespace wdspy
