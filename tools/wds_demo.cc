// wds-demo: the README's main job on built-in data.
//
//   wds-demo --make-shards DIR [--shards N] [--samples-per-shard M] [--bytes B]
//       writes DIR/demo-000000.tar ... with samples {bin: B random bytes,
//       cls: an integer label, json: a small record}.
//   wds-demo [--workers W] [--epochs E] [--shuffle S] [--seed X] PATTERN
//       streams the shards through shard shuffle, split_by_worker, tar reading,
//       a shuffle buffer and decoding on W loader threads, and prints the
//       throughput of each epoch and whether every sample came exactly once.
//       --raw measures bare sample iteration instead: no shuffle buffer, no
//       decoding, no per-sample bookkeeping.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "wds/wds.h"

namespace {

struct Options {
  std::string make_dir;
  int shards = 8;
  int samples_per_shard = 500;
  int bytes = 16384;
  int workers = 2;
  int epochs = 2;
  int shuffle = 500;
  uint64_t seed = 0;
  bool raw = false;
  std::string pattern;
};

[[noreturn]] void Die(std::string_view message) {
  std::fprintf(stderr, "wds-demo: %.*s\n", static_cast<int>(message.size()), message.data());
  std::exit(1);
}

int IntArg(int argc, char** argv, int* i) {
  if (++*i == argc) Die(std::string(argv[*i - 1]) + " needs a value");
  char* end;
  long v = std::strtol(argv[*i], &end, 10);
  if (*end != '\0' || v < 0) Die(std::string("bad number for ") + argv[*i - 1] + ": " + argv[*i]);
  return static_cast<int>(v);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--make-shards" && i + 1 < argc)
      o.make_dir = argv[++i];
    else if (a == "--shards")
      o.shards = IntArg(argc, argv, &i);
    else if (a == "--samples-per-shard")
      o.samples_per_shard = IntArg(argc, argv, &i);
    else if (a == "--bytes")
      o.bytes = IntArg(argc, argv, &i);
    else if (a == "--workers")
      o.workers = IntArg(argc, argv, &i);
    else if (a == "--epochs")
      o.epochs = IntArg(argc, argv, &i);
    else if (a == "--shuffle")
      o.shuffle = IntArg(argc, argv, &i);
    else if (a == "--raw")
      o.raw = true;
    else if (a == "--seed")
      o.seed = static_cast<uint64_t>(IntArg(argc, argv, &i));
    else if (!a.empty() && a[0] != '-')
      o.pattern = std::string(a);
    else
      Die("unknown option " + std::string(a));
  }
  if (o.make_dir.empty() && o.pattern.empty()) Die("give --make-shards DIR or a shard PATTERN");
  return o;
}

void MakeShards(const Options& o) {
  std::filesystem::create_directories(o.make_dir);
  wds::Rng rng(o.seed);
  std::string payload(static_cast<size_t>(o.bytes), '\0');
  for (int shard = 0; shard < o.shards; ++shard) {
    char name[32];
    std::snprintf(name, sizeof(name), "/demo-%06d.tar", shard);
    auto writer = wds::TarWriter::Create(o.make_dir + name);
    if (!writer.ok()) Die(writer.status().ToString());
    for (int i = 0; i < o.samples_per_shard; ++i) {
      for (char& c : payload) c = static_cast<char>(rng.Next());
      int64_t index = static_cast<int64_t>(shard) * o.samples_per_shard + i;
      char key[16];
      std::snprintf(key, sizeof(key), "%08lld", static_cast<long long>(index));
      wds::Sample s;
      s.Set("__key__", std::string(key));
      s.Set("bin", wds::Buffer::Copy(payload));
      s.Set("cls", index % 10);
      s.Set("json", "{\"index\": " + std::to_string(index) + "}");
      if (absl::Status st = (*writer)->Write(s); !st.ok()) Die(st.ToString());
    }
    if (absl::Status st = (*writer)->Close(); !st.ok()) Die(st.ToString());
  }
  std::printf("wrote %d shards of %d samples to %s\n", o.shards, o.samples_per_shard,
              o.make_dir.c_str());
}

int Stream(const Options& o) {
  auto source = wds::WebDataset(o.pattern, {.seed = o.seed, .shardshuffle = true});
  if (!source.ok()) Die(source.status().ToString());
  wds::Pipeline pipeline =
      o.raw ? *source : source->Shuffle(static_cast<size_t>(o.shuffle)).Decode();
  wds::Loader loader(pipeline, {.workers = o.workers, .prefetch = 8});
  using Clock = std::chrono::steady_clock;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    std::map<std::string, int> seen;
    int64_t samples = 0, bytes = 0;
    double first_s = 0;
    auto start = Clock::now();
    for (const wds::Sample& s : loader) {
      if (samples++ == 0) first_s = std::chrono::duration<double>(Clock::now() - start).count();
      if (const wds::Buffer* b = s.GetBytes("bin")) bytes += static_cast<int64_t>(b->size());
      if (!o.raw) ++seen[std::string(s.key())];
    }
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    bool once = true;
    for (const auto& [key, n] : seen) once = once && n == 1;
    std::printf(
        "epoch %d: %lld samples, %.1f MB in %.3f s = %.0f samples/s, %.0f MB/s; first sample "
        "after %.1f ms; every sample exactly once: %s\n",
        epoch, static_cast<long long>(samples), bytes / 1e6, secs, samples / secs,
        bytes / 1e6 / secs, first_s * 1e3,
        o.raw  ? "not checked (--raw)"
        : once ? "yes"
               : "NO");
    if (!once) return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  if (!o.make_dir.empty()) MakeShards(o);
  if (!o.pattern.empty()) {
    try {
      return Stream(o);
    } catch (const wds::LoaderError& e) {
      Die(e.what());
    }
  }
  return 0;
}
