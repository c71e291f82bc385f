// IndexedShard: random access to the samples of one uncompressed shard, a
// local file or a remote object read by ranged requests.
//
//   absl::StatusOr<std::unique_ptr<wds::IndexedShard>> shard =
//       wds::IndexedShard::Open("data/train-000003.tar");
//   absl::StatusOr<wds::Sample> s = (*shard)->Read(17);  // its 18th sample
//   auto remote = wds::IndexedShard::Open("s3://b/train-000003.tar", wds::RemoteOpener());
//
// Where each member lies comes from the shard's .idx sidecar when it has one,
// else from a scan of its headers (ShardIndex, shard_index.h), so samples are
// grouped, counted and keyed as a WebDataset pipeline groups them. Reading a
// member is one preadv(2) of its tar header and its data, straight into the
// caller's memory (remotely: one ranged request per sample, see Open); the
// header is checked (its checksum, the size the index
// records, and a short name), so a sidecar left from another version of the
// shard is an error naming the member rather than other bytes. (A version
// whose members have the same sizes and long or non-ASCII names in the same
// places passes the check: rewrite the sidecar with the shard, as
// `wds-shard index` does, and `wds-shard verify` compares them.)
//
// Only uncompressed tars can be read this way: the offsets count bytes of the
// uncompressed tar. A compressed shard is refused when it is opened, naming
// its compression.
//
// Thread safety: after Open, every method may run concurrently (the reads are
// positioned reads of one descriptor).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "wds/base/sample.h"
#include "wds/io/remote.h"
#include "wds/tar/shard_index.h"

namespace wds {

class IndexedShard {
 public:
  // Open opens `url`, a local path or file: URL, and indexes it: from its
  // sidecar IndexPath(url) when that exists and names its members (DALI
  // v1.2), else by a header scan. Errors name the URL (or the sidecar):
  // NotFound and the like for a file that cannot be opened; InvalidArgument
  // for a URL that is not local and for a file that is not an uncompressed
  // tar (a compressed one names its compression); DataLoss for a sidecar
  // whose members lie past the end of the file, and the scan's errors.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<IndexedShard>> Open(std::string_view url);
  // Open reads `fd`, the file `url` names opened by the caller (which then
  // reports a failed open its own way), and owns it, also on error.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<IndexedShard>> Open(std::string_view url,
                                                                          int fd);
  // Open reads a remote `url` (http(s), s3, gs) through `remote`, by ranged
  // requests; any other URL as Open(url). Opening costs a request for the
  // object's first block (an uncompressed tar, as above) and one for its
  // index: "<url>.idx" when the server has one that names the members, else
  // a scan of the whole object (read once); neither goes through the
  // opener's cache of copies, which ranges never fill or read. With a cache
  // directory, the index is kept there for this version of the shard
  // (RemoteOpener::Keep), and a later Open, in any process of the machine,
  // reads it from there instead (the first block's request still tells the
  // version); a kept index that does not fit the first block, or a
  // member's header read later, is dropped from there (a sidecar rewritten
  // while the shard stays the same is otherwise not noticed). The first answer's version
  // (ObjectVersion: ETag, Last-Modified, size) is the one every later read
  // asks for and checks, so a shard
  // replaced meanwhile is an Aborted error naming it rather than another
  // version's bytes (except what ObjectVersion says passes unseen; the
  // header checks below stand then). Members past the object's end are
  // DataLoss naming the sidecar. Errors: also those of
  // RemoteOpener::ReadRange and of the scan, InvalidArgument for a
  // compressed shard.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<IndexedShard>> Open(
      std::string_view url, const RemoteOpener& remote);
  ~IndexedShard();

  IndexedShard(const IndexedShard&) = delete;
  IndexedShard& operator=(const IndexedShard&) = delete;

  const std::string& url() const { return url_; }
  const ShardIndex& index() const { return index_; }
  int64_t size() const { return static_cast<int64_t>(index_.samples.size()); }

  // Key is sample i's key: its first member's name without "." and the
  // field. `i` must lie in [0, size()).
  std::string_view Key(int64_t i) const;

  // ReadMember copies member j of sample i (index().samples[i].members[j])
  // into `dest`, which holds its size in bytes. Errors name the URL and the
  // member: OutOfRange for i or j outside the index; DataLoss when the
  // member's tar header does not match the index (its checksum, size or
  // name) or the file ends early; the errno of a failed read.
  [[nodiscard]] absl::Status ReadMember(int64_t i, size_t j, char* dest) const;

  // ReadMembers copies every member of sample i, in index order, into
  // `dests` (one per member, each holding its size): a remote shard's
  // sample in one request (members apart by more than kMaxGap in several).
  // Errors as ReadMember's, and InvalidArgument for a count of `dests`
  // other than the sample's members.
  [[nodiscard]] absl::Status ReadMembers(int64_t i, absl::Span<char* const> dests) const;
  // kMaxGap is the most bytes between two members of a sample (padding,
  // metadata members) that one remote request reads and drops.
  static constexpr int64_t kMaxGap = int64_t{1} << 20;

  // remote is true for a shard read by ranged requests.
  bool remote() const { return remote_.has_value(); }
  // version is the version a remote shard's reads ask for (empty when local,
  // or when its server sent no validator).
  const ObjectVersion& version() const { return version_; }

  // ForOpener returns a copy of this remote shard (its index and version;
  // no request) that reads through `remote`: for a process forked after
  // this one was opened, whose connections are not its own.
  // REQUIRES: remote().
  std::unique_ptr<IndexedShard> ForOpener(const RemoteOpener& remote) const;

  // Read returns sample i as a WebDataset pipeline yields it: __key__ and
  // __url__, then its fields (IndexMember::field in lower case, tar order).
  // Errors as ReadMember's.
  [[nodiscard]] absl::StatusOr<Sample> Read(int64_t i) const;

 private:
  IndexedShard(std::string url, int fd);

  // ReadRemote reads members [first, last] of sample i (index order), into
  // `dests`, with one request.
  absl::Status ReadRemote(int64_t i, size_t first, size_t last, char* const* dests) const;
  // CheckHeader says whether `header` is member j of sample i's.
  absl::Status CheckHeader(const unsigned char* header, const IndexMember& m) const;
  absl::Status CheckIndices(int64_t i, size_t j) const;

  std::string url_;
  int fd_;  // -1 when remote
  ShardIndex index_;
  std::optional<RemoteOpener> remote_;
  ObjectVersion version_;
};

}  // namespace wds
