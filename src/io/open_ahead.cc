// AheadOpen: see open_ahead.h.
#include "io/open_ahead.h"

#include <system_error>
#include <utility>

#include "absl/time/time.h"
#include "wds/base/interrupt.h"

namespace wds {

AheadOpen::AheadOpen(Opener opener, std::string url)
    : opener_(std::move(opener)), url_(std::move(url)) {
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error&) {
    // No thread to be had: Take opens it on the owner's thread.
  }
}

AheadOpen::~AheadOpen() {
  cancelled_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

void AheadOpen::Run() {
  ScopedInterruptCheck check([this] {
    return cancelled_.load(std::memory_order_relaxed)
               ? absl::CancelledError(url_ + ": no longer wanted (opened ahead)")
               : absl::OkStatus();
  });
  result_ = opener_(url_);
  done_.Notify();
}

absl::StatusOr<std::unique_ptr<ByteStream>> AheadOpen::Take() {
  if (!thread_.joinable()) return opener_(url_);
  // In slices, so that the owner's interrupt check is heard (a Loader
  // stopping its worker while the next shard's server is slow to answer).
  const bool check = InterruptCheckInstalled();
  while (!done_.WaitForNotificationWithTimeout(check ? absl::FromChrono(kInterruptCheckInterval)
                                                     : absl::InfiniteDuration())) {
    absl::Status go_on = CheckInterrupt();
    if (!go_on.ok()) return go_on;
  }
  thread_.join();
  return std::move(result_);
}

}  // namespace wds
