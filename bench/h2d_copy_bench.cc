// h2d_copy_bench: what pinned batches buy when every batch is copied to a GPU.
//
//   LOCAL_RANK=0 h2d_copy_bench [workers,...=2,8,14] [samples=4096] [rounds=3]
//
// Self-contained: it writes 16 shards of synthetic JPEGs (500x375, quality
// 90, textured and noisy like a photograph) into a temporary folder, with
// index sidecars so that workers split the samples evenly. For each worker
// count it keeps two loaders alive, one with pin_memory and one without
// (WebDataset -> Decode("rgb8") -> ToTuple(jpg, cls) -> Batched(64)), warms
// both up for an epoch, then runs rounds of four epochs side by side:
// each loader alone, and each loader with every image block copied to the
// device by cudaMemcpyAsync on one stream. Copies are double-buffered: a
// batch stays alive until its copy's event completed, which is the earliest
// a pooled batch may be reused. It prints one JSON line per configuration
// (medians over the rounds), then a plain H2D bandwidth line for a 36 MB
// block of each kind of host memory, what allocating, first writing and
// freeing such a block costs with each allocator, and lines saying which
// devices hold a CUDA context (expected: only the LOCAL_RANK device, created
// by the pinned pool's first allocation on a worker thread).
//
// Built only when the CUDA toolkit was found (WDS_WITH_CUDA); needs a device
// at run time.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <turbojpeg.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/host_allocator.h"
#include "wds/base/buffer_pool.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/shards/shard_list.h"
#include "wds/tar/shard_writer.h"

namespace {

constexpr int kWidth = 500;
constexpr int kHeight = 375;
constexpr int kBatch = 64;
constexpr int kShards = 16;
constexpr int kDistinctImages = 64;
constexpr size_t kImageBytes = size_t{kWidth} * kHeight * 3;
constexpr size_t kBlockBytes = kImageBytes * kBatch;  // 36,000,000: one full batch

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "h2d_copy_bench: %s\n", message.c_str());
  std::exit(1);
}

void Check(const absl::Status& status) {
  if (!status.ok()) Die(std::string(status.message()));
}

void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorName(e));
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

std::string JsonList(const std::vector<double>& v, int digits) {
  std::ostringstream out;
  out.precision(digits);
  out << std::fixed << "[";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? "," : "") << v[i];
  out << "]";
  return out.str();
}

// LocalDevice is the device the loader pins for: LOCAL_RANK, else
// SLURM_LOCALID, else 0 (as LoaderOptions.device documents).
int LocalDevice() {
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return 0;
}

// Picture is image `seed`: smooth shapes, texture and sensor-like noise, so
// that a JPEG of it costs about what a photograph does to decode.
std::vector<uint8_t> Picture(uint64_t seed) {
  std::vector<uint8_t> rgb(kImageBytes);
  uint64_t state = 88172645463325252ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
  auto noise = [&state] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return static_cast<double>(state % 1000) / 1000.0 - 0.5;
  };
  const double phase = static_cast<double>(seed) * 0.37;
  size_t i = 0;
  for (int y = 0; y < kHeight; ++y) {
    for (int x = 0; x < kWidth; ++x) {
      for (int c = 0; c < 3; ++c) {
        const double v = 120 + 70 * std::sin(x / 41.0 + c + phase) * std::cos(y / 29.0 - c) +
                         25 * std::sin((x + 2 * y) / 6.0 + c * 1.7 + phase) + 34 * noise();
        rgb[i++] = static_cast<uint8_t>(std::lround(std::fmin(255, std::fmax(0, v))));
      }
    }
  }
  return rgb;
}

std::string Jpeg(const std::vector<uint8_t>& rgb) {
  tjhandle tj = tjInitCompress();
  if (tj == nullptr) Die("tjInitCompress failed");
  unsigned char* out = nullptr;
  unsigned long size = 0;
  if (tjCompress2(tj, rgb.data(), kWidth, 0, kHeight, TJPF_RGB, &out, &size, TJSAMP_420, 90,
                  TJFLAG_ACCURATEDCT) != 0) {
    Die(std::string("tjCompress2: ") + tjGetErrorStr2(tj));
  }
  std::string jpeg(reinterpret_cast<const char*>(out), size);
  tjFree(out);
  tjDestroy(tj);
  return jpeg;
}

// WriteShards writes kShards shards of `samples` samples in all (jpg, cls),
// cycling through kDistinctImages encoded pictures, with index sidecars.
std::vector<std::string> WriteShards(const std::string& dir, int64_t samples,
                                     double* mean_jpeg_bytes) {
  std::vector<std::string> jpegs(kDistinctImages);
  std::vector<std::thread> encoders;
  const int threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (int t = 0; t < threads; ++t) {
    encoders.emplace_back([&jpegs, t, threads] {
      for (int i = t; i < kDistinctImages; i += threads) jpegs[i] = Jpeg(Picture(i));
    });
  }
  for (std::thread& t : encoders) t.join();
  double total = 0;
  for (const std::string& j : jpegs) total += static_cast<double>(j.size());
  *mean_jpeg_bytes = total / kDistinctImages;

  std::vector<std::string> paths;
  wds::ShardWriterOptions options;
  options.maxcount = (samples + kShards - 1) / kShards;
  options.write_index = true;
  options.on_close = [&paths](const wds::ShardInfo& shard) {
    paths.push_back(shard.path);
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<wds::ShardWriter>> writer =
      wds::ShardWriter::Create(dir + "/synthetic-%06d.tar", options);
  Check(writer.status());
  for (int64_t i = 0; i < samples; ++i) {
    wds::Sample s;
    char key[32];
    std::snprintf(key, sizeof key, "%08lld", static_cast<long long>(i));
    s.Set(std::string(wds::kKeyField), std::string(key));
    s.Set("jpg", wds::Buffer::Copy(jpegs[i % kDistinctImages]));
    s.Set("cls", int64_t{i % 1000});
    Check((*writer)->Write(s));
  }
  Check((*writer)->Close());
  return paths;
}

wds::Pipeline Recipe(const std::vector<std::string>& shards) {
  wds::WebDatasetOptions options;
  options.split = wds::SplitGranularity::kSamples;
  absl::StatusOr<wds::Pipeline> source = wds::WebDataset(shards, options);
  Check(source.status());
  return source->Decode("rgb8").ToTuple({"jpg", "cls"}).Batched(kBatch);
}

// HostMemoryKind asks CUDA what `p` is: "pinned" for page-locked memory the
// GPU can read directly, "pageable" for ordinary memory.
std::string HostMemoryKind(const void* p) {
  cudaPointerAttributes attributes{};
  CheckCuda(cudaPointerGetAttributes(&attributes, p), "cudaPointerGetAttributes");
  switch (attributes.type) {
    case cudaMemoryTypeHost:
      return "pinned";
    case cudaMemoryTypeUnregistered:
      return "pageable";
    default:
      return "other";
  }
}

// One epoch's measurements.
struct EpochResult {
  int64_t images = 0;
  int64_t batches = 0;
  double seconds = 0;
  double copied_bytes = 0;
  std::vector<double> copy_ms;   // per copy, by CUDA events
  std::vector<double> issue_ms;  // host time inside cudaMemcpyAsync
  std::vector<double> wait_ms;   // host time waiting for a slot's copy to end
  std::string host_memory;       // of the first batch's image block
};

// Copier copies batches to the device, double-buffered on one stream: slot
// i % 2 is reused only after the copy that last used it has completed, and
// the batch it copied from is released only then.
class Copier {
 public:
  Copier() {
    CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    for (Slot& s : slots_) {
      CheckCuda(cudaMalloc(&s.device, kBlockBytes), "cudaMalloc");
      CheckCuda(cudaEventCreate(&s.start), "cudaEventCreate");
      CheckCuda(cudaEventCreate(&s.stop), "cudaEventCreate");
    }
  }
  ~Copier() {
    for (Slot& s : slots_) {
      cudaFree(s.device);
      cudaEventDestroy(s.start);
      cudaEventDestroy(s.stop);
    }
    cudaStreamDestroy(stream_);
  }

  void Copy(const wds::Sample& batch, EpochResult* result) {
    const wds::Array* images = batch.GetArray("jpg");
    if (images == nullptr) Die("a batch has no jpg array");
    if (images->nbytes() > kBlockBytes) Die("a batch is larger than a full batch");
    Slot& slot = slots_[next_++ % 2];
    Retire(slot, result);
    slot.batch = batch;
    const Clock::time_point issue = Clock::now();
    CheckCuda(cudaEventRecord(slot.start, stream_), "cudaEventRecord");
    CheckCuda(cudaMemcpyAsync(slot.device, images->data.data(), images->nbytes(),
                              cudaMemcpyHostToDevice, stream_),
              "cudaMemcpyAsync");
    CheckCuda(cudaEventRecord(slot.stop, stream_), "cudaEventRecord");
    result->issue_ms.push_back(Seconds(Clock::now() - issue) * 1e3);
    result->copied_bytes += static_cast<double>(images->nbytes());
    slot.busy = true;
  }

  // Finish waits for every copy in flight and releases their batches.
  void Finish(EpochResult* result) {
    for (Slot& s : slots_) Retire(s, result);
  }

 private:
  struct Slot {
    void* device = nullptr;
    cudaEvent_t start = nullptr;
    cudaEvent_t stop = nullptr;
    wds::Sample batch;
    bool busy = false;
  };

  void Retire(Slot& slot, EpochResult* result) {
    if (!slot.busy) return;
    const Clock::time_point wait = Clock::now();
    CheckCuda(cudaEventSynchronize(slot.stop), "cudaEventSynchronize");
    result->wait_ms.push_back(Seconds(Clock::now() - wait) * 1e3);
    float ms = 0;
    CheckCuda(cudaEventElapsedTime(&ms, slot.start, slot.stop), "cudaEventElapsedTime");
    result->copy_ms.push_back(ms);
    slot.batch = wds::Sample();  // the host batch goes back to the pool now
    slot.busy = false;
  }

  cudaStream_t stream_ = nullptr;
  Slot slots_[2];
  int64_t next_ = 0;
};

EpochResult RunEpoch(wds::Loader& loader, Copier* copier) {
  EpochResult result;
  const Clock::time_point start = Clock::now();
  for (const wds::Sample& batch : loader) {
    const wds::Array* images = batch.GetArray("jpg");
    if (images == nullptr) Die("a batch has no jpg array");
    if (result.batches == 0 && copier != nullptr) {
      result.host_memory = HostMemoryKind(images->data.data());
    }
    result.images += images->shape[0];
    ++result.batches;
    if (copier != nullptr) copier->Copy(batch, &result);
  }
  if (copier != nullptr) copier->Finish(&result);
  result.seconds = Seconds(Clock::now() - start);
  return result;
}

struct Config {
  bool pin = false;
  bool copies = false;
  std::vector<EpochResult> rounds;
};

void PrintConfig(int workers, const Config& config, const wds::Loader& loader) {
  std::vector<double> rates, copy_ms, issue_ms, wait_ms, gbps, busy;
  for (const EpochResult& r : config.rounds) {
    rates.push_back(static_cast<double>(r.images) / r.seconds);
    copy_ms.insert(copy_ms.end(), r.copy_ms.begin(), r.copy_ms.end());
    issue_ms.insert(issue_ms.end(), r.issue_ms.begin(), r.issue_ms.end());
    wait_ms.insert(wait_ms.end(), r.wait_ms.begin(), r.wait_ms.end());
    double total_ms = 0;
    for (double ms : r.copy_ms) total_ms += ms;
    if (total_ms > 0) {
      gbps.push_back(r.copied_bytes / (total_ms * 1e-3) / 1e9);
      busy.push_back(total_ms * 1e-3 / r.seconds);
    }
  }
  const EpochResult& first = config.rounds.front();
  const wds::BufferPoolStats pool = loader.pool()->stats();
  std::printf(
      "{\"bench\": \"loader_h2d\", \"workers\": %d, \"pin_memory\": %s, \"copies\": %s, "
      "\"pool\": \"%s\", \"host_memory\": \"%s\", \"images_per_epoch\": %lld, "
      "\"batches_per_epoch\": %lld, \"rounds\": %zu, \"images_per_s\": %.0f, "
      "\"images_per_s_rounds\": %s",
      workers, config.pin ? "true" : "false", config.copies ? "true" : "false",
      std::string(loader.pool()->allocator().name()).c_str(),
      config.copies ? first.host_memory.c_str() : "-", static_cast<long long>(first.images),
      static_cast<long long>(first.batches), config.rounds.size(), Median(rates),
      JsonList(rates, 0).c_str());
  if (config.copies) {
    // copy_busy_fraction: the share of the epoch's wall time the copy engine
    // spent on this loader's copies.
    std::printf(
        ", \"copy_GBps\": %.2f, \"copy_GBps_rounds\": %s, \"copy_ms_median\": %.3f, "
        "\"copy_ms_p90\": %.3f, \"issue_ms_median\": %.3f, \"issue_ms_p90\": %.3f, "
        "\"wait_ms_median\": %.3f, \"copy_busy_fraction\": %.3f",
        Median(gbps), JsonList(gbps, 2).c_str(), Median(copy_ms), Quantile(copy_ms, 0.9),
        Median(issue_ms), Quantile(issue_ms, 0.9), Median(wait_ms), Median(busy));
  }
  // The pool counts are over the loader's life (warm-up epoch and every round
  // of both of its configurations).
  std::printf(
      ", \"pool_allocations\": %lld, \"pool_reuses\": %lld, \"pool_frees\": %lld, "
      "\"pool_peak_MiB\": %.0f}\n",
      static_cast<long long>(pool.allocations), static_cast<long long>(pool.reuses),
      static_cast<long long>(pool.frees), static_cast<double>(pool.peak_bytes) / (1 << 20));
  std::fflush(stdout);
}

void RunWorkers(int workers, const std::vector<std::string>& shards, int rounds, Copier* copier) {
  wds::Loader pageable(Recipe(shards), {.workers = workers, .pin_memory = false});
  wds::Loader pinned(Recipe(shards), {.workers = workers, .pin_memory = true});
  if (!pinned.pool()->pinned()) Die("pin_memory did not take effect (see the warning above)");
  RunEpoch(pageable, nullptr);  // warm-up: fills both pools and the page cache
  RunEpoch(pinned, nullptr);
  Config configs[] = {{false, false, {}}, {true, false, {}}, {false, true, {}}, {true, true, {}}};
  for (int round = 0; round < rounds; ++round) {
    for (Config& c : configs) {
      c.rounds.push_back(RunEpoch(c.pin ? pinned : pageable, c.copies ? copier : nullptr));
    }
  }
  for (const Config& c : configs) PrintConfig(workers, c, c.pin ? pinned : pageable);
}

// Bandwidth times `copies` H2D copies of `bytes` from `host` (after one
// untimed copy) and prints their median.
void Bandwidth(const char* source, const void* host, size_t bytes, void* device,
               cudaStream_t stream, int copies) {
  cudaEvent_t start, stop;
  CheckCuda(cudaEventCreate(&start), "cudaEventCreate");
  CheckCuda(cudaEventCreate(&stop), "cudaEventCreate");
  CheckCuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpy");
  CheckCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::vector<double> ms, gbps;
  for (int i = 0; i < copies; ++i) {
    CheckCuda(cudaEventRecord(start, stream), "cudaEventRecord");
    CheckCuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpy");
    CheckCuda(cudaEventRecord(stop, stream), "cudaEventRecord");
    CheckCuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float elapsed = 0;
    CheckCuda(cudaEventElapsedTime(&elapsed, start, stop), "cudaEventElapsedTime");
    ms.push_back(elapsed);
    gbps.push_back(static_cast<double>(bytes) / (elapsed * 1e-3) / 1e9);
  }
  std::printf(
      "{\"bench\": \"h2d_bandwidth\", \"source\": \"%s\", \"host_memory\": \"%s\", "
      "\"bytes\": %zu, \"copies\": %d, \"GBps_median\": %.2f, \"GBps_min\": %.2f, "
      "\"GBps_max\": %.2f, \"ms_median\": %.3f}\n",
      source, HostMemoryKind(host).c_str(), bytes, copies, Median(gbps),
      *std::min_element(gbps.begin(), gbps.end()), *std::max_element(gbps.begin(), gbps.end()),
      Median(ms));
  std::fflush(stdout);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

// AllocationCost times what a pool pays for a new 36 MB block and for giving
// one back: Allocate, the first write of every page, and Deallocate.
void AllocationCost(const char* source, wds::HostAllocator& allocator) {
  constexpr int kBlocks = 10;
  std::vector<double> allocate_ms, touch_ms, free_ms;
  for (int i = 0; i < kBlocks; ++i) {
    Clock::time_point t = Clock::now();
    absl::StatusOr<void*> p = allocator.Allocate(kBlockBytes);
    Check(p.status());
    allocate_ms.push_back(Seconds(Clock::now() - t) * 1e3);
    t = Clock::now();
    std::fill_n(static_cast<uint8_t*>(*p), kBlockBytes, uint8_t{1});
    touch_ms.push_back(Seconds(Clock::now() - t) * 1e3);
    t = Clock::now();
    allocator.Deallocate(*p, kBlockBytes);
    free_ms.push_back(Seconds(Clock::now() - t) * 1e3);
  }
  std::printf(
      "{\"bench\": \"host_alloc\", \"source\": \"%s\", \"allocator\": \"%s\", "
      "\"bytes\": %zu, \"blocks\": %d, \"allocate_ms_median\": %.2f, "
      "\"first_write_ms_median\": %.2f, \"free_ms_median\": %.2f}\n",
      source, std::string(allocator.name()).c_str(), kBlockBytes, kBlocks, Median(allocate_ms),
      Median(touch_ms), Median(free_ms));
  std::fflush(stdout);
}

// RunBandwidth compares a 36 MB block of ordinary memory (operator new,
// touched), of the loader's unpinned pool, and of its pinned pool; then
// what a new block costs each allocator.
void RunBandwidth(const std::vector<std::string>& shards, void* device) {
  wds::Loader pageable(Recipe(shards), {.workers = 1, .pin_memory = false});
  wds::Loader pinned(Recipe(shards), {.workers = 1, .pin_memory = true});
  std::unique_ptr<uint8_t[]> plain(new uint8_t[kBlockBytes]);
  absl::StatusOr<wds::Buffer> aligned = pageable.pool()->Acquire(kBlockBytes);
  absl::StatusOr<wds::Buffer> locked = pinned.pool()->Acquire(kBlockBytes);
  Check(aligned.status());
  Check(locked.status());
  std::fill_n(plain.get(), kBlockBytes, uint8_t{7});
  std::fill_n(aligned->mutable_data(), kBlockBytes, uint8_t{7});
  std::fill_n(locked->mutable_data(), kBlockBytes, uint8_t{7});
  cudaStream_t stream;
  CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  constexpr int kCopies = 30;
  for (int round = 0; round < 2; ++round) {
    Bandwidth("operator new", plain.get(), kBlockBytes, device, stream, kCopies);
    Bandwidth("loader pool, pin_memory=false", aligned->data(), kBlockBytes, device, stream,
              kCopies);
    Bandwidth("loader pool, pin_memory=true", locked->data(), kBlockBytes, device, stream, kCopies);
  }
  cudaStreamDestroy(stream);
  AllocationCost("pin_memory=false", *wds::AlignedHostAllocator());
  absl::StatusOr<std::shared_ptr<wds::HostAllocator>> pinned_allocator =
      wds::PinnedHostAllocator(LocalDevice());
  Check(pinned_allocator.status());
  AllocationCost("pin_memory=true", **pinned_allocator);
}

std::vector<int> ParseWorkers(const char* arg) {
  std::vector<int> workers;
  std::stringstream in(arg);
  std::string item;
  while (std::getline(in, item, ',')) {
    const int w = std::atoi(item.c_str());
    if (w < 1) Die("workers must be a comma-separated list of counts >= 1, got '" + item + "'");
    workers.push_back(w);
  }
  return workers;
}

// DriverFunction looks up a CUDA driver API function through the runtime, so
// that the bench links no libcuda and starts (to say it needs a device) on a
// machine without a driver.
template <typename F>
F DriverFunction(const char* name) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    Die(std::string("no driver function ") + name);
  }
  return reinterpret_cast<F>(f);
}

// ReportContexts prints which devices hold an active primary context (the
// CUDA runtime's only kind) and whether this thread has a current one.
void ReportContexts(const char* when, int device_count) {
  auto get_device = DriverFunction<CUresult (*)(CUdevice*, int)>("cuDeviceGet");
  auto get_state =
      DriverFunction<CUresult (*)(CUdevice, unsigned int*, int*)>("cuDevicePrimaryCtxGetState");
  auto get_current = DriverFunction<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  std::string active = "[";
  for (int d = 0; d < device_count; ++d) {
    CUdevice dev;
    unsigned int flags = 0;
    int is_active = 0;
    if (get_device(&dev, d) != CUDA_SUCCESS || get_state(dev, &flags, &is_active) != CUDA_SUCCESS) {
      Die("cuDevicePrimaryCtxGetState failed");
    }
    active += std::string(d ? ", " : "") + (is_active ? "true" : "false");
  }
  active += "]";
  CUcontext current = nullptr;
  if (get_current(&current) != CUDA_SUCCESS) Die("cuCtxGetCurrent failed");
  const char* local_rank = std::getenv("LOCAL_RANK");
  std::printf(
      "{\"bench\": \"cuda_context\", \"when\": \"%s\", \"LOCAL_RANK\": \"%s\", "
      "\"device_count\": %d, \"primary_context_active\": %s, "
      "\"main_thread_has_context\": %s}\n",
      when, local_rank ? local_rank : "<unset>", device_count, active.c_str(),
      current != nullptr ? "true" : "false");
  std::fflush(stdout);
}

int Run(int argc, char** argv) {
  const std::vector<int> worker_counts = ParseWorkers(argc > 1 ? argv[1] : "2,8,14");
  const int64_t samples = argc > 2 ? std::atoll(argv[2]) : 4096;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  if (samples < kShards || rounds < 1) Die("samples must be >= 16 and rounds >= 1");

  // cudaGetDeviceCount creates no context: the first context must come from
  // the pinned pool, on the LOCAL_RANK device.
  int device_count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&device_count); e != cudaSuccess || device_count == 0) {
    std::printf("{\"bench\": \"h2d_copy\", \"error\": \"needs a CUDA device: %s\"}\n",
                e != cudaSuccess ? cudaGetErrorName(e) : "none present");
    return 2;
  }
  const int device = LocalDevice();

  std::string tmpl = (std::filesystem::temp_directory_path() / "wds-h2d-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp failed");
  double mean_jpeg_bytes = 0;
  const Clock::time_point made = Clock::now();
  const std::vector<std::string> shards = WriteShards(tmpl, samples, &mean_jpeg_bytes);
  std::printf(
      "{\"bench\": \"shards\", \"shards\": %zu, \"samples\": %lld, \"image\": \"%dx%d q90\", "
      "\"distinct_images\": %d, \"mean_jpeg_bytes\": %.0f, \"seconds\": %.2f}\n",
      shards.size(), static_cast<long long>(samples), kWidth, kHeight, kDistinctImages,
      mean_jpeg_bytes, Seconds(Clock::now() - made));

  {
    // The pinned pool's first allocation, on a worker thread, creates the
    // process's first context; the main thread has made no CUDA call yet.
    wds::Loader first(Recipe(shards), {.workers = 2, .pin_memory = true});
    RunEpoch(first, nullptr);
    std::printf("{\"bench\": \"allocator\", \"name\": \"%s\", \"pinned\": %s}\n",
                std::string(first.pool()->allocator().name()).c_str(),
                first.pool()->pinned() ? "true" : "false");
    ReportContexts("after a pinned loader's epoch, before any CUDA call of the main thread",
                   device_count);
  }

  CheckCuda(cudaSetDevice(device), "cudaSetDevice");
  {
    Copier copier;
    for (int workers : worker_counts) RunWorkers(workers, shards, rounds, &copier);
  }
  void* block = nullptr;
  CheckCuda(cudaMalloc(&block, kBlockBytes), "cudaMalloc");
  RunBandwidth(shards, block);
  cudaFree(block);
  ReportContexts("at the end", device_count);
  std::filesystem::remove_all(tmpl);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const wds::LoaderError& e) {  // a setup error, e.g. a device that is not there
    Die(e.what());
  }
}
