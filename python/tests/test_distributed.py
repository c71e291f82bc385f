"""Equal steps on every rank: epoch plans from .idx sidecars, an all-reduce,
and a torchrun job with 3 ranks on 7 uneven shards."""

import json
import os
import socket
import subprocess
import sys

import pytest

import webdataset_cpp as wds
from conftest import write_shards

COUNTS = [5, 9, 3, 12, 7, 4, 10]  # 50 samples in 7 uneven shards


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    directory = tmp_path_factory.mktemp("uneven")
    paths = write_shards(directory, len(COUNTS), COUNTS, jpeg=False)
    assert [wds.write_index(p) for p in paths] == COUNTS
    return os.path.join(directory, "shard-{000000..000006}.tar")


def ranks_keys(pattern, world_size, workers, epoch, batch, monkeypatch):
    """What each (rank, worker) reads in an epoch, iterating for real."""
    out = {}
    for rank in range(world_size):
        for worker in range(workers):
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("WORLD_SIZE", str(world_size))
            monkeypatch.setenv("WORKER", str(worker))
            monkeypatch.setenv("NUM_WORKERS", str(workers))
            ds = (wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node,
                                 seed=11).batched(batch, partial=False))
            ds.set_epoch(epoch)
            out[rank, worker] = [len(b["__key__"]) for b in ds]
    for name in ("RANK", "WORLD_SIZE", "WORKER", "NUM_WORKERS"):
        monkeypatch.delenv(name)
    return out


def test_plans_match_what_the_workers_read(uneven, monkeypatch):
    ds = wds.WebDataset(uneven, shardshuffle=100, nodesplitter=wds.split_by_node,
                        seed=11).decode().to_tuple("cls").batched(2, partial=False)
    read = ranks_keys(uneven, 3, 2, 1, 2, monkeypatch)
    for rank in range(3):
        plan = wds.plan_epoch(ds, num_workers=2, epoch=1, rank=rank, world_size=3)
        assert [w.batches for w in plan.workers] == [len(read[rank, w]) for w in range(2)]
        assert plan.samples == sum(w.samples for w in plan.workers)
        assert plan.local_steps("drop") == plan.batches_without_repeats()
    all_shards = [s for r in range(3) for w in wds.plan_epoch(
        ds, num_workers=2, epoch=1, rank=r, world_size=3).workers for s in w.shards]
    assert sorted(all_shards) == sorted(wds.shardlists.expand_urls(uneven))
    assert wds.agreed_steps(ds, num_workers=2) == wds.plan_epoch(ds, num_workers=2).local_steps(
        "drop")
    with pytest.raises(ValueError, match=r"^plan_epoch: Slice\(start=0, stop=5, step=1\) may "
                                         r"change how many samples there are$"):
        wds.plan_epoch(wds.WebDataset(uneven, shardshuffle=False).slice(5).batched(2))
    with pytest.raises(ValueError, match="^plan_epoch needs a dataset whose stages are all "
                                         "native"):
        wds.plan_epoch(ds.select(lambda s: True))
    with pytest.raises(ValueError, match="policy must be 'drop' or 'wrap', got 'even'"):
        wds.agreed_steps(ds, policy="even")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_three_ranks_run_equal_steps(uneven, tmp_path):
    script = os.path.join(os.path.dirname(__file__), "ddp_equal_steps.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
           "--nproc_per_node", "3", "--master_addr", "127.0.0.1", "--master_port",
           str(free_port()), "--log_dir", str(tmp_path / "logs"), script, uneven,
           str(tmp_path), "2"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    reports = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(3)]
    natural_counts = set()
    for epoch in range(2):
        runs = [r["epochs"][epoch] for r in reports]
        steps = {run["steps"] for run in runs}
        assert len(steps) == 1 and all(run["ran"] == run["steps"] for run in runs)
        assert steps.pop() == min(run["drop"] for run in runs)
        keys = [k for run in runs for k in run["keys"]]
        assert len(keys) == len(set(keys))  # "drop": no sample twice in an epoch
        natural_counts.add(tuple(run["natural"] for run in runs))
    # The shards are uneven: left alone, the ranks would run different steps.
    assert any(len(set(counts)) > 1 for counts in natural_counts)
    assert reports[0]["epochs"][0]["keys"] != reports[0]["epochs"][1]["keys"]


def sample_split_keys(pattern, rank, world_size, worker, workers, monkeypatch, **kw):
    for name, value in (("RANK", rank), ("WORLD_SIZE", world_size), ("WORKER", worker),
                        ("NUM_WORKERS", workers)):
        monkeypatch.setenv(name, str(value))
    ds = wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node, seed=11,
                        split="samples", **kw)
    ds.set_epoch(1)
    return [s["__key__"] for s in ds]


def test_sample_split_gives_every_rank_an_equal_share(uneven, monkeypatch):
    keys = {(r, w): sample_split_keys(uneven, r, 3, w, 2, monkeypatch)
            for r in range(3) for w in range(2)}
    every = [k for ks in keys.values() for k in ks]
    assert len(every) == sum(COUNTS) and len(set(every)) == sum(COUNTS)
    per_rank = [len(keys[r, 0]) + len(keys[r, 1]) for r in range(3)]
    assert max(per_rank) - min(per_rank) <= 1
    ds = wds.WebDataset(uneven, shardshuffle=100, nodesplitter=wds.split_by_node, seed=11,
                        split="samples").batched(2, partial=False)
    for rank in range(3):
        plan = wds.plan_epoch(ds, num_workers=2, epoch=1, rank=rank, world_size=3)
        assert [w.samples for w in plan.workers] == [len(keys[rank, w]) for w in range(2)]


def test_sample_split_needs_the_native_source(uneven, monkeypatch):
    with pytest.raises(ValueError, match="split must be 'shards' or 'samples', not 'rows'"):
        wds.WebDataset(uneven, shardshuffle=False, split="rows")
    with pytest.raises(ValueError, match="split='samples' needs a native handler"):
        sample_split_keys(uneven, 0, 1, 0, 1, monkeypatch, handler=lambda e: True)
