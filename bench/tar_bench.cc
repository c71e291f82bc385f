// Benchmarks of tar reading on ImageNet-like shards from the page cache.
//
// Four shards of 1000 samples each (a 60-100 KB incompressible "jpg", a "cls"
// and a small "json"), written once with libarchive's pax writer into a
// temporary directory:
//   BM_BareLibarchive  archive_read_open_filename, malloc + read + free per member
//   BM_TarReader       OpenUrl + TarReader: members only
//   BM_TarSamples      WebDataset(...).Open(): members grouped into samples
//   BM_Loader/N        the same through a Loader with N worker threads
// Each reports bytes/s (tar bytes) and items/s (samples), and allocs/sample:
// calls of the global operator new in the timed loop (Buffer's storage comes
// from malloc and is not counted; its control block is).
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocation_count.h"
#include "benchmark/benchmark.h"
#include "wds/internal/base/strings.h"
#include "wds/io/byte_stream.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/tar/tar_reader.h"

namespace wds {
namespace {

constexpr int kShards = 4;
constexpr int kSamplesPerShard = 1000;
constexpr int kMembersPerSample = 3;

// Corpus is the generated shards; the directory goes away with it.
struct Corpus {
  std::string dir;
  std::vector<std::string> paths;
  int64_t bytes = 0;

  ~Corpus() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  int64_t samples() const { return int64_t{kShards} * kSamplesPerShard; }
};

void Check(int rc, archive* a, const char* what) {
  if (rc != ARCHIVE_OK) throw std::runtime_error(Cat(what, ": ", archive_error_string(a)));
}

void WriteMember(archive* a, const std::string& name, const char* data, size_t size) {
  archive_entry* entry = archive_entry_new();
  archive_entry_set_pathname(entry, name.c_str());
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_perm(entry, 0644);
  archive_entry_set_size(entry, static_cast<la_int64_t>(size));
  archive_entry_set_mtime(entry, 1700000000, 0);
  Check(archive_write_header(a, entry), a, "header");
  if (archive_write_data(a, data, size) != static_cast<la_ssize_t>(size)) {
    throw std::runtime_error(Cat("short write: ", archive_error_string(a)));
  }
  archive_entry_free(entry);
}

void WriteShard(const std::string& path, int shard, const std::string& pool, std::mt19937& rng) {
  archive* a = archive_write_new();
  Check(archive_write_set_format_pax_restricted(a), a, "format");
  Check(archive_write_add_filter_none(a), a, "filter");
  Check(archive_write_open_filename(a, path.c_str()), a, "open");
  std::uniform_int_distribution<size_t> jpg_size(60000, 100000);
  for (int i = 0; i < kSamplesPerShard; ++i) {
    const std::string key = Cat("n0", 1440764 + shard, "_", 10000 + i);
    const size_t size = jpg_size(rng);
    const size_t offset = std::uniform_int_distribution<size_t>(0, pool.size() - size)(rng);
    const std::string cls = std::to_string(i % 1000);
    const std::string json = Cat("{\"width\": 500, \"height\": 375, \"label\": ", i % 1000, "}");
    WriteMember(a, key + ".jpg", pool.data() + offset, size);
    WriteMember(a, key + ".cls", cls.data(), cls.size());
    WriteMember(a, key + ".json", json.data(), json.size());
  }
  Check(archive_write_close(a), a, "close");
  archive_write_free(a);
}

const Corpus& GetCorpus() {
  static Corpus* corpus = [] {
    auto* c = new Corpus;
    std::string tmpl = (std::filesystem::temp_directory_path() / "wds-tar-bench-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    c->dir = tmpl;
    std::mt19937 rng(1);
    std::string pool(4 << 20, '\0');
    for (char& ch : pool) ch = static_cast<char>(rng());
    for (int s = 0; s < kShards; ++s) {
      const std::string path = Cat(c->dir, "/imagenet-", s, ".tar");
      WriteShard(path, s, pool, rng);
      c->paths.push_back(path);
      c->bytes += static_cast<int64_t>(std::filesystem::file_size(path));
    }
    std::atexit([] { delete corpus; });
    return c;
  }();
  return *corpus;
}

void Report(benchmark::State& state, int64_t allocations) {
  const Corpus& corpus = GetCorpus();
  state.SetBytesProcessed(state.iterations() * corpus.bytes);
  state.SetItemsProcessed(state.iterations() * corpus.samples());
  state.counters["allocs/sample"] =
      benchmark::Counter(static_cast<double>(allocations) /
                         static_cast<double>(state.iterations() * corpus.samples()));
}

int64_t ReadWithLibarchive(const std::string& path) {
  archive* a = archive_read_new();
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  Check(archive_read_open_filename(a, path.c_str(), size_t{1} << 20), a, "open");
  int64_t members = 0;
  archive_entry* entry;
  while (archive_read_next_header(a, &entry) == ARCHIVE_OK) {
    const size_t size = static_cast<size_t>(archive_entry_size(entry));
    char* data = static_cast<char*>(std::malloc(size == 0 ? 1 : size));
    size_t filled = 0;
    while (filled < size) {
      la_ssize_t n = archive_read_data(a, data + filled, size - filled);
      if (n <= 0) throw std::runtime_error(Cat(path, ": ", archive_error_string(a)));
      filled += static_cast<size_t>(n);
    }
    benchmark::DoNotOptimize(data);
    std::free(data);
    ++members;
  }
  archive_read_free(a);
  return members;
}

void BM_BareLibarchive(benchmark::State& state) {
  const Corpus& corpus = GetCorpus();
  const int64_t before = bench::AllocationCount();
  for (auto _ : state) {
    int64_t members = 0;
    for (const std::string& path : corpus.paths) members += ReadWithLibarchive(path);
    if (members != corpus.samples() * kMembersPerSample) state.SkipWithError("member count");
  }
  Report(state, bench::AllocationCount() - before);
}

int64_t ReadWithTarReader(const std::string& path) {
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl(path);
  if (!stream.ok()) throw std::runtime_error(stream.status().ToString());
  absl::StatusOr<std::unique_ptr<TarReader>> reader = TarReader::Open(std::move(*stream));
  if (!reader.ok()) throw std::runtime_error(reader.status().ToString());
  int64_t members = 0;
  while (true) {
    absl::StatusOr<std::optional<TarMember>> member = (*reader)->Next();
    if (!member.ok()) throw std::runtime_error(member.status().ToString());
    if (!member->has_value()) return members;
    benchmark::DoNotOptimize((*member)->data.data());
    ++members;
  }
}

void BM_TarReader(benchmark::State& state) {
  const Corpus& corpus = GetCorpus();
  const int64_t before = bench::AllocationCount();
  for (auto _ : state) {
    int64_t members = 0;
    for (const std::string& path : corpus.paths) members += ReadWithTarReader(path);
    if (members != corpus.samples() * kMembersPerSample) state.SkipWithError("member count");
  }
  Report(state, bench::AllocationCount() - before);
}

void BM_TarSamples(benchmark::State& state) {
  const Corpus& corpus = GetCorpus();
  absl::StatusOr<Pipeline> pipeline = WebDataset(corpus.paths);
  if (!pipeline.ok()) throw std::runtime_error(pipeline.status().ToString());
  const int64_t before = bench::AllocationCount();
  for (auto _ : state) {
    std::unique_ptr<SampleStream> stream = pipeline->Open({});
    int64_t samples = 0;
    while (true) {
      SampleResult sample = stream->Next();
      if (!sample.ok()) throw std::runtime_error(sample.status().ToString());
      if (!sample->has_value()) break;
      benchmark::DoNotOptimize((*sample)->GetBytes("jpg"));
      ++samples;
    }
    if (samples != corpus.samples()) state.SkipWithError("sample count");
  }
  Report(state, bench::AllocationCount() - before);
}

// BM_Loader: the same samples through Loader worker threads and their queues,
// consumed on the benchmark thread; Arg is the number of workers.
void BM_Loader(benchmark::State& state) {
  const Corpus& corpus = GetCorpus();
  absl::StatusOr<Pipeline> pipeline = WebDataset(corpus.paths);
  if (!pipeline.ok()) throw std::runtime_error(pipeline.status().ToString());
  Loader loader(*pipeline, {.workers = static_cast<int>(state.range(0)), .prefetch = 16});
  const int64_t before = bench::AllocationCount();
  for (auto _ : state) {
    int64_t samples = 0;
    for (const Sample& sample : loader) {
      benchmark::DoNotOptimize(sample.GetBytes("jpg"));
      ++samples;
    }
    if (samples != corpus.samples()) state.SkipWithError("sample count");
  }
  Report(state, bench::AllocationCount() - before);
}

BENCHMARK(BM_BareLibarchive)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TarReader)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TarSamples)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Loader)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace wds

BENCHMARK_MAIN();
