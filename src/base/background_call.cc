#include "wds/internal/base/background_call.h"

#include <utility>

#include "absl/time/time.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/signals_blocked.h"

namespace wds {

BackgroundCall::BackgroundCall(std::function<void()> call, absl::Status cancelled) {
  const SignalsBlocked no_signals;
  thread_ = std::thread([this, call = std::move(call), cancelled = std::move(cancelled)] {
    {
      ScopedInterruptCheck check([this, &cancelled] {
        return cancelled_.load(std::memory_order_relaxed) ? cancelled : absl::OkStatus();
      });
      call();
    }
    done_.Notify();
  });
}

BackgroundCall::~BackgroundCall() {
  Cancel();
  if (thread_.joinable()) thread_.join();
}

absl::Status BackgroundCall::Wait(OnInterrupt on_interrupt) {
  absl::Status interrupted;
  // In slices only while the owner has a check to ask.
  const bool check = InterruptCheckInstalled();
  while (!done_.WaitForNotificationWithTimeout(check && interrupted.ok()
                                                   ? absl::FromChrono(kInterruptCheckInterval)
                                                   : absl::InfiniteDuration())) {
    interrupted = CheckInterrupt();
    if (interrupted.ok()) continue;
    if (on_interrupt == kReturn) return interrupted;
    Cancel();
  }
  if (thread_.joinable()) thread_.join();
  return interrupted;
}

}  // namespace wds
