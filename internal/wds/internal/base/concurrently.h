// RunConcurrently: a fan-out of independent jobs that each wait on the
// outside world (a round trip to a server), for callers that need all their
// results before going on (a batch of samples, the counts of a shard list).
//
//   std::vector<absl::StatusOr<int64_t>> counts(urls.size());
//   wds::RunConcurrently(urls.size(), 16, [&](size_t i) {
//     counts[i] = wds::ReadShardCount(urls[i], opener);
//   });
//
// Interrupts: the caller's interrupt check (wds/base/interrupt.h), if it
// has one, stays in force. The caller's own jobs' waits call it; while the
// caller waits for the other threads it calls it every
// kInterruptCheckInterval; once it fails, the other threads' waits end with
// CANCELLED and the jobs not begun are not run. A check must therefore keep
// failing once it has failed (the Python bindings' SignalCheck does).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"

namespace wds {

// RunConcurrently runs job(0) ... job(n - 1), taken in order, on up to
// `threads` threads, the caller's among them (fewer when threads cannot be
// started: the caller then runs what is left). `job` must not throw; a job
// that fails records its failure where the caller will look for it.
void RunConcurrently(size_t n, int threads, const std::function<void(size_t)>& job);

// ReadEach returns read(items[i]) (an absl::StatusOr<T>) for every item,
// `threads` at a time. After a failure no read begins (those left are
// CANCELLED "not read"); reads begin in order, so every read before the
// first failure in order has run, and that failure is the one a loop over
// the items would have stopped at.
template <typename T, typename Item, typename Read>
std::vector<absl::StatusOr<T>> ReadEach(const std::vector<Item>& items, int threads,
                                        const Read& read) {
  std::vector<absl::StatusOr<T>> results(items.size(), absl::CancelledError("not read"));
  std::atomic<bool> failed{false};
  RunConcurrently(items.size(), threads, [&](size_t i) {
    if (failed.load()) return;
    results[i] = read(items[i]);
    if (!results[i].ok()) failed.store(true);
  });
  return results;
}

}  // namespace wds
