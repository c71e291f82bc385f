// wds-bench: measures a loader configuration end to end (read, shuffle,
// decode, collate on worker threads) and reports throughput, first-batch
// latency, peak memory and where the worker time goes; a sweep over worker
// counts plots the scaling curve with gnuplot.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#if WDS_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif
#include "json_text.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/image/image.h"
#include "wds/internal/base/strings.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: wds-bench [options] URL_PATTERN\n"
    "  --workers N          loader worker threads (default 1)\n"
    "  --batch B            batch size (default 64)\n"
    "  --shuffle S          shuffle buffer; 0 keeps the order (default 0)\n"
    "  --decode SPEC|none   image output spec (rgb8, torchrgb, ...) or none (default rgb8)\n"
    "  --resize WxH         decode to this size (stretch unless --crop)\n"
    "  --crop center|random center crop or random resized crop (needs --resize)\n"
    "  --device cpu|cuda[:N] where images are decoded: cuda decodes each batch on the GPU\n"
    "                       (nvJPEG and one resize kernel) into device memory (default cpu)\n"
    "  --pin-memory         batches in page-locked memory (LoaderOptions::pin_memory; with\n"
    "                       --device cuda the workers make the images' jobs there too, and\n"
    "                       the decoder reads them in place instead of gathering them)\n"
    "  --decode-in-workers  with --device cuda: each worker decodes its batches on the GPU\n"
    "                       (LoaderOptions::gpu_decoders), the consumer only finishes them\n"
    "  --fields F,G         keep these fields as a tuple (';' separates alternatives)\n"
    "  --epochs E           epochs to run (default 1)\n"
    "  --prefetch P         items queued per worker (default 2)\n"
    "  --seed N             shuffle seed (default 0)\n"
    "  --json               print one JSON object (an array in sweep mode)\n"
    "  --sweep-workers L    run once per worker count: 1..N or a list 1,2,4\n"
    "  --plot FILE.png      with --sweep-workers: plot samples/s against workers\n";

struct Config {
  int workers = 1;
  int prefetch = 2;
  size_t batch = 64;
  size_t shuffle = 0;
  std::string decode = "rgb8";
  wds::ImageResize resize;
  int device = -1;  // a CUDA device, or -1: decode in the workers
  bool pin_memory = false;
  bool decode_in_workers = false;  // --device cuda: the workers decode (GpuWorkerDecoders)
  std::vector<std::string> fields;
  int epochs = 1;
  uint64_t seed = 0;
  bool json = false;
  std::vector<int> sweep;
  std::string plot;
  std::string urls;
};

int Fail(std::string_view message) {
  std::fprintf(stderr, "wds-bench: %.*s\n", static_cast<int>(message.size()), message.data());
  return 1;
}

std::vector<std::string> Split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(sep, start);
    parts.emplace_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

absl::StatusOr<int64_t> ParseInt(std::string_view option, std::string_view text, int64_t min) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || value < min) {
    return absl::InvalidArgumentError(
        wds::Cat(option, ": expected an integer >= ", min, ", got '", text, "'"));
  }
  return value;
}

absl::StatusOr<std::vector<int>> ParseWorkerList(std::string_view text) {
  std::vector<int> workers;
  size_t dots = text.find("..");
  if (dots != std::string_view::npos) {
    auto lo = ParseInt("--sweep-workers", text.substr(0, dots), 1);
    if (!lo.ok()) return lo.status();
    auto hi = ParseInt("--sweep-workers", text.substr(dots + 2), *lo);
    if (!hi.ok()) return hi.status();
    for (int64_t w = *lo; w <= *hi; ++w) workers.push_back(static_cast<int>(w));
    return workers;
  }
  for (const std::string& part : Split(text, ',')) {
    auto w = ParseInt("--sweep-workers", part, 1);
    if (!w.ok()) return w.status();
    workers.push_back(static_cast<int>(*w));
  }
  return workers;
}

absl::Status ParseResize(std::string_view text, wds::ImageResize& resize) {
  std::vector<std::string> dims = Split(text, 'x');
  if (dims.size() != 2) {
    return absl::InvalidArgumentError(wds::Cat("--resize: expected WxH, got '", text, "'"));
  }
  auto w = ParseInt("--resize", dims[0], 1);
  auto h = ParseInt("--resize", dims[1], 1);
  if (!w.ok()) return w.status();
  if (!h.ok()) return h.status();
  resize.width = static_cast<int>(*w);
  resize.height = static_cast<int>(*h);
  if (resize.mode == wds::ResizeMode::kNone) resize.mode = wds::ResizeMode::kStretch;
  return absl::OkStatus();
}

absl::Status ParseArgs(int argc, char** argv, Config& config) {
  std::optional<std::string> crop;
  std::optional<std::string> resize;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--json") {
      config.json = true;
      continue;
    }
    if (arg == "--pin-memory") {
      config.pin_memory = true;
      continue;
    }
    if (arg == "--decode-in-workers") {
      config.decode_in_workers = true;
      continue;
    }
    if (arg.size() < 2 || arg.substr(0, 2) != "--") {
      if (!config.urls.empty()) {
        return absl::InvalidArgumentError(wds::Cat("unexpected argument '", arg, "'"));
      }
      config.urls = std::string(arg);
      continue;
    }
    static constexpr std::string_view kValued[] = {
        "--workers", "--batch",  "--shuffle",  "--decode",        "--resize", "--crop",
        "--fields",  "--epochs", "--prefetch", "--sweep-workers", "--plot",   "--seed",
        "--device"};
    bool known = false;
    for (std::string_view name : kValued) known = known || name == arg;
    if (!known) return absl::InvalidArgumentError(wds::Cat("unknown option ", arg));
    if (i + 1 >= argc) return absl::InvalidArgumentError(wds::Cat(arg, " needs a value"));
    std::string_view value = argv[++i];
    absl::StatusOr<int64_t> n = int64_t{0};
    if (arg == "--workers" || arg == "--batch" || arg == "--epochs" || arg == "--prefetch") {
      n = ParseInt(arg, value, 1);
    } else if (arg == "--shuffle" || arg == "--seed") {
      n = ParseInt(arg, value, 0);
    }
    if (!n.ok()) return n.status();
    if (arg == "--workers") config.workers = static_cast<int>(*n);
    if (arg == "--batch") config.batch = static_cast<size_t>(*n);
    if (arg == "--epochs") config.epochs = static_cast<int>(*n);
    if (arg == "--prefetch") config.prefetch = static_cast<int>(*n);
    if (arg == "--shuffle") config.shuffle = static_cast<size_t>(*n);
    if (arg == "--seed") config.seed = static_cast<uint64_t>(*n);
    if (arg == "--decode") config.decode = std::string(value);
    if (arg == "--resize") resize = std::string(value);
    if (arg == "--crop") crop = std::string(value);
    if (arg == "--fields") config.fields = Split(value, ',');
    if (arg == "--plot") config.plot = std::string(value);
    if (arg == "--device") {
      if (value == "cpu") {
        config.device = -1;
      } else if (value == "cuda") {
        config.device = 0;
      } else if (value.substr(0, 5) == "cuda:") {
        auto n = ParseInt("--device", value.substr(5), 0);
        if (!n.ok()) return n.status();
        config.device = static_cast<int>(*n);
      } else {
        return absl::InvalidArgumentError(
            wds::Cat("--device: expected cpu, cuda or cuda:N, got '", value, "'"));
      }
    }
    if (arg == "--sweep-workers") {
      auto list = ParseWorkerList(value);
      if (!list.ok()) return list.status();
      config.sweep = *std::move(list);
    }
  }
  if (config.urls.empty()) return absl::InvalidArgumentError("missing URL_PATTERN");
  if (crop.has_value()) {
    if (*crop == "center") {
      config.resize.mode = wds::ResizeMode::kCenterCrop;
    } else if (*crop == "random") {
      config.resize.mode = wds::ResizeMode::kRandomResizedCrop;
    } else {
      return absl::InvalidArgumentError(
          wds::Cat("--crop: expected center or random, got '", *crop, "'"));
    }
    if (!resize.has_value()) return absl::InvalidArgumentError("--crop needs --resize WxH");
  }
  if (resize.has_value()) {
    if (absl::Status s = ParseResize(*resize, config.resize); !s.ok()) return s;
  }
  if (config.decode == "none" && resize.has_value()) {
    return absl::InvalidArgumentError("--resize needs an image --decode spec, not none");
  }
  if (config.decode != "none") {
    if (auto spec = wds::ParseImageSpec(config.decode); !spec.ok()) {
      return absl::InvalidArgumentError(
          wds::Cat("--decode: ", wds::ToStd(spec.status().message())));
    }
  }
  if (config.decode_in_workers && config.device < 0) {
    return absl::InvalidArgumentError(
        "--decode-in-workers needs --device cuda (the CPU path always decodes in the workers)");
  }
  if (config.device >= 0 && config.decode == "none") {
    return absl::InvalidArgumentError("--device cuda needs an image --decode spec, not none");
  }
  if (!config.plot.empty() && config.sweep.empty()) {
    return absl::InvalidArgumentError("--plot needs --sweep-workers");
  }
  return absl::OkStatus();
}

// Probe counters are shared by every worker's copy of a probe stage.
struct ProbeCounters {
  std::atomic<int64_t> nanos{0};
  std::atomic<int64_t> bytes{0};
};

// ProbeStream passes items through unchanged, adding the time spent in its
// upstream's Next() (cumulative: everything below it) and, when asked, the
// size of the still-undecoded bytes fields of each item.
class ProbeStream : public wds::SampleStream {
 public:
  ProbeStream(std::unique_ptr<wds::SampleStream> upstream, std::shared_ptr<ProbeCounters> counters,
              bool count_bytes)
      : upstream_(std::move(upstream)), counters_(std::move(counters)), count_bytes_(count_bytes) {}

  wds::SampleResult Next() override {
    Clock::time_point start = Clock::now();
    wds::SampleResult item = upstream_->Next();
    counters_->nanos.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(),
        std::memory_order_relaxed);
    if (count_bytes_ && item.ok() && item->has_value()) {
      int64_t bytes = 0;
      for (const auto& [name, value] : **item) {
        if (const auto* buffer = std::get_if<wds::Buffer>(&value)) bytes += buffer->size();
      }
      counters_->bytes.fetch_add(bytes, std::memory_order_relaxed);
    }
    return item;
  }

 private:
  std::unique_ptr<wds::SampleStream> upstream_;
  std::shared_ptr<ProbeCounters> counters_;
  bool count_bytes_;
};

wds::StageFactory Probe(std::shared_ptr<ProbeCounters> counters, bool count_bytes = false) {
  return [counters = std::move(counters), count_bytes](const wds::StreamFactory& upstream,
                                                       const wds::WorkerContext& ctx) {
    return std::make_unique<ProbeStream>(upstream(ctx), counters, count_bytes);
  };
}

struct Probes {
  std::shared_ptr<ProbeCounters> read = std::make_shared<ProbeCounters>();
  std::shared_ptr<ProbeCounters> decode = std::make_shared<ProbeCounters>();
  std::shared_ptr<ProbeCounters> batch = std::make_shared<ProbeCounters>();
};

absl::StatusOr<wds::Pipeline> BuildPipeline(const Config& config, const Probes& probes) {
  absl::StatusOr<wds::Pipeline> source =
      wds::WebDataset(config.urls, {.seed = config.seed, .shardshuffle = config.shuffle > 0});
  if (!source.ok()) return source.status();
  wds::Pipeline p = *source;
  if (config.shuffle > 0) p = p.Shuffle(config.shuffle);
  p = p.Then(Probe(probes.read, /*count_bytes=*/true));
  if (config.decode == "none") {
    p = p.Decode();
  } else {
    wds::ImageDecodeOptions image;
    image.resize = config.resize;
    p = config.device >= 0 ? p.DecodeOnGpu(config.decode, image) : p.Decode(config.decode, image);
  }
  if (!config.fields.empty()) p = p.ToTuple(config.fields);
  p = p.Then(Probe(probes.decode));
  return p.Batched(config.batch).Then(Probe(probes.batch));
}

// BatchSize is the number of samples collated into `batch`: the leading
// dimension of any of its collated fields.
int64_t BatchSize(const wds::Batch& batch) {
  for (const auto& [name, value] : batch) {
    if (const auto* array = std::get_if<wds::Array>(&value)) {
      if (!array->shape.empty()) return array->shape[0];
    } else if (const auto* texts = std::get_if<wds::TextList>(&value)) {
      return static_cast<int64_t>(texts->size());
    } else if (const auto* blobs = std::get_if<wds::BytesList>(&value)) {
      return static_cast<int64_t>(blobs->size());
    }
  }
  return 0;
}

struct Result {
  int workers = 0;
  int64_t samples = 0;
  int64_t batches = 0;
  int64_t bytes = 0;
  // From the loader's start (after the GPU decoder's set-up) until the last
  // batch is consumed (on the device: decoded); teardown is not timed.
  double seconds = 0;
  double first_batch_s = 0;
  // After the first batch: its samples, and the time from its arrival to the
  // end (the rate once the pipeline is full).
  int64_t steady_samples = 0;
  double steady_seconds = 0;
  double peak_rss_mb = 0;
  double read_share = 0;
  double decode_share = 0;
  double collate_share = 0;
  double waiting_share = 0;
  double worker_seconds = 0;
  // Over the run, from getrusage: minor page faults, user and system CPU time.
  int64_t minor_faults = 0;
  double user_s = 0;
  double sys_s = 0;
  // The loader's batch and member memory pools at the end of the run.
  wds::BufferPoolStats pool;
  bool pinned = false;  // the batch pool is page-locked (--pin-memory took effect)
  wds::BufferPoolStats read_pool;
  // --device cuda: the GPU decoder, its set-up time and what decoded what
  // (with --decode-in-workers, summed over the workers' decoders, of which
  // there were gpu_decoders).
  std::string gpu_decoder;
  double gpu_init_s = 0;
  wds::GpuBatchDecoder::Stats gpu;
  int gpu_decoders = 0;
};

// GpuConsumer decodes the GPU job columns of each batch on the device into
// one reused device buffer per column, on one stream, as a training loop
// would before its step; with --decode-in-workers the workers decoded them
// (GpuWorkerDecoders) and it finishes their PendingImages there instead.
// Drain waits for the last batch. Its destructor frees the buffers, the
// stream and the decoder (untimed, on every return path).
class GpuConsumer {
 public:
  GpuConsumer() = default;
  GpuConsumer(const GpuConsumer&) = delete;
  GpuConsumer& operator=(const GpuConsumer&) = delete;
  ~GpuConsumer() {
#if WDS_BENCH_CUDA
    if (stream_ == nullptr) return;
    Wait();
    for (auto& [out, bytes] : outputs_) cudaFree(out);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
#endif
  }

  // Init makes the decoder, or with `in_workers` one decoder per worker, so
  // that none is made within the timed run.
  absl::Status Init(int device, bool in_workers, int workers, Result& result) {
#if WDS_BENCH_CUDA
    const Clock::time_point start = Clock::now();
    if (in_workers) {
      auto made = wds::GpuWorkerDecoders::Create(device, {}, workers);
      if (!made.ok()) return made.status();
      workers_ = *std::move(made);
      result.gpu_decoder = workers_->decoder();
    } else {
      auto made = wds::GpuBatchDecoder::Create(device);
      if (!made.ok()) return made.status();
      decoder_ = *std::move(made);
      result.gpu_decoder = std::string(decoder_->decoder());
    }
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) {
      return absl::InternalError("wds-bench: cudaStreamCreate failed");
    }
    result.gpu_init_s = std::chrono::duration<double>(Clock::now() - start).count();
    return absl::OkStatus();
#else
    (void)result;
    (void)in_workers;
    (void)workers;
    // The library says why it cannot decode there (no device, no kernels).
    auto made = wds::GpuBatchDecoder::Create(device);
    if (!made.ok()) return made.status();
    return absl::UnavailableError(
        wds::Cat("decode on cuda:", device, ": wds-bench was built without the CUDA runtime"));
#endif
  }

  // The workers' decoders, to give the Loader (null unless --decode-in-workers).
  const std::shared_ptr<wds::GpuWorkerDecoders>& workers() const { return workers_; }

  absl::Status Consume(const wds::Sample& batch) {
#if WDS_BENCH_CUDA
    const auto [keys, urls] = wds::BatchKeysAndUrls(batch);
    size_t column = 0;
    for (const auto& [name, value] : batch) {
      wds::PendingImages* pending = wds::AsPendingImages(value);
      if (pending == nullptr && !wds::IsGpuJobColumn(value)) continue;
      wds::GpuBatchLayout layout;
      if (pending != nullptr) {
        layout = pending->layout();
      } else {
        auto parsed = wds::GpuJobLayout(std::get<wds::BytesList>(value), keys, urls);
        if (!parsed.ok()) return parsed.status();
        layout = *std::move(parsed);
      }
      absl::StatusOr<void*> out = Output(column++, layout.nbytes());
      if (!out.ok()) return out.status();
      absl::Status s = pending != nullptr ? pending->Finish(*out, stream_)
                                          : decoder_->Decode(std::get<wds::BytesList>(value), keys,
                                                             urls, *out, stream_);
      if (!s.ok()) return s;
    }
#else
    (void)batch;
#endif
    return absl::OkStatus();
  }

  // Wait waits for the batches consumed so far to be decoded.
  void Wait() {
#if WDS_BENCH_CUDA
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
#endif
  }

  // Drain waits for the last batch's decode and takes the decoders' stats.
  void Drain(Result& result) {
#if WDS_BENCH_CUDA
    Wait();
    if (decoder_ != nullptr) result.gpu = decoder_->stats();
    if (workers_ != nullptr) {
      result.gpu = workers_->stats();
      result.gpu_decoders = workers_->decoders();
    }
#else
    (void)result;
#endif
  }

 private:
#if WDS_BENCH_CUDA
  // Output is the reused device buffer of the batch's `column`-th image
  // column, grown to `bytes`.
  absl::StatusOr<void*> Output(size_t column, size_t bytes) {
    if (column >= outputs_.size()) outputs_.push_back({nullptr, 0});
    auto& [out, size] = outputs_[column];
    if (bytes > size) {
      cudaStreamSynchronize(stream_);
      cudaFree(out);
      out = nullptr;
      if (cudaMalloc(&out, bytes) != cudaSuccess) {
        return absl::ResourceExhaustedError("wds-bench: cudaMalloc of a batch failed");
      }
      size = bytes;
    }
    return out;
  }

  cudaStream_t stream_ = nullptr;
#endif
  std::unique_ptr<wds::GpuBatchDecoder> decoder_;
  std::shared_ptr<wds::GpuWorkerDecoders> workers_;
  std::vector<std::pair<void*, size_t>> outputs_;
};

double TimevalSeconds(const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; }

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

absl::StatusOr<Result> RunOnce(const Config& config, int workers) {
  Probes probes;
  absl::StatusOr<wds::Pipeline> pipeline = BuildPipeline(config, probes);
  if (!pipeline.ok()) return pipeline.status();
  Result result;
  result.workers = workers;
  // The GPU decoder's set-up (the CUDA context, nvJPEG's handles) happens
  // once per process, before training: it is timed apart (gpu_init_s), and
  // the run's clock, page faults and CPU time start after it.
  GpuConsumer gpu;
  if (config.device >= 0) {
    if (absl::Status s = gpu.Init(config.device, config.decode_in_workers, workers, result);
        !s.ok()) {
      return s;
    }
  }
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  rusage after{};
  Clock::duration waiting{};
  const Clock::time_point start = Clock::now();
  Clock::time_point first_batch;
  Clock::time_point end;
  {
    wds::LoaderOptions options{.workers = workers, .prefetch = config.prefetch};
    options.pin_memory = config.pin_memory;
    if (config.device >= 0) options.device = config.device;
    options.gpu_decoders = gpu.workers();
    wds::Loader loader(*pipeline, options);
    for (int epoch = 0; epoch < config.epochs; ++epoch) {
      while (true) {
        Clock::time_point asked = Clock::now();
        absl::StatusOr<std::optional<wds::Sample>> batch = loader.Next();
        waiting += Clock::now() - asked;
        if (!batch.ok()) return batch.status();
        if (!batch->has_value()) break;
        if (config.device >= 0) {
          if (absl::Status s = gpu.Consume(**batch); !s.ok()) return s;
        }
        const int64_t size = BatchSize(**batch);
        if (result.batches == 0) {
          gpu.Wait();  // the first batch has arrived once it is decoded
          first_batch = Clock::now();
          result.first_batch_s = Seconds(first_batch - start);
        } else {
          result.steady_samples += size;
        }
        ++result.batches;
        result.samples += size;
      }
    }
    gpu.Drain(result);
    end = Clock::now();
    getrusage(RUSAGE_SELF, &after);
    result.pool = loader.pool()->stats();
    result.pinned = loader.pool()->pinned();
    result.read_pool = loader.read_pool()->stats();
  }
  result.seconds = Seconds(end - start);
  if (result.batches > 1) result.steady_seconds = Seconds(end - first_batch);
  result.bytes = probes.read->bytes.load();
  const double read = probes.read->nanos.load();
  const double decoded = probes.decode->nanos.load();
  const double total = probes.batch->nanos.load();
  result.worker_seconds = total * 1e-9;
  if (total > 0) {
    result.read_share = read / total;
    result.decode_share = (decoded - read) / total;
    result.collate_share = (total - decoded) / total;
  }
  if (result.seconds > 0) result.waiting_share = Seconds(waiting) / result.seconds;
  result.peak_rss_mb = static_cast<double>(after.ru_maxrss) / 1024.0;
  result.minor_faults = after.ru_minflt - before.ru_minflt;
  result.user_s = TimevalSeconds(after.ru_utime) - TimevalSeconds(before.ru_utime);
  result.sys_s = TimevalSeconds(after.ru_stime) - TimevalSeconds(before.ru_stime);
  return result;
}

double PerSecond(double amount, double seconds) { return seconds > 0 ? amount / seconds : 0.0; }

std::string Fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

// GpuJson is the --device fields of the JSON object, from a leading comma.
std::string GpuJson(const Config& config, const Result& r) {
  if (config.device < 0) return ", \"device\": \"cpu\"";
  return wds::Cat(", \"device\": \"cuda:", config.device, "\", \"gpu_decoder\": \"", r.gpu_decoder,
                  "\", \"gpu_init_s\": ", Fixed(r.gpu_init_s, 6),
                  ", \"decode_in_workers\": ", config.decode_in_workers ? "true" : "false",
                  ", \"gpu_decoders\": ", config.decode_in_workers ? r.gpu_decoders : 1,
                  // The decoder's stats(), named as the Python binding names them.
                  ", \"gpu_stats\": {\"batches\": ", r.gpu.batches, ", \"images\": ", r.gpu.images,
                  ", \"nvjpeg_images\": ", r.gpu.nvjpeg_images,
                  ", \"cpu_fallback_images\": ", r.gpu.cpu_fallback_images,
                  ", \"worker_decoded_images\": ", r.gpu.worker_decoded_images,
                  ", \"images_read_in_place\": ", r.gpu.images_read_in_place,
                  ", \"seconds\": {\"parse\": ", Fixed(r.gpu.seconds.parse, 6),
                  ", \"wait\": ", Fixed(r.gpu.seconds.wait, 6),
                  ", \"gather\": ", Fixed(r.gpu.seconds.gather, 6),
                  ", \"nvjpeg\": ", Fixed(r.gpu.seconds.nvjpeg, 6),
                  ", \"cpu_decode\": ", Fixed(r.gpu.seconds.cpu_decode, 6),
                  ", \"kernel\": ", Fixed(r.gpu.seconds.kernel, 6), "}}");
}

std::string ToJson(const Config& config, const Result& r) {
  std::string decode;
  wds::tools::AppendJsonString(decode, config.decode);
  std::string urls;
  wds::tools::AppendJsonString(urls, config.urls);
  return wds::Cat(
      "{\"urls\": ", urls, ", \"workers\": ", r.workers, ", \"batch\": ", config.batch,
      ", \"shuffle\": ", config.shuffle, ", \"decode\": ", decode, ", \"epochs\": ", config.epochs,
      ", \"samples\": ", r.samples, ", \"batches\": ", r.batches, ", \"bytes\": ", r.bytes,
      ", \"bytes_source\": \"undecoded bytes fields\", \"seconds\": ", Fixed(r.seconds, 6),
      ", \"samples_per_s\": ", Fixed(PerSecond(r.samples, r.seconds), 2),
      ", \"steady_samples_per_s\": ", Fixed(PerSecond(r.steady_samples, r.steady_seconds), 2),
      ", \"mb_per_s\": ", Fixed(PerSecond(r.bytes / 1e6, r.seconds), 3),
      ", \"first_batch_s\": ", Fixed(r.first_batch_s, 6),
      ", \"peak_rss_mb\": ", Fixed(r.peak_rss_mb, 1),
      ", \"worker_seconds\": ", Fixed(r.worker_seconds, 6), ", \"minor_faults\": ", r.minor_faults,
      ", \"user_s\": ", Fixed(r.user_s, 3), ", \"sys_s\": ", Fixed(r.sys_s, 3),
      ", \"pool\": {\"pinned\": ", r.pinned ? "true" : "false",
      ", \"allocations\": ", r.pool.allocations, ", \"reuses\": ", r.pool.reuses,
      ", \"frees\": ", r.pool.frees, ", \"peak_mb\": ", Fixed(r.pool.peak_bytes / 1e6, 1), "}",
      ", \"read_pool\": {\"allocations\": ", r.read_pool.allocations,
      ", \"reuses\": ", r.read_pool.reuses, ", \"frees\": ", r.read_pool.frees,
      ", \"peak_mb\": ", Fixed(r.read_pool.peak_bytes / 1e6, 1), "}",
      ", \"shares\": {\"read\": ", Fixed(r.read_share, 4),
      ", \"decode\": ", Fixed(r.decode_share, 4), ", \"collate\": ", Fixed(r.collate_share, 4),
      ", \"waiting\": ", Fixed(r.waiting_share, 4), "}", GpuJson(config, r), "}");
}

std::string ToText(const Result& r) {
  return wds::Cat("workers ", r.workers, ": ", r.samples, " samples in ", r.batches, " batches, ",
                  Fixed(r.seconds, 3), " s, ", Fixed(PerSecond(r.samples, r.seconds), 1),
                  " samples/s, ", Fixed(PerSecond(r.bytes / 1e6, r.seconds), 1),
                  " MB/s (undecoded bytes)\n  first batch ", Fixed(r.first_batch_s, 3), " s, then ",
                  Fixed(PerSecond(r.steady_samples, r.steady_seconds), 1), " samples/s; peak RSS ", Fixed(r.peak_rss_mb, 1), " MB\n  worker time: read ",
                  Fixed(100 * r.read_share, 1), "%, decode ", Fixed(100 * r.decode_share, 1),
                  "%, collate ", Fixed(100 * r.collate_share, 1), "%; consumer waiting ",
                  Fixed(100 * r.waiting_share, 1), "% of wall time\n");
}

// FindInPath returns the full path of an executable named `name`, or "".
std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (const std::string& dir : Split(path ? path : "", ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string GnuplotQuote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted + "'";
}

absl::Status WritePlot(const Config& config, const std::vector<Result>& results) {
  std::string gnuplot = FindInPath("gnuplot");
  if (gnuplot.empty()) {
    return absl::FailedPreconditionError(wds::Cat(
        "cannot write ", config.plot, ": gnuplot not found in PATH (apt-get install gnuplot-nox)"));
  }
  std::string dir_template = "/tmp/wds-bench-XXXXXX";
  if (mkdtemp(dir_template.data()) == nullptr) {
    return absl::InternalError(wds::Cat("mkdtemp: ", std::strerror(errno)));
  }
  const std::string dat = dir_template + "/sweep.dat";
  const std::string script = dir_template + "/sweep.gp";
  {
    std::ofstream out(dat);
    for (const Result& r : results) {
      out << r.workers << ' ' << Fixed(PerSecond(r.samples, r.seconds), 2) << '\n';
    }
    std::ofstream gp(script);
    gp << "set terminal pngcairo size 800,500\n"
       << "set output " << GnuplotQuote(config.plot) << "\n"
       << "set title " << GnuplotQuote("wds-bench: " + config.urls) << " noenhanced\n"
       << "set xlabel 'workers'\nset ylabel 'samples/s'\nset grid\nset yrange [0:*]\n"
       << "set xtics 1\nplot " << GnuplotQuote(dat)
       << " using 1:2 with linespoints lw 2 pt 7 title " << GnuplotQuote(config.decode)
       << " noenhanced\n";
  }
  pid_t pid = fork();
  if (pid == 0) {
    execl(gnuplot.c_str(), "gnuplot", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) {
    return absl::InternalError(wds::Cat("cannot run gnuplot: ", std::strerror(errno)));
  }
  std::remove(dat.c_str());
  std::remove(script.c_str());
  rmdir(dir_template.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(wds::Cat("gnuplot failed writing ", config.plot));
  }
  return absl::OkStatus();
}

int RunSweep(const Config& config) {
  std::vector<Result> results;
  for (int workers : config.sweep) {
    absl::StatusOr<Result> result = RunOnce(config, workers);
    if (!result.ok()) return Fail(wds::ToStd(result.status().message()));
    results.push_back(*result);
  }
  if (config.json) {
    std::string out = "[";
    for (size_t i = 0; i < results.size(); ++i) {
      out += wds::Cat(i == 0 ? "" : ",\n ", ToJson(config, results[i]));
    }
    std::printf("%s]\n", out.c_str());
  } else {
    for (const Result& r : results) std::fputs(ToText(r).c_str(), stdout);
  }
  if (!config.plot.empty()) {
    if (absl::Status s = WritePlot(config, results); !s.ok()) return Fail(wds::ToStd(s.message()));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  Config config;
  if (absl::Status s = ParseArgs(argc, argv, config); !s.ok()) {
    Fail(wds::ToStd(s.message()));
    std::fputs(kUsage, stderr);
    return 1;
  }
  if (!config.sweep.empty()) return RunSweep(config);
  absl::StatusOr<Result> result = RunOnce(config, config.workers);
  if (!result.ok()) return Fail(wds::ToStd(result.status().message()));
  std::fputs((config.json ? ToJson(config, *result) + "\n" : ToText(*result)).c_str(), stdout);
  return 0;
}
