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
#include <vector>

#include "absl/status/statusor.h"
#include "wds/stage.h"

namespace wds {

[[nodiscard]] absl::StatusOr<std::vector<std::string>> ExpandBraces(std::string_view pattern);
// ExpandUrls splits `urls` on "::" and brace-expands each part, in order.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ExpandUrls(std::string_view urls);

// ShardSplitter picks this rank's (or worker's) shards from a list.
using ShardSplitter =
    std::function<std::vector<std::string>(std::vector<std::string> shards, const WorkerContext&)>;

// SplitByNode keeps shards[rank::world_size]; SplitByWorker keeps
// shards[worker::num_workers] (Python slice notation).
std::vector<std::string> SplitByNode(std::vector<std::string> shards, const WorkerContext& ctx);
std::vector<std::string> SplitByWorker(std::vector<std::string> shards, const WorkerContext& ctx);

struct ShardListOptions {
  // shuffle permutes the list by DeriveSeed(seed, {kShardPermutation, epoch,
  // pass}) before any split: the same permutation on every rank.
  bool shuffle = false;
  ShardSplitter nodesplitter = SplitByNode;
  ShardSplitter workersplitter = SplitByWorker;
  bool allow_empty = false;
};

// ShardsForWorker is the list one worker reads in ctx's epoch and pass:
// permuted (if shuffle), then split by node, then by worker. A worker left
// with nothing is a FailedPrecondition error naming the counts ("8 shards
// cannot feed 4 ranks x 4 workers: rank 1 worker 3 has none") unless
// allow_empty.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ShardsForWorker(
    const std::vector<std::string>& shards, const ShardListOptions& options,
    const WorkerContext& ctx);

}  // namespace wds
