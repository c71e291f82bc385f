// Sample counts of a shard list, looked up once per process.
//
// A sample-granular split needs every shard's sample count, an epoch plan the
// counts of the shards it plans, and a restored stream the counts of the
// shards it re-reads. Without a cache each iteration of a Python dataset (a
// new native pipeline, with a new catalog) and each plan_epoch call would
// read the dataset index, the .idx sidecars or whole shards again. Counts
// are kept per process instead, per (shard list, dataset index path):
//
//   std::shared_ptr<DatasetCounts> counts = CountsFor(urls, index_path);  // GIL held
//   absl::StatusOr<std::vector<int64_t>> n = counts->Counts(urls, opener);  // GIL released
//   options.dataset_index = counts->Known();   // a catalog that reads no count
//
// Counts are data, so a forked child (a DataLoader worker) keeps them: the
// fork handlers hold the cache's lock across fork(), so that no other
// thread's half-done update is copied. A shard rewritten with another count
// while the process runs is not noticed (neither is one under a stale
// sidecar); `wds-shard verify` checks sidecars against their shards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/byte_stream.h"
#include "wds/shard_index.h"

namespace wdspy {

// DatasetCounts answers for one (shard list, dataset index): a shard's count
// comes from the dataset index, else from ReadShardCount; each shard is
// looked up once. Thread-safe; no lock is held while a count is read.
class DatasetCounts {
 public:
  // `index` is the loaded dataset index (null without one); `known` says
  // whether every count is known without reading a shard.
  DatasetCounts(std::shared_ptr<const wds::DatasetIndex> index, bool known);

  // known is true when every shard of the list is listed in the dataset
  // index or is a local file with a sidecar, as the process first saw it:
  // what WebDataset's split=None chooses samples by. SimpleShardList asks it
  // when it is made and carries the answer to the DataLoader workers it
  // pickles to, so that one run splits one way however sidecars change.
  bool known() const { return known_; }
  const std::shared_ptr<const wds::DatasetIndex>& index() const { return index_; }

  // Count returns the samples of `url`, a shard not counted yet read through
  // `opener` (the reader's, so that remote options and cache apply); errors
  // name the shard.
  [[nodiscard]] absl::StatusOr<int64_t> Count(const std::string& url, const wds::Opener& opener);
  // Counts returns the samples of each URL, in order.
  [[nodiscard]] absl::StatusOr<std::vector<int64_t>> Counts(const std::vector<std::string>& urls,
                                                            const wds::Opener& opener);
  // Known is every count known so far as a dataset index, for a pipeline's
  // catalog (which then reads no count it lists). The same object until a
  // count is added.
  std::shared_ptr<const wds::DatasetIndex> Known();

 private:
  const std::shared_ptr<const wds::DatasetIndex> index_;
  const bool known_;
  // Guarded by the cache's lock (see dataset_counts.cc): the counts read
  // so far, and Known()'s index of them (null when a count was added since).
  std::map<std::string, int64_t> counted_;
  std::shared_ptr<const wds::DatasetIndex> known_index_;
};

// ReadShardCount reads one shard's count: the first line of a local shard's
// .idx sidecar, else wds::IndexOf through `opener` (a remote shard's
// "<url>.idx" when the server has one, else a header scan of the shard; for a
// pipe: or remote shard, a read of all of it).
[[nodiscard]] absl::StatusOr<int64_t> ReadShardCount(const std::string& url,
                                                     const wds::Opener& opener);

// CountsFor returns this process's DatasetCounts of `urls` and the dataset
// index at `index_path` (empty: none), made at its first use, when the index
// file is read (its errors raise ValueError naming the file).
// REQUIRES: the GIL is held.
std::shared_ptr<DatasetCounts> CountsFor(const std::vector<std::string>& urls,
                                         const std::string& index_path);

// Fork handlers: the cache's lock is held across fork() (see above).
void CountsBeforeFork();
void CountsAfterFork();

}  // namespace wdspy
