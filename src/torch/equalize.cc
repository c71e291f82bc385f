#include "wds/torch/equalize.h"

#include <algorithm>
#include <map>
#include <string>

#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// ListsDiffer says which ranks see which shard list: by digest, in the order
// of the lowest rank seeing each, with its ranks, shards and samples.
absl::Status ListsDiffer(const std::vector<int64_t>& digests, const std::vector<int64_t>& shards,
                         const std::vector<int64_t>& samples) {
  std::map<int64_t, std::vector<int>> ranks;  // digest -> its ranks
  std::vector<int64_t> order;
  for (int r = 0; r < static_cast<int>(digests.size()); ++r) {
    if (ranks[digests[r]].empty()) order.push_back(digests[r]);
    ranks[digests[r]].push_back(r);
  }
  std::string lists;
  for (int64_t digest : order) {
    const std::vector<int>& group = ranks[digest];
    std::string names;
    for (int r : group) names += Cat(names.empty() ? "" : ", ", r);
    const int64_t n = samples[group.front()];
    lists += Cat(lists.empty() ? "" : "; ", "ranks [", names, "] ", shards[group.front()],
                 " shards", n > 0 ? Cat(", ", n, " samples") : std::string(),
                 digest == 0 ? " of their own (not split by node)" : "");
  }
  return absl::FailedPreconditionError(
      Cat("the ranks do not see the same shard list and counts (", lists,
          "), so their shares would overlap or leave samples out: give every rank the same list "
          "and the same dataset index (a stale copy of the index, or a directory listed while "
          "shards are written, differ)"));
}

}  // namespace

absl::StatusOr<EqualizedSteps> AgreeOnSteps(const DistributedContext& context,
                                            const RankEpochPlan& plan, EqualizePolicy policy) {
  EqualizedSteps result;
  result.proposals = context.AllGather(plan.LocalSteps(policy));
  const std::vector<int64_t> digests = context.AllGather(static_cast<int64_t>(plan.list_digest));
  if (std::any_of(digests.begin(), digests.end(),
                  [&](int64_t d) { return d != digests.front(); })) {
    const std::vector<int64_t> shards = context.AllGather(plan.dataset_shards);
    return ListsDiffer(digests, shards, context.AllGather(plan.dataset_samples));
  }
  const auto [low, high] = std::minmax_element(result.proposals.begin(), result.proposals.end());
  switch (policy) {
    case EqualizePolicy::kDrop:
      result.steps = *low;
      break;
    case EqualizePolicy::kWrap:
    case EqualizePolicy::kPad:
      result.steps = *high;
      break;
    case EqualizePolicy::kOff:
      result.steps = plan.batches();
      break;
  }
  return result;
}

}  // namespace wds
