// Shard lists: per-epoch permutation, node/worker splits and the URL streams
// of one worker.
#include "wds/shard_list.h"

#include <cassert>
#include <utility>

#include "shards/shard_streams.h"
#include "wds/internal/strings.h"
#include "wds/random.h"

namespace wds {
namespace {

// Slice is Python's v[start::step]; empty for a negative start or a step
// below 1 (a context that is no placement: ShardsForWorker reports it).
std::vector<std::string> Slice(std::vector<std::string> v, int start, int step) {
  std::vector<std::string> out;
  if (start < 0 || step < 1) return out;
  for (size_t i = start; i < v.size(); i += step) out.push_back(std::move(v[i]));
  return out;
}

std::string Count(size_t n, std::string_view noun) { return Cat(n, " ", noun, n == 1 ? "" : "s"); }

// NoShardsMessage names only the levels that were split, so that the counts
// it gives are the ones that left this worker empty.
std::string NoShardsMessage(size_t shards, const ShardListOptions& options,
                            const WorkerContext& ctx) {
  std::string feeders, who;
  if (options.nodesplitter) {
    feeders = Count(ctx.world_size, "rank");
    who = Cat("rank ", ctx.rank);
  }
  if (options.workersplitter) {
    feeders += Cat(feeders.empty() ? "" : " x ", Count(ctx.num_workers, "worker"));
    who += Cat(who.empty() ? "" : " ", "worker ", ctx.worker);
  }
  const std::string head =
      feeders.empty() ? Cat(Count(shards, "shard"), ": rank ", ctx.rank, " worker ", ctx.worker)
                      : Cat(Count(shards, "shard"), " cannot feed ", feeders, ": ", who);
  return Cat(head, " has none (allow_empty permits this)");
}

class ListUrlStream : public UrlStream {
 public:
  explicit ListUrlStream(absl::StatusOr<std::vector<std::string>> urls) : urls_(std::move(urls)) {}

  absl::StatusOr<std::optional<std::string>> Next() override {
    if (!urls_.ok()) return urls_.status();
    if (next_ == urls_->size()) return std::nullopt;
    return std::move((*urls_)[next_++]);
  }

 private:
  absl::StatusOr<std::vector<std::string>> urls_;
  size_t next_ = 0;
};

class ResampledUrlStream : public UrlStream {
 public:
  ResampledUrlStream(std::vector<std::string> urls, std::optional<int64_t> count, uint64_t seed)
      : urls_(std::move(urls)), count_(count), rng_(seed) {}

  absl::StatusOr<std::optional<std::string>> Next() override {
    if (count_ && drawn_ >= *count_) return std::nullopt;
    if (urls_.empty()) {
      return absl::FailedPreconditionError("cannot resample shards from an empty shard list");
    }
    ++drawn_;
    return urls_[rng_.Below(urls_.size())];
  }

 private:
  std::vector<std::string> urls_;
  std::optional<int64_t> count_;
  Rng rng_;
  int64_t drawn_ = 0;
};

}  // namespace

std::vector<std::string> SplitByNode(std::vector<std::string> shards, const WorkerContext& ctx) {
  return Slice(std::move(shards), ctx.rank, ctx.world_size);
}

std::vector<std::string> SplitByWorker(std::vector<std::string> shards, const WorkerContext& ctx) {
  return Slice(std::move(shards), ctx.worker, ctx.num_workers);
}

std::vector<std::string> PermuteShards(std::vector<std::string> shards, uint64_t seed,
                                       int64_t epoch, int64_t pass) {
  Rng rng(DeriveSeed(seed, {kShardPermutation, uint64_t(epoch), uint64_t(pass)}));
  for (size_t i = shards.size(); i > 1; --i) {
    std::swap(shards[i - 1], shards[rng.Below(i)]);
  }
  return shards;
}

absl::StatusOr<std::vector<std::string>> ShardsForWorker(const std::vector<std::string>& shards,
                                                         const ShardListOptions& options,
                                                         const WorkerContext& ctx) {
  if (ctx.world_size < 1 || ctx.rank < 0 || ctx.rank >= ctx.world_size || ctx.num_workers < 1 ||
      ctx.worker < 0 || ctx.worker >= ctx.num_workers) {
    return absl::InvalidArgumentError(Cat("shard list: rank ", ctx.rank, " of ", ctx.world_size,
                                          ", worker ", ctx.worker, " of ", ctx.num_workers,
                                          " is not a placement (need 0 <= rank < world_size "
                                          "and 0 <= worker < num_workers)"));
  }
  std::vector<std::string> list =
      options.shuffle ? PermuteShards(shards, ctx.seed, ctx.epoch, ctx.pass) : shards;
  if (options.nodesplitter) list = options.nodesplitter(std::move(list), ctx);
  if (options.workersplitter) list = options.workersplitter(std::move(list), ctx);
  if (list.empty() && !options.allow_empty) {
    return absl::FailedPreconditionError(NoShardsMessage(shards.size(), options, ctx));
  }
  return list;
}

std::unique_ptr<UrlStream> ShardStream(const std::vector<std::string>& shards,
                                       const ShardListOptions& options, const WorkerContext& ctx) {
  return std::make_unique<ListUrlStream>(ShardsForWorker(shards, options, ctx));
}

std::unique_ptr<UrlStream> ResampledShardStream(std::vector<std::string> shards,
                                                std::optional<int64_t> count,
                                                const WorkerContext& ctx) {
  const uint64_t seed = DeriveSeed(ctx.seed, {kResample, uint64_t(ctx.epoch), uint64_t(ctx.pass),
                                              uint64_t(ctx.rank), uint64_t(ctx.worker)});
  return std::make_unique<ResampledUrlStream>(std::move(shards), count, seed);
}

}  // namespace wds
