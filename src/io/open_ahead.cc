// AheadOpen: see open_ahead.h.
#include "io/open_ahead.h"

#include <condition_variable>
#include <mutex>
#include <system_error>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/time/time.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/signals_blocked.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/io/open_ahead.h"

namespace wds {
namespace {

constexpr const char* kOpenInTurnPayload = "wds.open_in_turn";

thread_local bool opening_ahead = false;

// InFlight counts the threads opening a shard ahead (WaitForAheadOpens).
struct InFlight {
  std::mutex mu;
  std::condition_variable none;
  int count = 0;
};

InFlight& Opens() {
  static auto* in_flight = new InFlight;  // never destroyed: threads may outlive statics
  return *in_flight;
}

}  // namespace

bool OpeningAhead() { return opening_ahead; }

absl::Status OpenInTurn(std::string_view url) {
  absl::Status status =
      absl::UnavailableError(Cat(url, ": to be opened in its turn, not ahead of it"));
  status.SetPayload(kOpenInTurnPayload, absl::Cord("1"));
  return status;
}

bool IsOpenInTurn(const absl::Status& status) {
  return status.GetPayload(kOpenInTurnPayload).has_value();
}

void WaitForAheadOpens() {
  InFlight& opens = Opens();
  std::unique_lock<std::mutex> lock(opens.mu);
  opens.none.wait(lock, [&] { return opens.count == 0; });
}

AheadOpen::AheadOpen(Opener opener, std::string url)
    : opener_(std::move(opener)), url_(std::move(url)) {
  {
    std::lock_guard<std::mutex> lock(Opens().mu);
    ++Opens().count;
  }
  try {
    // A Ctrl-C goes to the application's threads (signals_blocked.h).
    const SignalsBlocked no_signals;
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error&) {
    // No thread to be had: Take opens it on the owner's thread.
    Ended();
  }
}

AheadOpen::~AheadOpen() {
  Cancel();
  if (thread_.joinable()) thread_.join();
}

void AheadOpen::Cancel() { cancelled_.store(true, std::memory_order_relaxed); }

void AheadOpen::Ended() {
  InFlight& opens = Opens();
  std::lock_guard<std::mutex> lock(opens.mu);
  if (--opens.count == 0) opens.none.notify_all();
}

void AheadOpen::Run() {
  opening_ahead = true;
  ScopedInterruptCheck check([this] {
    return cancelled_.load(std::memory_order_relaxed)
               ? absl::CancelledError(Cat(url_, ": no longer wanted (opened ahead)"))
               : absl::OkStatus();
  });
  result_ = opener_(url_);
  Ended();
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
  if (!result_.ok() && IsOpenInTurn(result_.status())) return opener_(url_);
  return std::move(result_);
}

}  // namespace wds
