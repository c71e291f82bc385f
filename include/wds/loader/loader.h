// Loader: runs a pipeline recipe on worker threads and hands out its items in
// a deterministic order.
//
//   wds::Loader loader(pipeline, {.workers = 4, .prefetch = 2});
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     loader.SetEpoch(epoch);
//     for (const wds::Sample& item : loader) Train(item);   // throws LoaderError
//   }
//
// Each worker thread opens its own copy of the recipe with its WorkerContext
// (rank, world_size, worker, num_workers, epoch, seed) and fills a bounded
// queue of `prefetch` items. Items are taken round-robin over the workers, as
// PyTorch's DataLoader does (a worker that ends drops out of the rotation), so
// a fixed seed gives a fixed stream; an error reaches the consumer at its
// place in that order. Options.ordered = false takes items as they come.
//
// Epoch sizing follows the recipe: a natural epoch ends when every worker's
// stream ends; WithLength(n) yields exactly n items over all workers (each
// worker continues into fresh passes when its data runs out); WithEpoch(n)
// yields the next n items of streams that continue across epochs.
//
// Under WithEpoch the worker streams (and their queues and the rotation) live
// on from epoch to epoch, so their WorkerContext keeps the epoch they were
// opened in; they are re-opened only after an error.
//
// Destroying a Loader mid-epoch stops and joins its threads promptly (a worker
// inside its stream's Next() finishes that call first; one waiting on a
// stalled pipe: command, standard input or FIFO gives up within
// kInterruptCheckInterval, see wds/base/interrupt.h).
// Thread safety: one consumer thread. `warn` is called from worker threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/base/buffer_pool.h"
#include "wds/base/checkpointable.h"
#include "wds/base/error.h"
#include "wds/base/pull_iterator.h"
#include "wds/base/sample.h"
#include "wds/pipeline/pipeline.h"

namespace wds {

class GpuWorkerDecoders;

struct LoaderOptions {
  int workers = 1;   // >= 1
  int prefetch = 2;  // items queued per worker, >= 1
  bool ordered = true;
  // Distributed placement; nullopt reads RANK/WORLD_SIZE, then
  // SLURM_PROCID/SLURM_NTASKS (each pair together: one set without the other
  // is an error), else 0/1.
  std::optional<int> rank;
  std::optional<int> world_size;
  WarningSink warn;  // null: stderr
  // pin_memory asks for batch storage in CUDA page-locked memory on `device`.
  // When that is unavailable (built without CUDA, no device at run time) the
  // loader uses aligned host memory and warns once through `warn`; a device
  // beyond those visible is an InvalidArgument setup error. The workers make
  // GPU jobs (DecodeOnGpu) in that memory too, which the device decoder then
  // reads in place instead of gathering them into its staging.
  bool pin_memory = false;
  // device is the rank's local GPU; nullopt reads LOCAL_RANK, else
  // SLURM_LOCALID, else 0. Read only when pin_memory is set.
  std::optional<int> device;
  // decode_gpu_jobs_on_host makes each worker decode its items' GPU job
  // columns (the images of DecodeOnGpu / GpuDecodeStage) on the host, as
  // DecodeGpuJobsOnHost does, before handing them out: for a consumer without
  // a GPU, so that the decode runs on every worker rather than on the
  // consumer's one thread. The items then hold arrays, the same pixels the
  // consumer would have made. A decode error names the shard, key and field
  // (its message starts "decode on cuda: ", as at a GPU consumer: the recipe
  // asked for the GPU path), and ends the epoch as at the consumer (the
  // handlers ran when the batch was formed). Jobs the workers decode are not
  // made in pinned memory.
  bool decode_gpu_jobs_on_host = false;
  // gpu_decoders, when set, make each worker decode its items' GPU job
  // columns on their device (GpuBatchDecoder::DecodeAhead, each worker with a
  // decoder and stream of its own): nvJPEG's host work then runs on every
  // worker rather than on the consumer's one thread. The items hold
  // PendingImages in those columns' places, which the consumer finishes into
  // its batch tensors on its own stream (DevicePrefetcher and the Python
  // Loader(device="cuda") do). Make them with GpuWorkerDecoders::Create(device)
  // (a device that cannot decode fails there), and give the same ones to the
  // next Loader to keep nvJPEG's handles and the memory. Each item holds its
  // full-size decoded images in device memory until dropped (3 bytes a pixel:
  // 36 MB for 64 images of 500x375), so the queues hold workers x prefetch
  // such blocks. A decode error is as for decode_gpu_jobs_on_host. Not with
  // decode_gpu_jobs_on_host; with pin_memory, for `device`'s GPU.
  std::shared_ptr<GpuWorkerDecoders> gpu_decoders;
};

// LoaderError carries the Status of an error met during range-for iteration.
class LoaderError : public std::runtime_error {
 public:
  explicit LoaderError(absl::Status status);
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// LoaderStats is how an epoch went as its consumer saw it: whether training
// waited for data. From the epoch's first Next() call (or the first after a
// Restore) to the call that ended it, or to now while it runs (also when
// the consumer stopped calling Next before its end).
struct LoaderStats {
  int64_t epoch = -1;  // -1: none counted yet (nor since a Restore)
  int64_t items = 0;   // items handed out
  // wait_seconds: time Next() spent waiting for them (starting the workers
  // included); seconds - wait_seconds is the consumer's own time.
  double wait_seconds = 0;
  // first_item_seconds: from the first Next() call to the first item (-1:
  // none yet).
  double first_item_seconds = -1;
  double seconds = 0;
};

class Loader final : public Checkpointable {
 public:
  // An invalid option (workers or prefetch < 1, a negative length) or a bad
  // rank / world size (malformed or out of range, naming its variable) makes
  // every Next() return InvalidArgument and begin() throw.
  Loader(Pipeline pipeline, LoaderOptions options = {});
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // SetEpoch chooses the epoch that the next iteration runs (default: 0, then
  // one more after each started epoch: completed, failed or abandoned).
  void SetEpoch(int64_t epoch);
  // epoch is the running epoch, or when none runs the one that runs next.
  int64_t epoch() const;
  // in_epoch is whether an epoch runs: started (or restored) and not ended.
  bool in_epoch() const;

  // Next returns the next item of the current epoch (starting one if none is
  // running), nullopt at its end, or the first error. After an error or the
  // end, the next call starts the next epoch. While the calling thread has an
  // interrupt check (wds/base/interrupt.h), Next waits in slices and returns the
  // check's error when it gives up; the epoch then goes on (nothing was
  // taken) and the next call waits again.
  [[nodiscard]] absl::StatusOr<std::optional<Sample>> Next();

  // size is the recipe's length() (WithLength / WithEpoch), else nullopt.
  std::optional<int64_t> size() const;
  int rank() const;
  int world_size() const;
  // errors counts every error the handlers saw, over all workers and epochs.
  const ErrorCounters& errors() const;
  // stats is the running epoch's, else the last one's (call it from the
  // thread that calls Next).
  LoaderStats stats() const;
  // pool is the batch buffer pool shared by every worker (its pinned() says
  // whether pin_memory took effect). Never null.
  const std::shared_ptr<BufferPool>& pool() const;
  // read_pool is the pool of tar member buffers shared by every worker (host
  // memory, never pinned). Never null.
  const std::shared_ptr<BufferPool>& read_pool() const;

  // State (Checkpointable) is a small JSON text: the epoch, the items still
  // to come in it, the worker rotation and, per worker, the checkpoint of
  // the last item handed out. It takes microseconds. FailedPrecondition for
  // an unordered loader (its order depends on timing), a recipe with Slice
  // or Repeat, or a stream without exactly one tar source or with more than
  // one shuffle stage.
  [[nodiscard]] absl::StatusOr<std::string> State() const override;
  // Restore (Checkpointable) takes a state of a loader of the same recipe
  // (shards, seed, stages and their parameters, length), placement and
  // worker count. The shuffle buffers are re-read by seeking to their
  // samples (one seek per run of consecutive samples), not by reading what
  // came before. A running epoch is stopped. Exactness assumes the data
  // reads the same as before (no errors skipped by a handler before the
  // shuffle stage).
  //
  // `state` may also be a job state (JobState()). On the job's own layout
  // (world size and workers) this rank then restores exactly from its part.
  // On another layout the loader runs the rest of the job's epoch: this
  // rank's share of what the job's workers had not handed out
  // (wds/loader/elastic.h), then the next epochs as usual. The recipe must be the
  // job's (its length may differ: size it with PlanResumedEpoch); a WithEpoch
  // recipe resumes only on its own layout. A rank state of an epoch that was
  // resumed elastically is refused: its job state holds what it resumed from.
  [[nodiscard]] absl::Status Restore(std::string_view state) override;

  // JobState gathers the State() texts of every rank of the job, taken at
  // the same step (this rank's among them, in any order), into one job
  // state: the text Restore() takes on any layout. It is the same on every
  // rank. Errors: InvalidArgument for a text that is not a loader state, a
  // missing or repeated rank; FailedPrecondition for states of another
  // recipe, epoch or layout than each other's or this loader's.
  [[nodiscard]] absl::StatusOr<std::string> JobState(
      const std::vector<std::string>& rank_states) const;

  using Iterator = PullIterator<Sample>;
  // begin starts an epoch; the iterator throws LoaderError on an error.
  Iterator begin();
  Iterator end();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wds
