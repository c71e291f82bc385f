// Interrupting blocking waits.
//
// Some waits depend on the outside world and may never end: a pipe: command
// that stalls, standard input, a FIFO, a Loader whose workers are stuck in
// one of those. A thread that must be able to give up (a Python caller that
// has to raise KeyboardInterrupt, a loader worker being stopped) installs an
// interrupt check for the length of the call:
//
//   wds::ScopedInterruptCheck check([&] {
//     return stop.load() ? absl::CancelledError("stopped") : absl::OkStatus();
//   });
//   wds::SampleResult item = stream->Next();   // CANCELLED soon after `stop`
//
// While a check is installed, the calling thread's blocking waits in this
// library (reading a pipe: command's output, standard input or a FIFO, a
// remote shard's server and the sleep before its retry, and Loader::Next
// waiting for its workers) wake at least every
// kInterruptCheckInterval, and whenever a signal interrupts them, and call
// the check; a non-OK status ends the wait, and the call returns that status.
// Without a check, waits block as before. Work that does not wait (decoding,
// reading regular files) never calls the check.
//
// Errors handlers never see: a Cancelled status ends a stream whatever its
// stage's handler (see wds/base/error.h), so an interrupted read cannot be
// skipped like a bad shard.
//
// Thread safety: a check belongs to the thread that installed it and is
// called only on that thread; checks nest (the innermost one is called).
#pragma once

#include <chrono>
#include <functional>

#include "absl/status/status.h"

namespace wds {

// kInterruptCheckInterval is the longest a waiting thread goes without
// calling its interrupt check.
inline constexpr std::chrono::milliseconds kInterruptCheckInterval{50};

// InterruptCheck returns OK to go on waiting, an error to give up with.
using InterruptCheck = std::function<absl::Status()>;

// ScopedInterruptCheck installs `check` for the calling thread until it is
// destroyed (on the same thread), when the previous check (if any) returns.
class ScopedInterruptCheck {
 public:
  explicit ScopedInterruptCheck(InterruptCheck check);
  ~ScopedInterruptCheck();
  ScopedInterruptCheck(const ScopedInterruptCheck&) = delete;
  ScopedInterruptCheck& operator=(const ScopedInterruptCheck&) = delete;

 private:
  friend absl::Status CheckInterrupt();
  friend bool InterruptCheckInstalled();
  InterruptCheck check_;
  ScopedInterruptCheck* previous_;
};

// CheckInterrupt calls the calling thread's innermost check; OK when it has
// none. For waits: call it after each kInterruptCheckInterval and after EINTR.
[[nodiscard]] absl::Status CheckInterrupt();

// InterruptCheckInstalled is whether the calling thread has a check (a wait
// then sleeps in slices of kInterruptCheckInterval instead of indefinitely).
bool InterruptCheckInstalled();

}  // namespace wds
