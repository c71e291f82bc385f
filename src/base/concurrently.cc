#include "wds/internal/base/concurrently.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "wds/base/interrupt.h"

namespace wds {

void RunConcurrently(size_t n, int threads, const std::function<void(size_t)>& job) {
  if (n == 0) return;
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  // The caller's check, asked after each of its jobs and while it waits.
  auto caller_stopped = [&] {
    if (!stop.load() && !CheckInterrupt().ok()) stop.store(true);
    return stop.load();
  };
  const size_t helpers = std::min<size_t>(n, static_cast<size_t>(std::max(threads, 1))) - 1;
  std::mutex mu;
  std::condition_variable done;
  size_t running = 0;
  std::vector<std::thread> pool;
  pool.reserve(helpers);
  for (size_t t = 0; t < helpers; ++t) {
    std::lock_guard<std::mutex> lock(mu);
    try {
      pool.emplace_back([&] {
        {
          ScopedInterruptCheck check(
              [&] { return stop.load() ? absl::CancelledError("interrupted") : absl::OkStatus(); });
          for (size_t i; !stop.load() && (i = next.fetch_add(1)) < n;) job(i);
        }
        std::lock_guard<std::mutex> lock(mu);
        --running;
        done.notify_all();
      });
      ++running;
    } catch (const std::system_error&) {
      break;  // no more threads: the ones made (and the caller) do it all
    }
  }
  if (pool.empty()) {  // the caller alone: its jobs' own waits ask its check
    for (size_t i; (i = next.fetch_add(1)) < n;) job(i);
    return;
  }
  try {
    for (size_t i; !caller_stopped() && (i = next.fetch_add(1)) < n;) job(i);
    std::unique_lock<std::mutex> lock(mu);
    while (!done.wait_for(lock, kInterruptCheckInterval, [&] { return running == 0; })) {
      lock.unlock();
      caller_stopped();
      lock.lock();
    }
  } catch (...) {
    // Leaving early (the caller's thread being ended, pthread_exit, in its
    // interrupt check): the helpers use this frame, so they stop and are
    // joined first.
    stop.store(true);
    for (std::thread& t : pool) t.join();
    throw;
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace wds
