// ShardCatalog: what a sample-granular reader must know of each shard (its
// sample count, and where each sample starts), gathered once per process and
// shared by the workers of a pipeline.
#pragma once

#include <cstdint>
#include <map>
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

// ShardCatalog answers from, in turn: the dataset index it was given (counts
// only), a shard's sidecar (.idx), a header scan of the shard through
// `opener`. Each shard is looked up once; a count is read from the cheapest
// source, start offsets only for shards that are read from the middle.
// Thread-safe.
class ShardCatalog {
 public:
  ShardCatalog(Opener opener, std::shared_ptr<const DatasetIndex> index);

  // Counts returns the sample count of each URL, in order; errors name the
  // shard. Remote shards not known yet are read kCountThreads at a time
  // (ListCounts::Counts, wds/tar/shard_counts.h).
  [[nodiscard]] absl::StatusOr<std::vector<int64_t>> Counts(const std::vector<std::string>& urls);
  [[nodiscard]] absl::StatusOr<int64_t> Count(const std::string& url);
  // StartOffset is the tar offset at which reading starts with sample
  // `sample` of `url` (SampleStartOffsets). REQUIRES: 0 <= sample.
  [[nodiscard]] absl::StatusOr<int64_t> StartOffset(const std::string& url, int64_t sample);

 private:
  // ReadRemoteIndexes reads the start offsets (and so the counts) of the
  // remote shards of `urls` that are not known yet, concurrently when there
  // are several; the failures by URL (views into `urls`), which Counts
  // reports in list order.
  std::unordered_map<std::string_view, absl::Status> ReadRemoteIndexes(
      const std::vector<std::string>& urls);
  absl::StatusOr<int64_t> CountLocked(const std::string& url);
  absl::StatusOr<const std::vector<int64_t>*> StartsLocked(const std::string& url);

  const Opener opener_;
  std::mutex read_mu_;  // held by ReadRemoteIndexes, before mu_
  std::mutex mu_;
  std::map<std::string, int64_t> counts_;
  std::map<std::string, std::vector<int64_t>> starts_;
};

}  // namespace wds
