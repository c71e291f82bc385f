#include "wds/loader.h"

#include <exception>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "base/handlers.h"
#include "wds/internal/bounded_queue.h"
#include "wds/internal/status_macros.h"
#include "wds/internal/strings.h"
#include "wds/placement.h"

namespace wds {
namespace {

// Entry is what a worker hands to the consumer: an item, its end (ok and
// empty) or its error.
struct Entry {
  int worker;
  SampleResult result;
};

bool IsEnd(const SampleResult& result) { return result.ok() && !result->has_value(); }

// ResolvePlacement reads rank and world size as documented in LoaderOptions.
absl::StatusOr<Placement> ResolvePlacement(const LoaderOptions& options) {
  PlacementOptions placement;
  placement.rank = options.rank;
  placement.world_size = options.world_size;
  return wds::ResolvePlacement(placement, "LoaderOptions");
}

// ResolveDevice reads the local GPU as documented in LoaderOptions.device.
absl::StatusOr<int> ResolveDevice(const LoaderOptions& options) {
  return ResolveLocalRank(options.device, "LoaderOptions.device", "device");
}

absl::Status ValidateOptions(const Pipeline& pipeline, const LoaderOptions& options) {
  if (options.workers < 1) {
    return absl::InvalidArgumentError(
        Cat("LoaderOptions.workers must be >= 1, got ", options.workers));
  }
  if (options.prefetch < 1) {
    return absl::InvalidArgumentError(
        Cat("LoaderOptions.prefetch must be >= 1, got ", options.prefetch));
  }
  if (pipeline.epoch_mode() != EpochMode::kNatural && pipeline.length().value_or(-1) < 0) {
    return absl::InvalidArgumentError(
        Cat("the pipeline's WithLength/WithEpoch length must be >= 0, got ",
            pipeline.length().value_or(-1)));
  }
  return absl::OkStatus();
}

// ExceptionStatus turns the exception being handled into an error, so that an
// exception escaping a recipe reaches the consumer at its place instead of
// terminating the process. REQUIRES: called inside a catch block.
absl::Status ExceptionStatus(int worker) {
  try {
    throw;
  } catch (const std::exception& e) {
    return absl::InternalError(Cat("loader worker ", worker, ": exception: ", e.what()));
  } catch (...) {
    return absl::UnknownError(Cat("loader worker ", worker, ": unknown exception"));
  }
}

std::unique_ptr<SampleStream> OpenGuarded(const Pipeline& pipeline, const WorkerContext& ctx,
                                          bool endless) {
  try {
    return endless ? pipeline.OpenEndless(ctx) : pipeline.Open(ctx);
  } catch (...) {
    return ErrorStream(ExceptionStatus(ctx.worker));
  }
}

SampleResult NextGuarded(SampleStream& stream, int worker) {
  try {
    return stream.Next();
  } catch (...) {
    return ExceptionStatus(worker);
  }
}

// WorkerGroup runs one stream per worker thread, each feeding a bounded queue
// (its own when ordered, one shared queue otherwise), and hands out their
// entries in loader order. Destroying it stops and joins the threads.
class WorkerGroup {
 public:
  WorkerGroup(const Pipeline& pipeline, const WorkerContext& base, const LoaderOptions& options,
              bool endless)
      : ordered_(options.ordered), ended_(options.workers, false), active_(options.workers) {
    const size_t workers = static_cast<size_t>(options.workers);
    const size_t prefetch = static_cast<size_t>(options.prefetch);
    if (ordered_) {
      for (size_t w = 0; w < workers; ++w) {
        queues_.push_back(std::make_unique<BoundedQueue<Entry>>(prefetch));
      }
    } else {
      queues_.push_back(std::make_unique<BoundedQueue<Entry>>(prefetch * workers));
    }
    try {
      for (int w = 0; w < options.workers; ++w) {
        WorkerContext ctx = base;
        ctx.worker = w;
        BoundedQueue<Entry>* queue = queues_[ordered_ ? w : 0].get();
        threads_.emplace_back([&pipeline, ctx = std::move(ctx), queue, endless] {
          Run(pipeline, ctx, *queue, endless);
        });
      }
    } catch (...) {
      // The destructor does not run for a half-built group: stop what started.
      StopAndJoin();
      throw;
    }
  }

  ~WorkerGroup() { StopAndJoin(); }

  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Stop tells the workers to finish; queued items are discarded.
  void Stop() {
    for (auto& queue : queues_) queue->Close();
  }

  // Take returns the next item or error in loader order, or nullopt once every
  // worker has ended.
  SampleResult Take() {
    while (active_ > 0) {
      std::optional<Entry> entry = ordered_ ? TakeOrdered() : queues_[0]->Pop();
      if (!entry.has_value()) return absl::CancelledError("the loader's workers were stopped");
      if (!IsEnd(entry->result)) return std::move(entry->result);
      ended_[entry->worker] = true;
      --active_;
    }
    return std::nullopt;
  }

 private:
  static void Run(const Pipeline& pipeline, const WorkerContext& ctx, BoundedQueue<Entry>& queue,
                  bool endless) {
    std::unique_ptr<SampleStream> stream = OpenGuarded(pipeline, ctx, endless);
    while (!queue.closed()) {
      SampleResult result = NextGuarded(*stream, ctx.worker);
      const bool last = !result.ok() || !result->has_value();
      if (!queue.Push(Entry{ctx.worker, std::move(result)})) return;
      if (last) return;
    }
  }

  void StopAndJoin() {
    Stop();
    for (std::thread& t : threads_) t.join();
  }

  // TakeOrdered pops from the next worker in the rotation that has not ended.
  std::optional<Entry> TakeOrdered() {
    const int workers = static_cast<int>(queues_.size());
    while (ended_[cursor_]) cursor_ = (cursor_ + 1) % workers;
    const int worker = cursor_;
    cursor_ = (cursor_ + 1) % workers;
    return queues_[worker]->Pop();
  }

  const bool ordered_;
  std::vector<std::unique_ptr<BoundedQueue<Entry>>> queues_;
  std::vector<std::thread> threads_;
  std::vector<bool> ended_;
  int active_;
  int cursor_ = 0;
};

}  // namespace

LoaderError::LoaderError(absl::Status status)
    : std::runtime_error(status.ToString()), status_(std::move(status)) {}

struct Loader::Impl {
  Pipeline pipeline;
  LoaderOptions options;
  absl::Status setup;
  Placement placement{0, 1};
  std::shared_ptr<ErrorCounters> errors = std::make_shared<ErrorCounters>();
  // The pools outlive the workers (declared before `group`); batches and
  // samples still held by the consumer keep their state alive after the
  // Loader is gone. `pool` holds batches (pinned when asked for), `read_pool`
  // the tar members' bytes (never pinned: most are decoded and dropped).
  std::shared_ptr<BufferPool> pool;
  // Member sizes vary widely: page-granular classes waste least on them.
  std::shared_ptr<BufferPool> read_pool = std::make_shared<BufferPool>(
      AlignedHostAllocator(), BufferPoolOptions{.classes_per_doubling = 1024});
  int64_t next_epoch = 0;
  bool running = false;
  int64_t running_epoch = 0;
  int64_t remaining = 0;  // items left in a WithLength / WithEpoch epoch
  // Declared last so that its threads stop before the recipe they read goes.
  std::unique_ptr<WorkerGroup> group;

  Impl(Pipeline p, LoaderOptions o) : pipeline(std::move(p)), options(std::move(o)) {
    setup = ValidateOptions(pipeline, options);
    if (!setup.ok()) return;
    absl::StatusOr<Placement> resolved = ResolvePlacement(options);
    if (resolved.ok()) {
      placement = *resolved;
    } else {
      setup = resolved.status();
    }
    if (setup.ok()) setup = MakePool();
    if (pool == nullptr) pool = std::make_shared<BufferPool>();
  }

  // MakePool creates the batch pool, pinned when asked for and possible;
  // falling back to ordinary memory is worth one warning, not an error.
  absl::Status MakePool() {
    if (!options.pin_memory) return absl::OkStatus();
    WDS_ASSIGN_OR_RETURN(int device, ResolveDevice(options));
    BatchAllocator chosen = DefaultBatchAllocator(/*pin_memory=*/true, device);
    if (!chosen.note.empty()) {
      const std::string warning = Cat("loader: ", chosen.note);
      if (options.warn) {
        options.warn(warning);
      } else {
        WriteWarningToStderr(warning);
      }
    }
    pool = std::make_shared<BufferPool>(std::move(chosen.allocator));
    return absl::OkStatus();
  }

  EpochMode mode() const { return pipeline.epoch_mode(); }

  void StartEpoch() {
    // A WithEpoch stream continues across epochs, even abandoned ones.
    if (mode() != EpochMode::kEpoch) group.reset();
    running = true;
    running_epoch = next_epoch;
    next_epoch = running_epoch + 1;
    remaining = pipeline.length().value_or(0);
  }

  void FinishEpoch(bool failed) {
    running = false;
    if (failed || mode() != EpochMode::kEpoch) group.reset();
  }

  absl::Status EnsureWorkers() {
    if (group != nullptr) return absl::OkStatus();
    WorkerContext ctx;
    ctx.rank = placement.rank;
    ctx.world_size = placement.world_size;
    ctx.num_workers = options.workers;
    ctx.epoch = running_epoch;
    ctx.seed = pipeline.seed();
    ctx.errors = errors;
    ctx.warn = options.warn;
    ctx.pool = pool;
    ctx.read_pool = read_pool;
    try {
      group = std::make_unique<WorkerGroup>(pipeline, ctx, options,
                                            /*endless=*/mode() != EpochMode::kNatural);
    } catch (const std::system_error& e) {
      return absl::ResourceExhaustedError(
          Cat("cannot start ", options.workers, " loader worker threads: ", e.what()));
    }
    return absl::OkStatus();
  }

  SampleResult Next() {
    if (!setup.ok()) return setup;
    if (!running) StartEpoch();
    const bool counted = mode() != EpochMode::kNatural;
    if (counted && remaining == 0) {
      FinishEpoch(/*failed=*/false);
      return std::nullopt;
    }
    if (absl::Status started = EnsureWorkers(); !started.ok()) {
      FinishEpoch(/*failed=*/true);
      return started;
    }
    SampleResult result = group->Take();
    if (!result.ok()) {
      FinishEpoch(/*failed=*/true);
      return result;
    }
    if (!result->has_value()) {
      FinishEpoch(/*failed=*/counted);
      if (!counted) return result;
      // Endless streams end only by an error; a clean end would make this rank
      // run fewer steps than the others.
      return absl::FailedPreconditionError(
          Cat("every loader worker's stream ended with ", remaining, " of ", *pipeline.length(),
              " items of epoch ", running_epoch, " still to come"));
    }
    // Stop WithLength workers now rather than at the next call, so that they
    // do not compute items that will be discarded.
    if (counted && --remaining == 0 && mode() == EpochMode::kLength) group->Stop();
    return result;
  }
};

Loader::Loader(Pipeline pipeline, LoaderOptions options)
    : impl_(std::make_unique<Impl>(std::move(pipeline), std::move(options))) {}

Loader::~Loader() = default;

void Loader::SetEpoch(int64_t epoch) { impl_->next_epoch = epoch; }

int64_t Loader::epoch() const { return impl_->running ? impl_->running_epoch : impl_->next_epoch; }

absl::StatusOr<std::optional<Sample>> Loader::Next() { return impl_->Next(); }

std::optional<int64_t> Loader::size() const { return impl_->pipeline.length(); }

int Loader::rank() const { return impl_->placement.rank; }

int Loader::world_size() const { return impl_->placement.world_size; }

const ErrorCounters& Loader::errors() const { return *impl_->errors; }

const std::shared_ptr<BufferPool>& Loader::pool() const { return impl_->pool; }
const std::shared_ptr<BufferPool>& Loader::read_pool() const { return impl_->read_pool; }

Loader::Iterator Loader::begin() {
  if (impl_->setup.ok()) impl_->StartEpoch();
  return Iterator([this]() -> std::optional<Sample> {
    absl::StatusOr<std::optional<Sample>> result = Next();
    if (!result.ok()) throw LoaderError(result.status());
    return *std::move(result);
  });
}

Loader::Iterator Loader::end() { return Iterator(); }

}  // namespace wds
