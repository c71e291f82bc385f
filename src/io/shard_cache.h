// ShardCache: complete local copies of remote objects (and, when asked, of
// pipe: commands' output), filled while they stream to their first reader,
// shared by processes through flock(2) and bounded by least-recently-used
// eviction. The protocol is documented in docs/REMOTE.md ("Cache").
//
//   auto cache = std::make_shared<ShardCache>("/scratch/cache", int64_t{100} << 30);
//   absl::StatusOr<std::unique_ptr<ByteStream>> s =
//       cache->Open(url, 0, [&](int64_t offset) { return OpenRemote(offset); }, nullptr);
//
// Files, for H = hex SHA-256 of the URL: H (a complete copy), H.meta (its
// URL, ETag and size), H.part (a download in progress, locked by its writer);
// and .size (the ledger: the complete files' total and the last scan's time,
// whose flock orders downloads' renames and scans). What Keep stores (a
// remote shard's index) is a complete file too, named by the hash of its key.
//
// Thread safety: thread-safe (it holds no state but its directory).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "io/remote_stream.h"
#include "wds/io/byte_stream.h"

namespace wds {

// Streams it returns keep the cache alive (it must be owned by a shared_ptr).
class ShardCache : public std::enable_shared_from_this<ShardCache> {
 public:
  // OpenRemote opens the remote object from a byte offset.
  using OpenRemote = std::function<absl::StatusOr<std::unique_ptr<RemoteStream>>(int64_t offset)>;
  // OpenStream opens any stream (a command's output) from a byte offset.
  using OpenStream = std::function<absl::StatusOr<std::unique_ptr<ByteStream>>(int64_t offset)>;
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
  // process first scans it (Evict) when its ledger is missing, unreadable,
  // cannot be locked, is over this process's limit, or was last scanned
  // kCleanupInterval (an hour) ago, so
  // that processes that only hit still remove stale downloads and keep the
  // size limit, without a scan per process. Errors:
  // the remote stream's, the cache directory's when it cannot be created,
  // OutOfRange for an offset at or past the end of a cached copy.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<ByteStream>> Open(const std::string& url,
                                                                 int64_t offset,
                                                                 const OpenRemote& open_remote,
                                                                 const Revalidate& revalidate);

  // OpenCommand is Open for the output of a pipe: command `url`, which has no
  // length or ETag to check a copy by: the copy filled from offset 0 is kept
  // only when its reader read to the end and Finish() found that the command
  // exited 0 (Finish first reads what the reader left, a tar's trailing
  // padding, into the copy), and never when the output was empty. A copy is never revalidated: the
  // command is not run again while it is cached. `open` runs the command and moves its stream to
  // the offset.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<ByteStream>> OpenCommand(const std::string& url,
                                                                        int64_t offset,
                                                                        const OpenStream& open);

  // Evict scans the directory, under the ledger's lock: it removes `.part`
  // files that no process is writing and `.meta` files left without their
  // copy; when complete files exceed the limit, it removes the least
  // recently used ones not in use (never `keep`, a file name in the
  // directory) down to 90% of the limit; and it writes the ledger: the total
  // left and the time. Costs a stat of every file: 0.15-0.21 s for 50,000
  // shards on a local disk (bench/cache_bench.cc).
  void Evict(const std::string& keep);

  // Install puts a complete download in place as one step under the
  // ledger's lock (microseconds): it writes `meta` to the copy's .meta,
  // renames `part` to `path`, releases the download's lock on `part_fd` (-1:
  // none), and counts its `bytes` in the ledger, less a copy it replaced.
  // False when the .meta or the rename fails (nothing is then put in place).
  // It scans (as Evict) when the ledger then passes the limit or is
  // unreadable or new, or, with a limit, when it cannot be locked.
  [[nodiscard]] bool Install(int part_fd, const std::string& part, const std::string& path,
                             const std::string& meta, int64_t bytes);

  // PathFor is the complete copy's path for `url`.
  std::string PathFor(const std::string& url) const;

  // Keep stores `bytes` under `key`, a name no URL has (say, "index of
  // <url>"), for `version`, one line that says which version of its source
  // the bytes are of. The file (PathFor(key), its first line the version)
  // is put in place as a download is (Install): counted, and evicted least
  // recently used with the copies. Best effort: when the file cannot be
  // written (a full disk), or another process is writing it, nothing is kept.
  void Keep(const std::string& key, std::string_view version, std::string_view bytes);
  // Kept returns what Keep stored under `key` for `version`, and marks it
  // most recently used; nullopt when nothing is kept, or only for another
  // version, or it cannot be read.
  std::optional<std::string> Kept(const std::string& key, std::string_view version);
  // Forget removes what Keep stored under `key` (a kept index that proved
  // wrong), so that the next reader asks the server again.
  void Forget(const std::string& key);

 private:
  // Source is a stream to copy into the cache and how to tell that the copy
  // is complete: `complete` gives, at the end of the data, the .meta of a
  // complete copy of `written` bytes, or nullopt; with `after_finish` the
  // copy is complete only once the stream's Finish() succeeds too.
  struct Source {
    std::unique_ptr<ByteStream> stream;
    std::function<std::optional<std::string>(int64_t written)> complete;
    bool after_finish = false;
  };
  using OpenSource = std::function<absl::StatusOr<Source>(int64_t offset)>;
  // OpenThrough is Open's and OpenCommand's work: a complete copy from
  // `offset` (checked by `revalidate` when it is set), else the source,
  // copied into the cache when read from offset 0.
  absl::StatusOr<std::unique_ptr<ByteStream>> OpenThrough(const std::string& url, int64_t offset,
                                                          const OpenSource& open,
                                                          const Revalidate& revalidate);

  // ScanOnFirstUse scans the directory at the first use of it in this
  // process when the ledger says to (see Open).
  void ScanOnFirstUse();
  // Scan is Evict's work; `ledger` is the ledger's locked descriptor, or -1
  // (nothing written).
  void Scan(int ledger, const std::string& keep);

  std::string dir_;
  int64_t size_limit_;
};

}  // namespace wds
