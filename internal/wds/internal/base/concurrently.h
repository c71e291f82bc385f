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
// has one, stays in force. The caller's own jobs' waits call it; with other
// threads, the caller also calls it before each job it takes and every
// kInterruptCheckInterval while it waits for them; once it fails, the other
// threads' waits end with CANCELLED and the jobs not begun are not run. A
// check must therefore keep failing once it has failed (the Python
// bindings' SignalCheck does).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"

namespace wds {

// RunConcurrently runs job(0) ... job(n - 1), taken in order, on up to
// `threads` threads, the caller's among them (fewer when threads cannot be
// started: the caller then runs what is left). `job` must not throw; a job
// that fails records its failure where the caller will look for it.
void RunConcurrently(size_t n, int threads, const std::function<void(size_t)>& job);

// ReadEachInOrder reads as ReadEach does, and hands each item's result to
// take(i, result) in the items' order, as soon as that item and every one
// before it are done: under a lock, on the thread that finished the last of
// them. No result is kept past its take. An item not read after a failure is
// handed over as CANCELLED "not read"; items that the caller's interrupt
// check kept from starting (RunConcurrently) are not handed over, nor any
// after them.
template <typename T, typename Item, typename Read, typename Take>
void ReadEachInOrder(const std::vector<Item>& items, int threads, const Read& read,
                     const Take& take) {
  // The lowest failed item so far: an item after it need not be read, one
  // before it must (a thread may take it late).
  std::atomic<size_t> first_failed{SIZE_MAX};
  std::mutex mu;
  std::vector<std::optional<absl::StatusOr<T>>> done(items.size());
  size_t next = 0;  // the first item not taken
  RunConcurrently(items.size(), threads, [&](size_t i) {
    absl::StatusOr<T> result = absl::CancelledError("not read");
    if (i <= first_failed.load()) {
      try {
        result = read(items[i]);
      } catch (const std::bad_alloc&) {
        result = absl::ResourceExhaustedError("out of memory");
      } catch (const std::exception& e) {
        result = absl::InternalError(e.what());
      }
      if (!result.ok()) {
        for (size_t seen = first_failed.load(); i < seen;) {
          if (first_failed.compare_exchange_weak(seen, i)) break;
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    done[i] = std::move(result);
    for (; next < done.size() && done[next].has_value(); ++next) {
      take(next, *done[next]);
      done[next].reset();
    }
  });
}

// ReadEach returns read(items[i]) (an absl::StatusOr<T>) for every item,
// `threads` at a time. No read begins after a failed one (those are
// CANCELLED "not read"; reads under way run to their end), and every read
// before the first failure in order runs, so that failure is the one a loop
// over the items would have stopped at. An exception from `read` is its
// item's error (RESOURCE_EXHAUSTED for std::bad_alloc, else INTERNAL).
template <typename T, typename Item, typename Read>
std::vector<absl::StatusOr<T>> ReadEach(const std::vector<Item>& items, int threads,
                                        const Read& read) {
  std::vector<absl::StatusOr<T>> results(items.size(), absl::CancelledError("not read"));
  ReadEachInOrder<T>(items, threads, read,
                     [&](size_t i, absl::StatusOr<T>& result) { results[i] = std::move(result); });
  return results;
}

}  // namespace wds
