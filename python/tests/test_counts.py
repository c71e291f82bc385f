"""Shard sample counts: the default split (samples when every count is known
without reading a shard, else whole shards), the one-file dataset index, and
counts read once per process, however many epochs and plans ask for them."""

import json
import os
import pickle
import re
import subprocess
import sys

import pytest
import torch

import webdataset_cpp as wds
from conftest import tool, write_shards

COUNTS = [5, 9, 3, 12, 7]  # 36 samples


def shard_set(directory, sidecars):
    paths = write_shards(directory, len(COUNTS), COUNTS, jpeg=False)
    if sidecars:
        assert [wds.write_index(p) for p in paths] == COUNTS
    return paths, os.path.join(directory, "shard-{000000..000004}.tar")


def placement(monkeypatch, rank, world_size, worker, workers):
    for name, value in (("RANK", rank), ("WORLD_SIZE", world_size), ("WORKER", worker),
                        ("NUM_WORKERS", workers)):
        monkeypatch.setenv(name, str(value))


def shares(pattern, monkeypatch, **kw):
    """{(rank, worker): keys} of one epoch, 2 ranks x 2 workers."""
    out = {}
    for rank in range(2):
        for worker in range(2):
            placement(monkeypatch, rank, 2, worker, 2)
            ds = wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node,
                                seed=3, **kw)
            ds.set_epoch(1)
            out[rank, worker] = [s["__key__"] for s in ds]
    return out


def test_the_default_split_shares_samples_when_every_count_is_known(tmp_path, monkeypatch):
    _, indexed = shard_set(tmp_path / "indexed", sidecars=True)
    default = shares(indexed, monkeypatch)
    assert default == shares(indexed, monkeypatch, split="samples")
    assert default != shares(indexed, monkeypatch, split="shards")
    sizes = sorted(len(keys) for keys in default.values())
    assert sizes == [9, 9, 9, 9]  # 36 samples, 4 equal shares
    # A Python handler reads whole shards one at a time: the reference's split, no error.
    assert shares(indexed, monkeypatch, handler=lambda e: True) == shares(
        indexed, monkeypatch, split="shards")


def test_without_counts_the_default_split_is_the_references(tmp_path, monkeypatch):
    paths, plain = shard_set(tmp_path / "plain", sidecars=False)
    default = shares(plain, monkeypatch)
    assert default == shares(plain, monkeypatch, split="shards")
    # Whole shards, as the reference's split_by_node and split_by_worker give them.
    for keys in default.values():
        shards = {k.split("_")[0] for k in keys}
        assert len(keys) == sum(COUNTS[int(s[1:])] for s in shards)
    assert sorted(len(keys) for keys in default.values()) != [9, 9, 9, 9]
    # One shard without a sidecar is enough to keep the reference's split.
    _, mixed = shard_set(tmp_path / "mixed", sidecars=True)
    os.remove(os.path.join(tmp_path, "mixed", "shard-000002.tar.idx"))
    assert shares(mixed, monkeypatch) == shares(mixed, monkeypatch, split="shards")


_WORKER_KEYS = """
import pickle, sys
dataset = pickle.load(open(sys.argv[1], "rb"))
dataset.set_epoch(1)
print(" ".join(s["__key__"] for s in dataset))
"""


@pytest.mark.parametrize("sidecars_at_first", [False, True])
def test_the_default_split_is_decided_once_and_travels_with_the_dataset(
        tmp_path, monkeypatch, sidecars_at_first):
    """split=None is decided when the dataset is made (in the main process):
    a worker started later (spawned: a process with a cache of its own) that
    sees sidecars appear, or vanish, still splits as the main process does."""
    paths, pattern = shard_set(tmp_path / "shards", sidecars=sidecars_at_first)
    dataset = wds.WebDataset(pattern, shardshuffle=100, seed=3, nodesplitter=wds.split_by_node)
    if sidecars_at_first:
        for path in paths:
            os.remove(path + ".idx")
    else:
        assert [wds.write_index(p) for p in paths] == COUNTS
    pickled = tmp_path / "dataset.pickle"
    with open(pickled, "wb") as f:
        pickle.dump(dataset, f)
    decided = "samples" if sidecars_at_first else "shards"
    expected = shares(pattern, monkeypatch, split=decided)
    assert expected != shares(pattern, monkeypatch,
                              split="shards" if sidecars_at_first else "samples")
    for (rank, worker), keys in expected.items():
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", WORKER=str(worker),
                   NUM_WORKERS="2")
        run = subprocess.run([sys.executable, "-c", _WORKER_KEYS, str(pickled)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == keys, (rank, worker)


def test_plans_follow_the_default_split(tmp_path, monkeypatch):
    _, indexed = shard_set(tmp_path / "indexed", sidecars=True)
    keys = shares(indexed, monkeypatch)
    ds = wds.WebDataset(indexed, shardshuffle=100, nodesplitter=wds.split_by_node,
                        seed=3).batched(2, partial=False)
    for rank in range(2):
        plan = wds.plan_epoch(ds, num_workers=2, epoch=1, rank=rank, world_size=2)
        assert [w.samples for w in plan.workers] == [len(keys[rank, w]) for w in range(2)]
        assert plan.local_steps("drop") == 8  # 9 samples per worker: 4 batches each


# ------------------------------------------------ the dataset index


def index_with_the_tool(paths, directory):
    """wds-shard index --json, then the sidecars it also writes removed: the
    counts are in the one file only."""
    path = os.path.join(directory, "index.json")
    subprocess.run([tool("wds-shard"), "index", "--json", path, *paths], check=True,
                   capture_output=True)
    for p in paths:
        os.remove(p + ".idx")
    return path


def test_a_dataset_index_gives_every_count_from_one_file(tmp_path, monkeypatch):
    paths, pattern = shard_set(tmp_path, sidecars=False)
    index = index_with_the_tool(paths, tmp_path)
    listed = json.load(open(index))["shardlist"]
    assert [s["nsamples"] for s in listed] == COUNTS
    assert [s["url"] for s in listed] == [os.path.basename(p) for p in paths]  # relative
    keys = shares(pattern, monkeypatch, dataset_index=index)
    assert keys == shares(pattern, monkeypatch, split="samples")
    for url in ("file:" + index, "file://" + index):  # the same file
        assert wds.WebDataset(pattern, shardshuffle=False,
                              dataset_index=url).pipeline[0].counts_known is True
    ds = wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node, seed=3,
                        dataset_index=index).batched(2, partial=False)
    for rank in range(2):
        plan = wds.plan_epoch(ds, num_workers=2, epoch=1, rank=rank, world_size=2)
        assert [w.samples for w in plan.workers] == [len(keys[rank, w]) for w in range(2)]
    # Read once per process: the file can go, the counts stay.
    os.remove(index)
    assert shares(pattern, monkeypatch, dataset_index=index) == keys
    assert wds.agreed_steps(ds, num_workers=2) == 8


def test_a_dataset_index_that_cannot_be_read_is_a_clear_error(tmp_path, monkeypatch):
    paths, pattern = shard_set(tmp_path, sidecars=False)
    missing = str(tmp_path / "missing.json")
    with pytest.raises(ValueError, match=f"^dataset_index {missing}: cannot open$"):
        list(wds.WebDataset(pattern, shardshuffle=False, dataset_index=missing))
    with pytest.raises(ValueError, match=f"^dataset_index {missing}: cannot open$"):
        wds.plan_epoch(wds.WebDataset(pattern, shardshuffle=False, dataset_index=missing))
    with pytest.raises(ValueError, match=f"^dataset_index {missing}: cannot open$"):
        wds.WebDataset(pattern, shardshuffle=False, dataset_index="file://" + missing)
    bad = tmp_path / "bad.json"
    bad.write_text('{"__kind__": "something else"}')
    with pytest.raises(ValueError, match=f"^dataset_index .*{bad}"):
        list(wds.WebDataset(pattern, shardshuffle=False, dataset_index=bad))
    # Resampled shards read it when made too.
    with pytest.raises(ValueError, match=f"^dataset_index {missing}: cannot open$"):
        wds.WebDataset(pattern, resampled=True, shardshuffle=False, dataset_index=missing)
    with pytest.raises(ValueError, match=f"^dataset_index {missing}: cannot open$"):
        wds.ResampledShards(pattern, seed=1, dataset_index=missing)
    with pytest.raises(TypeError):
        wds.ResampledShards(pattern, remote="not options")
    index = index_with_the_tool(paths[:2], tmp_path)
    with pytest.warns(UserWarning, match=rf"^dataset_index {re.escape(index)} does not list 3 of "
                                         r"the 5 shards \(the first: .*shard-000002.tar\): their "
                                         r"counts come from sidecars or reading them$"):
        wds.ResampledShards(pattern, seed=1, dataset_index=index)


def test_a_process_that_reads_a_replaced_index_refuses_to_split_by_it(tmp_path, monkeypatch):
    """A spawned worker reads the index again: one replaced since the dataset
    was made (another count of one of its shards) would share out the samples
    otherwise than the rest of the job. Other shards' entries, their order,
    and a split by whole shards do not matter."""
    paths, pattern = shard_set(tmp_path, sidecars=False)
    index = index_with_the_tool(paths, tmp_path)
    listed = json.load(open(index))
    listed["shardlist"].append({"url": "other.tar", "nsamples": 5})
    with open(index, "w") as f:
        json.dump(listed, f)
    env = dict(os.environ, RANK="1", WORLD_SIZE="2", WORKER="0", NUM_WORKERS="2")
    expected = shares(pattern, monkeypatch, dataset_index=index)[1, 0]
    datasets = {}
    for split in (None, "shards"):
        datasets[split] = tmp_path / f"dataset-{split}.pickle"
        with open(datasets[split], "wb") as f:
            pickle.dump(wds.WebDataset(pattern, shardshuffle=100, seed=3, split=split,
                                       nodesplitter=wds.split_by_node, dataset_index=index), f)

    def worker(split=None):
        return subprocess.run([sys.executable, "-c", _WORKER_KEYS, str(datasets[split])],
                              env=env, capture_output=True, text=True, timeout=120)

    run = worker()  # the same index: the same share
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == expected

    def rewrite(change):
        change(listed["shardlist"])
        with open(index, "w") as f:
            json.dump(listed, f)

    rewrite(lambda shards: (shards.reverse(), shards[0].update(nsamples=6)))  # other.tar's
    run = worker()
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == expected
    rewrite(lambda shards: shards[3].update(nsamples=shards[3]["nsamples"] + 1))
    run = worker("shards")  # whole shards: the counts do not place them
    assert run.returncode == 0, run.stderr
    run = worker()
    assert run.returncode != 0
    assert run.stderr.strip().splitlines()[-1] == (
        f"ValueError: dataset_index {index} changed since the dataset was made: this process "
        "read other counts of its shards than the process that made it, and would share out "
        "the samples otherwise than the rest of the job (replace an index only between jobs)")
    # plan_epoch in such a process says so too.
    plan = ("import pickle, sys, webdataset_cpp as wds\n"
            "wds.plan_epoch(pickle.load(open(sys.argv[1], 'rb')).batched(2), num_workers=2)")
    run = subprocess.run([sys.executable, "-c", plan, str(datasets[None])], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "changed since the dataset was made" in run.stderr


def test_an_index_of_other_shards_leaves_the_split_to_the_shards(tmp_path, monkeypatch):
    paths, pattern = shard_set(tmp_path / "data", sidecars=False)
    other, _ = shard_set(tmp_path / "other", sidecars=False)
    index = index_with_the_tool(other, tmp_path / "other")
    first = os.path.join(tmp_path, "data", "shard-000000.tar")
    with pytest.warns(UserWarning, match=re.escape(
            f"dataset_index {index} does not list 5 of the 5 shards (the first: {first}): their "
            "counts come from sidecars or reading them, and split=None then shares out whole "
            "shards unless each of them has a sidecar")):
        split = shares(pattern, monkeypatch, dataset_index=index)
    assert split == shares(pattern, monkeypatch, split="shards")


# ------------------------------------------------ counts read once per process


def test_pipe_shards_are_scanned_once_per_process(tmp_path):
    """pipe: shards have no sidecar: a sample-granular split scans each once,
    then reads it once per epoch; each command run is logged."""
    paths, _ = shard_set(tmp_path, sidecars=False)
    log = tmp_path / "runs.log"
    urls = [f"pipe:echo {i} >> {log}; cat {p}" for i, p in enumerate(paths)]

    def runs():
        return sorted(log.read_text().split()) if log.exists() else []

    ds = wds.WebDataset(urls, shardshuffle=100, seed=1, split="samples").batched(4)
    first = [k for b in ds for k in b["__key__"]]
    assert len(first) == sum(COUNTS)
    assert runs() == sorted([str(i) for i in range(5)] * 2)  # one scan and one read each
    log.unlink()
    second = [k for b in ds for k in b["__key__"]]
    assert sorted(second) == sorted(first) and second != first  # a new permutation
    assert runs() == [str(i) for i in range(5)]  # reads only
    log.unlink()
    assert wds.plan_epoch(ds, num_workers=2).samples == sum(COUNTS)
    assert wds.agreed_steps(ds, num_workers=1) == 9
    assert runs() == []  # no command ran


def corrupt_sidecars(paths):
    """Sidecars that claim 999 samples: a reader that reads them again fails."""
    for p in paths:
        with open(p + ".idx", "w") as f:
            f.write("v1.2 999\n")


def test_sidecars_are_read_once_per_process(tmp_path):
    paths, pattern = shard_set(tmp_path, sidecars=True)

    def make():
        return wds.WebDataset(pattern, shardshuffle=100, seed=2).batched(3, partial=False)

    ds = make()
    epochs = [[k for b in ds for k in b["__key__"]] for _ in range(2)]
    plan = wds.plan_epoch(ds, num_workers=2, epoch=2)
    ds.set_epoch(0)
    assert [k for b in ds for k in b["__key__"]] == epochs[0]
    corrupt_sidecars(paths)
    # This process counted them: its epochs, plans and new datasets read no count.
    assert [k for b in ds for k in b["__key__"]] == epochs[1]
    again = make()
    again.set_epoch(1)
    assert [k for b in again for k in b["__key__"]] == epochs[1]
    replan = wds.plan_epoch(ds, num_workers=2, epoch=2)
    assert [w.samples for w in replan.workers] == [w.samples for w in plan.workers]
    # A forked DataLoader worker inherits the counts.
    loader = torch.utils.data.DataLoader(again, batch_size=None, num_workers=1,
                                         multiprocessing_context="fork")
    again.set_epoch(1)
    assert [k for b in loader for k in b["__key__"]] == epochs[1]
    # A new process reads the lying sidecars (so the checks above would see a re-read).
    code = (f"import webdataset_cpp as wds\n"
            f"list(wds.WebDataset({pattern!r}, shardshuffle=100, seed=2))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=dict(os.environ))
    assert result.returncode != 0
    assert "its index counts more" in result.stderr
