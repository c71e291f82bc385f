#include "worker_context.h"

#include "chain.h"

namespace wdspy {

wds::WorkerContext CheckedWorkerContext(int rank, int world_size, int worker, int num_workers,
                                        int64_t epoch, int64_t pass, uint64_t seed) {
  CheckPlacement(rank, world_size, worker, num_workers);
  wds::WorkerContext ctx;
  ctx.rank = rank;
  ctx.world_size = world_size;
  ctx.worker = worker;
  ctx.num_workers = num_workers;
  ctx.epoch = epoch;
  ctx.pass = pass;
  ctx.seed = seed;
  return ctx;
}

}  // namespace wdspy
