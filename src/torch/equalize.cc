#include "wds/torch/equalize.h"

#include <algorithm>

namespace wds {

EqualizedSteps AgreeOnSteps(const DistributedContext& context, const RankEpochPlan& plan,
                            EqualizePolicy policy) {
  EqualizedSteps result;
  result.proposals = context.AllGather(plan.LocalSteps(policy));
  const auto [low, high] = std::minmax_element(result.proposals.begin(), result.proposals.end());
  switch (policy) {
    case EqualizePolicy::kDrop:
      result.steps = *low;
      break;
    case EqualizePolicy::kWrap:
      result.steps = *high;
      break;
    case EqualizePolicy::kOff:
      result.steps = plan.batches();
      break;
  }
  return result;
}

}  // namespace wds
