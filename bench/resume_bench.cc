// resume_bench: what exact resume costs against the position in the epoch.
//
//   resume_bench 'imagenet-{000000..000007}.tar' [workers] [shuffle] [split]
//
// For a loader over the shards (shard shuffle, a shuffle buffer, rgb8 decode,
// batches of 64) it consumes 0%, 25%, 50%, 75% and 95% of an epoch, takes
// State() (timed), and then times a new loader's Restore() up to its first
// batch, next to a fresh loader's first batch. split is auto (the default:
// samples where every shard has a sidecar, else shards), samples or shards.
// Run it without and with `wds-shard index` sidecars beside the shards, with
// the same split, to see what the sidecars save.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "wds/loader/loader.h"
#include "wds/pipeline/web_dataset.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

wds::Pipeline Recipe(const std::string& urls, size_t shuffle,
                     std::optional<wds::SplitGranularity> split) {
  wds::WebDatasetOptions options{.seed = 1, .shardshuffle = true};
  options.split = split;
  absl::StatusOr<wds::Pipeline> source = wds::WebDataset(urls, options);
  if (!source.ok()) {
    std::fprintf(stderr, "%s\n", std::string(source.status().message()).c_str());
    std::exit(1);
  }
  return source->Shuffle(shuffle).Decode("rgb8").Batched(64);
}

void Check(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: resume_bench URLS [workers] [shuffle] [auto|samples|shards]\n");
    return 2;
  }
  const std::string urls = argv[1];
  const int workers = argc > 2 ? std::atoi(argv[2]) : 2;
  const size_t shuffle = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 1000;
  const std::string split_name = argc > 4 ? argv[4] : "auto";
  std::optional<wds::SplitGranularity> split;
  if (split_name == "samples") split = wds::SplitGranularity::kSamples;
  if (split_name == "shards") split = wds::SplitGranularity::kShards;
  if (split_name != "auto" && !split.has_value()) {
    std::fprintf(stderr, "split must be auto, samples or shards, not %s\n", split_name.c_str());
    return 2;
  }
  const wds::LoaderOptions options{.workers = workers};

  int64_t batches = 0;
  double fresh_s = 0;
  {
    wds::Loader loader(Recipe(urls, shuffle, split), options);
    const Clock::time_point start = Clock::now();
    for (const wds::Sample& batch : loader) {
      if (batches++ == 0) fresh_s = Since(start);
      (void)batch;
    }
  }
  std::printf("epoch: %lld batches; fresh loader's first batch %.3f s\n",
              static_cast<long long>(batches), fresh_s);
  std::printf("position | State() us | state bytes | restore to first batch s\n");
  for (double fraction : {0.0, 0.25, 0.5, 0.75, 0.95}) {
    const int64_t stop = static_cast<int64_t>(fraction * static_cast<double>(batches));
    std::string state;
    double state_us = 0;
    {
      wds::Loader loader(Recipe(urls, shuffle, split), options);
      for (int64_t i = 0; i < stop; ++i) Check(loader.Next().status());
      const Clock::time_point start = Clock::now();
      absl::StatusOr<std::string> taken = loader.State();
      state_us = Since(start) * 1e6;
      Check(taken.status());
      state = *taken;
    }
    wds::Loader loader(Recipe(urls, shuffle, split), options);
    const Clock::time_point start = Clock::now();
    Check(loader.Restore(state));
    absl::StatusOr<std::optional<wds::Sample>> first = loader.Next();
    const double restore_s = Since(start);
    Check(first.status());
    std::printf("%3.0f%% (batch %lld) | %.1f | %zu | %.3f\n", fraction * 100,
                static_cast<long long>(stop), state_us, state.size(), restore_s);
  }
  return 0;
}
