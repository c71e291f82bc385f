// wds/internal/base/concurrently.h: jobs fanned out over threads, each run
// once; a failure or the caller's interrupt stops the jobs not begun.
#include "wds/internal/base/concurrently.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "wds/base/interrupt.h"

namespace wds {
namespace {

// Gate lets jobs wait until `want` of them are inside it at once (or a
// deadline passes, so that a serial run fails instead of hanging).
class Gate {
 public:
  explicit Gate(int want) : want_(want) {}
  void Enter() {
    std::unique_lock<std::mutex> lock(mu_);
    max_ = std::max(max_, ++inside_);
    cv_.notify_all();
    cv_.wait_until(lock, deadline_, [&] { return inside_ >= want_ || released_; });
    released_ = true;  // once full, every later job passes at once
    --inside_;
  }
  int max() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_;
  }

 private:
  const int want_;
  const std::chrono::steady_clock::time_point deadline_ =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int inside_ = 0;
  int max_ = 0;
  bool released_ = false;
};

TEST(RunConcurrentlyTest, RunsEveryJobOnceOnAsManyThreadsTheCallersAmongThem) {
  std::vector<std::atomic<int>> runs(50);
  std::mutex mu;
  std::set<std::thread::id> ids;
  Gate gate(4);
  RunConcurrently(runs.size(), 4, [&](size_t i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    }
    if (i < 4) gate.Enter();
    ++runs[i];
  });
  for (const std::atomic<int>& n : runs) EXPECT_EQ(n.load(), 1);
  EXPECT_EQ(gate.max(), 4);
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 1u);
}

TEST(RunConcurrentlyTest, NoJobsRunNothingAndOneThreadIsTheCallers) {
  RunConcurrently(0, 8, [](size_t) { ADD_FAILURE() << "ran a job of none"; });
  std::vector<size_t> order;
  const std::thread::id caller = std::this_thread::get_id();
  RunConcurrently(5, 1, [&](size_t i) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(i);
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4}));
}

// A job that waits as the library's waits do: until its interrupt check fails.
absl::Status WaitForInterrupt() {
  for (;;) {
    absl::Status status = CheckInterrupt();
    if (!status.ok()) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

TEST(RunConcurrentlyTest, TheCallersInterruptEndsEveryWaitAndNoJobBeginsAfterIt) {
  std::atomic<int> entered{0};
  ScopedInterruptCheck check(
      [&] { return entered.load() >= 4 ? absl::CancelledError("Ctrl-C") : absl::OkStatus(); });
  std::vector<absl::Status> results(100, absl::OkStatus());
  RunConcurrently(results.size(), 4, [&](size_t i) {
    ++entered;
    results[i] = WaitForInterrupt();
  });
  EXPECT_EQ(entered.load(), 4);
  int cancelled = 0;
  for (const absl::Status& status : results) cancelled += absl::IsCancelled(status);
  EXPECT_EQ(cancelled, 4);
  EXPECT_TRUE(absl::IsCancelled(CheckInterrupt()));  // the caller's own check, still in force
}

TEST(RunConcurrentlyTest, AnExceptionLeavingTheCallerStopsAndJoinsTheHelpersFirst) {
  // As when CPython ends the caller's thread (pthread_exit) in its check:
  // the helpers use the caller's frame, so none may outlive it.
  std::atomic<int> entered{0};
  std::atomic<int> returned{0};
  ScopedInterruptCheck check([&]() -> absl::Status {
    if (entered.load() >= 4) throw std::runtime_error("thread ended");
    return absl::OkStatus();
  });
  std::vector<absl::Status> results(100, absl::OkStatus());
  EXPECT_THROW(RunConcurrently(results.size(), 4,
                               [&](size_t i) {
                                 ++entered;
                                 results[i] = WaitForInterrupt();
                                 ++returned;
                               }),
               std::runtime_error);
  // The three helpers' jobs ended, cancelled, before the exception left; the
  // caller's job is the one the exception left; no job began after it.
  EXPECT_EQ(entered.load(), 4);
  EXPECT_EQ(returned.load(), 3);
  int cancelled = 0;
  for (const absl::Status& status : results) cancelled += absl::IsCancelled(status);
  EXPECT_EQ(cancelled, 3);
}

TEST(ReadEachTest, ASerialReadStopsAtItsFirstFailure) {
  std::vector<int> items = {0, 1, 2, 3, 4, 5};
  std::vector<int> read;
  std::vector<absl::StatusOr<int>> results =
      ReadEach<int>(items, 1, [&](int item) -> absl::StatusOr<int> {
        read.push_back(item);
        if (item == 2 || item == 4) return absl::DataLossError("bad " + std::to_string(item));
        return item * 10;
      });
  EXPECT_EQ(read, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(*results[0], 0);
  EXPECT_EQ(*results[1], 10);
  EXPECT_EQ(results[2].status(), absl::DataLossError("bad 2"));
  for (size_t i = 3; i < results.size(); ++i) {
    EXPECT_EQ(results[i].status(), absl::CancelledError("not read")) << i;
  }
}

TEST(ReadEachTest, AReadUnderWayWhenAnEarlierItemFailsKeepsItsResult) {
  // Items 0, 1 and 2 start together; 1 fails while 0 and 2 are under way.
  // Both keep their results (a cache of reads may take them); item 3,
  // taken after the failure, is not read.
  std::vector<int> items = {0, 1, 2, 3};
  std::atomic<int> started{0};
  std::atomic<bool> one_failed{false};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto wait_until = [&](auto done) {
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  std::vector<absl::StatusOr<int>> results =
      ReadEach<int>(items, 3, [&](int item) -> absl::StatusOr<int> {
        ++started;
        if (item == 1) {
          wait_until([&] { return started.load() >= 3; });
          one_failed.store(true);
          return absl::DataLossError("bad 1");
        }
        wait_until([&] { return one_failed.load(); });
        return item;
      });
  ASSERT_TRUE(one_failed.load());
  EXPECT_EQ(*results[0], 0);
  EXPECT_EQ(results[1].status(), absl::DataLossError("bad 1"));
  EXPECT_EQ(*results[2], 2);
  EXPECT_EQ(results[3].status(), absl::CancelledError("not read"));
  EXPECT_EQ(started.load(), 3);
}

TEST(ReadEachTest, TheFirstFailureInOrderIsTheOneAFailureLaterInTimeComesBefore) {
  // Item 6 fails at once; item 2 fails only after it: in order, 2 is first,
  // and every item before 2 was read.
  std::vector<int> items = {0, 1, 2, 3, 4, 5, 6, 7};
  std::atomic<bool> six_failed{false};
  std::vector<absl::StatusOr<int>> results =
      ReadEach<int>(items, 8, [&](int item) -> absl::StatusOr<int> {
        if (item == 6) {
          six_failed.store(true);
          return absl::DataLossError("bad 6");
        }
        if (item == 2) {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (!six_failed.load() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          return absl::DataLossError("bad 2");
        }
        return item;
      });
  ASSERT_TRUE(six_failed.load());
  EXPECT_EQ(*results[0], 0);
  EXPECT_EQ(*results[1], 1);
  EXPECT_EQ(results[2].status(), absl::DataLossError("bad 2"));
  EXPECT_EQ(results[6].status(), absl::DataLossError("bad 6"));
  for (int i : {3, 4, 5, 7}) {
    EXPECT_TRUE(results[i].ok() || results[i].status() == absl::CancelledError("not read")) << i;
  }
}

TEST(ReadEachInOrderTest, ResultsAreTakenInOrderAsSoonAsTheItemsBeforeThemAreRead) {
  // Item 0 is read last: nothing is taken before it, then everything at once.
  std::vector<int> items = {0, 1, 2, 3, 4, 5};
  std::atomic<int> read_after_zero{0};
  std::atomic<bool> zero_may_end{false};
  std::vector<std::pair<size_t, int>> taken;
  std::vector<int> read_when_taken;
  ReadEachInOrder<int>(
      items, 6,
      [&](int item) -> absl::StatusOr<int> {
        if (item == 0) {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (!zero_may_end.load() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        } else if (++read_after_zero == 5) {
          zero_may_end.store(true);
        }
        return item * 10;
      },
      [&](size_t i, absl::StatusOr<int>& result) {
        taken.emplace_back(i, *result);
        read_when_taken.push_back(read_after_zero.load());
      });
  EXPECT_EQ(taken, (std::vector<std::pair<size_t, int>>{
                       {0, 0}, {1, 10}, {2, 20}, {3, 30}, {4, 40}, {5, 50}}));
  EXPECT_EQ(read_when_taken, std::vector<int>(6, 5));
}

TEST(ReadEachInOrderTest, TheFirstFailureIsTakenAndTheItemsAfterItAreNotRead) {
  std::vector<int> items = {0, 1, 2, 3, 4, 5};
  std::vector<int> read;
  std::vector<std::string> taken;
  ReadEachInOrder<int>(
      items, 1,
      [&](int item) -> absl::StatusOr<int> {
        read.push_back(item);
        if (item == 1) throw std::runtime_error("boom");
        if (item == 3) return absl::DataLossError("bad 3");
        return item;
      },
      [&](size_t i, absl::StatusOr<int>& result) {
        taken.push_back(std::to_string(i) + ":" +
                        (result.ok() ? std::to_string(*result) : result.status().ToString()));
      });
  EXPECT_EQ(read, (std::vector<int>{0, 1}));
  EXPECT_EQ(taken, (std::vector<std::string>{"0:0", "1:INTERNAL: boom", "2:CANCELLED: not read",
                                             "3:CANCELLED: not read", "4:CANCELLED: not read",
                                             "5:CANCELLED: not read"}));
}

}  // namespace
}  // namespace wds
