// Tests for the Loader: worker threads, round-robin order, epoch sizing,
// shutdown, rank/world resolution and error counting. Sources are in-memory
// streams whose items are named after the WorkerContext that produced them.
#include "wds/loader/loader.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/output_slots.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/base/error_kind.h"
#include "wds/base/stage.h"
#include "wds/decode/decode.h"
#include "wds/internal/base/worker_wiring.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;
using Clock = std::chrono::steady_clock;

// SourceSpec describes the in-memory source: worker w yields lengths[w] items
// per pass (0 beyond the list), named "w<worker>/e<epoch>/p<pass>/i<index>".
struct SourceSpec {
  std::vector<int> lengths;
  bool endless = false;             // every worker yields forever
  std::optional<int> error_worker;  // this worker fails after error_after items
  int error_after = 0;
  bool throw_instead = false;  // the failure is an exception, not a Status
  bool jitter = false;         // sleep a little per item, differently per worker
  std::shared_ptr<std::atomic<int>> live = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> produced = std::make_shared<std::atomic<int>>(0);
};

std::string ItemKey(const WorkerContext& ctx, int index) {
  return "w" + std::to_string(ctx.worker) + "/e" + std::to_string(ctx.epoch) + "/p" +
         std::to_string(ctx.pass) + "/i" + std::to_string(index);
}

class TestStream : public SampleStream {
 public:
  TestStream(const SourceSpec& spec, const WorkerContext& ctx) : spec_(spec), ctx_(ctx) {
    ++*spec_.live;
    const size_t w = static_cast<size_t>(ctx.worker);
    length_ = w < spec.lengths.size() ? spec.lengths[w] : 0;
  }
  ~TestStream() override { --*spec_.live; }

  SampleResult Next() override {
    if (spec_.error_worker == ctx_.worker && index_ == spec_.error_after) {
      if (spec_.throw_instead) throw std::runtime_error("boom in test stream");
      return absl::DataLossError("worker " + std::to_string(ctx_.worker) + " hit bad data");
    }
    if (!spec_.endless && index_ >= length_) return std::nullopt;
    if (spec_.jitter) {
      std::this_thread::sleep_for(
          std::chrono::microseconds(((ctx_.worker * 7 + index_ * 3) % 5) * 300));
    }
    Sample s;
    s.Set(std::string(kKeyField), ItemKey(ctx_, index_));
    s.Set("index", int64_t{index_});
    s.Set("worker", int64_t{ctx_.worker});
    s.Set("num_workers", int64_t{ctx_.num_workers});
    s.Set("rank", int64_t{ctx_.rank});
    s.Set("world_size", int64_t{ctx_.world_size});
    s.Set("seed", static_cast<int64_t>(ctx_.seed));
    ++index_;
    ++*spec_.produced;
    return s;
  }

 private:
  SourceSpec spec_;
  WorkerContext ctx_;
  int length_ = 0;
  int index_ = 0;
};

Pipeline TestPipeline(const SourceSpec& spec, uint64_t seed = 0) {
  return Pipeline(
      [spec](const WorkerContext& ctx) { return std::make_unique<TestStream>(spec, ctx); }, seed);
}

// TakeEpoch takes items until the end of the epoch; the error that ended it, if any,
// goes to *status.
std::vector<std::string> TakeEpoch(Loader& loader, absl::Status* status = nullptr) {
  std::vector<std::string> keys;
  while (true) {
    absl::StatusOr<std::optional<Sample>> item = loader.Next();
    if (!item.ok()) {
      if (status != nullptr) *status = item.status();
      return keys;
    }
    if (!item->has_value()) return keys;
    keys.emplace_back((*item)->key());
  }
}

std::vector<std::string> TakeEpochOk(Loader& loader) {
  absl::Status status;
  std::vector<std::string> keys = TakeEpoch(loader, &status);
  EXPECT_TRUE(status.ok()) << status;
  return keys;
}

std::vector<std::string> Keys(std::initializer_list<const char*> keys) {
  return std::vector<std::string>(keys.begin(), keys.end());
}

// kPromptly bounds, in seconds, how long destroying a loader may take:
// milliseconds unloaded, with room for a loaded machine; a worker that missed
// the stop would never end (an endless source, or the wait for the next
// epoch).
constexpr double kPromptly = 10.0;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// EnvGuard clears the rank/world variables and restores them afterwards.
class EnvGuard {
 public:
  EnvGuard() {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  ~EnvGuard() {
    for (const auto& [name, value] : saved_) {
      if (value.has_value()) {
        setenv(name, value->c_str(), 1);
      } else {
        unsetenv(name);
      }
    }
  }
  void Set(const char* name, const char* value) { setenv(name, value, 1); }

 private:
  static constexpr const char* kNames[] = {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

const std::vector<std::string> kRoundRobin523 =
    Keys({"w0/e0/p0/i0", "w1/e0/p0/i0", "w2/e0/p0/i0", "w0/e0/p0/i1", "w1/e0/p0/i1", "w2/e0/p0/i1",
          "w0/e0/p0/i2", "w2/e0/p0/i2", "w0/e0/p0/i3", "w0/e0/p0/i4"});

TEST(LoaderTest, OrderedIsRoundRobinSkippingEndedWorkers) {
  SourceSpec spec{.lengths = {5, 2, 3}, .jitter = true};
  Loader loader(TestPipeline(spec), {.workers = 3, .prefetch = 2});
  EXPECT_EQ(TakeEpochOk(loader), kRoundRobin523);
}

TEST(LoaderTest, OrderedWithPrefetchOneKeepsOrder) {
  SourceSpec spec{.lengths = {5, 2, 3}, .jitter = true};
  Loader loader(TestPipeline(spec), {.workers = 3, .prefetch = 1});
  EXPECT_EQ(TakeEpochOk(loader), kRoundRobin523);
}

TEST(LoaderTest, UnorderedYieldsSameMultiset) {
  SourceSpec spec{.lengths = {5, 2, 3}, .jitter = true};
  Loader loader(TestPipeline(spec), {.workers = 3, .prefetch = 2, .ordered = false});
  EXPECT_THAT(TakeEpochOk(loader), UnorderedElementsAreArray(kRoundRobin523));
}

TEST(LoaderTest, TwoLoadersGiveTheSameStream) {
  SourceSpec spec{.lengths = {7, 3, 6, 1}, .jitter = true};
  Loader a(TestPipeline(spec), {.workers = 4, .prefetch = 3});
  Loader b(TestPipeline(spec), {.workers = 4, .prefetch = 1});
  std::vector<std::string> first = TakeEpochOk(a);
  EXPECT_EQ(first.size(), 17u);
  EXPECT_EQ(TakeEpochOk(b), first);
}

TEST(LoaderTest, SingleWorkerYieldsItsStream) {
  SourceSpec spec{.lengths = {3}};
  Loader loader(TestPipeline(spec));
  EXPECT_EQ(TakeEpochOk(loader), Keys({"w0/e0/p0/i0", "w0/e0/p0/i1", "w0/e0/p0/i2"}));
}

TEST(LoaderTest, WorkersSeeTheirContext) {
  SourceSpec spec{.lengths = {1, 1}};
  Loader loader(TestPipeline(spec, /*seed=*/42), {.workers = 2, .rank = 1, .world_size = 3});
  for (int64_t w = 0; w < 2; ++w) {
    absl::StatusOr<std::optional<Sample>> item = loader.Next();
    ASSERT_TRUE(item.ok()) << item.status();
    ASSERT_TRUE(item->has_value());
    const Sample& s = **item;
    EXPECT_EQ(s.GetInt("worker"), w);
    EXPECT_EQ(s.GetInt("num_workers"), 2);
    EXPECT_EQ(s.GetInt("rank"), 1);
    EXPECT_EQ(s.GetInt("world_size"), 3);
    EXPECT_EQ(s.GetInt("seed"), 42);
  }
}

TEST(LoaderTest, ErrorArrivesAtItsPlaceAndEndsTheEpoch) {
  SourceSpec spec{.lengths = {3, 3, 3}, .error_worker = 1, .error_after = 1, .jitter = true};
  Loader loader(TestPipeline(spec), {.workers = 3, .prefetch = 2});
  absl::Status status;
  EXPECT_EQ(TakeEpoch(loader, &status),
            Keys({"w0/e0/p0/i0", "w1/e0/p0/i0", "w2/e0/p0/i0", "w0/e0/p0/i1"}));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("worker 1 hit bad data"));
  EXPECT_EQ(loader.epoch(), 1);
  // The failed epoch's workers are gone; the next call starts epoch 1 afresh.
  EXPECT_EQ(spec.live->load(), 0);
  absl::StatusOr<std::optional<Sample>> next = loader.Next();
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((*next)->key(), "w0/e1/p0/i0");
}

TEST(LoaderTest, UnorderedErrorEndsTheEpoch) {
  SourceSpec spec{.lengths = {2, 2}, .error_worker = 0, .error_after = 0};
  Loader loader(TestPipeline(spec), {.workers = 2, .ordered = false});
  absl::Status status;
  std::vector<std::string> keys = TakeEpoch(loader, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("worker 0 hit bad data"));
  for (const std::string& key : keys) EXPECT_THAT(key, HasSubstr("w1/"));
  EXPECT_EQ(spec.live->load(), 0);
}

TEST(LoaderTest, ExceptionInStreamBecomesInternalError) {
  SourceSpec spec{.lengths = {2, 2}, .error_worker = 1, .error_after = 0, .throw_instead = true};
  Loader loader(TestPipeline(spec), {.workers = 2});
  absl::Status status;
  EXPECT_EQ(TakeEpoch(loader, &status), Keys({"w0/e0/p0/i0"}));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), HasSubstr("loader worker 1"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("boom in test stream"));
}

TEST(LoaderTest, ExceptionOpeningTheRecipeBecomesInternalError) {
  SourceSpec spec{.lengths = {2, 2}};
  Pipeline pipeline([spec](const WorkerContext& ctx) -> std::unique_ptr<SampleStream> {
    if (ctx.worker == 1) throw std::runtime_error("cannot open in test");
    return std::make_unique<TestStream>(spec, ctx);
  });
  Loader loader(pipeline, {.workers = 2});
  absl::Status status;
  EXPECT_EQ(TakeEpoch(loader, &status), Keys({"w0/e0/p0/i0"}));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), HasSubstr("loader worker 1: exception: cannot open"));
}

TEST(LoaderTest, NaturalEpochsReopenWithTheNextEpoch) {
  SourceSpec spec{.lengths = {2, 1}};
  Loader loader(TestPipeline(spec), {.workers = 2});
  EXPECT_EQ(loader.epoch(), 0);
  EXPECT_EQ(TakeEpochOk(loader), Keys({"w0/e0/p0/i0", "w1/e0/p0/i0", "w0/e0/p0/i1"}));
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(TakeEpochOk(loader), Keys({"w0/e1/p0/i0", "w1/e1/p0/i0", "w0/e1/p0/i1"}));
  EXPECT_EQ(loader.epoch(), 2);
  EXPECT_EQ(spec.live->load(), 0);
}

TEST(LoaderTest, StatsSayHowLongTheConsumerWaited) {
  // Each item takes at least 20 ms in the one worker: a consumer that asks at
  // once waits at least 5 x 20 ms; one that takes 30 ms per item itself does
  // not count that time as waiting.
  SourceSpec spec{.lengths = {5}};
  Loader loader(TestPipeline(spec).Map([](Sample s) -> absl::StatusOr<Sample> {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return s;
  }));
  EXPECT_EQ(loader.stats().epoch, -1);
  EXPECT_EQ(loader.stats().items, 0);
  EXPECT_EQ(TakeEpochOk(loader).size(), 5u);
  LoaderStats s = loader.stats();
  EXPECT_EQ(s.epoch, 0);
  EXPECT_EQ(s.items, 5);
  EXPECT_GE(s.seconds, 0.1);
  EXPECT_GE(s.wait_seconds, 0.05);  // less what the consumer took between calls
  EXPECT_GE(s.first_item_seconds, 0.02);
  EXPECT_LE(s.first_item_seconds, s.wait_seconds);
  EXPECT_LE(s.wait_seconds, s.seconds);
  // Between epochs, the last one's stay as they were.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(loader.stats().seconds, s.seconds);

  const auto started = Clock::now();
  absl::StatusOr<std::optional<Sample>> item = loader.Next();
  ASSERT_TRUE(item.ok() && item->has_value());
  LoaderStats running = loader.stats();
  EXPECT_EQ(running.epoch, 1);
  EXPECT_EQ(running.items, 1);
  EXPECT_GT(running.first_item_seconds, 0);
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the consumer's own time
    item = loader.Next();
    ASSERT_TRUE(item.ok());
  }
  EXPECT_FALSE(item->has_value());  // the end
  s = loader.stats();
  EXPECT_EQ(s.items, 5);
  EXPECT_GE(s.seconds - s.wait_seconds, 0.15);
  EXPECT_LE(s.seconds, SecondsSince(started));
}

TEST(LoaderTest, SetEpochChoosesTheNextEpoch) {
  SourceSpec spec{.lengths = {1}};
  Loader loader(TestPipeline(spec));
  loader.SetEpoch(5);
  EXPECT_EQ(loader.epoch(), 5);
  EXPECT_EQ(TakeEpochOk(loader), Keys({"w0/e5/p0/i0"}));
  EXPECT_EQ(loader.epoch(), 6);
  EXPECT_EQ(TakeEpochOk(loader), Keys({"w0/e6/p0/i0"}));
}

TEST(LoaderTest, SizeIsTheRecipeLength) {
  SourceSpec spec{.lengths = {1}};
  EXPECT_EQ(Loader(TestPipeline(spec)).size(), std::nullopt);
  EXPECT_EQ(Loader(TestPipeline(spec).WithLength(7)).size(), 7);
  EXPECT_EQ(Loader(TestPipeline(spec).WithEpoch(3)).size(), 3);
}

TEST(LoaderTest, WithLengthOnShortDataContinuesIntoNewPasses) {
  SourceSpec spec{.lengths = {2, 1}, .jitter = true};
  Loader loader(TestPipeline(spec).WithLength(7), {.workers = 2});
  EXPECT_EQ(TakeEpochOk(loader), Keys({"w0/e0/p0/i0", "w1/e0/p0/i0", "w0/e0/p0/i1", "w1/e0/p1/i0",
                                       "w0/e0/p1/i0", "w1/e0/p2/i0", "w0/e0/p1/i1"}));
  EXPECT_EQ(TakeEpochOk(loader), Keys({"w0/e1/p0/i0", "w1/e1/p0/i0", "w0/e1/p0/i1", "w1/e1/p1/i0",
                                       "w0/e1/p1/i0", "w1/e1/p2/i0", "w0/e1/p1/i1"}));
}

TEST(LoaderTest, WithLengthOnLongDataStopsAtNEachEpoch) {
  SourceSpec spec{.lengths = {100, 100}};
  Loader loader(TestPipeline(spec).WithLength(5), {.workers = 2, .prefetch = 4});
  EXPECT_EQ(TakeEpochOk(loader),
            Keys({"w0/e0/p0/i0", "w1/e0/p0/i0", "w0/e0/p0/i1", "w1/e0/p0/i1", "w0/e0/p0/i2"}));
  // The extra prefetched items went with the joined workers.
  EXPECT_EQ(spec.live->load(), 0);
  EXPECT_EQ(TakeEpochOk(loader),
            Keys({"w0/e1/p0/i0", "w1/e1/p0/i0", "w0/e1/p0/i1", "w1/e1/p0/i1", "w0/e1/p0/i2"}));
}

TEST(LoaderTest, WithLengthUnorderedYieldsExactlyN) {
  SourceSpec spec{.lengths = {3, 1, 2}, .jitter = true};
  Loader loader(TestPipeline(spec).WithLength(11), {.workers = 3, .ordered = false});
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::string> keys = TakeEpochOk(loader);
    EXPECT_EQ(keys.size(), 11u);
    for (const std::string& key : keys) {
      EXPECT_THAT(key, HasSubstr("/e" + std::to_string(epoch) + "/"));
    }
  }
}

TEST(LoaderTest, WithLengthZeroYieldsNothingAndStartsNoWorker) {
  SourceSpec spec{.lengths = {3}};
  Loader loader(TestPipeline(spec).WithLength(0));
  EXPECT_TRUE(TakeEpochOk(loader).empty());
  EXPECT_EQ(spec.produced->load(), 0);
  EXPECT_EQ(loader.epoch(), 1);
}

TEST(LoaderTest, WithLengthOverNoDataIsFailedPrecondition) {
  SourceSpec spec{.lengths = {0}};
  Loader loader(TestPipeline(spec).WithLength(3));
  absl::Status status;
  EXPECT_TRUE(TakeEpoch(loader, &status).empty());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("yielded no items"));
}

TEST(LoaderTest, WithEpochContinuesWhereThePreviousEpochStopped) {
  // Streams of 6 with prefetch 2: after the first epoch a worker holds at most
  // i2, i3 queued and i4 in hand, so neither stream can have ended (and been
  // replaced by the next pass's) when the live count is read.
  SourceSpec spec{.lengths = {6, 6}, .jitter = true};
  Loader loader(TestPipeline(spec).WithEpoch(4), {.workers = 2, .prefetch = 2});
  EXPECT_EQ(TakeEpochOk(loader),
            Keys({"w0/e0/p0/i0", "w1/e0/p0/i0", "w0/e0/p0/i1", "w1/e0/p0/i1"}));
  EXPECT_EQ(loader.epoch(), 1);
  // Streams survive the epoch boundary: they keep the epoch they opened in.
  EXPECT_EQ(spec.live->load(), 2);
  EXPECT_EQ(TakeEpochOk(loader),
            Keys({"w0/e0/p0/i2", "w1/e0/p0/i2", "w0/e0/p0/i3", "w1/e0/p0/i3"}));
  EXPECT_EQ(TakeEpochOk(loader),
            Keys({"w0/e0/p0/i4", "w1/e0/p0/i4", "w0/e0/p0/i5", "w1/e0/p0/i5"}));
  // An exhausted stream is followed by the next pass, still in the opening epoch.
  EXPECT_EQ(TakeEpochOk(loader),
            Keys({"w0/e0/p1/i0", "w1/e0/p1/i0", "w0/e0/p1/i1", "w1/e0/p1/i1"}));
  EXPECT_EQ(loader.epoch(), 4);
}

TEST(LoaderTest, WithEpochRotationContinuesAcrossEpochs) {
  SourceSpec spec{.lengths = {10, 10, 10}};
  Loader loader(TestPipeline(spec).WithEpoch(2), {.workers = 3});
  EXPECT_EQ(TakeEpochOk(loader), Keys({"w0/e0/p0/i0", "w1/e0/p0/i0"}));
  EXPECT_EQ(TakeEpochOk(loader), Keys({"w2/e0/p0/i0", "w0/e0/p0/i1"}));
}

TEST(LoaderTest, WithEpochReopensStreamsAfterAnError) {
  SourceSpec spec{.lengths = {5}, .error_worker = 0, .error_after = 2};
  Loader loader(TestPipeline(spec).WithEpoch(3));
  absl::Status status;
  EXPECT_EQ(TakeEpoch(loader, &status), Keys({"w0/e0/p0/i0", "w0/e0/p0/i1"}));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(spec.live->load(), 0);
  status = absl::OkStatus();
  EXPECT_EQ(TakeEpoch(loader, &status), Keys({"w0/e1/p0/i0", "w0/e1/p0/i1"}));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
}

// SigintBlockedStream yields one sample saying whether SIGINT is blocked in
// the thread that reads it.
class SigintBlockedStream : public SampleStream {
 public:
  SampleResult Next() override {
    if (done_) return std::nullopt;
    done_ = true;
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    Sample s;
    s.Set(std::string(kKeyField), std::string("k"));
    s.Set("sigint_blocked", int64_t{sigismember(&mask, SIGINT)});
    return s;
  }

 private:
  bool done_ = false;
};

TEST(LoaderTest, WorkersTakeNoAsynchronousSignalsAndTheCallersMaskIsKept) {
  // A SIGINT sent to the process must reach the application's threads (Python
  // handles it only in its main thread), never a worker.
  Loader loader(
      Pipeline([](const WorkerContext&) { return std::make_unique<SigintBlockedStream>(); }),
      {.workers = 2});
  int blocked = 0;
  while (true) {
    absl::StatusOr<std::optional<Sample>> item = loader.Next();
    ASSERT_TRUE(item.ok()) << item.status();
    if (!item->has_value()) break;
    blocked += static_cast<int>((*item)->GetInt("sigint_blocked").value_or(-100));
  }
  EXPECT_EQ(blocked, 2);
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  EXPECT_FALSE(sigismember(&mask, SIGINT));
}

TEST(LoaderTest, DestroyingMidEpochWithEndlessWorkersIsPrompt) {
  SourceSpec spec{.lengths = {}, .endless = true};
  auto loader =
      std::make_unique<Loader>(TestPipeline(spec), LoaderOptions{.workers = 3, .prefetch = 2});
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(loader->Next().ok());
  const Clock::time_point start = Clock::now();
  loader.reset();
  EXPECT_LT(SecondsSince(start), kPromptly);
  EXPECT_EQ(spec.live->load(), 0);
}

TEST(LoaderTest, WorkersBlockOnFullQueuesAndDestroyingThemIsPrompt) {
  SourceSpec spec{.lengths = {}, .endless = true};
  auto loader =
      std::make_unique<Loader>(TestPipeline(spec), LoaderOptions{.workers = 2, .prefetch = 1});
  ASSERT_TRUE(loader->Next().ok());
  // Worker 0: one taken, one queued, one in hand; worker 1: one queued, one in hand.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  while (spec.produced->load() < 5 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(spec.produced->load(), 5);
  const Clock::time_point start = Clock::now();
  loader.reset();
  EXPECT_LT(SecondsSince(start), kPromptly);
  EXPECT_EQ(spec.live->load(), 0);
}

TEST(LoaderTest, DestroyingAWithEpochLoaderBetweenEpochsIsPrompt) {
  SourceSpec spec{.lengths = {4, 4}};
  auto loader =
      std::make_unique<Loader>(TestPipeline(spec).WithEpoch(3), LoaderOptions{.workers = 2});
  EXPECT_EQ(TakeEpochOk(*loader).size(), 3u);
  const Clock::time_point start = Clock::now();
  loader.reset();
  EXPECT_LT(SecondsSince(start), kPromptly);
  EXPECT_EQ(spec.live->load(), 0);
}

TEST(LoaderTest, RangeForYieldsTheEpoch) {
  SourceSpec spec{.lengths = {2, 1}};
  Loader loader(TestPipeline(spec), {.workers = 2});
  std::vector<std::string> keys;
  for (const Sample& s : loader) keys.emplace_back(s.key());
  EXPECT_EQ(keys, Keys({"w0/e0/p0/i0", "w1/e0/p0/i0", "w0/e0/p0/i1"}));
  EXPECT_EQ(loader.epoch(), 1);
}

TEST(LoaderTest, BeginTwiceAbandonsTheFirstEpoch) {
  SourceSpec spec{.lengths = {4, 4}, .jitter = true};
  Loader loader(TestPipeline(spec), {.workers = 2});
  std::vector<std::string> keys;
  for (const Sample& s : loader) {
    keys.emplace_back(s.key());
    if (keys.size() == 3) break;
  }
  EXPECT_EQ(keys, Keys({"w0/e0/p0/i0", "w1/e0/p0/i0", "w0/e0/p0/i1"}));
  keys.clear();
  for (const Sample& s : loader) keys.emplace_back(s.key());
  EXPECT_EQ(keys, Keys({"w0/e1/p0/i0", "w1/e1/p0/i0", "w0/e1/p0/i1", "w1/e1/p0/i1", "w0/e1/p0/i2",
                        "w1/e1/p0/i2", "w0/e1/p0/i3", "w1/e1/p0/i3"}));
  EXPECT_EQ(loader.epoch(), 2);
  EXPECT_EQ(spec.live->load(), 0);
}

TEST(LoaderTest, BeginAbandonsAWithLengthEpoch) {
  SourceSpec spec{.lengths = {10}};
  Loader loader(TestPipeline(spec).WithLength(4));
  ASSERT_TRUE(loader.Next().ok());
  std::vector<std::string> keys;
  for (const Sample& s : loader) keys.emplace_back(s.key());
  EXPECT_EQ(keys, Keys({"w0/e1/p0/i0", "w0/e1/p0/i1", "w0/e1/p0/i2", "w0/e1/p0/i3"}));
}

TEST(LoaderTest, BeginKeepsAWithEpochStreamGoing) {
  SourceSpec spec{.lengths = {10}};
  Loader loader(TestPipeline(spec).WithEpoch(3));
  ASSERT_TRUE(loader.Next().ok());
  std::vector<std::string> keys;
  for (const Sample& s : loader) keys.emplace_back(s.key());
  EXPECT_EQ(keys, Keys({"w0/e0/p0/i1", "w0/e0/p0/i2", "w0/e0/p0/i3"}));
  EXPECT_EQ(loader.epoch(), 2);
}

TEST(LoaderTest, LoaderErrorWhatIsCodeAndMessageWithoutPayloads) {
  LoaderError error(
      WithErrorKind(absl::DataLossError("x.tar: truncated"), ErrorKind::kShardUnreadable, "x.tar"));
  EXPECT_STREQ(error.what(), "DATA_LOSS: x.tar: truncated");
  EXPECT_EQ(ErrorKindOf(error.status()), ErrorKind::kShardUnreadable);
}

TEST(LoaderTest, RangeForThrowsLoaderErrorWithTheStatus) {
  SourceSpec spec{.lengths = {3}, .error_worker = 0, .error_after = 1};
  Loader loader(TestPipeline(spec));
  std::vector<std::string> keys;
  try {
    for (const Sample& s : loader) keys.emplace_back(s.key());
    ADD_FAILURE() << "no LoaderError thrown";
  } catch (const LoaderError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(e.what(), HasSubstr("DATA_LOSS"));
    EXPECT_THAT(e.what(), HasSubstr("worker 0 hit bad data"));
  }
  EXPECT_EQ(keys, Keys({"w0/e0/p0/i0"}));
}

TEST(LoaderTest, ZeroWorkersIsInvalidArgument) {
  SourceSpec spec{.lengths = {1}};
  Loader loader(TestPipeline(spec), {.workers = 0});
  absl::StatusOr<std::optional<Sample>> item = loader.Next();
  EXPECT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(item.status().message()), HasSubstr("LoaderOptions.workers"));
  // The error is permanent, not one epoch's.
  EXPECT_EQ(loader.Next().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.live->load(), 0);
  // A loader that failed its setup still has a (never used) batch pool.
  ASSERT_NE(loader.pool(), nullptr);
  EXPECT_FALSE(loader.pool()->pinned());
}

TEST(LoaderTest, ZeroPrefetchIsInvalidArgumentAndBeginThrows) {
  SourceSpec spec{.lengths = {1}};
  Loader loader(TestPipeline(spec), {.prefetch = 0});
  try {
    for (const Sample& s : loader) ADD_FAILURE() << "got " << s.key();
    ADD_FAILURE() << "no LoaderError thrown";
  } catch (const LoaderError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("LoaderOptions.prefetch"));
  }
}

TEST(LoaderTest, NegativeLengthIsInvalidArgument) {
  SourceSpec spec{.lengths = {1}};
  Loader loader(TestPipeline(spec).WithLength(-1));
  absl::StatusOr<std::optional<Sample>> item = loader.Next();
  EXPECT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(item.status().message()), HasSubstr("length must be >= 0"));
}

TEST(LoaderTest, PlacementDefaultsToRankZeroOfOne) {
  EnvGuard env;
  Loader loader(TestPipeline({.lengths = {1}}));
  EXPECT_EQ(loader.rank(), 0);
  EXPECT_EQ(loader.world_size(), 1);
  EXPECT_TRUE(loader.Next().ok());
}

TEST(LoaderTest, PlacementReadsTorchrunEnv) {
  EnvGuard env;
  env.Set("RANK", "2");
  env.Set("WORLD_SIZE", "4");
  Loader loader(TestPipeline({.lengths = {1}}));
  EXPECT_EQ(loader.rank(), 2);
  EXPECT_EQ(loader.world_size(), 4);
  absl::StatusOr<std::optional<Sample>> item = loader.Next();
  ASSERT_TRUE(item.ok() && item->has_value()) << item.status();
  EXPECT_EQ((*item)->GetInt("rank"), 2);
  EXPECT_EQ((*item)->GetInt("world_size"), 4);
}

TEST(LoaderTest, PlacementReadsSlurmEnv) {
  EnvGuard env;
  env.Set("SLURM_PROCID", "1");
  env.Set("SLURM_NTASKS", "3");
  Loader loader(TestPipeline({.lengths = {1}}));
  EXPECT_EQ(loader.rank(), 1);
  EXPECT_EQ(loader.world_size(), 3);
}

TEST(LoaderTest, TorchrunEnvWinsOverSlurm) {
  EnvGuard env;
  env.Set("RANK", "5");
  env.Set("WORLD_SIZE", "8");
  env.Set("SLURM_PROCID", "1");
  env.Set("SLURM_NTASKS", "2");
  Loader loader(TestPipeline({.lengths = {1}}));
  EXPECT_EQ(loader.rank(), 5);
  EXPECT_EQ(loader.world_size(), 8);
}

TEST(LoaderTest, ExplicitPlacementIgnoresEnv) {
  EnvGuard env;
  env.Set("RANK", "junk");
  env.Set("WORLD_SIZE", "junk");
  Loader loader(TestPipeline({.lengths = {1}}), {.rank = 1, .world_size = 2});
  EXPECT_EQ(loader.rank(), 1);
  EXPECT_EQ(loader.world_size(), 2);
  EXPECT_TRUE(loader.Next().ok());
}

TEST(LoaderTest, ExplicitRankTakesWorldSizeFromEnv) {
  EnvGuard env;
  env.Set("RANK", "0");
  env.Set("WORLD_SIZE", "6");
  Loader loader(TestPipeline({.lengths = {1}}), {.rank = 3});
  EXPECT_EQ(loader.rank(), 3);
  EXPECT_EQ(loader.world_size(), 6);
}

TEST(LoaderTest, MalformedEnvValueIsErrorNamingTheVariable) {
  for (const char* bad : {"4x", "", " 4", "4.0", "99999999999"}) {
    EnvGuard env;
    env.Set("RANK", "0");
    env.Set("WORLD_SIZE", bad);
    Loader loader(TestPipeline({.lengths = {1}}));
    absl::StatusOr<std::optional<Sample>> item = loader.Next();
    EXPECT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(item.status().message()),
                HasSubstr("WORLD_SIZE=\"" + std::string(bad) + "\" is not an integer"));
  }
}

TEST(LoaderTest, MalformedSlurmValueIsErrorNamingTheVariable) {
  EnvGuard env;
  env.Set("SLURM_PROCID", "-");
  env.Set("SLURM_NTASKS", "2");
  Loader loader(TestPipeline({.lengths = {1}}));
  absl::StatusOr<std::optional<Sample>> item = loader.Next();
  EXPECT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(item.status().message()), HasSubstr("SLURM_PROCID=\"-\""));
}

TEST(LoaderTest, RankWithoutWorldSizeIsError) {
  EnvGuard env;
  env.Set("RANK", "1");
  Loader loader(TestPipeline({.lengths = {1}}));
  absl::StatusOr<std::optional<Sample>> item = loader.Next();
  EXPECT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(item.status().message()),
              HasSubstr("WORLD_SIZE is not set although RANK is"));
}

TEST(LoaderTest, RankOutOfRangeIsError) {
  EnvGuard env;
  env.Set("RANK", "4");
  env.Set("WORLD_SIZE", "4");
  Loader loader(TestPipeline({.lengths = {1}}));
  absl::StatusOr<std::optional<Sample>> item = loader.Next();
  EXPECT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(item.status().message()), HasSubstr("rank 4 from RANK is not in [0, 4)"));
}

TEST(LoaderTest, ZeroWorldSizeIsError) {
  EnvGuard env;
  Loader loader(TestPipeline({.lengths = {1}}), {.rank = 0, .world_size = 0});
  absl::StatusOr<std::optional<Sample>> item = loader.Next();
  EXPECT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(item.status().message()),
              HasSubstr("world size 0 from LoaderOptions.world_size must be >= 1"));
}

// DropOdd sends every item with an odd index to its handler as DataLoss.
StageFactory DropOdd(Handler handler) {
  class Stream : public SampleStream {
   public:
    Stream(std::unique_ptr<SampleStream> up, WorkerContext ctx, Handler handler)
        : up_(std::move(up)), ctx_(std::move(ctx)), handler_(handler) {}
    SampleResult Next() override {
      while (true) {
        SampleResult item = up_->Next();
        if (!item.ok() || !item->has_value()) return item;
        if (*(*item)->GetInt("index") % 2 == 0) return item;
        absl::Status error = absl::DataLossError(std::string((*item)->key()) + " is odd");
        switch (ctx_.Handle(handler_, "drop_odd", error)) {
          case ErrorAction::kRaise:
            return error;
          case ErrorAction::kStop:
            return std::nullopt;
          case ErrorAction::kContinue:
            break;
        }
      }
    }

   private:
    std::unique_ptr<SampleStream> up_;
    WorkerContext ctx_;
    Handler handler_;
  };
  return [handler](const StreamFactory& upstream, const WorkerContext& ctx) {
    return std::make_unique<Stream>(upstream(ctx), ctx, handler);
  };
}

TEST(LoaderTest, ErrorsCountsHandledErrorsOfAllWorkersAndEpochs) {
  SourceSpec spec{.lengths = {5, 2, 3}};
  std::mutex mu;
  std::vector<std::string> warnings;
  LoaderOptions options{.workers = 3, .warn = [&](std::string_view message) {
                          std::lock_guard<std::mutex> lock(mu);
                          warnings.emplace_back(message);
                        }};
  Loader loader(TestPipeline(spec).Then(DropOdd(Handler::kWarnAndContinue)), options);
  EXPECT_EQ(TakeEpochOk(loader), Keys({"w0/e0/p0/i0", "w1/e0/p0/i0", "w2/e0/p0/i0", "w0/e0/p0/i2",
                                       "w2/e0/p0/i2", "w0/e0/p0/i4"}));
  EXPECT_EQ(loader.errors().Count("drop_odd", absl::StatusCode::kDataLoss), 4);
  EXPECT_EQ(TakeEpochOk(loader).size(), 6u);
  EXPECT_EQ(loader.errors().Count("drop_odd", absl::StatusCode::kDataLoss), 8);
  EXPECT_EQ(loader.errors().Total(), 8);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(warnings.size(), 8u);
  EXPECT_THAT(warnings, ::testing::Contains(HasSubstr("drop_odd: DATA_LOSS: w1/e0/p0/i1 is odd")));
}

TEST(LoaderTest, ErrorsCountsMapFailuresUnderWarnAndContinue) {
  SourceSpec spec{.lengths = {3, 3}};
  std::atomic<int> warnings{0};
  LoaderOptions options{.workers = 2, .warn = [&](std::string_view) { ++warnings; }};
  Pipeline pipeline = TestPipeline(spec).Map(
      [](Sample s) -> absl::StatusOr<Sample> {
        if (*s.GetInt("index") == 1) return absl::InvalidArgumentError("no odd ones");
        return s;
      },
      Handler::kWarnAndContinue);
  Loader loader(pipeline, options);
  EXPECT_EQ(TakeEpochOk(loader),
            Keys({"w0/e0/p0/i0", "w1/e0/p0/i0", "w0/e0/p0/i2", "w1/e0/p0/i2"}));
  EXPECT_EQ(loader.errors().Count("map", absl::StatusCode::kInvalidArgument), 2);
  EXPECT_EQ(warnings.load(), 2);
}

TEST(LoaderTest, StopHandlerEndsOnlyThatWorker) {
  SourceSpec spec{.lengths = {4, 4}};
  Loader loader(TestPipeline(spec).Then(DropOdd(Handler::kIgnoreAndStop)), {.workers = 2});
  EXPECT_EQ(TakeEpochOk(loader), Keys({"w0/e0/p0/i0", "w1/e0/p0/i0"}));
  EXPECT_EQ(loader.errors().Count("drop_odd", absl::StatusCode::kDataLoss), 2);
}

// Images decoded in place by a worker (here a stand-in decoder writing each
// sample's "raw" bytes into the slot Batched offers) reach the consumer
// intact: the batch block crosses threads through the queue.
TEST(LoaderTest, BatchesDecodedInPlaceReachTheConsumerIntact) {
  SourceSpec spec;
  spec.lengths = {10, 10};
  auto accepted = std::make_shared<std::atomic<int>>(0);
  FieldDecoder fill = [accepted](std::string_view field, const Buffer& data,
                                 DecodeContext& ctx) -> absl::StatusOr<std::optional<Value>> {
    if (field != "raw") return std::nullopt;
    Array a{DType::kUInt8, {static_cast<int64_t>(data.size())}, Buffer()};
    OutputSlots* slots = ctx.worker != nullptr ? WiringOf(*ctx.worker).output_slots.get() : nullptr;
    if (slots != nullptr) a.data = slots->Offer(field, a.dtype, a.shape);
    if (a.data.empty()) {
      a = Array::Allocate(a.dtype, a.shape);
    } else {
      ++*accepted;
    }
    std::memcpy(a.mutable_data<uint8_t>(), data.data(), data.size());
    return Value(std::move(a));
  };
  Pipeline p = TestPipeline(spec)
                   .Map([](Sample s) -> absl::StatusOr<Sample> {
                     const std::string key(s.key());
                     s.Set("raw", Buffer::Copy(key + std::string(16 - key.size(), '.')));
                     return s;
                   })
                   .Decode({fill}, {.only = {"raw"}})
                   .Batched(4);
  Loader loader(p, {.workers = 2, .prefetch = 2});
  int samples = 0;
  while (true) {
    absl::StatusOr<std::optional<Sample>> batch = loader.Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    if (!batch->has_value()) break;
    const TextList& keys = std::get<TextList>(*(*batch)->Find("__key__"));
    const Array& raw = std::get<Array>(*(*batch)->Find("raw"));
    ASSERT_EQ(raw.shape, (std::vector<int64_t>{static_cast<int64_t>(keys.size()), 16}));
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string row(reinterpret_cast<const char*>(raw.data_as<uint8_t>()) + 16 * i, 16);
      EXPECT_EQ(row, keys[i] + std::string(16 - keys[i].size(), '.'));
    }
    samples += static_cast<int>(keys.size());
  }
  EXPECT_EQ(samples, 20);
  EXPECT_EQ(accepted->load(), 20);
}

// ProcessResources counts what a leak would leave behind: open descriptors,
// threads and child processes of this process.
struct ProcessResources {
  int fds = 0;
  int threads = 0;
  int children = 0;
};

int CountEntries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n - (std::string(dir) == "/proc/self/fd");  // opendir's own descriptor
}

int CountChildren() {
  int n = 0;
  const std::string me = std::to_string(getpid());
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(stat, line);
    // pid (comm) state ppid ...: comm may hold spaces, so parse after ')'.
    std::istringstream rest(line.substr(line.rfind(')') + 1));
    std::string state, ppid;
    rest >> state >> ppid;
    n += ppid == me;
  }
  closedir(d);
  return n;
}

ProcessResources Resources() {
  return {CountEntries("/proc/self/fd"), CountEntries("/proc/self/task"), CountChildren()};
}

// ThreadsSettleTo returns this process's thread count once it is `want`, or
// after 10 s: a joined thread may stay in /proc/self/task for a moment after
// the join returns (the kernel wakes the joiner before the thread is gone),
// longer on a loaded machine. A leaked thread never settles.
int ThreadsSettleTo(int want) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  int now = Resources().threads;
  while (now != want && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    now = Resources().threads;
  }
  return now;
}

TEST(LoaderStressTest, StoppedAndRestartedTwoThousandTimesLeaksNothing) {
  testing::TempDir dir;
  std::vector<std::string> files, piped;
  for (int shard = 0; shard < 6; ++shard) {
    std::vector<testing::TarEntry> entries;
    for (int i = 0; i < 20; ++i) {
      const std::string key = "s" + std::to_string(shard * 100 + i);
      entries.push_back({key + ".bin", std::string(100 + i, 'x')});
      entries.push_back({key + ".cls", std::to_string(i)});
    }
    const std::string path =
        dir.Write("s" + std::to_string(shard) + ".tar", testing::MakeTar(entries));
    files.push_back(path);
    // A third of these shards come through child processes, to be reaped.
    piped.push_back(shard % 3 == 0 ? "pipe:cat " + path : path);
  }
  auto make = [](const std::vector<std::string>& urls) {
    absl::StatusOr<Pipeline> source = WebDataset(urls, {.seed = 1, .shardshuffle = true});
    EXPECT_TRUE(source.ok());
    return source->Shuffle(10).Decode().ToTuple({"bin", "cls"}).Batched(4);
  };
  // Starting a command costs milliseconds here: one round in eight has them.
  const Pipeline from_files = make(files);
  const Pipeline with_commands = make(piped);
  const ProcessResources before = Resources();
  std::mt19937 rng(42);
  for (int round = 0; round < 2000; ++round) {
    const int workers = 1 + static_cast<int>(rng() % 4);
    const int prefetch = 1 + static_cast<int>(rng() % 3);
    const int stop_after = static_cast<int>(rng() % 32);  // 30 batches in a full epoch
    Loader loader(round % 8 == 0 ? with_commands : from_files,
                  {.workers = workers, .prefetch = prefetch});
    int taken = 0;
    while (taken < stop_after) {
      absl::StatusOr<std::optional<Sample>> batch = loader.Next();
      ASSERT_TRUE(batch.ok()) << batch.status();
      if (!batch->has_value()) break;
      ++taken;
    }
  }
  // Child processes are reaped by the stream that started them, before the
  // Loader's destructor returns.
  const ProcessResources after = Resources();
  EXPECT_EQ(after.fds, before.fds);
  EXPECT_EQ(after.children, before.children);
  EXPECT_EQ(ThreadsSettleTo(before.threads), before.threads);
}

}  // namespace
}  // namespace wds
