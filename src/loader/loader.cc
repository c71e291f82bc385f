#include "wds/loader/loader.h"

#include <cxxabi.h>
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <exception>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "base/handlers.h"
#include "base/host_allocator.h"
#include "loader/elastic_plan.h"
#include "loader/launcher_env.h"
#include "loader/loader_state.h"
#include "wds/base/interrupt.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/bounded_queue.h"
#include "wds/internal/base/resume_channel.h"
#include "wds/internal/base/signals_blocked.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/base/worker_wiring.h"
#include "wds/loader/placement.h"

namespace wds {
namespace {

// Entry is what a worker hands to the consumer: an item, its end (ok and
// empty) or its error.
struct Entry {
  int worker;
  SampleResult result;
  // Where the worker's stream stood after this item (see ResumeChannel);
  // checkpointable is false when its recipe has no single tar source or
  // more than one shuffle stage.
  StreamCheckpoint checkpoint;
  bool checkpointable = true;
};

// ElasticShares are the parts of an elastic resume's leftover that the
// workers read in pass 0 of `epoch` (wds/loader/elastic.h), by worker.
struct ElasticShares {
  int64_t epoch = 0;
  int64_t generation = 0;
  std::vector<std::shared_ptr<const std::vector<ShardSlice>>> by_worker;
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
  if (options.decode_gpu_jobs_on_host && options.gpu_decoders != nullptr) {
    return absl::InvalidArgumentError(
        "LoaderOptions: decode_gpu_jobs_on_host and gpu_decoders exclude each other");
  }
  return absl::OkStatus();
}

// ExceptionStatus turns the exception being handled into an error, so that an
// exception escaping a recipe reaches the consumer at its place instead of
// terminating the process. A thread being ended (pthread_exit: a callback that
// asked Python for the GIL while it finalizes) goes on unwinding to its start.
// REQUIRES: called inside a catch block.
absl::Status ExceptionStatus(int worker) {
  try {
    throw;
  } catch (const abi::__forced_unwind&) {
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

// DecodeJobsGuarded decodes the GPU job columns of the item in `result`: with
// `decoders` when given (LoaderOptions::gpu_decoders), else on the host
// (decode_gpu_jobs_on_host), its arrays from the loader's batch pool as the
// batch's own are. An error replaces the item.
void DecodeJobsGuarded(SampleResult& result, const WorkerContext& ctx,
                       GpuWorkerDecoders* decoders) {
  if (!result.ok() || !result->has_value()) return;
  absl::Status s;
  try {
    s = decoders != nullptr ? decoders->DecodeAhead(**result)
                            : DecodeGpuJobsOnHost(**result, WiringOf(ctx).pool.get());
  } catch (...) {
    s = ExceptionStatus(ctx.worker);
  }
  if (!s.ok()) result = std::move(s);
}

// WorkerGroup runs one stream per worker thread, each feeding a bounded queue
// (its own when ordered, one shared queue otherwise), and hands out their
// entries in loader order. Destroying it stops and joins the threads.
class WorkerGroup {
 public:
  // `start`, when not null, restores the workers (see Loader::Restore);
  // `shares`, when not null, gives them an elastic resume's leftover.
  WorkerGroup(const Pipeline& pipeline, const WorkerContext& base, const LoaderOptions& options,
              bool endless, const GroupState* start, const ElasticShares* shares)
      : ordered_(options.ordered), ended_(options.workers, false), active_(options.workers) {
    state_.workers.resize(options.workers);
    for (WorkerStart& w : state_.workers) w.checkpoint = {base.pass, 0, 0};
    if (start != nullptr) {
      state_ = *start;
      cursor_ = start->cursor;
      for (int w = 0; w < options.workers; ++w) {
        if (!start->workers[w].ended) continue;
        ended_[w] = true;
        --active_;
      }
    }
    const size_t workers = static_cast<size_t>(options.workers);
    const size_t prefetch = static_cast<size_t>(options.prefetch);
    if (ordered_) {
      for (size_t w = 0; w < workers; ++w) {
        queues_.push_back(std::make_unique<BoundedQueue<Entry>>(prefetch));
      }
    } else {
      queues_.push_back(std::make_unique<BoundedQueue<Entry>>(prefetch * workers));
    }
    const SignalsBlocked workers_take_no_signals;
    try {
      for (int w = 0; w < options.workers; ++w) {
        if (ended_[w]) continue;
        WorkerContext ctx = base;
        ctx.worker = w;
        const std::shared_ptr<ResumeChannel> resume = std::make_shared<ResumeChannel>();
        Rewire(ctx).resume = resume;
        if (shares != nullptr) {
          resume->slices = shares->by_worker[w];
          resume->slices_epoch = shares->epoch;
          resume->generation = shares->generation;
        }
        if (start != nullptr) {
          resume->restore = start->workers[w].checkpoint;
          ctx.pass = start->workers[w].checkpoint.pass;
        }
        BoundedQueue<Entry>* queue = queues_[ordered_ ? w : 0].get();
        threads_.emplace_back(
            [&pipeline, ctx = std::move(ctx), queue, endless,
             decode = options.decode_gpu_jobs_on_host || options.gpu_decoders != nullptr,
             decoders = options.gpu_decoders] {
              Run(pipeline, ctx, *queue, endless, decode, decoders.get());
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
  // worker has ended. When the calling thread's interrupt check gives up
  // (wds/base/interrupt.h), Take returns its error with *interrupted set, and
  // nothing was taken.
  SampleResult Take(bool* interrupted) {
    *interrupted = false;
    while (active_ > 0) {
      absl::StatusOr<std::optional<Entry>> popped =
          ordered_ ? TakeOrdered() : PopInterruptibly(*queues_[0]);
      if (!popped.ok()) {
        *interrupted = true;
        return popped.status();
      }
      std::optional<Entry>& entry = *popped;
      if (!entry.has_value()) return absl::CancelledError("the loader's workers were stopped");
      if (!IsEnd(entry->result)) {
        if (entry->result.ok()) {
          WorkerStart& w = state_.workers[entry->worker];
          w.checkpoint = entry->checkpoint;
          state_.checkpointable = state_.checkpointable && entry->checkpointable;
        }
        return std::move(entry->result);
      }
      ended_[entry->worker] = true;
      state_.workers[entry->worker].ended = true;
      --active_;
    }
    return std::nullopt;
  }

  // State is the position of the items taken so far.
  GroupState State() const {
    GroupState state = state_;
    state.cursor = cursor_;
    return state;
  }

 private:
  static void Run(const Pipeline& pipeline, const WorkerContext& ctx, BoundedQueue<Entry>& queue,
                  bool endless, bool decode_jobs, GpuWorkerDecoders* decoders) {
    // A worker waiting on a stalled source (a pipe: command) gives up once
    // the loader stops, so that stopping joins promptly.
    ScopedInterruptCheck stopped([&queue] {
      return queue.closed() ? absl::CancelledError("the loader was stopped") : absl::OkStatus();
    });
    std::unique_ptr<SampleStream> stream = OpenGuarded(pipeline, ctx, endless);
    ResumeChannel& resume = *WiringOf(ctx).resume;
    while (!queue.closed()) {
      SampleResult result = NextGuarded(*stream, ctx.worker);
      if (decode_jobs) DecodeJobsGuarded(result, ctx, decoders);
      // A stage that could not restore reports it here, at the first item.
      if (!resume.error.ok()) result = resume.error;
      const bool last = !result.ok() || !result->has_value();
      const bool checkpointable =
          resume.sources == 1 && resume.shuffles <= 1 &&
          (resume.shuffles == 0 || resume.shuffle_in == resume.position.source_out);
      if (!queue.Push(Entry{ctx.worker, std::move(result), resume.position, checkpointable})) {
        return;
      }
      if (last) return;
    }
  }

  void StopAndJoin() {
    Stop();
    for (std::thread& t : threads_) t.join();
  }

  // TakeOrdered pops from the next worker in the rotation that has not ended;
  // the rotation moves on only when that worker's turn was taken.
  absl::StatusOr<std::optional<Entry>> TakeOrdered() {
    const int workers = static_cast<int>(queues_.size());
    while (ended_[cursor_]) cursor_ = (cursor_ + 1) % workers;
    absl::StatusOr<std::optional<Entry>> entry = PopInterruptibly(*queues_[cursor_]);
    if (entry.ok()) cursor_ = (cursor_ + 1) % workers;
    return entry;
  }

  // PopInterruptibly pops, waiting in slices while the calling thread has an
  // interrupt check, and returns the check's error when it gives up.
  static absl::StatusOr<std::optional<Entry>> PopInterruptibly(BoundedQueue<Entry>& queue) {
    if (!InterruptCheckInstalled()) return queue.Pop();
    while (true) {
      bool timed_out = false;
      std::optional<Entry> entry = queue.PopFor(kInterruptCheckInterval, &timed_out);
      if (!timed_out) return entry;
      WDS_RETURN_IF_ERROR(CheckInterrupt());
    }
  }

  const bool ordered_;
  std::vector<std::unique_ptr<BoundedQueue<Entry>>> queues_;
  std::vector<std::thread> threads_;
  std::vector<bool> ended_;
  int active_;
  int cursor_ = 0;
  GroupState state_;
};

}  // namespace

LoaderError::LoaderError(absl::Status status)
    : std::runtime_error(status.ToString(absl::StatusToStringMode::kWithNoExtraData)),
      status_(std::move(status)) {}

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
  // stats is the epoch's as its consumer saw it; counting says whether it
  // counts the running epoch (false until that epoch's first Next), since
  // and ended when it started and ended.
  LoaderStats stats;
  bool counting = false;
  std::chrono::steady_clock::time_point since, ended;
  // stream_epoch is the epoch the running workers' streams were opened in
  // (earlier than the running one under WithEpoch).
  int64_t stream_epoch = 0;
  // restored_group starts the next workers at a restored state; resumed
  // makes begin() continue a restored epoch instead of starting one.
  std::optional<GroupState> restored_group;
  bool resumed = false;
  // base is the job state whose leftover epoch base->first().epoch reads
  // (an elastic resume, wds/loader/elastic.h), and shares this rank's workers'
  // parts of it; null when the running epoch reads the recipe's own split.
  std::shared_ptr<const JobStateData> base;
  std::optional<ElasticShares> shares;
  // Declared last so that its threads stop before the recipe they read goes.
  std::unique_ptr<WorkerGroup> group;

  Impl(Pipeline p, LoaderOptions o) : pipeline(std::move(p)), options(std::move(o)) {
    setup = ValidateOptions(pipeline, options);
    if (setup.ok()) {
      absl::StatusOr<Placement> resolved = ResolvePlacement(options);
      if (resolved.ok()) {
        placement = *resolved;
      } else {
        setup = resolved.status();
      }
    }
    if (setup.ok() && options.pin_memory) {
      absl::StatusOr<int> device = ResolveDevice(options);
      setup = device.status();
      if (setup.ok()) setup = MakePinnedPool(*device);
      if (setup.ok()) setup = CheckDecodersDevice(*device);
    }
    // pool() is never null, even for a loader that fails its setup.
    if (pool == nullptr) pool = std::make_shared<BufferPool>();
  }

  // MakePinnedPool creates the batch pool in `device`'s page-locked memory
  // where possible; falling back to ordinary memory (no CUDA, no device) is
  // worth one warning, not an error; a device that does not exist is an error.
  absl::Status MakePinnedPool(int device) {
    absl::StatusOr<BatchAllocator> allocator = DefaultBatchAllocator(/*pin_memory=*/true, device);
    if (!allocator.ok()) {
      return absl::Status(allocator.status().code(),
                          Cat("LoaderOptions.pin_memory: ", ToStd(allocator.status().message()),
                              "; LoaderOptions.device (else LOCAL_RANK, SLURM_LOCALID) names it"));
    }
    BatchAllocator chosen = *std::move(allocator);
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

  // CheckDecodersDevice: jobs pinned for `device` are made for the decoders'.
  absl::Status CheckDecodersDevice(int device) {
    if (options.gpu_decoders == nullptr ||
        options.gpu_decoders->device() == GpuBatchDecoder::kHost) {
      return absl::OkStatus();
    }
    if (device == options.gpu_decoders->device()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        Cat("LoaderOptions: pin_memory pins for cuda:", device,
            ", gpu_decoders decode on cuda:", options.gpu_decoders->device(),
            "; LoaderOptions.device (else LOCAL_RANK, "
            "SLURM_LOCALID) names the first"));
  }

  EpochMode mode() const { return pipeline.epoch_mode(); }

  void StartEpoch() {
    counting = false;
    // A WithEpoch stream continues across epochs, even abandoned ones.
    if (mode() != EpochMode::kEpoch) {
      group.reset();
      restored_group.reset();
    }
    running = true;
    running_epoch = next_epoch;
    next_epoch = running_epoch + 1;
    remaining = pipeline.length().value_or(0);
    if (base != nullptr && base->first().epoch != running_epoch) {
      base.reset();
      shares.reset();
    }
  }

  // ElasticApplies is whether the running workers' pass 0 is the leftover
  // of `base`.
  bool ElasticApplies() const { return base != nullptr && base->first().epoch == stream_epoch; }

  // ComputeShares works out this rank's workers' parts of base's leftover.
  absl::Status ComputeShares() {
    ElasticShares computed;
    computed.epoch = base->first().epoch;
    computed.generation = base->first().generation + 1;
    WorkerContext ctx;
    ctx.rank = placement.rank;
    ctx.world_size = placement.world_size;
    ctx.num_workers = options.workers;
    WDS_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, LeftoverSizes(pipeline, *base));
    for (ctx.worker = 0; ctx.worker < options.workers; ++ctx.worker) {
      WDS_ASSIGN_OR_RETURN(std::vector<ShardSlice> share,
                           LeftoverShare(pipeline, *base, sizes, ctx));
      computed.by_worker.push_back(
          std::make_shared<const std::vector<ShardSlice>>(std::move(share)));
    }
    shares = std::move(computed);
    return absl::OkStatus();
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
    if (!restored_group.has_value()) stream_epoch = running_epoch;
    ctx.epoch = stream_epoch;
    ctx.seed = pipeline.seed();
    ctx.errors = errors;
    ctx.warn = options.warn;
    WorkerContext::Wiring& wiring = Rewire(ctx);
    wiring.pool = pool;
    wiring.read_pool = read_pool;
    // GPU jobs read by a device consumer go where it can read them in place;
    // jobs the workers decode themselves stay in ordinary memory.
    if (pool->pinned() && !options.decode_gpu_jobs_on_host) wiring.job_pool = pool;
    if (ElasticApplies() && !shares.has_value()) WDS_RETURN_IF_ERROR(ComputeShares());
    try {
      group = std::make_unique<WorkerGroup>(
          pipeline, ctx, options, /*endless=*/mode() != EpochMode::kNatural,
          restored_group.has_value() ? &*restored_group : nullptr,
          ElasticApplies() ? &*shares : nullptr);
      restored_group.reset();
    } catch (const std::system_error& e) {
      return absl::ResourceExhaustedError(
          Cat("cannot start ", options.workers, " loader worker threads: ", e.what()));
    }
    return absl::OkStatus();
  }

  SampleResult Next() {
    if (!setup.ok()) return setup;
    const auto called = std::chrono::steady_clock::now();
    SampleResult result = Take(called);
    const auto now = std::chrono::steady_clock::now();
    if (counting) {
      stats.wait_seconds += std::chrono::duration<double>(now - called).count();
      if (result.ok() && result->has_value() && stats.items++ == 0) {
        stats.first_item_seconds = std::chrono::duration<double>(now - since).count();
      }
      if (!running) ended = now;
    }
    return result;
  }

  // Take is Next without the stats; a call at `called` that starts counting
  // an epoch starts its clock.
  SampleResult Take(std::chrono::steady_clock::time_point called) {
    resumed = false;
    if (!running) StartEpoch();
    if (!counting) {
      counting = true;
      stats = LoaderStats{.epoch = running_epoch};
      since = called;
    }
    const bool counted = mode() != EpochMode::kNatural;
    if (counted && remaining == 0) {
      FinishEpoch(/*failed=*/false);
      return std::nullopt;
    }
    if (absl::Status started = EnsureWorkers(); !started.ok()) {
      FinishEpoch(/*failed=*/true);
      return started;
    }
    bool interrupted = false;
    SampleResult result = group->Take(&interrupted);
    if (interrupted) return result;  // the epoch goes on: the next call waits again
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

  LoaderStateData Identity() const {
    LoaderStateData d;
    d.recipe = pipeline.recipe();
    d.rank = placement.rank;
    d.world_size = placement.world_size;
    d.workers = options.workers;
    d.mode = static_cast<int>(mode());
    d.length = pipeline.length().value_or(-1);
    return d;
  }

  absl::StatusOr<std::string> State() const {
    if (!setup.ok()) return setup;
    if (!options.ordered) {
      return absl::FailedPreconditionError(
          "Loader::State: an unordered loader hands out items as they come; it has no state");
    }
    if (!pipeline.checkpoint_blocker().empty()) {
      return absl::FailedPreconditionError(Cat("Loader::State: the recipe's ",
                                               pipeline.checkpoint_blocker(),
                                               " stage keeps a position the state cannot record"));
    }
    LoaderStateData d = Identity();
    d.running = running;
    d.epoch = running ? running_epoch : next_epoch;
    d.remaining = running ? remaining : 0;
    d.stream_epoch = stream_epoch;
    if (group != nullptr) {
      d.group = group->State();
    } else if (restored_group.has_value()) {
      d.group = restored_group;
    }
    if (ElasticApplies()) {
      d.generation = base->first().generation + 1;
      d.base_digest = base->digest;
    }
    if (d.group.has_value() && !d.group->checkpointable) {
      return absl::FailedPreconditionError(
          "Loader::State: a worker's stream cannot be checkpointed: it needs exactly one tar "
          "source (WebDataset()) and at most one shuffle stage, fed sample by sample from the "
          "source (put Shuffle before Batched and Select)");
    }
    return StateJson(d);
  }

  absl::Status Restore(std::string_view text) {
    if (!setup.ok()) return setup;
    if (IsJobState(text)) return RestoreJob(text);
    WDS_ASSIGN_OR_RETURN(LoaderStateData d, ParseState(text));
    if (!d.base_digest.empty() && (base == nullptr || base->digest != d.base_digest)) {
      return absl::FailedPreconditionError(
          "Loader::Restore: the state is of an epoch resumed on another layout: restore it "
          "through the job state (Loader::JobState) that holds what that epoch resumed from");
    }
    WDS_RETURN_IF_ERROR(CheckSameRecipe(d, /*with_length=*/true));
    const LoaderStateData mine = Identity();
    if (d.rank != mine.rank || d.world_size != mine.world_size || d.workers != mine.workers) {
      return absl::FailedPreconditionError(
          Cat("Loader::Restore: the state was taken by rank ", d.rank, " of ", d.world_size,
              " with ", d.workers, " workers, not rank ", mine.rank, " of ", mine.world_size,
              " with ", mine.workers, " (gather every rank's state with JobState to resume on "
              "another layout)"));
    }
    if (d.base_digest.empty()) {
      base.reset();
      shares.reset();
    }
    Apply(d);
    return absl::OkStatus();
  }

  absl::Status CheckSameRecipe(const LoaderStateData& d, bool with_length) const {
    const LoaderStateData mine = Identity();
    if (d.recipe != mine.recipe || d.mode != mine.mode ||
        (with_length && d.length != mine.length)) {
      return absl::FailedPreconditionError(
          "Loader::Restore: the state was taken with another recipe (its shards, seed, stages, "
          "their parameters or its length differ)");
    }
    return absl::OkStatus();
  }

  // Apply continues from rank state `d`, taken on this loader's layout.
  void Apply(const LoaderStateData& d) {
    group.reset();
    counting = false;
    stats = LoaderStats{};
    running = d.running;
    running_epoch = d.epoch;
    next_epoch = d.running ? d.epoch + 1 : d.epoch;
    remaining = d.remaining;
    stream_epoch = d.stream_epoch;
    restored_group = d.group;
    resumed = d.running;
  }

  // RestoreJob continues from a job state: exactly on the job's own layout,
  // else with this rank's share of the epoch's leftover (wds/loader/elastic.h).
  absl::Status RestoreJob(std::string_view text) {
    WDS_ASSIGN_OR_RETURN(JobStateData job, ParseJobState(text));
    const LoaderStateData& first = job.first();
    if (first.world_size == placement.world_size && first.workers == options.workers) {
      const LoaderStateData& d = job.ranks[placement.rank];
      WDS_RETURN_IF_ERROR(CheckSameRecipe(d, /*with_length=*/true));
      base = job.base;
      shares.reset();
      Apply(d);
      return absl::OkStatus();
    }
    WDS_RETURN_IF_ERROR(CheckElastic(pipeline, job));
    group.reset();
    restored_group.reset();
    shares.reset();
    base.reset();
    counting = false;
    stats = LoaderStats{};
    if (!first.running) {
      // Between epochs nothing is left over: the next epoch starts as usual.
      running = false;
      resumed = false;
      next_epoch = first.epoch;
      return absl::OkStatus();
    }
    base = std::make_shared<const JobStateData>(std::move(job));
    running = true;
    running_epoch = base->first().epoch;
    next_epoch = running_epoch + 1;
    stream_epoch = running_epoch;
    remaining = pipeline.length().value_or(0);
    if (absl::Status computed = ComputeShares(); !computed.ok()) {
      base.reset();
      running = false;
      next_epoch = running_epoch;
      return computed;
    }
    resumed = true;
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> JobState(const std::vector<std::string>& texts) const {
    if (!setup.ok()) return setup;
    std::vector<LoaderStateData> ranks;
    for (const std::string& text : texts) {
      absl::StatusOr<LoaderStateData> d = ParseState(text);
      if (!d.ok()) {
        return absl::InvalidArgumentError(
            Cat("Loader::JobState: state ", ranks.size(), ": ", ToStd(d.status().message())));
      }
      ranks.push_back(*std::move(d));
    }
    WDS_ASSIGN_OR_RETURN(JobStateData job, GatherJob(std::move(ranks), base));
    WDS_RETURN_IF_ERROR(CheckSameRecipe(job.first(), /*with_length=*/true));
    return JobStateJson(job);
  }
};

Loader::Loader(Pipeline pipeline, LoaderOptions options)
    : impl_(std::make_unique<Impl>(std::move(pipeline), std::move(options))) {}

Loader::~Loader() = default;

void Loader::SetEpoch(int64_t epoch) { impl_->next_epoch = epoch; }

int64_t Loader::epoch() const { return impl_->running ? impl_->running_epoch : impl_->next_epoch; }

bool Loader::in_epoch() const { return impl_->running; }

absl::StatusOr<std::optional<Sample>> Loader::Next() { return impl_->Next(); }

std::optional<int64_t> Loader::size() const { return impl_->pipeline.length(); }

int Loader::rank() const { return impl_->placement.rank; }

int Loader::world_size() const { return impl_->placement.world_size; }

const ErrorCounters& Loader::errors() const { return *impl_->errors; }

LoaderStats Loader::stats() const {
  LoaderStats s = impl_->stats;
  if (impl_->counting) {
    const auto until = impl_->running ? std::chrono::steady_clock::now() : impl_->ended;
    s.seconds = std::chrono::duration<double>(until - impl_->since).count();
  }
  return s;
}

const std::shared_ptr<BufferPool>& Loader::pool() const { return impl_->pool; }
const std::shared_ptr<BufferPool>& Loader::read_pool() const { return impl_->read_pool; }

absl::StatusOr<std::string> Loader::State() const { return impl_->State(); }

absl::Status Loader::Restore(std::string_view state) { return impl_->Restore(state); }

absl::StatusOr<std::string> Loader::JobState(const std::vector<std::string>& rank_states) const {
  return impl_->JobState(rank_states);
}

Loader::Iterator Loader::begin() {
  // A restored epoch continues; otherwise every range-for starts one.
  if (impl_->setup.ok() && !std::exchange(impl_->resumed, false)) impl_->StartEpoch();
  return Iterator([this]() -> std::optional<Sample> {
    absl::StatusOr<std::optional<Sample>> result = Next();
    if (!result.ok()) throw LoaderError(result.status());
    return *std::move(result);
  });
}

Loader::Iterator Loader::end() { return Iterator(); }

}  // namespace wds
