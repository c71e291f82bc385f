// Tests for host allocators, the pinned-memory fallback, BufferPool recycling
// (also under ThreadSanitizer) and the Loader's pool.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/host_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/base/buffer_pool.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"

#if WDS_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::wds::testing::ScopedEnv;
using ::wds::testing::VectorSource;

// CountingAllocator records what it hands out and takes back.
class CountingAllocator final : public HostAllocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (fail_)
      return absl::ResourceExhaustedError(std::string("no room for ") + std::to_string(bytes));
    void* p = std::aligned_alloc(kHostAlignment,
                                 (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment);
    std::lock_guard<std::mutex> lock(mu_);
    live_.insert(p);
    ++allocations_;
    return p;
  }
  void Deallocate(void* p, size_t /*bytes*/) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      EXPECT_EQ(live_.erase(p), 1u) << "freed a block it did not allocate";
      freed_.push_back(p);
    }
    std::free(p);
  }
  bool pinned() const override { return false; }
  std::string_view name() const override { return "counting"; }

  void set_fail(bool fail) { fail_ = fail; }
  size_t live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.size();
  }
  int allocations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return allocations_;
  }
  std::vector<void*> freed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return freed_;
  }

 private:
  mutable std::mutex mu_;
  std::set<void*> live_;
  std::vector<void*> freed_;
  int allocations_ = 0;
  std::atomic<bool> fail_{false};
};

// PinnedMemoryWorks: pinned memory must work exactly where the library was
// built with CUDA, a CUDA device node exists and CUDA_VISIBLE_DEVICES does
// not hide every device ("" or a list starting with an invalid -1).
bool PinnedMemoryWorks() {
#if WDS_WITH_CUDA
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && (*visible == '\0' || std::string_view(visible).rfind("-1", 0) == 0)) {
    return false;
  }
  return access("/dev/nvidia0", F_OK) == 0;
#else
  return false;
#endif
}

// RanWithoutDevices is for the tests of what happens where memory cannot be
// pinned. Where it can (a GPU machine), the calling test runs itself again in
// a child process that sees no CUDA device (CUDA_VISIBLE_DEVICES=""), checks
// that the child ran it and passed, and returns true: the test is done.
// Elsewhere it returns false and the test runs here.
bool RanWithoutDevices() {
  if (!PinnedMemoryWorks()) return false;
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter =
      std::string("--gtest_filter=") + test->test_suite_name() + "." + test->name();
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).rfind("CUDA_VISIBLE_DEVICES=", 0) != 0) env_text.emplace_back(*e);
  }
  env_text.emplace_back("CUDA_VISIBLE_DEVICES=");
  std::vector<char*> env;
  for (std::string& e : env_text) env.push_back(e.data());
  env.push_back(nullptr);
  testing::TempDir dir;
  const std::string out = dir.path() + "/out";
  const pid_t pid = fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    char* const argv[] = {const_cast<char*>("memory_test"), const_cast<char*>(filter.c_str()),
                          nullptr};
    execve("/proc/self/exe", argv, env.data());
    _exit(127);
  }
  int status = -1;
  EXPECT_GT(pid, 0);
  if (pid > 0) waitpid(pid, &status, 0);
  const std::string log = testing::ReadFile(out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
  EXPECT_THAT(log, HasSubstr("[  PASSED  ] 1 test.")) << log;
  EXPECT_THAT(log, Not(HasSubstr("SKIPPED"))) << log;
  return true;
}

// ExpectPinnedOn checks that CUDA itself sees `p` as page-locked host memory
// allocated for `device` (when the test is built without CUDA, the allocator
// could not have returned any).
void ExpectPinnedOn(const void* p, int device) {
#if WDS_WITH_CUDA
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, p), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  EXPECT_EQ(attributes.device, device);
#else
  ADD_FAILURE() << "pinned memory " << p << " for device " << device << " without CUDA";
#endif
}

// ---------------------------------------------------------- allocators

TEST(AlignedHostAllocatorTest, IsPageAlignedAndNotPinned) {
  std::shared_ptr<HostAllocator> a = AlignedHostAllocator();
  EXPECT_FALSE(a->pinned());
  EXPECT_EQ(a->name(), "aligned");
  for (size_t bytes : {size_t{1}, size_t{100}, size_t{5000}, size_t{1} << 20}) {
    absl::StatusOr<void*> p = a->Allocate(bytes);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 4096, 0u) << bytes;
    std::memset(*p, 0xab, bytes);
    a->Deallocate(*p, bytes);
  }
}

// IsMapped tells whether the page holding `p` is mapped in this process.
bool IsMapped(const void* p) {
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095});
  return msync(page, 4096, MS_ASYNC) == 0;
}

TEST(AlignedHostAllocatorTest, LargeBlocksAreHugePageAligned) {
  std::shared_ptr<HostAllocator> a = AlignedHostAllocator();
  const size_t bytes = size_t{36} << 20;
  void* p = *a->Allocate(bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20), 0u);
  std::memset(p, 1, bytes);
  a->Deallocate(p, bytes);
  EXPECT_FALSE(IsMapped(p));  // given straight back to the kernel
}

TEST(AlignedHostAllocatorTest, SmallBlocksShareSlabsThatAreReturnedWhenFree) {
  std::shared_ptr<HostAllocator> a = AlignedHostAllocator();
  const size_t bytes = 80 << 10;  // 25 fit in a 2 MiB slab
  std::vector<void*> blocks;
  for (int i = 0; i < 30; ++i) blocks.push_back(*a->Allocate(bytes));
  for (int i = 1; i < 25; ++i) {  // carved one after another from the first slab
    EXPECT_EQ(static_cast<char*>(blocks[i]) - static_cast<char*>(blocks[i - 1]),
              static_cast<ptrdiff_t>(bytes));
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[0]) % (size_t{2} << 20), 0u);
  std::set<void*> distinct(blocks.begin(), blocks.end());
  EXPECT_EQ(distinct.size(), blocks.size());
  for (void* p : blocks) std::memset(p, 0xcd, bytes);
  // The first slab is full: freeing its 25 blocks returns it; the second
  // stays while blocks are carved from it.
  for (int i = 0; i < 25; ++i) a->Deallocate(blocks[i], bytes);
  EXPECT_FALSE(IsMapped(blocks[0]));
  for (int i = 25; i < 30; ++i) a->Deallocate(blocks[i], bytes);
  EXPECT_TRUE(IsMapped(blocks[25]));
}

TEST(PinnedHostAllocatorTest, WithoutADeviceIsFailedPrecondition) {
  if (RanWithoutDevices()) return;
  absl::StatusOr<std::shared_ptr<HostAllocator>> a = PinnedHostAllocator(0);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("CUDA"));
}

TEST(PinnedHostAllocatorTest, WithADeviceAllocatesPinnedMemory) {
  if (!PinnedMemoryWorks()) GTEST_SKIP() << "no CUDA device (or built without CUDA)";
  absl::StatusOr<std::shared_ptr<HostAllocator>> a = PinnedHostAllocator(0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE((*a)->pinned());
  EXPECT_EQ((*a)->name(), "cuda_pinned(device 0)");
  absl::StatusOr<void*> p = (*a)->Allocate(1 << 20);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % kHostAlignment, 0u);
  ExpectPinnedOn(*p, 0);
  std::memset(*p, 0x5a, 1 << 20);
  (*a)->Deallocate(*p, 1 << 20);
}

TEST(PinnedHostAllocatorTest, DeviceBeyondTheVisibleOnesIsInvalidArgument) {
  if (!PinnedMemoryWorks()) GTEST_SKIP() << "no CUDA device (or built without CUDA)";
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", nullptr);
  absl::StatusOr<std::shared_ptr<HostAllocator>> a = PinnedHostAllocator(4096);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(a.status().message()),
              ::testing::MatchesRegex("CUDA device 4096 is out of range: [0-9]+ devices? (is|are) "
                                      "visible \\(CUDA_VISIBLE_DEVICES=<unset>\\)"));
  EXPECT_EQ(PinnedHostAllocator(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DefaultBatchAllocatorTest, WithoutPinMemoryIsAlignedWithoutNote) {
  absl::StatusOr<BatchAllocator> chosen = DefaultBatchAllocator(false, 3);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_FALSE(chosen->allocator->pinned());
  EXPECT_EQ(chosen->allocator->name(), "aligned");
  EXPECT_EQ(chosen->note, "");
}

TEST(DefaultBatchAllocatorTest, PinMemoryWithoutDeviceFallsBackAndSaysWhy) {
  if (RanWithoutDevices()) return;
  // Without a device any device number falls back: none is out of range.
  for (int device : {0, 4096}) {
    absl::StatusOr<BatchAllocator> chosen = DefaultBatchAllocator(true, device);
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    EXPECT_FALSE(chosen->allocator->pinned());
    EXPECT_EQ(chosen->allocator->name(), "aligned");
    EXPECT_THAT(chosen->note,
                HasSubstr("pin_memory was requested but pinned memory is unavailable ("));
    EXPECT_THAT(chosen->note, HasSubstr("); batches use ordinary aligned host memory"));
  }
}

TEST(DefaultBatchAllocatorTest, PinMemoryOnADeviceThatIsNotThereIsAnErrorNotAFallback) {
  if (!PinnedMemoryWorks()) GTEST_SKIP() << "no CUDA device (or built without CUDA)";
  absl::StatusOr<BatchAllocator> chosen = DefaultBatchAllocator(true, 4096);
  EXPECT_EQ(chosen.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(chosen.status().message()),
              HasSubstr("CUDA device 4096 is out of range: "));
  absl::StatusOr<BatchAllocator> device0 = DefaultBatchAllocator(true, 0);
  ASSERT_TRUE(device0.ok()) << device0.status();
  EXPECT_EQ(device0->allocator->name(), "cuda_pinned(device 0)");
  EXPECT_EQ(device0->note, "");
}

// ------------------------------------------------------------ BufferPool

TEST(BufferPoolTest, SizeClasses) {
  EXPECT_EQ(BufferPool::SizeClass(0), 4096u);
  EXPECT_EQ(BufferPool::SizeClass(1), 4096u);
  EXPECT_EQ(BufferPool::SizeClass(4096), 4096u);
  EXPECT_EQ(BufferPool::SizeClass(4097), 8192u);
  EXPECT_EQ(BufferPool::SizeClass(100000), 106496u);                // granule 8 KiB
  EXPECT_EQ(BufferPool::SizeClass(64 * 224 * 224 * 3), 10485760u);  // granule 1 MiB
  EXPECT_EQ(BufferPool::SizeClass(10485760), 10485760u);
}

TEST(BufferPoolTest, FinerSizeClassesStopAtPages) {
  EXPECT_EQ(BufferPool::SizeClass(100000, 32), 102400u);    // granule 2 KiB -> 4 KiB
  EXPECT_EQ(BufferPool::SizeClass(100000, 1024), 102400u);  // never finer than a page
  EXPECT_EQ(BufferPool::SizeClass(5000000, 32), 5111808u);  // granule 128 KiB
  EXPECT_EQ(BufferPool::SizeClass(5000000, 1), 8388608u);   // one class per doubling
  BufferPool pool(AlignedHostAllocator(), {.classes_per_doubling = 1024});
  ASSERT_TRUE(pool.Acquire(100000).ok());
  EXPECT_EQ(pool.stats().peak_bytes, 102400u);
}

TEST(BufferPoolTest, AcquireGivesExactSizeAndAlignment) {
  BufferPool pool;
  absl::StatusOr<Buffer> b = pool.Acquire(1000);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % kHostAlignment, 0u);
  EXPECT_FALSE(pool.pinned());
  EXPECT_EQ(pool.allocator().name(), "aligned");
  BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.allocations, 1);
  EXPECT_EQ(s.live_bytes, 4096u);
  EXPECT_EQ(s.cached_bytes, 0u);
}

TEST(BufferPoolTest, DroppedBufferIsReusedAtTheSamePointer) {
  BufferPool pool;
  const uint8_t* first;
  {
    Buffer b = *pool.Acquire(50000);
    first = b.data();
  }
  EXPECT_EQ(pool.stats().cached_bytes, BufferPool::SizeClass(50000));
  Buffer again = *pool.Acquire(49500);  // same size class
  EXPECT_EQ(again.data(), first);
  BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.allocations, 1);
  EXPECT_EQ(s.reuses, 1);
  EXPECT_EQ(s.cached_bytes, 0u);
}

TEST(BufferPoolTest, OtherSizeClassIsNotShared) {
  BufferPool pool;
  { Buffer b = *pool.Acquire(4096); }
  Buffer other = *pool.Acquire(8192);
  EXPECT_EQ(pool.stats().allocations, 2);
  EXPECT_EQ(pool.stats().reuses, 0);
}

TEST(BufferPoolTest, SteadyStateAllocatesNothingOver100Batches) {
  auto counting = std::make_shared<CountingAllocator>();
  BufferPool pool(counting);
  for (int i = 0; i < 100; ++i) {
    Buffer images = *pool.Acquire(64 * 224 * 224 * 3);
    Buffer labels = *pool.Acquire(64 * 8);
    images.mutable_data()[0] = static_cast<uint8_t>(i);
  }
  BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.allocations, 2);
  EXPECT_EQ(s.reuses, 198);
  EXPECT_EQ(s.frees, 0);
  EXPECT_EQ(counting->allocations(), 2);
}

TEST(BufferPoolTest, SlicesCopiesAndArraysKeepStorageOutOfThePool) {
  BufferPool pool;
  Buffer b = *pool.Acquire(4096);
  const uint8_t* p = b.data();
  Buffer slice = b.Slice(10, 20);
  Array array;
  array.dtype = DType::kUInt8;
  array.shape = {4096};
  array.data = b;
  b = Buffer();
  EXPECT_NE(pool.Acquire(4096)->data(), p);  // still held by slice and array
  slice = Buffer();
  EXPECT_NE(pool.Acquire(4096)->data(), p);  // still held by array
  array = Array();
  // The most recently released block is handed out first.
  EXPECT_EQ(pool.Acquire(4096)->data(), p);
}

TEST(BufferPoolTest, BuffersOutliveThePool) {
  auto counting = std::make_shared<CountingAllocator>();
  Buffer survivor;
  {
    BufferPool pool(counting);
    { Buffer cached = *pool.Acquire(4096); }
    survivor = *pool.Acquire(8192);
    EXPECT_EQ(counting->live(), 2u);
  }
  // The pool freed its cache; the survivor is still usable.
  EXPECT_EQ(counting->live(), 1u);
  std::memset(survivor.mutable_data(), 7, survivor.size());
  EXPECT_EQ(survivor.data()[8191], 7);
  const void* p = survivor.data();
  survivor = Buffer();
  EXPECT_EQ(counting->live(), 0u);
  EXPECT_EQ(counting->freed().back(), p);
}

TEST(BufferPoolTest, CacheCapFreesTheOldestFirst) {
  auto counting = std::make_shared<CountingAllocator>();
  BufferPool pool(counting, BufferPoolOptions{3 * 4096});
  std::vector<Buffer> held;
  for (int i = 0; i < 4; ++i) held.push_back(*pool.Acquire(4096));
  std::vector<const void*> order;
  for (Buffer& b : held) order.push_back(b.data());
  held.clear();  // released in order 0, 1, 2, 3
  BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.cached_bytes, 3u * 4096);
  EXPECT_EQ(s.frees, 1);
  EXPECT_THAT(counting->freed(), ElementsAre(order[0]));
}

TEST(BufferPoolTest, CacheCapEvictsOtherClassesToMakeRoom) {
  auto counting = std::make_shared<CountingAllocator>();
  BufferPool pool(counting, BufferPoolOptions{12288});
  Buffer small = *pool.Acquire(4096);
  Buffer large = *pool.Acquire(12288);
  const void* small_data = small.data();
  small = Buffer();
  large = Buffer();
  EXPECT_THAT(counting->freed(), ElementsAre(small_data));
  EXPECT_EQ(pool.stats().cached_bytes, 12288u);
}

TEST(BufferPoolTest, BlockLargerThanTheCapIsFreedNotCached) {
  auto counting = std::make_shared<CountingAllocator>();
  BufferPool pool(counting, BufferPoolOptions{4096});
  { Buffer b = *pool.Acquire(8192); }
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
  EXPECT_EQ(pool.stats().frees, 1);
  EXPECT_EQ(counting->live(), 0u);
}

TEST(BufferPoolTest, TrimFreesTheCache) {
  auto counting = std::make_shared<CountingAllocator>();
  BufferPool pool(counting);
  { Buffer a = *pool.Acquire(4096), b = *pool.Acquire(4096); }
  EXPECT_EQ(counting->live(), 2u);
  pool.Trim();
  EXPECT_EQ(counting->live(), 0u);
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
  EXPECT_EQ(pool.stats().frees, 2);
  // The pool stays usable after a trim.
  { Buffer c = *pool.Acquire(4096); }
  EXPECT_EQ(pool.stats().cached_bytes, 4096u);
}

TEST(BufferPoolTest, AllocatorFailureIsResourceExhausted) {
  auto counting = std::make_shared<CountingAllocator>();
  counting->set_fail(true);
  BufferPool pool(counting);
  absl::StatusOr<Buffer> b = pool.Acquire(100);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("buffer pool (counting): no room for 4096"));
}

TEST(BufferPoolTest, ConcurrentAcquireAndReleaseAcrossThreads) {
  auto counting = std::make_shared<CountingAllocator>();
  auto pool = std::make_shared<BufferPool>(counting);
  constexpr int kThreads = 4;
  constexpr int kRounds = 500;
  // Buffers are handed to the next thread through a shared inbox, so that
  // storage is released on other threads than the one that acquired it.
  std::mutex mu;
  std::vector<Buffer> inbox;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        Buffer b = *pool->Acquire(4096 * (1 + (i + t) % 3));
        std::memset(b.mutable_data(), t, b.size());
        Buffer taken;
        {
          std::lock_guard<std::mutex> lock(mu);
          inbox.push_back(b);
          if (inbox.size() > 8) {
            taken = inbox.front();
            inbox.erase(inbox.begin());
          }
        }
        if (!taken.empty()) {
          const uint8_t first = taken.data()[0];
          EXPECT_EQ(taken.data()[taken.size() - 1], first);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  inbox.clear();
  BufferPoolStats s = pool->stats();
  EXPECT_EQ(s.allocations + s.reuses, kThreads * kRounds);
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_GT(s.cached_bytes, 0u);
  EXPECT_EQ(static_cast<int64_t>(counting->live()), s.allocations - s.frees);
  pool.reset();
  EXPECT_EQ(counting->live(), 0u);
}

// --------------------------------------------------------------- Loader

std::vector<Sample> ArraySamples(int n) {
  std::vector<Sample> samples;
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.Append(std::string(kKeyField), std::to_string(i));
    Array a = Array::Allocate(DType::kUInt8, {4, 4});
    std::memset(a.mutable_data<uint8_t>(), i, 16);
    s.Append("img", std::move(a));
    s.Append("cls", int64_t{i});
    samples.push_back(std::move(s));
  }
  return samples;
}

TEST(LoaderPoolTest, PinMemoryWithoutDeviceFallsBackWarnsOnceAndWorks) {
  if (RanWithoutDevices()) return;
  std::vector<std::string> warnings;
  std::mutex mu;
  LoaderOptions options;
  options.workers = 2;
  options.pin_memory = true;
  options.device = 0;
  options.warn = [&](std::string_view w) {
    std::lock_guard<std::mutex> lock(mu);
    warnings.emplace_back(w);
  };
  Loader loader(Pipeline(VectorSource(ArraySamples(8))).Batched(2), options);
  ASSERT_NE(loader.pool(), nullptr);
  EXPECT_FALSE(loader.pool()->pinned());
  int batches = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const Sample& batch : loader) {
      const Array* img = batch.GetArray("img");
      ASSERT_NE(img, nullptr);
      EXPECT_THAT(img->shape, ElementsAre(2, 4, 4));
      ++batches;
    }
  }
  EXPECT_EQ(batches, 16);  // 2 workers x 4 batches x 2 epochs
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("loader: pin_memory was requested but pinned memory is "
                                     "unavailable"));
  EXPECT_GT(loader.pool()->stats().allocations, 0);
  EXPECT_GT(loader.pool()->stats().reuses, 0);
}

TEST(LoaderPoolTest, PinMemoryOnLocalRankDeviceGivesPinnedBatchesWithoutWarning) {
  if (!PinnedMemoryWorks()) GTEST_SKIP() << "no CUDA device (or built without CUDA)";
  ScopedEnv local_rank("LOCAL_RANK", "0");
  std::vector<std::string> warnings;
  std::mutex mu;
  LoaderOptions options;
  options.workers = 2;
  options.pin_memory = true;
  options.warn = [&](std::string_view w) {
    std::lock_guard<std::mutex> lock(mu);
    warnings.emplace_back(w);
  };
  Loader loader(Pipeline(VectorSource(ArraySamples(8))).Batched(2), options);
  EXPECT_TRUE(loader.pool()->pinned());
  EXPECT_EQ(loader.pool()->allocator().name(), "cuda_pinned(device 0)");
  std::vector<int64_t> first_pixels;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const Sample& batch : loader) {
      const Array* img = batch.GetArray("img");
      ASSERT_NE(img, nullptr);
      EXPECT_THAT(img->shape, ElementsAre(2, 4, 4));
      ExpectPinnedOn(img->data.data(), 0);
      first_pixels.push_back(img->data_as<uint8_t>()[0]);
    }
  }
  // Each worker streams all 8 samples; batches alternate between workers.
  EXPECT_THAT(first_pixels, ElementsAre(0, 0, 2, 2, 4, 4, 6, 6, 0, 0, 2, 2, 4, 4, 6, 6));
  EXPECT_TRUE(warnings.empty());
  EXPECT_GT(loader.pool()->stats().allocations, 0);
  EXPECT_GT(loader.pool()->stats().reuses, 0);
}

TEST(LoaderPoolTest, WithoutPinMemoryNoWarningAndWorkersUseTheLoaderPool) {
  std::vector<std::string> warnings;
  LoaderOptions options;
  options.warn = [&](std::string_view w) { warnings.emplace_back(w); };
  Loader loader(Pipeline(VectorSource(ArraySamples(6))).Batched(3), options);
  EXPECT_FALSE(loader.pool()->pinned());
  std::vector<Sample> batches;
  for (const Sample& batch : loader) batches.push_back(batch);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_TRUE(warnings.empty());
  // Two batches alive: their img and cls storage are four pool blocks.
  EXPECT_EQ(loader.pool()->stats().live_bytes, 4u * 4096);
  batches.clear();
  EXPECT_EQ(loader.pool()->stats().live_bytes, 0u);
}

TEST(LoaderPoolTest, BatchesOutliveTheLoader) {
  std::vector<Sample> batches;
  {
    Loader loader(Pipeline(VectorSource(ArraySamples(4))).Batched(2));
    for (const Sample& batch : loader) batches.push_back(batch);
  }
  ASSERT_EQ(batches.size(), 2u);
  const Array* img = batches[1].GetArray("img");
  ASSERT_NE(img, nullptr);
  EXPECT_EQ(img->data_as<uint8_t>()[16], 3);
}

TEST(LoaderPoolTest, MemberBuffersAreRecycledThroughTheReadPool) {
  testing::TempDir dir;
  std::vector<testing::TarEntry> entries;
  for (int i = 0; i < 40; ++i) {
    entries.push_back({"s" + std::to_string(1000 + i) + ".bin", std::string(20000 + 100 * i, 'x')});
    entries.push_back({"s" + std::to_string(1000 + i) + ".cls", "1"});  // small: not pooled
  }
  std::string path = dir.Write("a.tar", testing::MakeTar(entries));
  absl::StatusOr<Pipeline> p = WebDataset(std::vector<std::string>{path}, {});
  ASSERT_TRUE(p.ok());
  Loader loader(*p, {.workers = 1, .prefetch = 1});
  int64_t samples = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const Sample& s : loader) {
      EXPECT_EQ(s.GetBytes("bin")->view().substr(0, 3), "xxx");
      ++samples;
    }
  }
  EXPECT_EQ(samples, 80);
  const BufferPoolStats stats = loader.read_pool()->stats();
  // Only the 80 .bin members come from the pool, and the few alive at once
  // (queued, held by the consumer, being read) are all it ever allocates.
  EXPECT_EQ(stats.allocations + stats.reuses, 80);
  EXPECT_LE(stats.allocations, 8);
  EXPECT_EQ(stats.live_bytes, 0u);
}

TEST(LoaderPoolTest, MalformedLocalRankIsASetupErrorOnlyWithPinMemory) {
  ScopedEnv local_rank("LOCAL_RANK", "two");
  LoaderOptions pinned;
  pinned.pin_memory = true;
  Loader bad(Pipeline(VectorSource(ArraySamples(2))).Batched(2), pinned);
  absl::StatusOr<std::optional<Sample>> item = bad.Next();
  EXPECT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(item.status().message()),
              HasSubstr("environment variable LOCAL_RANK=\"two\" is not an integer"));
  EXPECT_NE(bad.pool(), nullptr);

  Loader fine(Pipeline(VectorSource(ArraySamples(2))).Batched(2));
  EXPECT_TRUE(fine.Next().ok());
}

TEST(LoaderPoolTest, LocalRankBeyondTheVisibleDevicesIsASetupErrorWithoutWarning) {
  if (!PinnedMemoryWorks()) GTEST_SKIP() << "no CUDA device (or built without CUDA)";
  ScopedEnv local_rank("LOCAL_RANK", "4096");
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", nullptr);
  std::vector<std::string> warnings;
  LoaderOptions options;
  options.pin_memory = true;
  options.warn = [&](std::string_view w) { warnings.emplace_back(w); };
  Loader loader(Pipeline(VectorSource(ArraySamples(2))).Batched(2), options);
  absl::StatusOr<std::optional<Sample>> item = loader.Next();
  EXPECT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(item.status().message()),
              ::testing::MatchesRegex(
                  "LoaderOptions.pin_memory: CUDA device 4096 is out of range: [0-9]+ devices? "
                  "(is|are) visible \\(CUDA_VISIBLE_DEVICES=<unset>\\); LoaderOptions.device "
                  "\\(else LOCAL_RANK, SLURM_LOCALID\\) names it"));
  EXPECT_TRUE(warnings.empty());
  EXPECT_FALSE(loader.pool()->pinned());
}

TEST(LoaderPoolTest, NegativeDeviceIsASetupError) {
  ScopedEnv slurm("SLURM_LOCALID", "-1");
  LoaderOptions options;
  options.pin_memory = true;
  Loader loader(Pipeline(VectorSource(ArraySamples(2))), options);
  absl::StatusOr<std::optional<Sample>> item = loader.Next();
  EXPECT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(item.status().message()),
              HasSubstr("device -1 from SLURM_LOCALID must be >= 0"));
}

}  // namespace
}  // namespace wds
