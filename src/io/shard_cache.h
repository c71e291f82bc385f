// ShardCache: complete local copies of remote objects, filled while they
// stream to their first reader, shared by processes through flock(2) and
// bounded by least-recently-used eviction. The protocol is documented in
// wds/io/remote.h ("Cache").
//
//   auto cache = std::make_shared<ShardCache>("/scratch/cache", int64_t{100} << 30);
//   absl::StatusOr<std::unique_ptr<ByteStream>> s =
//       cache->Open(url, 0, [&](int64_t offset) { return OpenRemote(offset); }, nullptr);
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
#include "wds/io/byte_stream.h"

namespace wds {

// Streams it returns keep the cache alive (it must be owned by a shared_ptr).
class ShardCache : public std::enable_shared_from_this<ShardCache> {
 public:
  // OpenRemote opens the remote object from a byte offset.
  using OpenRemote = std::function<absl::StatusOr<std::unique_ptr<RemoteStream>>(int64_t offset)>;
  // Revalidate returns the object's current ETag (and size); null means
  // cached copies are trusted.
  using Revalidate = std::function<absl::StatusOr<ObjectInfo>()>;

  // size_limit: bytes of complete files kept, 0 for no limit.
  ShardCache(std::string dir, int64_t size_limit);

  // Open returns the cached copy of `url` from `offset` on if there is one,
  // else the remote stream, which from offset 0 is written into the cache as
  // it is read (unless another reader is downloading the same URL), and from
  // a later offset is not (a cache file holds an object from its start).
  // A stream that fills the cache does not Skip (its caller reads, and the
  // bytes go to the cache file too). The first Open of a directory in a
  // process first cleans it up (Evict), so that a process that only ever
  // hits still removes stale downloads and keeps the size limit. Errors:
  // the remote stream's, the cache directory's when it cannot be created,
  // OutOfRange for an offset at or past the end of a cached copy.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<ByteStream>> Open(const std::string& url,
                                                                 int64_t offset,
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
