// Distributed training over LibTorch's c10d: the process group from the
// launcher's environment, collectives for metrics and step agreement, and
// gradient synchronisation (LibTorch 1.13 has no C++ DistributedDataParallel).
//
//   wds::DistributedContext dist = wds::DistributedContext::FromEnvironment();
//   Net net;
//   net->to(dist.device());
//   wds::GradientSync grads(dist, *net);            // every rank now has rank 0's weights
//   torch::optim::SGD optimizer(net->parameters(), 0.1);
//   const int64_t steps = dist.AgreeOnMin(my_batches);   // drive WithLength(steps)
//   for (int64_t step = 0; step < steps; ++step) {
//     optimizer.zero_grad();
//     Loss(net, batch).backward();                 // buckets are all-reduced as grads arrive
//     grads.Synchronize();                         // grads now hold the average over ranks
//     optimizer.step();
//   }
//   dist.CheckStepCounts(epoch, steps);            // every rank ran the same number of steps
//   std::vector<double> sums = dist.AllReduce(std::vector<double>{loss_sum, correct, seen},
//                                             wds::ReduceOp::kSum);
//
// Launchers: torchrun, SLURM's srun, or a plain single process (see
// wds/loader/placement.h for the variables and their precedence). World size 1 needs
// no rendezvous and no process group; every collective then returns its input.
//
// Rendezvous goes through c10d's TCPStore, served by rank 0 at MASTER_ADDR:
// MASTER_PORT. The backend is ProcessGroupNCCL when wds::torch was compiled
// against a LibTorch with CUDA and NCCL headers and the device is a GPU, else
// ProcessGroupGloo (CPU tensors; also CUDA tensors where LibTorch has CUDA).
//
// Hangs become errors: every collective and the rendezvous take
// DistributedOptions::timeout. A rank whose peer stops calling collectives gets
// a DistributedError after the timeout naming the operation, its rank, the time
// it waited, and the step counts its peers reported with CheckStepCounts.
// With NCCL in LibTorch 1.13, collectives honour the timeout only when the
// launcher sets NCCL_BLOCKING_WAIT=1 or NCCL_ASYNC_ERROR_HANDLING=1.
//
// Collectives are matched by call order: every rank must call the same
// collectives (these methods, GradientSync::Synchronize and anything run on
// process_group()) in the same order. Pipelines whose length cannot be known in
// advance keep that order with AllStillHaveData, once per step.
//
// Rank 0's process serves the store: a rank leaving early (say rank 0 after
// its last step) breaks the others' CheckStepCounts and error reports. Call
// Barrier() before a context goes away while others may still use it.
//
// Errors are exceptions, as in the rest of the LibTorch layer (tensor.h):
// c10::ValueError for a bad environment or option (naming the variable),
// wds::DistributedError for a failed rendezvous or collective.
//
// Thread safety: a DistributedContext and a GradientSync are used by one
// thread at a time (collectives must be issued in one order anyway).
#pragma once

#include <c10/util/Exception.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wds/loader/placement.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace wds {

// DistributedError is a rendezvous or collective that failed or timed out.
class DistributedError : public c10::Error {
 public:
  using c10::Error::Error;
};

enum class DistributedBackend : uint8_t {
  kAuto,  // NCCL for a CUDA device when compiled in, else Gloo
  kGloo,
  kNccl,
};

enum class ReduceOp : uint8_t { kSum, kMean, kMin, kMax };

struct DistributedOptions {
  // Explicit rank, world size, local rank and rendezvous address; unset fields
  // come from the environment.
  PlacementOptions placement;
  DistributedBackend backend = DistributedBackend::kAuto;
  // device overrides the choice from the local rank, e.g. cuda:0 for several
  // ranks sharing one GPU (with kGloo: NCCL refuses two ranks on one device;
  // the ranks then share its memory and compute, so each runs slower).
  std::optional<torch::Device> device;
  // timeout bounds each step of the rendezvous (reaching rank 0's store, then
  // connecting the group), each collective and CheckStepCounts' wait.
  // It is also how long a healthy rank waits for a slow one (one writing a
  // checkpoint, say), so keep it above the longest such pause.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // gloo_interface is the network interface Gloo binds ("eth0"). Empty: the
  // GLOO_SOCKET_IFNAME variable, else loopback when the master address is a
  // loopback one, else the address this host's name resolves to.
  std::string gloo_interface;
};

class DistributedContext {
 public:
  // FromEnvironment resolves the placement, chooses the device (see
  // SelectLocalDevice) and, for world size > 1, meets the other ranks and
  // creates the process group. Throws c10::ValueError for a malformed
  // environment or option, DistributedError when the rendezvous fails or times
  // out.
  static DistributedContext FromEnvironment(const DistributedOptions& options = {});

  DistributedContext(DistributedContext&&) noexcept;
  DistributedContext& operator=(DistributedContext&&) noexcept;
  ~DistributedContext();

  int rank() const;
  int world_size() const;
  int local_rank() const;
  bool is_main() const { return rank() == 0; }
  Launcher launcher() const;
  const torch::Device& device() const;
  // backend is "gloo", "nccl", or "none" for world size 1.
  const std::string& backend() const;
  std::chrono::milliseconds timeout() const;
  // process_group is null for world size 1; valid while this context lives.
  c10d::ProcessGroup* process_group() const;

  // Broadcast overwrites `tensors` (in place, coalesced per dtype and device)
  // with root's. REQUIRES: the same shapes and dtypes on every rank.
  void Broadcast(const std::vector<torch::Tensor>& tensors, int root = 0) const;

  // AllReduce combines `values` element-wise over all ranks. REQUIRES: the
  // same size on every rank. kMean is for doubles only (ValueError for int64).
  std::vector<double> AllReduce(std::vector<double> values, ReduceOp op) const;
  std::vector<int64_t> AllReduce(std::vector<int64_t> values, ReduceOp op) const;
  double AllReduce(double value, ReduceOp op) const;
  int64_t AllReduce(int64_t value, ReduceOp op) const;

  // AllGather returns every rank's `value`, indexed by rank.
  std::vector<int64_t> AllGather(int64_t value) const;

  // AgreeOnMin returns the smallest `local` over all ranks: the number of
  // steps every rank can run when each has `local` batches.
  int64_t AgreeOnMin(int64_t local) const;

  // AllStillHaveData is the per-step safety net for pipelines of unknown
  // length (like PyTorch's Join): call it before each step with whether this
  // rank has a batch; it returns false on every rank as soon as one has none,
  // so that all ranks end the epoch after the same step.
  bool AllStillHaveData(bool mine) const;

  // CheckStepCounts is called by every rank at the end of `epoch` with the
  // steps it ran. It returns when all ranks report the same count, and throws
  // DistributedError naming each rank with its count (or saying that it did not
  // report within the timeout, e.g. because it is still stuck in a step) when
  // they differ. It goes through the store, not the process group, so that it
  // never pairs with another rank's gradient all-reduce.
  void CheckStepCounts(int64_t epoch, int64_t steps) const;

  void Barrier() const;

  struct Impl;

 private:
  friend class GradientSync;
  explicit DistributedContext(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// SelectLocalDevice returns cuda:local_rank when LibTorch sees a GPU, else the
// CPU, and makes that GPU the current device before anything else touches CUDA,
// so that no rank creates a context on GPU 0 by accident. The availability
// check (torch::cuda::is_available: cudaGetDeviceCount) creates no context.
// Throws c10::ValueError when local_rank is not below the number of GPUs.
torch::Device SelectLocalDevice(int local_rank);

// BroadcastParameters overwrites the module's parameters and buffers with
// rank 0's.
void BroadcastParameters(const DistributedContext& context, torch::nn::Module& module);

// LoadModule reads a checkpoint written by torch::save(module, path) onto the
// CPU first, then moves the module to `device`: a checkpoint saved from cuda:0
// never allocates on GPU 0 of a rank that trains elsewhere.
void LoadModule(torch::nn::Module& module, const std::string& path, const torch::Device& device);

struct GradientSyncOptions {
  // bucket_bytes is the gradient bytes per all-reduce (>= 1); a parameter
  // larger than that gets a bucket of its own.
  int64_t bucket_bytes = 25 << 20;
  // overlap launches each bucket's all-reduce during backward, as soon as the
  // gradients of the bucket and of all buckets before it are accumulated.
  // Without it, Synchronize launches them all after backward.
  bool overlap = true;
};

// GradientSync averages a module's gradients over all ranks, as PyTorch's
// DistributedDataParallel does: buckets of gradients (in reverse parameter
// order, the order backward produces them) are flattened, divided by the world
// size and all-reduced.
//
// Accumulation over k micro-batches: set_sync(false) for the first k - 1
// backward passes (they only accumulate locally, no communication), then
// set_sync(true) for the last one, then Synchronize(). Scale the loss by 1/k as
// for a single process.
//
// REQUIRES: the module is on its training device and keeps its parameters
// while the GradientSync lives; gradients are dense; the GradientSync is not
// destroyed during a backward pass.
class GradientSync {
 public:
  // The constructor broadcasts rank 0's parameters and buffers (see
  // BroadcastParameters) and, with overlap, hooks each parameter's gradient
  // accumulator. Throws c10::ValueError for bucket_bytes < 1.
  GradientSync(const DistributedContext& context, torch::nn::Module& module,
               GradientSyncOptions options = {});
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // set_sync(false) makes the following backward passes launch nothing.
  void set_sync(bool sync);
  bool sync() const;

  // Synchronize completes the step: it launches the all-reduce of every bucket
  // backward did not launch (a gradient that is still undefined counts as
  // zeros), waits for all of them and writes the averages into the parameters'
  // gradients. Call it once after the last backward of a step, before
  // optimizer.step(). A second synchronised backward before it is an error
  // (c10::Error, thrown from backward). Throws DistributedError when a bucket's
  // all-reduce fails or times out, naming the bucket and the step.
  void Synchronize();

  // steps counts the completed Synchronize calls.
  int64_t steps() const;
  int num_buckets() const;

  // NoSync is a scope in which backward passes only accumulate locally.
  class NoSync {
   public:
    explicit NoSync(GradientSync& sync) : sync_(sync), was_(sync.sync()) { sync_.set_sync(false); }
    ~NoSync() { sync_.set_sync(was_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    GradientSync& sync_;
    bool was_;
  };

  class State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace wds
