#include "wds/loader/padded_epoch.h"

#include <optional>

#include "wds/internal/base/strings.h"

namespace wds {

absl::Status RunPaddedEpoch(Loader& loader, int64_t steps,
                            absl::FunctionRef<absl::Status(const Sample&, bool)> step,
                            const Sample* fill) {
  if (steps < 0) return absl::InvalidArgumentError(Cat("RunPaddedEpoch: steps ", steps, " < 0"));
  if (loader.size().has_value()) {
    return absl::InvalidArgumentError(
        "RunPaddedEpoch: the loader's recipe is sized (WithLength / WithEpoch), so its workers "
        "would repeat samples from another pass instead of padding: give it the natural epoch");
  }
  int64_t taken = 0;
  std::optional<Sample> last;  // copies share the batch's bytes
  try {
    for (const Sample& batch : loader) {
      if (taken == steps) {
        return absl::FailedPreconditionError(
            Cat("RunPaddedEpoch: this rank's loader yielded more than the ", steps,
                " agreed steps, so the plans the ranks agreed with do not describe its epoch "
                "(other counts, workers or batching?); the batches after step ",
                steps, " were not run"));
      }
      if (absl::Status done = step(batch, true); !done.ok()) return done;
      last = batch;
      ++taken;
    }
  } catch (const LoaderError& e) {
    return e.status();
  }
  if (taken == steps) return absl::OkStatus();
  const Sample* padding = last.has_value() ? &*last : fill;
  if (padding == nullptr) {
    return absl::FailedPreconditionError(
        Cat("RunPaddedEpoch: this rank's loader yielded no batch to pad its ", steps,
            " steps with: pass a fill batch of the usual shape"));
  }
  for (; taken < steps; ++taken) {
    if (absl::Status done = step(*padding, false); !done.ok()) return done;
  }
  return absl::OkStatus();
}

}  // namespace wds
