// ShardCache: complete local copies of remote objects, filled while they
// stream to their first reader, shared by processes through flock(2) and
// bounded by least-recently-used eviction. The protocol is documented in
// wds/remote.h ("Cache").
//
//   ShardCache cache("/scratch/cache", 100 << 30);
//   absl::StatusOr<std::unique_ptr<ByteStream>> s = cache.Open(url, [&] { return OpenRemote(); });
//
// Files, for H = hex SHA-256 of the URL: H (a complete copy), H.meta (its
// URL, ETag and size), H.part (a download in progress, locked by its writer).
//
// Thread safety: thread-safe (it holds no state but its directory).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "io/remote_stream.h"
#include "wds/byte_stream.h"

namespace wds {

// Streams it returns keep the cache alive (it must be owned by a shared_ptr).
class ShardCache : public std::enable_shared_from_this<ShardCache> {
 public:
  using OpenRemote = std::function<absl::StatusOr<std::unique_ptr<RemoteStream>>()>;
  // Revalidate returns the object's current ETag (and size); null means
  // cached copies are trusted.
  using Revalidate = std::function<absl::StatusOr<ObjectInfo>()>;

  // size_limit: bytes of complete files kept, 0 for no limit.
  ShardCache(std::string dir, int64_t size_limit);

  // Open returns the cached copy of `url` if there is one, else the stream of
  // `open_remote` written into the cache as it is read (or, while another
  // reader is downloading the same URL, not written). Errors: the remote
  // stream's, or the cache directory's when it cannot be created.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<ByteStream>> Open(const std::string& url,
                                                                 const OpenRemote& open_remote,
                                                                 const Revalidate& revalidate);

  // Evict removes `.part` files that no process is writing, then, while
  // complete files exceed the limit, the least recently used one not in use
  // (never `keep`, a file name in the directory).
  void Evict(const std::string& keep);

  // PathFor is the complete copy's path for `url`.
  std::string PathFor(const std::string& url) const;

 private:
  std::string dir_;
  int64_t size_limit_;
};

}  // namespace wds
