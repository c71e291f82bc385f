// Opening a URL as a byte stream: the one place the library touches files and
// processes, so tests can substitute in-memory streams.
//
//   path/to/shard.tar, file:path   a local file
//   -                              standard input
//   pipe:CMD                       CMD's standard output, run by /bin/sh -c
//   http(s)://, s3://, gs://       a remote object, streamed with libcurl and
//                                  resumed after faults (wds/io/remote.h)
//
// For pipe: the command's exit status is checked when the stream is finished:
// a non-zero status is an error naming the command, the status and the tail
// of its stderr, even when the data read looked complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace wds {

// ByteStream is a forward-only source of bytes. Not thread-safe.
class ByteStream {
 public:
  // Destroying an unfinished stream releases it without checks (a pipe's
  // command is terminated and reaped).
  virtual ~ByteStream() = default;
  // Read fills up to `size` bytes of `buffer`; returns 0 only at end of data.
  [[nodiscard]] virtual absl::StatusOr<size_t> Read(void* buffer, size_t size) = 0;
  // Skip moves past up to `size` bytes without reading them and returns how
  // many it moved past; the caller reads whatever it did not (0: the stream
  // cannot skip now). Local files seek, never past their end (fewer than
  // `size` only there); remote streams drop what they buffered and move a
  // long distance by a new ranged request (wds/io/remote.h); the default cannot
  // skip.
  [[nodiscard]] virtual absl::StatusOr<int64_t> Skip(int64_t size) {
    (void)size;
    return 0;
  }
  // Finish ends the stream after its data was consumed and reports what the
  // data alone cannot show (a pipe command's exit status). REQUIRES: called at
  // most once.
  [[nodiscard]] virtual absl::Status Finish() = 0;
  // url is the URL as given to the opener.
  virtual const std::string& url() const = 0;
};

// Opener opens a URL. OpenUrl is the default.
using Opener = std::function<absl::StatusOr<std::unique_ptr<ByteStream>>(std::string_view url)>;

// OpenUrl opens a local path, "file:", "-", "pipe:" or a remote URL (with
// RemoteOptions::FromEnvironment(), and no connection reuse between calls:
// MakeOpener in wds/io/remote.h gives both); remote URLs, and pipe: commands
// with WDS_CACHE_PIPES=1, go through the environment's cache (WDS_CACHE). Errors: NotFound /
// PermissionDenied (naming the path) for files, those of wds/io/remote.h for
// remote URLs, Unimplemented for other schemes.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ByteStream>> OpenUrl(std::string_view url);

// MemoryStream serves `data` (tests, and data already in memory). If
// `finish_status` is not ok, Finish() returns it.
std::unique_ptr<ByteStream> MemoryStream(std::string url, std::string data,
                                         absl::Status finish_status = absl::OkStatus());

}  // namespace wds
