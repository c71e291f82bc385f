// BackgroundCall: one call run on a thread of its own, which its owner can
// wait for (keeping its own interrupt check) or give up on.
//
//   BackgroundCall upload([&] { result = Upload(); }, absl::CancelledError("gave up"));
//   ... fill the next shard ...
//   absl::Status interrupted = upload.Wait(BackgroundCall::kCancelAndFinish);
//
// The thread takes no asynchronous signals (signals_blocked.h) and has an
// interrupt check (wds/base/interrupt.h) that returns `cancelled` once
// Cancel was called, so the call's own waits (a server's answer, a retry's
// sleep) end within kInterruptCheckInterval. The ShardWriter's uploads and
// the shards opened ahead of their turn run this way.
//
// Thread safety: one owner thread calls Wait, Cancel and the destructor.
#pragma once

#include <atomic>
#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"

namespace wds {

class BackgroundCall {
 public:
  // Starts `call`. Throws std::system_error when no thread can be started.
  BackgroundCall(std::function<void()> call, absl::Status cancelled);
  // Cancels the call and waits for it to end.
  ~BackgroundCall();
  BackgroundCall(const BackgroundCall&) = delete;
  BackgroundCall& operator=(const BackgroundCall&) = delete;

  // Cancel tells the call to give up, without waiting for it.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }

  // What Wait does when the owner's interrupt check gives up first.
  enum OnInterrupt {
    kReturn,           // return at once (the destructor stops the call)
    kCancelAndFinish,  // cancel the call and wait for it to end
  };
  // Wait waits for the call to end and returns OK, or the owner's interrupt
  // status (its check is asked every kInterruptCheckInterval).
  [[nodiscard]] absl::Status Wait(OnInterrupt on_interrupt);

 private:
  std::atomic<bool> cancelled_{false};
  absl::Notification done_;
  std::thread thread_;
};

}  // namespace wds
