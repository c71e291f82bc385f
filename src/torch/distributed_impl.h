// The state behind a DistributedContext, shared with GradientSync.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "wds/loader/placement.h"
#include "wds/torch/distributed.h"

namespace wds {

using DistClock = std::chrono::steady_clock;

struct DistributedContext::Impl {
  Placement placement;
  int local_rank = 0;
  torch::Device device{torch::kCPU};
  std::string backend = "none";
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;         // null for world size 1
  c10::intrusive_ptr<c10d::ProcessGroup> group;  // null for world size 1

  // collective_device is where small collective buffers live: NCCL needs
  // them on the GPU, Gloo takes CPU tensors.
  torch::Device collective_device() const;

  // Launch starts a collective with `launch`, turning a failure to start it
  // into a DistributedError naming `operation`.
  c10::intrusive_ptr<c10d::Work> Launch(
      std::string_view operation, DistClock::time_point start,
      const std::function<c10::intrusive_ptr<c10d::Work>()>& launch) const;

  // Wait waits for `work`, launched at `start`; a failure (or a wait beyond
  // twice the timeout, should the backend's own timeout not fire) becomes a
  // DistributedError naming `operation`.
  void Wait(const c10::intrusive_ptr<c10d::Work>& work, std::string_view operation,
            DistClock::time_point start) const;

  // Fail throws a DistributedError for `operation`, started at `start`, that
  // failed with `cause`, adding what the peers reported to the store.
  [[noreturn]] void Fail(std::string_view operation, std::string_view cause,
                         DistClock::time_point start) const;

  // PeerReport lists the epoch ends the other ranks published through
  // CheckStepCounts ("rank 1 finished epoch 0 after 2 steps"), or says that
  // none did; it never throws.
  std::string PeerReport() const;
};

// CauseOf is an exception's message without LibTorch's backtrace.
std::string CauseOf(const std::exception& e);

[[noreturn]] void ThrowDistributedError(std::string message);

}  // namespace wds
