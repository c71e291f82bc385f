"""torch DataLoader workers (fork and spawn): each runs its own native chain,
the shards are split between them, and epochs move on."""

import gc
import multiprocessing
import pickle
import time

import pytest
import torch
from torch.utils.data import DataLoader

import webdataset_cpp as wds
from webdataset_cpp import _core

ALL_KEYS = sorted(f"s{s}_{i:03d}" for s in range(4) for i in range(10))


def keys_of(batches):
    return [k for _, keys in batches for k in keys]


def dataset(shards, **kw):
    return (wds.WebDataset(shards, **kw).decode("rgb8").to_tuple("jpg", "__key__")
            .batched(5))


@pytest.mark.parametrize("workers,context", [(0, None), (2, "fork"), (2, "spawn")])
def test_workers_cover_every_sample_once(shards, workers, context):
    ds = dataset(shards, shardshuffle=False)
    loader = DataLoader(ds, batch_size=None, num_workers=workers, multiprocessing_context=context)
    batches = list(loader)
    assert sorted(keys_of(batches)) == ALL_KEYS
    images = batches[0][0]
    assert isinstance(images, torch.Tensor) and images.shape == (5, 12, 16, 3)
    if workers == 2:
        # Round-robin over the workers: worker 0 reads shards 0 and 2.
        assert [k[:2] for k in batches[0][1]] == ["s0"] * 5
        assert [k[:2] for k in batches[1][1]] == ["s1"] * 5


def test_web_loader_moves_epochs_on_in_fresh_workers(shards):
    ds = dataset(shards, shardshuffle=10, seed=3)
    loader = wds.WebLoader(ds, batch_size=None, num_workers=2,
                           multiprocessing_context="fork")
    epochs = [keys_of(loader) for _ in range(3)]
    assert all(sorted(e) == ALL_KEYS for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    loader.set_epoch(0)
    assert keys_of(loader) == epochs[0]
    rebatched = loader.unbatched().shuffle(8).batched(8)
    assert sorted(k for _, keys in rebatched for k in keys) == ALL_KEYS
    assert len(list(rebatched)) == 5


def test_persistent_workers_continue_their_epochs(shards):
    ds = dataset(shards, shardshuffle=10, seed=3)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True,
                        multiprocessing_context="fork")
    first, second = keys_of(loader), keys_of(loader)
    assert sorted(first) == sorted(second) == ALL_KEYS and first != second


def test_with_epoch_counts_per_worker_as_the_reference_and_continues_into_a_new_pass(shards):
    ds = dataset(shards, shardshuffle=False).with_epoch(5)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    batches = list(loader)
    assert len(batches) == 10  # 5 per worker; each read its 4 batches, then 1 of a new pass
    assert [keys[0] for _, keys in batches[-2:]] == ["s0_000", "s1_000"]
    with pytest.raises(TypeError, match=r"across_workers=True"):
        len(loader)


def test_with_epoch_across_workers_is_a_total_over_workers(shards):
    ds = dataset(shards, shardshuffle=False).with_epoch(11, across_workers=True)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    batches = list(loader)
    assert len(batches) == 11 == len(loader)
    assert [k[:2] for _, keys in batches[:4] for k in keys[:1]] == ["s0", "s1", "s0", "s1"]


def _child_state(conn, it):
    try:
        next(it)
        conn.send(("iterated", None))
    except Exception as e:
        conn.send((type(e).__name__, str(e), _core._open_shard_descriptors()))


def test_a_forked_child_inherits_no_open_shard(shards):
    # An earlier test's iterator may still hold a shard until it is collected
    # (or its thread ends): start from none open.
    deadline = time.monotonic() + 10
    while _core._open_shard_descriptors() != 0 and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert _core._open_shard_descriptors() == 0
    it = iter(wds.WebDataset(shards, shardshuffle=False))
    next(it)
    assert _core._open_shard_descriptors() == 1
    parent, child = multiprocessing.get_context("fork").Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_child_state, args=(child, it))
    proc.start()
    proc.join(30)
    assert parent.recv() == ("ValueError", "this iterator was started before the process "
                             "forked; start a new one in this process", 0)
    assert len(list(it)) == 39  # the parent's iteration goes on


def test_the_dataset_pickles_as_its_recipe(shards):
    ds = dataset(shards, shardshuffle=False)
    it = iter(ds)
    next(it)
    clone = pickle.loads(pickle.dumps(ds))
    assert keys_of(clone) == keys_of(dataset(shards, shardshuffle=False))
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(ds.map(lambda s: s))  # like any lambda


class Boom(Exception):
    pass


def explode_after_three(src):
    for i, sample in enumerate(src):
        if i == 3:
            raise Boom("in a Python stage")
        yield sample


def test_an_exception_in_a_worker_stops_every_worker(shards):
    import gc

    before = set(multiprocessing.active_children())
    ds = wds.WebDataset(shards, shardshuffle=False).compose(explode_after_three).batched(2)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    raised = None
    try:
        list(loader)
    except Boom as e:
        raised = str(e)
    # torch re-raises the worker's exception type with the worker's traceback.
    assert raised.startswith("Caught Boom in DataLoader worker process 0.\n")
    assert raised.endswith("Boom: in a Python stage\n")
    gc.collect()
    workers = set(multiprocessing.active_children()) - before
    for proc in workers:
        proc.join(10)
    assert [p for p in workers if p.is_alive()] == []
