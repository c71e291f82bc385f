// AheadOpen: a shard opened on a thread of its own, so that a reader finds
// its next shard open (the request answered, the first bytes arriving) when
// it gets there. TarSamples uses it for WebDatasetOptions::open_ahead.
//
//   AheadOpen next(opener, "s3://bucket/train-000001.tar");   // starts at once
//   ... read the current shard ...
//   absl::StatusOr<std::unique_ptr<ByteStream>> stream = next.Take();
//
// Thread safety: one owner thread calls Take, Cancel and the destructor;
// `opener` is called on the AheadOpen's own thread (where OpeningAhead() is
// true, wds/internal/io/open_ahead.h), so it must be callable from any
// thread (MakeOpener's is); it may decline there with OpenInTurn(url), and
// is then called again by Take, on the owner's thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "wds/io/byte_stream.h"

namespace wds {

class AheadOpen {
 public:
  // Starts opening `url` with `opener` on a new thread, which takes no
  // asynchronous signals (on the owner's thread at Take when no thread can
  // be started). The open's thread has an interrupt check
  // (wds/base/interrupt.h) that Cancel and the destructor trip.
  AheadOpen(Opener opener, std::string url);
  // Stops an open still waiting (its server's answer, a retry's sleep: it
  // ends as Cancelled within kInterruptCheckInterval), waits for its thread,
  // and drops a stream opened and not taken.
  ~AheadOpen();
  AheadOpen(const AheadOpen&) = delete;
  AheadOpen& operator=(const AheadOpen&) = delete;

  // Cancel tells an open still waiting to stop, without waiting for it: an
  // owner dropping several cancels them all before destroying them.
  void Cancel();

  // Take waits for the open and returns what it gave: the stream, or the
  // opener's error (the opener's second answer, on this thread, when it
  // declined). Once. The wait calls the owner's interrupt check, and
  // returns its error (the open is then stopped by the destructor).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<ByteStream>> Take();

  const std::string& url() const { return url_; }

 private:
  void Run();
  // Ended counts the open out of those in flight (WaitForAheadOpens).
  void Ended();

  Opener opener_;
  const std::string url_;
  std::atomic<bool> cancelled_{false};
  absl::Notification done_;
  absl::StatusOr<std::unique_ptr<ByteStream>> result_;  // written before done_ by the thread
  std::thread thread_;
};

}  // namespace wds
