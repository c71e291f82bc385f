// The shard URLs one worker reads, as a stream: the source of the pipeline's
// tar reader.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wds/base/stage.h"
#include "wds/shards/shard_list.h"

namespace wds {

// UrlStream yields the shards, or parts of shards, to read.
using UrlStream = Stage<ShardSlice>;

// PermuteShards returns `shards` shuffled by DeriveSeed(seed, {kShardPermutation,
// epoch, pass}); the same on every rank.
std::vector<std::string> PermuteShards(std::vector<std::string> shards, uint64_t seed,
                                       int64_t epoch, int64_t pass);

// ShardStream yields ShardsForWorker(...) in order (or its error).
std::unique_ptr<UrlStream> ShardStream(const std::vector<std::string>& shards,
                                       const ShardListOptions& options, const WorkerContext& ctx);
// SlicesStream yields `slices` in order (or their error).
std::unique_ptr<UrlStream> SlicesStream(absl::StatusOr<std::vector<ShardSlice>> slices);
// ResampledShardStream draws shards with replacement, seeded by (seed,
// epoch, pass, rank, worker): `count` of them, or forever when nullopt;
// uniformly, or shard i with probability weights[i] / sum(weights).
// REQUIRES: weights empty, or CheckShardWeights(weights, shards.size()) ok.
std::unique_ptr<UrlStream> ResampledShardStream(std::vector<std::string> shards,
                                                std::optional<int64_t> count,
                                                const WorkerContext& ctx,
                                                const std::vector<double>& weights = {});

}  // namespace wds
