"""Resuming a dataset mid-epoch: DataPipeline.state_dict() / load_state_dict()
(torchdata's StatefulDataLoader protocol), checked with plain PyTorch.

The protocol: in each DataLoader worker (or the main process with
num_workers=0) state_dict() is taken after an item, and a restarted job calls
load_state_dict() in the same worker before iter(). Every test compares the
continuation with the uninterrupted run, item by item (keys and bytes)."""

import json
import os
import pickle
import re

import numpy as np
import pytest
import torch

import webdataset_cpp as wds
from conftest import write_shards, write_tar

COUNTS = [6, 9, 4, 11, 7]  # 37 samples in 5 uneven shards


@pytest.fixture(scope="module", params=["sidecars", "plain"])
def shards(request, tmp_path_factory):
    """The pattern of 5 uneven shards: with .idx sidecars (the default split
    shares out samples) or without (whole shards)."""
    directory = tmp_path_factory.mktemp(request.param)
    paths = write_shards(directory, len(COUNTS), COUNTS)
    if request.param == "sidecars":
        assert [wds.write_index(p) for p in paths] == COUNTS
    return os.path.join(directory, "shard-{000000..000004}.tar")


def add_one(sample):
    return {**sample, "cls": sample["cls"] + 1}


def keys_and_labels(batch):
    images, labels, keys = batch
    return (tuple(keys), np.asarray(labels).tobytes())


RECIPES = {
    # shard permutation, a shuffle buffer, image decoding into batch slots
    "batched": lambda p: (wds.WebDataset(p, shardshuffle=100, seed=5).shuffle(8, initial=3)
                          .decode("rgb8").to_tuple("jpg", "cls", "__key__").batched(4)),
    # more batches than an epoch holds: the workers continue into pass 1
    "with_epoch": lambda p: (wds.WebDataset(p, shardshuffle=100, seed=5).shuffle(8, initial=3)
                             .decode("rgb8").to_tuple("jpg", "cls", "__key__").batched(4)
                             .with_epoch(14)),
    "with_length": lambda p: (wds.WebDataset(p, shardshuffle=100, seed=5).shuffle(8, initial=3)
                              .decode("rgb8").to_tuple("jpg", "cls", "__key__").batched(4)
                              .with_length(9, silent=True)),
    # a Python map between native stages: the second chain is fed by Python
    "python_between": lambda p: (wds.WebDataset(p, shardshuffle=100, seed=5)
                                 .shuffle(8, initial=3).decode("rgb8").map(add_one)
                                 .to_tuple("jpg", "cls", "__key__").batched(3)),
    # a Python map after the chain, under with_epoch (passes run in Python)
    "python_passes": lambda p: (wds.WebDataset(p, shardshuffle=100, seed=5).shuffle(8)
                                .decode("rgb8").to_tuple("jpg", "cls", "__key__").batched(4)
                                .map(lambda b: b).with_epoch(13)),
    "repeat": lambda p: (wds.WebDataset(p, shardshuffle=100, seed=5).shuffle(8, initial=3)
                         .decode("rgb8").to_tuple("jpg", "cls", "__key__").batched(5)
                         .repeat(2)),
    # shards drawn with replacement, seeded (OpenCLIP's --dataset-resampled)
    "resampled": lambda p: (wds.WebDataset(p, resampled=True, shardshuffle=False, seed=5)
                            .shuffle(8, initial=3)
                            .decode("rgb8").to_tuple("jpg", "cls", "__key__").batched(4)
                            .with_epoch(12)),
    # the same drawn by ResampledShards (nshards: sys.maxsize) in a DataPipeline
    "resampled_shards": lambda p: wds.DataPipeline(
        wds.ResampledShards(p, seed=7), wds.tarfile_to_samples(), wds.shuffle(8, initial=3, seed=2),
        wds.decode("rgb8"), wds.to_tuple("jpg", "cls", "__key__"), wds.batched(4)).with_epoch(10),
    # the same drawn with weights (shard 1 never, shard 4 most)
    "resampled_weighted": lambda p: wds.DataPipeline(
        wds.ResampledShards(p, seed=7, weights=[1, 0, 2, 0.5, 3]), wds.tarfile_to_samples(),
        wds.shuffle(8, initial=3, seed=2), wds.decode("rgb8"), wds.to_tuple("jpg", "cls", "__key__"),
        wds.batched(4)).with_epoch(10),
    # samples, not batches; no shuffle buffer; the reference's shard order
    "samples": lambda p: (wds.WebDataset(p, shardshuffle=False).decode("rgb8")
                          .to_tuple("jpg", "cls", "__key__").map_tuple(None, None, lambda k: [k])),
}


def summary(items):
    return [keys_and_labels(item) for item in items]


def images_of(items):
    return [np.asarray(item[0]).tobytes() for item in items]


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_stop_point_continues_the_uninterrupted_run(shards, recipe):
    make = RECIPES[recipe]
    full = list(make(shards))
    assert len(full) > 8
    for k in range(len(full) + 2):
        dataset = make(shards)
        it = iter(dataset)
        head = [item for _, item in zip(range(k), it)]
        if k > len(full):
            assert next(it, None) is None  # the end is seen: the state says so
        state = dataset.state_dict()
        assert state["yielded"] == min(k, len(full)) and state["ended"] == (k > len(full))
        assert len(pickle.dumps(state)) < 1024  # positions, not data
        resumed = make(shards)
        resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
        rest = list(resumed)
        assert summary(head + rest) == summary(full), (recipe, k)
        assert images_of(head + rest) == images_of(full), (recipe, k)
        # The state after the restored run is the state after the whole one.
        assert resumed.state_dict()["ended"]


def test_the_next_epoch_after_a_resumed_one_is_the_next_epoch(shards):
    make = RECIPES["batched"]
    reference = make(shards)
    epochs = [summary(reference), summary(reference)]
    dataset = make(shards)
    it = iter(dataset)
    next(it), next(it)
    resumed = make(shards)
    resumed.load_state_dict(dataset.state_dict())
    assert summary(resumed) == epochs[0][2:]
    assert summary(resumed) == epochs[1]


@pytest.mark.parametrize("make", [
    lambda urls, index: wds.WebDataset(urls, resampled=True, shardshuffle=False, seed=5,
                                       dataset_index=index),
    lambda urls, index: wds.DataPipeline(wds.ResampledShards(urls, seed=5, dataset_index=index),
                                         wds.tarfile_to_samples())])
def test_a_resampled_restore_takes_the_drawn_shards_counts_from_the_dataset_index(tmp_path, make):
    """Resuming shards drawn with replacement counts the distinct shards drawn before the
    checkpoint: a pipe: shard without a sidecar is read whole for its count, one listed in
    dataset_index is not run at all. Each shard's command logs its runs."""
    log = tmp_path / "runs"
    urls = []
    for s in range(4):
        path = write_tar(tmp_path / f"shard-{s}.tar",
                         [(f"{s}_{i}.txt", f"{s}_{i}".encode()) for i in range(6)])
        urls.append(f"pipe:echo {s} >> {log} && cat {path}")
    index = tmp_path / "index.json"
    index.write_text(json.dumps({"__kind__": "wids-shard-index-v1", "wids_version": 1,
                                 "shardlist": [{"url": u, "nsamples": 6} for u in urls]}))

    def dataset(with_index):
        return (make(urls, str(index) if with_index else None)
                .compose(wds.to_tuple("__key__"), wds.batched(4)).with_epoch(12))

    def runs():
        ran = log.read_text().split()
        log.write_text("")
        return ran

    log.write_text("")
    uninterrupted = dataset(True)
    it = iter(uninterrupted)
    head = [next(it) for _ in range(5)]  # 20 samples: 3 drawn shards and 2 of the 4th
    state = uninterrupted.state_dict()
    rest = list(it)
    drawn = runs()  # the 12 batches' 8 shards, in draw order
    assert len(drawn) == 8 and len(head) == 5
    ran = {}
    for with_index in (True, False):
        resumed = dataset(with_index)
        resumed.load_state_dict(state)
        assert list(resumed) == rest
        ran[with_index] = runs()
    # With the index: the checkpoint's shard (the 4th drawn) runs twice, once for where its
    # samples lie (it has no sidecar) and once for them, then the rest as drawn. Without it, each
    # distinct shard drawn before runs once more first, to be counted.
    assert ran[True] == [drawn[3]] + drawn[3:]
    assert ran[False] == list(dict.fromkeys(drawn[:3])) + ran[True]


def test_a_state_of_an_ended_iteration_gives_an_empty_one(shards):

    make = RECIPES["batched"]
    reference = make(shards)
    reference.set_epoch(2)
    epoch2, epoch3 = summary(reference), summary(reference)
    dataset = make(shards)
    dataset.set_epoch(2)
    assert summary(dataset) == epoch2
    state = dataset.state_dict()
    assert state["ended"] and state["epoch"] == 2
    resumed = make(shards)
    resumed.load_state_dict(state)
    assert list(resumed) == []  # what an ended DataLoader worker must give
    assert summary(resumed) == epoch3


def test_set_epoch_keeps_a_state_of_its_epoch_and_drops_another(shards):
    make = RECIPES["batched"]
    full = summary(make(shards))
    dataset = make(shards)
    it = iter(dataset)
    head = [keys_and_labels(next(it)) for _ in range(3)]
    state = dataset.state_dict()
    resumed = make(shards)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)  # as WebLoader does before each epoch: the same epoch
    assert head + summary(resumed) == full
    other = make(shards)
    other.set_epoch(1)
    expected = summary(other)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)  # another epoch: the state is dropped
    assert summary(resumed) == expected


def test_a_state_before_any_iteration_holds_the_epoch(shards):
    make = RECIPES["batched"]
    dataset = make(shards)
    dataset.set_epoch(3)
    state = dataset.state_dict()
    assert state == {"format": "webdataset_cpp.DataPipeline", "version": 1, "epoch": 3,
                     "started": False}
    resumed = make(shards)
    resumed.load_state_dict(state)
    reference = make(shards)
    reference.set_epoch(3)
    assert summary(resumed) == summary(reference)


# ------------------------------------------------ one state per DataLoader worker


def worker_env(monkeypatch, rank, world_size, worker, workers):
    """The placement the package reads outside torch: RANK/WORLD_SIZE, WORKER/NUM_WORKERS."""
    for name, value in (("RANK", rank), ("WORLD_SIZE", world_size), ("WORKER", worker),
                        ("NUM_WORKERS", workers)):
        monkeypatch.setenv(name, str(value))


def make_ranked(pattern):
    return (wds.WebDataset(pattern, shardshuffle=100, seed=9, nodesplitter=wds.split_by_node)
            .shuffle(6, initial=2).decode("rgb8").to_tuple("jpg", "cls", "__key__").batched(3))


def round_robin(per_worker):
    """The order a DataLoader takes the workers' items in: (worker, item)."""
    out, its = [], [iter(items) for items in per_worker]
    live = list(range(len(its)))
    while live:
        for w in list(live):
            item = next(its[w], None)
            if item is None:
                live.remove(w)
            else:
                out.append((w, item))
    return out


def test_each_worker_resumes_its_own_state(shards, monkeypatch):
    """2 ranks x 2 workers: every worker's state taken and restored in that
    worker; for every stop point of a rank's DataLoader order, the workers'
    continuations together are the rest of the uninterrupted run."""
    for rank in range(2):
        full = []
        for w in range(2):
            worker_env(monkeypatch, rank, 2, w, 2)
            full.append(summary(make_ranked(shards)))
        order = round_robin(full)
        for k in range(len(order) + 1):
            taken = [sum(1 for w, _ in order[:k] if w == worker) for worker in range(2)]
            rest = []
            for w in range(2):
                worker_env(monkeypatch, rank, 2, w, 2)
                dataset = make_ranked(shards)
                it = iter(dataset)
                for _ in range(taken[w]):
                    next(it)
                state = dataset.state_dict()
                assert state["placement"] == [rank, 2, w, 2]
                resumed = make_ranked(shards)
                resumed.load_state_dict(state)
                mine = summary(resumed)
                assert mine == full[w][taken[w]:]
                rest += mine
            assert sorted(rest) == sorted(item for _, item in order[k:])


class Snapshots(torch.utils.data.IterableDataset):
    """What StatefulDataLoader does in each worker, with plain PyTorch: load
    the worker's state before iter(), take the state after each item."""

    def __init__(self, dataset, states=None):
        self.dataset = dataset
        self.states = states

    def __iter__(self):
        worker = torch.utils.data.get_worker_info().id
        if self.states is not None and self.states[worker] is not None:
            self.dataset.load_state_dict(self.states[worker])
        for images, labels, keys in self.dataset:
            yield worker, (tuple(keys), np.asarray(labels).tobytes()), self.dataset.state_dict()


@pytest.mark.parametrize("context,recipe", [("fork", "batched"), ("spawn", "batched"),
                                            ("fork", "resampled")])
def test_dataloader_workers_resume_from_their_states(shards, context, recipe):
    """Real worker processes: the states travel from the workers to the main
    process with the items (as StatefulDataLoader's snapshots do), the main
    process keeps each worker's state of the last item it took, and new
    workers continue from them (each worker draws its own resampled shards)."""
    def loader(states=None):
        return torch.utils.data.DataLoader(Snapshots(RECIPES[recipe](shards), states),
                                           batch_size=None, num_workers=2,
                                           multiprocessing_context=context)

    full = [(w, item) for w, item, _ in loader()]
    stops = [0, 1, 4, len(full) - 1] if context == "fork" else [5]
    for k in stops:
        states = [None, None]
        for w, _, state in list(loader())[:k]:
            states[w] = state
        taken = [sum(1 for w, _ in full[:k] if w == worker) for worker in range(2)]
        rest = [(w, item) for w, item, _ in loader(states)]
        for worker in range(2):
            assert ([item for w, item in rest if w == worker] ==
                    [item for w, item in full if w == worker][taken[worker]:])


# ------------------------------------------------ a checkpoint with the model


def test_a_checkpoint_holds_the_dataset_state_with_the_model(shards, tmp_path):
    """The logic of docs/PYTHON.md's Lightning example: the state goes into the
    training checkpoint (torch.save) and comes back in a new process's
    objects."""
    make = RECIPES["with_epoch"]
    full = summary(make(shards))
    model = torch.nn.Linear(2, 1)
    dataset = make(shards)
    seen = []
    for step, batch in enumerate(dataset):
        seen.append(keys_and_labels(batch))
        if step == 4:
            torch.save({"model": model.state_dict(), "data": dataset.state_dict()},
                       tmp_path / "ckpt.pt")
            break
    checkpoint = torch.load(tmp_path / "ckpt.pt")
    restarted_model, restarted = torch.nn.Linear(2, 1), make(shards)
    restarted_model.load_state_dict(checkpoint["model"])
    restarted.load_state_dict(checkpoint["data"])
    assert seen + summary(restarted) == full


# ------------------------------------------------ what a state refuses


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    directory = tmp_path_factory.mktemp("plain")
    write_shards(directory, 3, 4, jpeg=False)
    return os.path.join(directory, "shard-{000000..000002}.tar")


def state_after(dataset, n=1):
    it = iter(dataset)
    for _ in range(n):
        next(it)
    return dataset.state_dict()


def base(pattern, seed=0, **kw):
    # A seed: an unseeded shuffle in an unseeded pipeline cannot be resumed.
    return wds.WebDataset(pattern, shardshuffle=100, seed=seed, **kw).shuffle(5)


def test_a_state_of_another_pipeline_is_refused(plain, tmp_path):
    state = state_after(base(plain).batched(2))
    other_shards = write_shards(tmp_path, 2, 4, jpeg=False)
    for other in (base(plain, seed=1).batched(2), base(plain).batched(3),
                  base(plain).batched(2).with_epoch(5), base(plain).decode().batched(2),
                  wds.WebDataset(plain, shardshuffle=False, seed=0).shuffle(5).batched(2),
                  base(other_shards).batched(2)):
        with pytest.raises(ValueError, match=r"^load_state_dict: the state was taken with "
                                             r"another pipeline \(its shards, seed, stages, "
                                             r"their parameters or its epoch sizing differ\)$"):
            other.load_state_dict(state)


def test_a_state_of_another_worker_is_refused(plain, monkeypatch):
    state = state_after(base(plain).batched(2))
    worker_env(monkeypatch, 0, 1, 1, 2)
    with pytest.raises(ValueError, match=r"^load_state_dict: the state was taken by rank 0 of "
                                         r"1, DataLoader worker 0 of 1, not rank 0 of 1, worker "
                                         r"1 of 2 \(load each worker's state in that worker"):
        base(plain).batched(2).load_state_dict(state)
    # Loaded in one place and iterated in another (a DataLoader's workers
    # inherit the main process's dataset): refused when the iteration starts.
    monkeypatch.delenv("WORKER")
    monkeypatch.delenv("NUM_WORKERS")
    dataset = base(plain).batched(2)
    dataset.load_state_dict(state)
    worker_env(monkeypatch, 0, 1, 1, 2)
    with pytest.raises(ValueError, match="^load_state_dict: the state was taken by rank 0 of 1, "
                                         "DataLoader worker 0 of 1, not rank 0 of 1, worker 1"):
        iter(dataset)


def test_malformed_and_unknown_states_are_refused(plain):
    state = state_after(base(plain).batched(2))
    dataset = base(plain).batched(2)
    for bad, message in [
            ("text", r"^load_state_dict: not a webdataset_cpp DataPipeline state \(no 'format': "
                     r"'webdataset_cpp.DataPipeline'\)$"),
            ({"webdataset_cpp.Loader": "{}"}, "^load_state_dict: not a webdataset_cpp "
                                              "DataPipeline state"),
            ({**state, "version": 2}, r"^load_state_dict: DataPipeline state version 2 is "
                                      r"unknown \(this version reads 1\)$"),
            ({**state, "yielded": "3"}, "^load_state_dict: the state's 'yielded' is missing or "
                                        "malformed$"),
            ({k: v for k, v in state.items() if k != "recipe"},
             "^load_state_dict: the state's 'recipe' is missing or malformed$"),
            ({**state, "checkpoint": [0, 1]}, "^load_state_dict: the state's 'checkpoint' is "
                                              "malformed$")]:
        with pytest.raises(ValueError, match=message):
            dataset.load_state_dict(bad)


def test_a_checkpoint_out_of_bounds_is_refused_naming_the_bounds(plain):
    chain = wds._core.Chain(wds._core.shard_source(wds.shardlists.expand_urls(plain)), [], 0)
    assert len(list(chain.open(restore=(0, 2, -1)))) == 10  # -1: no shuffle stage
    for bad in [(-1, 0, 0), (0, -1, 0), (0, 0, -2)]:
        with pytest.raises(ValueError, match=re.escape(
                "restore: a checkpoint needs pass >= 0, source_out >= 0 and shuffle_out >= -1 "
                f"(-1: no shuffle stage), got {bad}")):
            chain.open(restore=bad)


def python_source():
    for i in range(9):
        yield {"__key__": f"k{i}", "cls": i}


def unrecordable(pattern):
    """Pipelines (and positions) a state cannot record, with why."""
    return [
        (wds.DataPipeline(python_source, wds.batched(2)),
         r"the pipeline must start with the native shard source"),
        (wds.WebDataset(pattern, resampled=True, shardshuffle=False).batched(2).with_epoch(6),
         r"shards resampled without a seed are drawn anew every run"),
        (base(pattern).batched(2).unbatched(), r"unbatched holds items between its outputs"),
        (base(pattern).listed(2).unlisted(), r"unlisted holds items between its outputs"),
        (base(pattern).slice(5), r"the slice stage keeps a position a state cannot record"),
        (wds.WebDataset(pattern, shardshuffle=False).map(dict).shuffle(5),
         r"a shuffle after a Python stage holds samples"),
        (wds.WebDataset(pattern, shardshuffle=False).batched(2).shuffle(3),
         r"a shuffle after batched holds batches"),
        (wds.WebDataset(pattern, shardshuffle=False, handler=lambda e: True).batched(2),
         r"a Python handler callable reads the shards one at a time"),
        # Found only while the chain runs: two shuffle buffers.
        (base(pattern).shuffle(3).batched(2), r"more than one shuffle stage"),
    ]


def test_pipelines_whose_position_cannot_be_recorded_say_why(plain):
    for dataset, reason in unrecordable(plain):
        state = state_after(dataset)  # never raises: StatefulDataLoader asks at every step
        assert set(state) == {"format", "version", "epoch", "started", "resumable", "reason"}
        assert state["resumable"] is False and state["started"] and state["epoch"] == 0
        assert re.search(reason, state["reason"]), (reason, state["reason"])
        assert len(pickle.dumps(state)) < 1024
        # Restoring it is the error, naming why (not a silent fresh start,
        # which would repeat the epoch's first items).
        with pytest.raises(ValueError, match=r"^load_state_dict: this state records no position "
                                             rf"to resume from: .*{reason}.* \(restore without "
                                             r"it: set_epoch\(0\) starts epoch 0 afresh\)$"):
            unrecordable(plain)[0][0].load_state_dict(state)


class EveryStepStates(torch.utils.data.IterableDataset):
    """StatefulDataLoader's calls in each worker, with plain PyTorch: the
    dataset's state after every item it yields."""

    def __init__(self, dataset, items):
        self.dataset = dataset
        self.items = items

    def __iter__(self):
        for _, _ in zip(range(self.items), self.dataset):
            yield torch.utils.data.get_worker_info().id, self.dataset.state_dict()


def test_workers_taking_states_at_every_step_run_unrecordable_pipelines(plain):
    for dataset, reason in unrecordable(plain):
        loader = torch.utils.data.DataLoader(EveryStepStates(dataset, 2), batch_size=None,
                                             num_workers=2, multiprocessing_context="fork")
        got = list(loader)
        assert sorted(w for w, _ in got) == [0, 0, 1, 1], reason
        for _, state in got:
            assert state["resumable"] is False and re.search(reason, state["reason"])


@pytest.fixture(scope="module", params=["sidecars", "plain"])
def with_bad_samples(request, tmp_path_factory):
    """3 shards of 7, 9 and 5 samples whose cls is a number but for 4 ("x")."""
    directory = tmp_path_factory.mktemp("bad-" + request.param)
    bad = {(0, 2), (1, 0), (1, 8), (2, 4)}  # a first, a last and a pass's last sample
    for shard, size in enumerate([7, 9, 5]):
        members = [(f"s{shard}_{i}.cls", b"x" if (shard, i) in bad else str(i).encode())
                   for i in range(size)]
        path = write_tar(directory / f"shard-{shard:06d}.tar", members)
        if request.param == "sidecars":
            wds.write_index(path)
    return os.path.join(directory, "shard-{000000..000002}.tar")


@pytest.mark.parametrize("epoch_length", [None, 30])
def test_samples_dropped_before_the_shuffle_are_recorded(with_bad_samples, epoch_length):
    """A handler before the shuffle skips a sample: the state records which
    (as runs of positions in the pass), and every stop point continues exactly."""
    def make():
        dataset = (wds.WebDataset(with_bad_samples, shardshuffle=100, seed=3)
                   .decode(handler=wds.ignore_and_continue).shuffle(4, initial=2)
                   .to_tuple("__key__", "cls"))
        return dataset if epoch_length is None else dataset.with_epoch(epoch_length)

    full = list(make())
    assert len(full) == (17 if epoch_length is None else epoch_length)
    assert not any(cls == "x" for _, cls in full)
    recorded = []
    for k in range(len(full) + 1):
        dataset = make()
        it = iter(dataset)
        head = [item for _, item in zip(range(k), it)]
        state = dataset.state_dict()
        assert state.get("resumable", True), state
        recorded.append(state["checkpoint"])
        resumed = make()
        resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
        assert head + list(resumed) == full, k
    # The drops are part of the checkpoints: [pass, source_out, shuffle_out, runs].
    runs = {tuple(map(tuple, c[3])) for c in recorded if c is not None and len(c) == 4}
    assert runs and all(sum(e - b for b, e in r) <= 4 for r in runs)
