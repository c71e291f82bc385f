"""One rank of test_elastic's torchrun jobs.

Arguments: shard pattern, output directory, phase, workers.
  first   trains 5 steps of epoch 0 (equalized), gathers the job state
          (gather_state_dict) and writes it, and each rank's keys.
  resume  loads the job state on this layout, trains the rest of epoch 0 with
          agreed_steps(..., resume=...) and writes each rank's keys and steps.
Every step is an all-reduce, so ranks that ran unequal steps would hang."""

import datetime
import faulthandler
import json
import os
import sys

import torch
import torch.distributed as dist

import webdataset_cpp as wds


def dataset(pattern):
    return (wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node, seed=11)
            .shuffle(16).decode().to_tuple("__key__", "cls").batched(4, partial=False))


def main(pattern, out_dir, phase, workers):
    # A rank still running after 50 s (a run takes seconds) prints every thread's stack once,
    # so that a hang shows where it is.
    faulthandler.dump_traceback_later(50)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    ds = dataset(pattern)
    job = None
    if phase == "resume":
        with open(os.path.join(out_dir, "job.json")) as f:
            job = json.load(f)
    steps = wds.agreed_steps(ds, num_workers=workers, resume=job)
    loader = wds.Loader(ds.with_epoch(steps, across_workers=True), workers=workers)
    if job is not None:
        loader.load_state_dict(job)
    keys, ran = [], 0
    for batch_keys, _ in loader:
        dist.all_reduce(torch.tensor([len(batch_keys)]))
        keys += batch_keys
        ran += 1
        if phase == "first" and ran == 5:
            state = wds.gather_state_dict(loader)
            if rank == 0:
                with open(os.path.join(out_dir, "job.json"), "w") as f:
                    json.dump(state, f)
            break
    with open(os.path.join(out_dir, f"{phase}-{dist.get_world_size()}-rank{rank}.json"), "w") as f:
        json.dump({"keys": keys, "steps": steps, "ran": ran}, f)
    dist.barrier()
    # The report is written: leave without destroy_process_group, which is reported to hang now
    # and then (pytorch/pytorch#75097); the process's exit closes the connections.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
