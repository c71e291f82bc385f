// Shard lists: per-epoch permutation, node/worker splits and the URL streams
// of one worker.
#include "wds/shards/shard_list.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "shards/shard_streams.h"
#include "wds/base/random.h"
#include "wds/internal/base/strings.h"

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

// NothingMessage names only the levels that were split, so that the counts
// it gives are the ones that left this worker empty; `what` is what was
// split ("8 shards").
std::string NothingMessage(std::string_view what, const ShardListOptions& options,
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
      feeders.empty() ? Cat(what, ": rank ", ctx.rank, " worker ", ctx.worker)
                      : Cat(what, " cannot feed ", feeders, ": ", who);
  return Cat(head, " has none (allow_empty permits this)");
}

class ListUrlStream : public UrlStream {
 public:
  explicit ListUrlStream(absl::StatusOr<std::vector<ShardSlice>> slices)
      : slices_(std::move(slices)) {}

  absl::StatusOr<std::optional<ShardSlice>> Next() override {
    if (!slices_.ok()) return slices_.status();
    if (next_ == slices_->size()) return std::nullopt;
    return std::move((*slices_)[next_++]);
  }

 private:
  absl::StatusOr<std::vector<ShardSlice>> slices_;
  size_t next_ = 0;
};

// Permutation is the order PermuteShards puts n shards in: position i holds
// shard order[i].
std::vector<size_t> Permutation(size_t n, uint64_t seed, int64_t epoch, int64_t pass) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  Rng rng(DeriveSeed(seed, {kShardPermutation, uint64_t(epoch), uint64_t(pass)}));
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
  return order;
}

// Share is part `index` of `parts` equal parts of [begin, end).
std::pair<int64_t, int64_t> Share(int64_t begin, int64_t end, int64_t index, int64_t parts) {
  const int64_t n = end - begin;
  return {begin + n * index / parts, begin + n * (index + 1) / parts};
}

absl::Status PlacementError(const WorkerContext& ctx) {
  return absl::InvalidArgumentError(Cat("shard list: rank ", ctx.rank, " of ", ctx.world_size,
                                        ", worker ", ctx.worker, " of ", ctx.num_workers,
                                        " is not a placement (need 0 <= rank < world_size "
                                        "and 0 <= worker < num_workers)"));
}

bool IsPlacement(const WorkerContext& ctx) {
  return ctx.world_size >= 1 && ctx.rank >= 0 && ctx.rank < ctx.world_size &&
         ctx.num_workers >= 1 && ctx.worker >= 0 && ctx.worker < ctx.num_workers;
}

class ResampledUrlStream : public UrlStream {
 public:
  // cumulative: empty (uniform draws), or the running sums of the weights.
  ResampledUrlStream(std::vector<std::string> urls, std::optional<int64_t> count, uint64_t seed,
                     std::vector<double> cumulative)
      : urls_(std::move(urls)), count_(count), rng_(seed), cumulative_(std::move(cumulative)) {}

  absl::StatusOr<std::optional<ShardSlice>> Next() override {
    if (count_ && drawn_ >= *count_) return std::nullopt;
    if (urls_.empty()) {
      return absl::FailedPreconditionError("cannot resample shards from an empty shard list");
    }
    ++drawn_;
    if (cumulative_.empty()) return ShardSlice{urls_[rng_.Below(urls_.size())], 0, -1};
    // The first shard whose running sum passes the draw (a weight of 0 is
    // never passed by a draw below the total).
    const double draw = rng_.Uniform() * cumulative_.back();
    const size_t i = static_cast<size_t>(
        std::upper_bound(cumulative_.begin(), cumulative_.end(), draw) - cumulative_.begin());
    // A draw rounded up to the total passes every sum: the last shard that
    // can be drawn (one of weight > 0) takes it.
    return ShardSlice{urls_[i < cumulative_.size() ? i : LastDrawable()], 0, -1};
  }

 private:
  // LastDrawable is the last shard whose running sum grows (weight > 0).
  size_t LastDrawable() const {
    size_t i = cumulative_.size() - 1;
    while (i > 0 && cumulative_[i] == cumulative_[i - 1]) --i;
    return i;
  }

  std::vector<std::string> urls_;
  std::optional<int64_t> count_;
  Rng rng_;
  std::vector<double> cumulative_;
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
  std::vector<std::string> out;
  out.reserve(shards.size());
  for (size_t i : Permutation(shards.size(), seed, epoch, pass)) out.push_back(std::move(shards[i]));
  return out;
}

absl::StatusOr<std::vector<std::string>> ShardsForWorker(const std::vector<std::string>& shards,
                                                         const ShardListOptions& options,
                                                         const WorkerContext& ctx) {
  if (!IsPlacement(ctx)) return PlacementError(ctx);
  std::vector<std::string> list =
      options.shuffle ? PermuteShards(shards, ctx.seed, ctx.epoch, ctx.pass) : shards;
  if (options.nodesplitter) list = options.nodesplitter(std::move(list), ctx);
  if (options.workersplitter) list = options.workersplitter(std::move(list), ctx);
  if (list.empty() && !options.allow_empty) {
    return absl::FailedPreconditionError(NothingMessage(Count(shards.size(), "shard"), options, ctx));
  }
  return list;
}

absl::StatusOr<std::vector<ShardSlice>> SlicesForWorker(const std::vector<std::string>& shards,
                                                        const std::vector<int64_t>& counts,
                                                        const ShardListOptions& options,
                                                        const WorkerContext& ctx) {
  if (!IsPlacement(ctx)) return PlacementError(ctx);
  if (counts.size() != shards.size()) {
    return absl::InvalidArgumentError(
        Cat("shard list: ", counts.size(), " sample counts for ", shards.size(), " shards"));
  }
  std::vector<size_t> order(shards.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (options.shuffle) order = Permutation(shards.size(), ctx.seed, ctx.epoch, ctx.pass);
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(
          Cat("shard list: ", shards[i], " has a negative sample count ", counts[i]));
    }
    total += counts[i];
  }
  const std::pair<int64_t, int64_t> range =
      SampleShare(total, ctx, options.nodesplitter != nullptr, options.workersplitter != nullptr);
  std::vector<ShardSlice> slices;
  int64_t first = 0;  // the position of shard order[i]'s first sample
  for (size_t i : order) {
    const int64_t begin = std::max(range.first, first);
    const int64_t end = std::min(range.second, first + counts[i]);
    if (begin < end) slices.push_back({shards[i], begin - first, end - first});
    first += counts[i];
    if (first >= range.second) break;
  }
  if (slices.empty() && !options.allow_empty) {
    return absl::FailedPreconditionError(NothingMessage(
        Cat(Count(total, "sample"), " in ", Count(shards.size(), "shard")), options, ctx));
  }
  return slices;
}

std::unique_ptr<UrlStream> ShardStream(const std::vector<std::string>& shards,
                                       const ShardListOptions& options, const WorkerContext& ctx) {
  absl::StatusOr<std::vector<std::string>> urls = ShardsForWorker(shards, options, ctx);
  if (!urls.ok()) return std::make_unique<ListUrlStream>(urls.status());
  std::vector<ShardSlice> slices;
  slices.reserve(urls->size());
  for (std::string& url : *urls) slices.push_back({std::move(url), 0, -1});
  return std::make_unique<ListUrlStream>(std::move(slices));
}

std::pair<int64_t, int64_t> SampleShare(int64_t total, const WorkerContext& ctx, bool by_node,
                                        bool by_worker) {
  std::pair<int64_t, int64_t> range{0, total};
  if (by_node) range = Share(range.first, range.second, ctx.rank, ctx.world_size);
  if (by_worker) range = Share(range.first, range.second, ctx.worker, ctx.num_workers);
  return range;
}

int64_t SampleCount(const std::vector<ShardSlice>& slices) {
  int64_t total = 0;
  for (const ShardSlice& s : slices) total += s.end - s.begin;
  return total;
}

std::unique_ptr<UrlStream> SlicesStream(absl::StatusOr<std::vector<ShardSlice>> slices) {
  return std::make_unique<ListUrlStream>(std::move(slices));
}

std::unique_ptr<UrlStream> ResampledShardStream(std::vector<std::string> shards,
                                                std::optional<int64_t> count,
                                                const WorkerContext& ctx,
                                                const std::vector<double>& weights) {
  const uint64_t seed = DeriveSeed(ctx.seed, {kResample, uint64_t(ctx.epoch), uint64_t(ctx.pass),
                                              uint64_t(ctx.rank), uint64_t(ctx.worker)});
  std::vector<double> cumulative;
  cumulative.reserve(weights.size());
  double sum = 0;
  for (double w : weights) cumulative.push_back(sum += w);
  return std::make_unique<ResampledUrlStream>(std::move(shards), count, seed,
                                              std::move(cumulative));
}

class ShardDraws::Stream {
 public:
  explicit Stream(std::unique_ptr<UrlStream> urls) : urls_(std::move(urls)) {}
  std::string Next() { return (*urls_->Next()).value().url; }

 private:
  std::unique_ptr<UrlStream> urls_;
};

ShardDraws::ShardDraws(std::vector<std::string> shards, const WorkerContext& ctx,
                       const std::vector<double>& weights)
    : stream_(std::make_unique<Stream>(
          ResampledShardStream(std::move(shards), std::nullopt, ctx, weights))) {}

ShardDraws::~ShardDraws() = default;

std::string ShardDraws::Next() { return stream_->Next(); }

absl::Status CheckShardWeights(const std::vector<double>& weights, size_t shards) {
  if (weights.size() != shards) {
    return absl::InvalidArgumentError(
        Cat("shard weights: ", weights.size(), " weights for ", shards, " shards"));
  }
  double sum = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard weights: weight ", i, " is ", weights[i], " (finite, >= 0 needed)"));
    }
    sum += weights[i];
  }
  if (!(sum > 0) || !std::isfinite(sum)) {
    return absl::InvalidArgumentError(absl::StrCat("shard weights: their sum is ", sum,
                                                   " (some weight must be > 0, the sum finite)"));
  }
  return absl::OkStatus();
}

}  // namespace wds
