// AheadOpen: see open_ahead.h.
#include "io/open_ahead.h"

#include <condition_variable>
#include <mutex>
#include <system_error>
#include <utility>

#include "absl/strings/cord.h"
#include "wds/internal/base/status_macros.h"
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

// InFlightCount adds `delta` to the opens in flight.
void InFlightCount(int delta) {
  InFlight& opens = Opens();
  std::lock_guard<std::mutex> lock(opens.mu);
  opens.count += delta;
  if (opens.count == 0) opens.none.notify_all();
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
  InFlightCount(1);
  try {
    call_ = std::make_unique<BackgroundCall>(
        [this] { Run(); }, absl::CancelledError(Cat(url_, ": no longer wanted (opened ahead)")));
  } catch (const std::system_error&) {
    InFlightCount(-1);  // no thread to be had: Take opens it on the owner's thread
  }
}

void AheadOpen::Run() {
  opening_ahead = true;
  result_ = opener_(url_);
  InFlightCount(-1);
}

absl::StatusOr<std::unique_ptr<ByteStream>> AheadOpen::Take() {
  if (call_ == nullptr) return opener_(url_);
  // The owner's interrupt check is heard (a Loader stopping its worker while
  // the next shard's server is slow to answer).
  WDS_RETURN_IF_ERROR(call_->Wait(BackgroundCall::kReturn));
  if (!result_.ok() && IsOpenInTurn(result_.status())) return opener_(url_);
  return std::move(result_);
}

}  // namespace wds
