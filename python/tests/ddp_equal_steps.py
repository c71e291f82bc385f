"""One rank of test_distributed's torchrun jobs: every rank must run the same
number of steps on uneven shards, each step an all-reduce (a rank that ran out
early would make the others hang until the timeout).

Arguments: shard pattern, output directory, epochs, split ("shards", or
"default": WebDataset's default, which shares out samples when the shards
have sidecars), and optionally the policy: "drop" (the default: equal steps
through with_epoch), or "pad" (an evaluation: the natural epoch in
padded_epoch, partial batches)."""

import datetime
import faulthandler
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import ddp_report
import webdataset_cpp as wds


def main(pattern, out_dir, epochs, split, policy="drop"):
    # A rank still running after 50 s (a run takes seconds) prints every thread's stack once,
    # so that a hang shows where it is.
    faulthandler.dump_traceback_later(50)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = (wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node,
                              seed=11, split=None if split == "default" else split)
               .decode().to_tuple("cls", "__key__").batched(2, partial=policy == "pad"))
    report = {"rank": rank, "world_size": world, "epochs": []}
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        steps = wds.agreed_steps(dataset, num_workers=2, policy=policy)
        # Workers come from a forkserver, not a fork of this rank: a fork of a
        # process with Gloo's threads running can leave a worker stuck on a
        # lock one of them held (seen under load: one rank waiting for a batch
        # forever, the others in all_reduce).
        if policy == "pad":
            batches = wds.padded_epoch(
                DataLoader(dataset, batch_size=None, num_workers=2,
                           multiprocessing_context="forkserver"), steps)
        else:
            batches = ((batch, True) for batch in DataLoader(
                dataset.with_epoch(steps, across_workers=True), batch_size=None, num_workers=2,
                multiprocessing_context="forkserver"))
        keys, ran, padded, reduced = [], 0, [], 0
        for (labels, batch_keys), real in batches:
            total = torch.tensor([len(batch_keys) if real else 0])
            dist.all_reduce(total)
            reduced += int(total)
            if real:
                keys += batch_keys
            else:
                padded.append(ran)
            ran += 1
        plan = wds.plan_epoch(dataset, num_workers=2, epoch=epoch)
        report["epochs"].append({"steps": steps, "ran": ran, "keys": keys, "padded": padded,
                                 "reduced": reduced,
                                 "natural": plan.batches, "drop": plan.local_steps("drop"),
                                 "samples": plan.samples,
                                 "worker_samples": [w.samples for w in plan.workers]})
    ddp_report.finish(out_dir, rank, report)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:])
