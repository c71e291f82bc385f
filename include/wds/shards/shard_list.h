// Shard lists: URL patterns, per-epoch order, and splitting across ranks and
// workers.
//
//   ExpandUrls("a/train-{000..002}.tar::b/extra.tar")
//     -> a/train-000.tar a/train-001.tar a/train-002.tar b/extra.tar
//
// Brace expansion follows the reference package: {a,b} alternatives,
// zero-padded integer ranges {000..123}, steps {0..10..5}, character ranges
// {a..c}, nesting, several groups as a cartesian product (left group varies
// slowest), and \{ \} \, escapes. A brace group with neither a comma nor a
// valid range ("{a}") is literal text. Unbalanced braces are an InvalidArgument
// error that names the position.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/base/stage.h"

namespace wds {

// ExpandUrls splits `urls` on "::" and brace-expands each part, in order.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ExpandUrls(std::string_view urls);

// ShardSplitter picks this rank's (or worker's) shards from a list.
using ShardSplitter =
    std::function<std::vector<std::string>(std::vector<std::string> shards, const WorkerContext&)>;

// SplitByNode keeps shards[rank::world_size]; SplitByWorker keeps
// shards[worker::num_workers] (Python slice notation).
std::vector<std::string> SplitByNode(std::vector<std::string> shards, const WorkerContext& ctx);
std::vector<std::string> SplitByWorker(std::vector<std::string> shards, const WorkerContext& ctx);

// SplitGranularity is what a shard list is shared out in.
enum class SplitGranularity : uint8_t {
  // kShards: whole shards, through nodesplitter and workersplitter (the
  // reference package's way). Ranks and workers get unequal shares when the
  // shards are few or uneven.
  kShards,
  // kSamples: the epoch's (permuted) shard list is one sequence of N samples;
  // rank r reads the contiguous slice [r*N/R, (r+1)*N/R) of R ranks, and
  // worker w of K the slice [w*M/K, (w+1)*M/K) of its rank's M samples, so
  // shares differ by at most one sample and every sample is read exactly
  // once per epoch across ranks. Slices start and end inside shards (read by
  // seeking to the sample's member offset). Needs every shard's sample count.
  // A null nodesplitter (workersplitter) means that level is not split; other
  // splitters are not called.
  kSamples,
};

// ShardSlice is the samples [begin, end) of one shard; end = -1 reads to the
// shard's end without knowing its count (shard-granular reading).
struct ShardSlice {
  std::string url;
  int64_t begin = 0;
  int64_t end = -1;
  bool operator==(const ShardSlice& o) const {
    return url == o.url && begin == o.begin && end == o.end;
  }
};

struct ShardListOptions {
  // shuffle permutes the list by DeriveSeed(seed, {kShardPermutation, epoch,
  // pass}) before any split: the same permutation on every rank.
  bool shuffle = false;
  ShardSplitter nodesplitter = SplitByNode;
  ShardSplitter workersplitter = SplitByWorker;
  bool allow_empty = false;
  SplitGranularity split = SplitGranularity::kShards;
};

// ShardsForWorker is the list one worker reads in ctx's epoch and pass:
// permuted (if shuffle), then split by node, then by worker. A worker left
// with nothing is a FailedPrecondition error naming the counts ("8 shards
// cannot feed 4 ranks x 4 workers: rank 1 worker 3 has none") unless
// allow_empty.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ShardsForWorker(
    const std::vector<std::string>& shards, const ShardListOptions& options,
    const WorkerContext& ctx);

// SlicesForWorker is the sample-granular split (SplitGranularity::kSamples,
// whatever options.split says): the slices one worker reads in ctx's epoch and
// pass, in order. counts[i] is the number of samples of shards[i]. A worker
// left with no sample is a FailedPrecondition error naming the counts unless
// allow_empty; counts of another length, or negative, are InvalidArgument.
[[nodiscard]] absl::StatusOr<std::vector<ShardSlice>> SlicesForWorker(
    const std::vector<std::string>& shards, const std::vector<int64_t>& counts,
    const ShardListOptions& options, const WorkerContext& ctx);

// SampleShare is the part [begin, end) of a sequence of `total` samples that
// ctx's worker reads under the sample-granular split: rank r of R takes
// [r*N/R, (r+1)*N/R) when by_node, and worker w of K the same share of its
// rank's part when by_worker. REQUIRES: ctx is a placement.
std::pair<int64_t, int64_t> SampleShare(int64_t total, const WorkerContext& ctx, bool by_node,
                                        bool by_worker);

// SampleCount is the number of samples `slices` hold. REQUIRES: every end >= 0.
int64_t SampleCount(const std::vector<ShardSlice>& slices);

// CheckShardWeights: InvalidArgument, naming the problem, unless `weights`
// has `shards` finite values >= 0 that are not all 0.
[[nodiscard]] absl::Status CheckShardWeights(const std::vector<double>& weights, size_t shards);

// ShardDraws draws shards with replacement exactly as a resampled WebDataset
// does for `ctx` (seeded by its seed, epoch, pass, rank and worker; shard i
// with probability weights[i] / sum(weights), or uniformly when `weights` is
// empty): for readers of shards other than WebDataset's.
// REQUIRES: !shards.empty(); weights empty or CheckShardWeights(weights,
// shards.size()) ok.
class ShardDraws {
 public:
  ShardDraws(std::vector<std::string> shards, const WorkerContext& ctx,
             const std::vector<double>& weights = {});
  ~ShardDraws();
  ShardDraws(const ShardDraws&) = delete;
  ShardDraws& operator=(const ShardDraws&) = delete;
  // Next is the next shard drawn.
  std::string Next();

 private:
  class Stream;
  std::unique_ptr<Stream> stream_;
};

}  // namespace wds
