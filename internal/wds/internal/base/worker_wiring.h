// WorkerContext::Wiring: how the library connects the stages of one running
// chain (memory pools, a Batched stage's output slots, checkpoint counters).
// Internal: the Loader, the stages that use it and the Python bindings' chains
// (which set pools and checkpoints as the Loader does) include it.
//
//   WorkerContext upstream_ctx = ctx;
//   Rewire(upstream_ctx).output_slots = slots;   // ctx keeps its own wiring
//   BufferPool* pool = WiringOf(ctx).pool.get();  // null: make your own
#pragma once

#include <memory>
#include <utility>

#include "wds/base/buffer_pool.h"
#include "wds/base/stage.h"
#include "wds/internal/base/resume_channel.h"

namespace wds {

// OutputSlots is private to the library (src/base/output_slots.h).
class OutputSlots;

struct WorkerContext::Wiring {
  // pool is the worker's memory for the arrays stages make (the Loader's,
  // pinned when asked for); null means each stage that needs one makes its
  // own.
  std::shared_ptr<BufferPool> pool;
  // read_pool is host memory for the bytes readers fill (tar members), shared
  // by the workers so that member buffers are recycled instead of allocated
  // per member; null means each reader makes its own.
  std::shared_ptr<BufferPool> read_pool;
  // job_pool is where GPU jobs are made (wds/gpu/gpu_decode.h): the Loader's
  // pinned batch pool when a device consumer reads them in place; null means
  // read_pool.
  std::shared_ptr<BufferPool> job_pool;
  // output_slots is set by a Batched stage for the stages it pulls from, so
  // that their decoders write arrays straight into the batch; null elsewhere.
  std::shared_ptr<OutputSlots> output_slots;
  // resume is set by the Loader (see ResumeChannel); null elsewhere.
  std::shared_ptr<ResumeChannel> resume;
};

// WiringOf returns the wiring of `ctx`, or one whose members are all null
// when it has none. The reference is valid while `ctx` is unchanged.
inline const WorkerContext::Wiring& WiringOf(const WorkerContext& ctx) {
  static const WorkerContext::Wiring kNone;
  return ctx.wiring != nullptr ? *ctx.wiring : kNone;
}

// Rewire gives `ctx` a copy of its wiring of its own and returns it for the
// caller to change; other copies of the context keep the wiring they had.
inline WorkerContext::Wiring& Rewire(WorkerContext& ctx) {
  auto wiring = std::make_shared<WorkerContext::Wiring>(WiringOf(ctx));
  WorkerContext::Wiring& out = *wiring;
  ctx.wiring = std::move(wiring);
  return out;
}

}  // namespace wds
