// Micro-benchmarks of collation, the buffer pool, npy decoding and
// compressed-field decoding.
//
//   build/bench/batch_bench --benchmark_filter=Collate
//
// Collation reports bytes/s of array data stacked; the pool reports
// acquire+release pairs per second and how many of them reached the
// allocator (pool_allocs/iter: 0 in a steady state).
#include <zlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "batch/collate.h"
#include "benchmark/benchmark.h"
#include "wds/base/buffer_pool.h"
#include "wds/batch/batch.h"
#include "wds/decode/decode.h"
#include "wds/decode/npy.h"

namespace wds {
namespace {

Sample ImageSample(int i, int64_t h, int64_t w) {
  Sample s;
  s.Append(std::string(kKeyField), std::to_string(i));
  Array img = Array::Allocate(DType::kUInt8, {h, w, 3});
  std::memset(img.mutable_data<uint8_t>(), i, img.nbytes());
  s.Append("jpg", std::move(img));
  s.Append("cls", int64_t{i});
  return s;
}

// BM_CollateImages: 64 x 224x224x3 uint8 images + labels into one batch.
void BM_CollateImages(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  std::vector<Sample> samples;
  for (int i = 0; i < batch; ++i) samples.push_back(ImageSample(i, 224, 224));
  BufferPool pool;
  for (auto _ : state) {
    absl::StatusOr<Batch> b = Collate(samples, {}, pool);
    if (!b.ok()) state.SkipWithError(std::string(b.status().message()).c_str());
    benchmark::DoNotOptimize(b->GetArray("jpg")->data.data());
  }
  state.SetBytesProcessed(state.iterations() * batch * 224 * 224 * 3);
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["pool_allocs"] = static_cast<double>(pool.stats().allocations);
}
BENCHMARK(BM_CollateImages)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();

// BM_CollatePadded: 32 variable-length float32 [T, 80] features padded.
void BM_CollatePadded(benchmark::State& state) {
  std::vector<Sample> samples;
  int64_t bytes = 0;
  for (int i = 0; i < 32; ++i) {
    Sample s;
    const int64_t t = 200 + (i * 37) % 300;
    Array a = Array::Allocate(DType::kFloat32, {t, 80});
    std::memset(a.mutable_data<float>(), 0, a.nbytes());
    bytes += static_cast<int64_t>(a.nbytes());
    s.Append("npy", std::move(a));
    samples.push_back(std::move(s));
  }
  BatchOptions options;
  options.pad = true;
  BufferPool pool;
  for (auto _ : state) {
    absl::StatusOr<Batch> b = Collate(samples, options, pool);
    benchmark::DoNotOptimize(b->GetArray("npy")->data.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_CollatePadded)->Unit(benchmark::kMicrosecond);

// BM_PoolAcquireRelease: one acquire and release of a batch-sized block.
void BM_PoolAcquireRelease(benchmark::State& state) {
  BufferPool pool;
  const size_t bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    absl::StatusOr<Buffer> b = pool.Acquire(bytes);
    benchmark::DoNotOptimize(b->data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["pool_allocs"] = static_cast<double>(pool.stats().allocations);
}
BENCHMARK(BM_PoolAcquireRelease)->Arg(4096)->Arg(64 * 224 * 224 * 3);

// BM_MallocBaseline: the same size from the aligned allocator every time, for
// comparison with the pool.
void BM_MallocBaseline(benchmark::State& state) {
  std::shared_ptr<HostAllocator> allocator = AlignedHostAllocator();
  const size_t bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = *allocator->Allocate(bytes);
    static_cast<uint8_t*>(p)[bytes - 1] = 1;  // touch the last page, as a batch would
    benchmark::DoNotOptimize(p);
    allocator->Deallocate(p, bytes);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MallocBaseline)->Arg(4096)->Arg(64 * 224 * 224 * 3);

// BM_PoolContended: acquire/release from several threads at once.
void BM_PoolContended(benchmark::State& state) {
  static BufferPool* pool = nullptr;
  if (state.thread_index() == 0) pool = new BufferPool();
  for (auto _ : state) {
    absl::StatusOr<Buffer> b = pool->Acquire(1 << 20);
    benchmark::DoNotOptimize(b->data());
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    delete pool;
    pool = nullptr;
  }
}
BENCHMARK(BM_PoolContended)->Threads(2)->UseRealTime();

std::string NpyFile(DType dtype, std::vector<int64_t> shape) {
  Array a = Array::Allocate(dtype, std::move(shape));
  std::memset(a.data.mutable_data(), 1, a.nbytes());
  return EncodeNpy(a);
}

// BM_DecodeNpy: a native float32 [1000, 80] file (shared, not copied) and a
// big-endian one (byte-swapped copy).
void BM_DecodeNpy(benchmark::State& state) {
  std::string file = NpyFile(DType::kFloat32, {1000, 80});
  const bool big_endian = state.range(0) == 1;
  if (big_endian) {
    const size_t descr = file.find("'<f4'");
    file[descr + 1] = '>';
  }
  const Buffer buffer = Buffer::Copy(file);
  for (auto _ : state) {
    absl::StatusOr<Array> a = DecodeNpy(buffer);
    benchmark::DoNotOptimize(a->data.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(file.size()));
  state.SetLabel(big_endian ? "big-endian (swap)" : "native (shared)");
}
BENCHMARK(BM_DecodeNpy)->Arg(0)->Arg(1);

// BM_DecodeNpyGz: the same array as an "npy.gz" field through DecodeSample.
void BM_DecodeNpyGz(benchmark::State& state) {
  const std::string file = NpyFile(DType::kFloat32, {1000, 80});
  std::string gz(compressBound(file.size()) + 64, '\0');
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(file.data()));
  zs.avail_in = static_cast<uInt>(file.size());
  zs.next_out = reinterpret_cast<Bytef*>(gz.data());
  zs.avail_out = static_cast<uInt>(gz.size());
  deflate(&zs, Z_FINISH);
  gz.resize(zs.total_out);
  deflateEnd(&zs);
  const Buffer compressed = Buffer::Copy(gz);
  const std::vector<FieldDecoder> decoders = BasicDecoders();
  Rng rng(0);
  for (auto _ : state) {
    Sample s;
    s.Append("npy.gz", compressed);
    absl::Status status = DecodeSample(s, decoders, {}, rng);
    if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(file.size()));
}
BENCHMARK(BM_DecodeNpyGz);

}  // namespace
}  // namespace wds

BENCHMARK_MAIN();
