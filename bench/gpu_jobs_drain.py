#!/usr/bin/env python3
"""The workers' side of decoding on the GPU, on a machine without one: the
core loader over .decode("rgb8", device="cuda", ...) drained in three ways,
alternating, each `rounds` times, with the process's CPU time and minor page
faults:

  jobs       the batches as the workers make them (GPU jobs, not decoded):
             what a GPU consumer receives
  consumer   each batch's jobs decoded on the host by the consumer's one
             thread (decode_gpu_jobs, into recycled memory), as Loader
             without a GPU did before
  fresh      the same into a fresh NumPy array per batch (what
             decode_gpu_jobs did before its memory was recycled)
  workers    decoded on the host by the loader's workers
             (decode_gpu_jobs_on_host): what Loader without a GPU does
  cpu        the CPU path for comparison: .decode("rgb8", ...) without device
  dl-jobs    through a torch DataLoader (its worker processes): the jobs
             arrive in the main process packed in shared batch blocks
  dl-bytes   the same with those blocks turned off (WDS_SHARED_BATCH_BYTES=0):
             the jobs pickled as bytes
  dl-cpu     the CPU path through the same DataLoader (decoded arrays in
             shared blocks)

    PYTHONPATH=build/python /usr/bin/python3 bench/gpu_jobs_drain.py \
        'shards-{000000..000003}.tar' [--workers 2] [--rounds 3] [--size 224]
"""
import argparse
import os
import resource
import time

import numpy as np

import webdataset_cpp as wds


def core_loader(pattern, workers, size, decode_in_workers, device="cuda"):
    decode = {"size": (size, size), "crop": "center"} if size else {}
    ds = (wds.WebDataset(pattern, shardshuffle=False).decode("rgb8", device=device, **decode)
          .to_tuple("jpg", "cls").batched(64))
    ctx = wds._plan.Context(0, 1, 0, workers, 0, 0, ds.seed)
    chain, kinds, names = wds._plan.single_native_segment(ds.pipeline, ctx).build(None, ctx)
    return wds._core.Loader(chain, workers=workers, kinds=kinds, kind_names=names,
                            decode_gpu_jobs_on_host=decode_in_workers)


def dataloader(mode, pattern, workers, size):
    """The batches of a torch DataLoader over the dataset (the DL modes)."""
    import torch

    os.environ["WDS_SHARED_BATCH_BYTES"] = "0" if mode == "dl-bytes" else str(1 << 30)
    decode = {"size": (size, size), "crop": "center"} if size else {}
    ds = (wds.WebDataset(pattern, shardshuffle=False)
          .decode("rgb8", device=None if mode == "dl-cpu" else "cuda", **decode)
          .to_tuple("jpg", "cls").batched(64))
    return iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))


def drain(mode, pattern, workers, size):
    if mode.startswith("dl-"):
        batches = dataloader(mode, pattern, workers, size)
        next_item = lambda: next(batches, None)  # noqa: E731
    else:
        core = core_loader(pattern, workers, size, decode_in_workers=mode == "workers",
                           device=None if mode == "cpu" else "cuda")
        next_item = core.next
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    images = 0
    host = wds._core.GpuBatchDecoder(-1) if mode == "fresh" else None
    while (item := next_item()) is not None:
        if mode == "consumer":
            item = wds.decode_gpu_jobs(item)
        elif mode == "fresh":
            dtype, shape = item[0].layout()
            out = np.empty(shape, dtype=dtype)
            host.decode(item[0], out.ctypes.data, 0)
            item = (out,) + tuple(item[1:])
        images += len(item[0])
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{mode:9s} {images} images, {images / seconds:7.0f} images/s, "
          f"user {after.ru_utime - before.ru_utime:.2f} s, "
          f"sys {after.ru_stime - before.ru_stime:.2f} s, "
          f"minor faults {after.ru_minflt - before.ru_minflt}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("pattern")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=0, help="a centre crop to SIZE x SIZE")
    parser.add_argument("--modes", default="jobs,consumer,workers,cpu")
    args = parser.parse_args()
    for _ in range(args.rounds):
        for mode in args.modes.split(","):
            drain(mode, args.pattern, args.workers, args.size)


if __name__ == "__main__":
    main()
