// ShardCounts: the sample counts of shard lists, each read once for as long
// as the cache lives.
//
// A sample-granular split needs every shard's count, an epoch plan the counts
// of the shards it plans, a restored stream those of the shards it re-reads.
// A program that builds many pipelines over one list (the Python bindings:
// one per iteration and per epoch plan) keeps one ShardCounts, so that the
// dataset index, the .idx sidecars or the shards themselves are read once:
//
//   wds::ShardCounts cache;  // its owner sets its lifetime (the bindings: the process)
//   absl::StatusOr<std::shared_ptr<wds::ListCounts>> list = cache.For(urls, index_url);
//   absl::StatusOr<std::vector<int64_t>> n = (*list)->Counts(urls, opener);
//   options.dataset_index = (*list)->Known();  // a pipeline that reads no count it lists
//
// Counts are data: a forked child keeps them (LockForFork holds the one lock
// across fork(), so that no other thread's half-done update is copied). A
// shard rewritten with another count while the cache lives is not noticed
// (neither is one under a stale sidecar); `wds-shard verify` checks sidecars.
//
// Thread safety: every member function may run concurrently; no lock is held
// while a file or shard is read.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/io/byte_stream.h"
#include "wds/tar/shard_index.h"

namespace wds {

// kCountThreads is how many remote shards a count of a shard list reads at
// once (ListCounts::Counts, the pipeline's sample-granular split): each read
// is a round trip or two, for a sidecar, or a whole shard without one.
inline constexpr int kCountThreads = 16;

// ReadShardCount reads one shard's count: the first line of a local shard's
// .idx sidecar, else IndexOf through `opener` (a remote shard's "<url>.idx"
// when the server has one, else a header scan of the shard; for a pipe: or
// remote shard, a read of all of it). Errors name the shard.
[[nodiscard]] absl::StatusOr<int64_t> ReadShardCount(const std::string& url, const Opener& opener);

// CountsKnownWithoutReading is true when every shard of `urls` is listed in
// `index` (may be null) or is a local file with a .idx sidecar: their counts
// can be had without reading a shard, so a split may choose samples.
[[nodiscard]] bool CountsKnownWithoutReading(const std::vector<std::string>& urls,
                                             const DatasetIndex* index);

// UnlistedShards is how many of `urls` `index` does not list, and the first
// of them: an index of other URLs (another scheme or host, a stale copy) is
// otherwise only noticed by shards being read to count them.
struct UnlistedShards {
  size_t count = 0;
  std::string first;
};
[[nodiscard]] UnlistedShards FindUnlisted(const std::vector<std::string>& urls,
                                          const DatasetIndex& index);

// ListCounts is the counts of one (shard list, dataset index): a shard's
// count comes from the dataset index, else from ReadShardCount, once.
class ListCounts {
 public:
  // known is true when every shard of the list is listed in the dataset
  // index or is a local file with a sidecar, as the cache first saw it: a
  // split can choose samples by it without reading a shard. Fixed at
  // creation, so that one run splits one way however sidecars change.
  bool known() const { return known_; }
  // index is the loaded dataset index (null without one).
  const std::shared_ptr<const DatasetIndex>& index() const { return index_; }
  // IndexDigest fingerprints what the index says of `urls`: each listed
  // URL with its count, in any order (0 without an index). A process that
  // reads an index again (a spawned worker) compares it with the one its
  // dataset was planned by, since an index at a URL may have been replaced
  // meanwhile; entries of other shards do not matter.
  uint64_t IndexDigest(const std::vector<std::string>& urls) const;

  // Count returns the samples of `url`, reading a shard not counted yet
  // through `opener` (the pipeline's, so that remote options and caches
  // apply).
  [[nodiscard]] absl::StatusOr<int64_t> Count(const std::string& url, const Opener& opener);
  // Counts returns the samples of each URL, in order; the first error in
  // list order. Remote shards not counted yet are read kCountThreads (above)
  // at a time (a thousand sidecars behind a 20 ms round trip take 20 s one by
  // one); a failure stops the reads not begun. An interrupt check of the
  // caller's (wds/base/interrupt.h) stops them all.
  [[nodiscard]] absl::StatusOr<std::vector<int64_t>> Counts(const std::vector<std::string>& urls,
                                                            const Opener& opener);
  // Known is every count known so far as a dataset index (for
  // WebDatasetOptions::dataset_index); the same object until a count is added.
  std::shared_ptr<const DatasetIndex> Known();

  ListCounts(std::shared_ptr<std::mutex> mu, std::shared_ptr<const DatasetIndex> index, bool known);

 private:
  // mu_ is the cache's lock; it guards counted_ and known_index_.
  const std::shared_ptr<std::mutex> mu_;
  const std::shared_ptr<const DatasetIndex> index_;
  const bool known_;
  // listed_ is the index's counts by URL (views into index_), for IndexDigest.
  std::unordered_map<std::string_view, int64_t> listed_;
  std::unordered_map<std::string, int64_t> counted_;
  // known_index_ is Known()'s answer, null when a count was added since.
  std::shared_ptr<const DatasetIndex> known_index_;
};

// ShardCounts keeps one ListCounts per (shard list, dataset index URL),
// made at its first use. Entries live as long as the cache: a program
// iterates few shard lists, and each entry holds only counts.
class ShardCounts {
 public:
  ShardCounts();
  ShardCounts(const ShardCounts&) = delete;
  ShardCounts& operator=(const ShardCounts&) = delete;

  // For returns the counts of `urls` with the dataset index at `index_url`
  // (empty: none), which is read when the entry is made, through
  // `index_opener` when it is not a local file (DatasetIndex::Load(url,
  // opener); its error is returned as Load gives it). The two-argument form
  // passes a null opener, which Load reads with the environment's options.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<ListCounts>> For(
      const std::vector<std::string>& urls, const std::string& index_url,
      const Opener& index_opener);
  [[nodiscard]] absl::StatusOr<std::shared_ptr<ListCounts>> For(
      const std::vector<std::string>& urls, const std::string& index_url);

  // LockForFork takes the cache's lock (in a pthread_atfork prepare
  // handler); UnlockAfterFork releases it, in the parent and the child.
  void LockForFork() { mu_->lock(); }
  void UnlockAfterFork() { mu_->unlock(); }

 private:
  const std::shared_ptr<std::mutex> mu_;
  // lists_ is keyed by the index URL and a 128-bit digest of the URLs in
  // any order (the counts of a list do not depend on its order).
  std::unordered_map<std::string, std::shared_ptr<ListCounts>> lists_;
};

}  // namespace wds
