// Micro-benchmarks of Shuffle and DecodeSample over in-memory samples.
//
// Every benchmark reports items/s and allocs/item: heap allocations counted by
// the replaced global operator new while the timed loop runs, so a stage that
// starts allocating per sample shows up here.
#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "allocation_count.h"
#include "benchmark/benchmark.h"
#include "wds/decode/decode.h"
#include "wds/pipeline/pipeline.h"

namespace wds {
namespace {

// AllocationCounter reports allocations per processed item on destruction.
class AllocationCounter {
 public:
  explicit AllocationCounter(benchmark::State& state)
      : state_(state), start_(bench::AllocationCount()) {}
  ~AllocationCounter() {
    const double items = static_cast<double>(state_.items_processed());
    state_.counters["allocs/item"] =
        items == 0 ? 0 : static_cast<double>(bench::AllocationCount() - start_) / items;
  }

 private:
  benchmark::State& state_;
  int64_t start_;
};

// ReuseStream yields `n` samples that share one prepared sample's fields, so
// the source costs only the Sample copy (one vector of fields).
class ReuseStream : public SampleStream {
 public:
  ReuseStream(const Sample* sample, int64_t n) : sample_(sample), left_(n) {}
  SampleResult Next() override {
    if (left_ == 0) return std::nullopt;
    --left_;
    return *sample_;
  }

 private:
  const Sample* sample_;
  int64_t left_;
};

Sample PreparedSample() {
  Sample s;
  s.Append(std::string(kKeyField), std::string("k"));
  s.Append("jpg", Buffer::Copy(std::string(1000, 'j')));
  s.Append("cls", int64_t{7});
  return s;
}

void RunStream(benchmark::State& state, const Pipeline& pipeline, int64_t n) {
  AllocationCounter counter(state);
  for (auto _ : state) {
    std::unique_ptr<SampleStream> stream = pipeline.Open({});
    for (SampleResult item = stream->Next(); item.ok() && item->has_value();
         item = stream->Next()) {
      benchmark::DoNotOptimize(*item);
    }
  }
  state.SetItemsProcessed(state.iterations() * n);
}

constexpr int64_t kSamplesPerRun = 100000;

void BM_SourceOnly(benchmark::State& state) {
  const Sample sample = PreparedSample();
  Pipeline p([&sample](const WorkerContext&) {
    return std::make_unique<ReuseStream>(&sample, kSamplesPerRun);
  });
  RunStream(state, p, kSamplesPerRun);
}
BENCHMARK(BM_SourceOnly)->Unit(benchmark::kMillisecond);

void BM_Shuffle1000(benchmark::State& state) {
  const Sample sample = PreparedSample();
  Pipeline p([&sample](const WorkerContext&) {
    return std::make_unique<ReuseStream>(&sample, kSamplesPerRun);
  });
  RunStream(state, p.Shuffle(1000), kSamplesPerRun);
}
BENCHMARK(BM_Shuffle1000)->Unit(benchmark::kMillisecond);

Sample EncodedSample(std::string_view txt, std::string_view json) {
  Sample s;
  s.Append(std::string(kKeyField), std::string("k"));
  s.Append(std::string(kUrlField), std::string("u"));
  s.Append("cls", Buffer::Copy("  1234\n"));
  s.Append("txt", Buffer::Copy(txt));
  s.Append("json", Buffer::Copy(json));
  s.Append("jpg", Buffer::Copy("not decoded"));
  return s;
}

// The copy of the encoded sample is timed too: it stands for the sample that
// the tar reader hands over. Short text stays within the small-string buffer;
// long text costs one inherent allocation per decoded string.
void DecodeLoop(benchmark::State& state, const Sample& encoded) {
  const std::vector<FieldDecoder> decoders = BasicDecoders();
  const DecodeOptions options;
  Rng rng(0);
  AllocationCounter counter(state);
  for (auto _ : state) {
    Sample s = encoded;
    absl::Status status = DecodeSample(s, decoders, options, rng);
    if (!status.ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_DecodeSampleShortText(benchmark::State& state) {
  DecodeLoop(state, EncodedSample("a cat", "{}"));
}
BENCHMARK(BM_DecodeSampleShortText);

void BM_DecodeSampleLongText(benchmark::State& state) {
  DecodeLoop(state, EncodedSample(std::string(200, 'c'),
                                  "{\"caption\": \"" + std::string(200, 'w') + "\"}"));
}
BENCHMARK(BM_DecodeSampleLongText);

void BM_SampleCopyOnly(benchmark::State& state) {
  const Sample encoded = EncodedSample("a cat", "{}");
  AllocationCounter counter(state);
  for (auto _ : state) {
    Sample s = encoded;
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SampleCopyOnly);

}  // namespace
}  // namespace wds

BENCHMARK_MAIN();
