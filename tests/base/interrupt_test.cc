// wds/base/interrupt.h: waits on stalled sources give up when the thread's
// interrupt check says so; handlers never swallow the interruption.
#include "wds/base/interrupt.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "util/test_util.h"
#include "wds/io/byte_stream.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"

namespace wds {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// CancelAfter is a check that gives up once `delay` has passed since it was made.
InterruptCheck CancelAfter(milliseconds delay) {
  const auto deadline = steady_clock::now() + delay;
  return [deadline] {
    return steady_clock::now() < deadline ? absl::OkStatus() : absl::CancelledError("give up");
  };
}

double SecondsSince(steady_clock::time_point start) {
  return std::chrono::duration<double>(steady_clock::now() - start).count();
}

TEST(InterruptTest, NoCheckIsOkAndChecksNest) {
  EXPECT_FALSE(InterruptCheckInstalled());
  EXPECT_TRUE(CheckInterrupt().ok());
  {
    ScopedInterruptCheck outer([] { return absl::CancelledError("outer"); });
    EXPECT_EQ(CheckInterrupt().message(), "outer");
    {
      ScopedInterruptCheck inner([] { return absl::OkStatus(); });
      EXPECT_TRUE(CheckInterrupt().ok());
    }
    EXPECT_EQ(CheckInterrupt().message(), "outer");
  }
  EXPECT_FALSE(InterruptCheckInstalled());
  // A check belongs to its thread.
  ScopedInterruptCheck mine([] { return absl::CancelledError("mine"); });
  std::thread([] { EXPECT_FALSE(InterruptCheckInstalled()); }).join();
}

TEST(InterruptTest, AStalledPipeReadGivesUpWithTheChecksError) {
  auto stream = OpenUrl("pipe:sleep 30");
  ASSERT_TRUE(stream.ok()) << stream.status();
  int calls = 0;
  char buffer[16];
  const auto start = steady_clock::now();
  absl::StatusOr<size_t> n;
  {
    // Counted, not timed, so that a loaded machine cannot change the count.
    ScopedInterruptCheck check(
        [&calls] { return ++calls < 4 ? absl::OkStatus() : absl::CancelledError("give up"); });
    n = (*stream)->Read(buffer, sizeof buffer);
  }
  EXPECT_EQ(n.status(), absl::CancelledError("give up"));
  // It went on asking after an OK answer, and waited kInterruptCheckInterval
  // (50 ms) between questions rather than asking in a busy loop: three waits
  // at least (load only lengthens them) ...
  EXPECT_EQ(calls, 4);
  EXPECT_GE(SecondsSince(start), 3 * 0.050 * 0.9);
  // ... and well under the 30 s the command sleeps (liveness, with room for a
  // loaded, sanitized run).
  EXPECT_LT(SecondsSince(start), 10.0);
}

TEST(InterruptTest, AStalledPipeShardEndsTheStreamWhateverTheHandler) {
  testing::TempDir dir;
  const std::string shard =
      dir.Write("a.tar", testing::MakeTar({{"a.txt", "x"}}, testing::TarFormat::kUstar));
  WebDatasetOptions options;
  options.handler = Handler::kWarnAndContinue;
  std::vector<std::string> warnings;
  auto pipeline = WebDataset({"pipe:sleep 30", shard}, options);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  WorkerContext ctx;
  ctx.errors = std::make_shared<ErrorCounters>();
  ctx.warn = [&](std::string_view w) { warnings.emplace_back(w); };
  auto stream = pipeline->Open(ctx);
  ScopedInterruptCheck check(CancelAfter(milliseconds(100)));
  SampleResult item = stream->Next();
  EXPECT_EQ(item.status().code(), absl::StatusCode::kCancelled) << item.status();
  EXPECT_TRUE(warnings.empty());                // not skipped like a bad shard ...
  EXPECT_TRUE(ctx.errors->Snapshot().empty());  // ... nor counted as one
}

TEST(InterruptTest, StoppingALoaderJoinsWorkersStalledOnAPipe) {
  auto pipeline = WebDataset(std::vector<std::string>{"pipe:sleep 30", "pipe:sleep 30"});
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  auto loader = std::make_unique<Loader>(*pipeline, LoaderOptions{.workers = 2});
  // The consumer gives up after 200 ms; the epoch goes on.
  absl::StatusOr<std::optional<Sample>> item;
  {
    ScopedInterruptCheck check(CancelAfter(milliseconds(200)));
    item = loader->Next();
  }
  EXPECT_EQ(item.status(), absl::CancelledError("give up"));
  EXPECT_TRUE(loader->in_epoch());
  const auto start = steady_clock::now();
  loader.reset();  // both workers are inside a read of `sleep 30`'s output
  // Liveness, with room for a loaded machine: far below the 30 s of `sleep`.
  EXPECT_LT(SecondsSince(start), 10.0);
}

TEST(InterruptTest, AnInterruptedNextLosesNothing) {
  testing::TempDir dir;
  const std::string shard = dir.Write(
      "a.tar", testing::MakeTar({{"a.txt", "1"}, {"b.txt", "2"}}, testing::TarFormat::kUstar));
  auto pipeline = WebDataset("pipe:sleep 0.5 && cat " + shard);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  Loader loader(*pipeline, LoaderOptions{.workers = 1});
  {
    ScopedInterruptCheck check(CancelAfter(milliseconds(100)));
    EXPECT_EQ(loader.Next().status(), absl::CancelledError("give up"));
  }
  std::vector<std::string> keys;
  while (true) {
    absl::StatusOr<std::optional<Sample>> item = loader.Next();
    ASSERT_TRUE(item.ok()) << item.status();
    if (!item->has_value()) break;
    keys.push_back(testing::FieldText(**item, "__key__"));
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(loader.epoch(), 1);
}

TEST(InterruptTest, ASignalDuringTheWaitIsNoError) {
  // poll() returns EINTR: the wait asks the check and goes on.
  struct sigaction action {};
  action.sa_handler = [](int) {};
  struct sigaction previous {};
  ASSERT_EQ(sigaction(SIGUSR1, &action, &previous), 0);
  auto stream = OpenUrl("pipe:sleep 30");
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::atomic<bool> signalled{false};
  const pthread_t self = pthread_self();
  std::thread sender([&] {
    std::this_thread::sleep_for(milliseconds(100));
    signalled = true;
    pthread_kill(self, SIGUSR1);
  });
  std::atomic<int> calls{0};
  char buffer[16];
  absl::StatusOr<size_t> n;
  {
    ScopedInterruptCheck check([&] {
      ++calls;
      return signalled ? absl::CancelledError("signalled") : absl::OkStatus();
    });
    n = (*stream)->Read(buffer, sizeof buffer);
  }
  sender.join();
  sigaction(SIGUSR1, &previous, nullptr);
  EXPECT_EQ(n.status(), absl::CancelledError("signalled"));
}

}  // namespace
}  // namespace wds
