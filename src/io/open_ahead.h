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

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "wds/internal/base/background_call.h"
#include "wds/io/byte_stream.h"

namespace wds {

class AheadOpen {
 public:
  // Starts opening `url` with `opener` on a thread of its own (a
  // BackgroundCall, wds/internal/base/background_call.h; on the owner's
  // thread at Take when no thread can be started).
  AheadOpen(Opener opener, std::string url);
  // Stops an open still waiting (its server's answer, a retry's sleep: it
  // ends as Cancelled within kInterruptCheckInterval), waits for its thread,
  // and drops a stream opened and not taken.
  ~AheadOpen() = default;
  AheadOpen(const AheadOpen&) = delete;
  AheadOpen& operator=(const AheadOpen&) = delete;

  // Cancel tells an open still waiting to stop, without waiting for it: an
  // owner dropping several cancels them all before destroying them.
  void Cancel() {
    if (call_ != nullptr) call_->Cancel();
  }

  // Take waits for the open and returns what it gave: the stream, or the
  // opener's error (the opener's second answer, on this thread, when it
  // declined). Once. The wait calls the owner's interrupt check, and
  // returns its error (the open is then stopped by the destructor).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<ByteStream>> Take();

  const std::string& url() const { return url_; }

 private:
  void Run();

  Opener opener_;
  const std::string url_;
  absl::StatusOr<std::unique_ptr<ByteStream>> result_;  // written by the call before it ends
  std::unique_ptr<BackgroundCall> call_;                // null: opened at Take
};

}  // namespace wds
