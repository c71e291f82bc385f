// IndexedShard: random access to the samples of one local, uncompressed shard.
//
//   absl::StatusOr<std::unique_ptr<wds::IndexedShard>> shard =
//       wds::IndexedShard::Open("data/train-000003.tar");
//   absl::StatusOr<wds::Sample> s = (*shard)->Read(17);  // its 18th sample
//
// Where each member lies comes from the shard's .idx sidecar when it has one,
// else from a scan of its headers (ShardIndex, shard_index.h), so samples are
// grouped, counted and keyed as a WebDataset pipeline groups them. Reading a
// member is one preadv(2) of its tar header and its data, straight into the
// caller's memory; the header is checked (its checksum, the size the index
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
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/base/sample.h"
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

  // Read returns sample i as a WebDataset pipeline yields it: __key__ and
  // __url__, then its fields (IndexMember::field in lower case, tar order).
  // Errors as ReadMember's.
  [[nodiscard]] absl::StatusOr<Sample> Read(int64_t i) const;

 private:
  IndexedShard(std::string url, int fd);

  std::string url_;
  int fd_;
  ShardIndex index_;
};

}  // namespace wds
