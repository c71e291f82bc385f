// cache_bench: what the shard cache's housekeeping costs as the cache grows
// to the tens of thousands of shards that a node's ranks share.
//
// A cache directory of N complete copies (sparse 1 MiB files, each with its
// .meta) is made once per N on the disk under TMPDIR (/tmp by default):
//   BM_CacheScan/N        ShardCache::Evict(""): one full scan of the
//                         directory (stat of every file, LRU order)
//   BM_CacheCommit/N/L    ShardCache::Install: what one completed download
//                         adds (its .meta, rename and count), L = 0 without a
//                         size limit; L = 1 with a limit
//                         the cache stands at, averaged over N / 5 commits
//                         (each commit's file is a new one, and the scans it
//                         causes evict older ones)
// Before the ledger, every download ran a full scan, as BM_CacheScan/N (which
// also checked each .meta's copy with access(2), one call more per shard).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "io/shard_cache.h"
#include "io/sigv4.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kShardBytes = int64_t{1} << 20;

std::string MetaOf(const std::string& url) {
  return Cat("url ", url, "\netag \"x\"\nsize ", kShardBytes, "\n");
}

// PutComplete makes the complete copy of `url` in `dir` as a download would
// leave it (a sparse file of kShardBytes and its .meta), returning its name;
// with `suffix` ".part", the download before Install (no .meta yet).
std::string PutComplete(const std::string& dir, const std::string& url,
                        const std::string& suffix = "") {
  const std::string name = sigv4::Sha256Hex(url);
  const std::string path = Cat(dir, "/", name, suffix);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ftruncate(fd, kShardBytes) != 0 || close(fd) != 0) {
    throw std::runtime_error(Cat("cannot make ", path));
  }
  if (suffix.empty()) std::ofstream(Cat(path, ".meta")) << MetaOf(url);
  return name;
}

// CacheOf returns a directory holding n complete copies, made at the first
// call for n and removed at exit.
const std::string& CacheOf(int64_t n) {
  static auto* dirs = new std::map<int64_t, std::string>();
  auto it = dirs->find(n);
  if (it != dirs->end()) return it->second;
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = Cat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/cache_bench.XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  for (int64_t i = 0; i < n; ++i) PutComplete(templ, Cat("http://host/train-", i, ".tar"));
  std::make_shared<ShardCache>(templ, 0)->Evict("");  // its ledger, as a scan leaves it
  static struct Cleanup {
    std::map<int64_t, std::string>* dirs;
    ~Cleanup() {
      for (const auto& [n, dir] : *dirs) fs::remove_all(dir);
    }
  } cleanup{dirs};
  return dirs->emplace(n, templ).first->second;
}

void BM_CacheScan(benchmark::State& state) {
  const std::string& dir = CacheOf(state.range(0));
  auto cache = std::make_shared<ShardCache>(dir, 0);
  for (auto _ : state) cache->Evict("");
  state.counters["shards"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_CacheScan)->Arg(1'000)->Arg(10'000)->Arg(50'000)->Unit(benchmark::kMillisecond);

void BM_CacheCommit(benchmark::State& state) {
  const int64_t n = state.range(0);
  const bool limited = state.range(1) != 0;
  const std::string& dir = CacheOf(n);
  // With a limit, the cache stands at it: each commit's file is one more,
  // and scans evict older ones. Without, the files made are removed after.
  auto cache = std::make_shared<ShardCache>(dir, limited ? n * kShardBytes : 0);
  std::vector<std::string> made;
  static int64_t next = 0;  // new names in every run and repetition
  for (auto _ : state) {
    state.PauseTiming();
    const std::string url = Cat("http://host/new-", next++, ".tar");
    const std::string name = PutComplete(dir, url, ".part");
    const std::string path = Cat(dir, "/", name);
    const std::string meta = MetaOf(url);
    if (!limited) made.push_back(name);
    state.ResumeTiming();
    if (!cache->Install(-1, Cat(path, ".part"), path, meta, kShardBytes)) {
      state.SkipWithError("the rename failed");
      break;
    }
  }
  for (const std::string& name : made) {
    fs::remove(Cat(dir, "/", name));
    fs::remove(Cat(dir, "/", name, ".meta"));
  }
  cache->Evict("");  // the ledger, without the files removed
  state.counters["shards"] = static_cast<double>(n);
}
BENCHMARK(BM_CacheCommit)
    ->ArgsProduct({{1'000, 10'000, 50'000}, {0}})
    ->Iterations(5'000)
    ->Unit(benchmark::kMicrosecond);
// With the limit, as many commits as a fifth of the cache: the scans they
// cause are part of the average.
BENCHMARK(BM_CacheCommit)->Args({1'000, 1})->Iterations(200)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CacheCommit)->Args({10'000, 1})->Iterations(2'000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CacheCommit)->Args({50'000, 1})->Iterations(10'000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace wds

BENCHMARK_MAIN();
