"""webdataset_cpp.Loader: the native threaded loader for native pipelines."""

import io
import os
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import webdataset_cpp as wds
from webdataset_cpp import _core
from conftest import threads, threads_at_rest, threads_settle_to


def dataset(shards, **kw):
    return (wds.WebDataset(shards, **kw).decode("rgb8").to_tuple("jpg", "cls", "__key__")
            .batched(4))


def keys(batches):
    return [k for *_, ks in batches for k in ks]


def test_same_batches_in_the_same_order_as_a_data_loader(shards):
    ds = dataset(shards, shardshuffle=10, seed=2).shuffle(6)
    for workers in (1, 2):
        native = list(wds.Loader(ds, workers=workers))
        torch_loader = DataLoader(ds, batch_size=None, num_workers=workers,
                                  multiprocessing_context="fork")
        expected = list(torch_loader)
        assert keys(native) == keys(expected)
        for (a, la, _), (b, lb, _) in zip(native, expected):
            assert type(a) is np.ndarray and a.dtype == np.uint8 and a.shape[1:] == (12, 16, 3)
            assert np.array_equal(a, b.numpy()) and np.array_equal(la, lb.numpy())


def test_threads_exist_only_while_an_epoch_runs(shards):
    before = threads_at_rest()
    loader = wds.Loader(dataset(shards, shardshuffle=False), workers=3)
    assert threads() == before
    it = iter(loader)
    next(it)
    assert threads() == before + 3
    for _ in it:
        pass
    assert threads_settle_to(before) == before
    for _ in loader:
        break
    assert threads_settle_to(before) == before  # leaving early joins them


def test_stats_say_how_long_the_loop_waited_for_data(shards):
    loader = wds.Loader(dataset(shards, shardshuffle=False), workers=2)
    assert loader.stats() == dict(epoch=None, items=0, wait_seconds=0.0,
                                  first_item_seconds=None, seconds=0.0)
    count = 0
    for _ in loader:
        count += 1
        time.sleep(0.02)  # the training step: the loop's own time, not waiting
    stats = loader.stats()
    assert stats["epoch"] == 0 and stats["items"] == count == 10
    assert 0 < stats["first_item_seconds"] <= stats["wait_seconds"] <= stats["seconds"]
    assert stats["seconds"] - stats["wait_seconds"] >= 10 * 0.02
    time.sleep(0.05)
    assert loader.stats() == stats  # between epochs, the last one's stay
    it = iter(loader)
    next(it)
    running = loader.stats()
    assert running["epoch"] == 1 and running["items"] == 1
    time.sleep(0.05)
    assert loader.stats()["seconds"] >= running["seconds"] + 0.05  # it runs on
    it.close()  # leaving early ends the epoch's count too
    left = loader.stats()
    time.sleep(0.02)
    assert loader.stats() == left and left["items"] == 1


def test_epochs_length_and_set_epoch(shards):
    ds = dataset(shards, shardshuffle=10, seed=1).with_epoch(7, across_workers=True)
    loader = wds.Loader(ds, workers=2)
    assert len(loader) == 7
    epoch0, epoch1 = keys(loader), keys(loader)
    assert len(epoch0) == len(epoch1) == 28 and epoch0 != epoch1
    assert loader.epoch == 2
    loader.set_epoch(0)
    assert keys(loader) == epoch0
    with pytest.raises(TypeError, match=r"len\(\) of a Loader needs a dataset with "
                                        r"\.with_epoch\(n\) or \.with_length\(n\)"):
        len(wds.Loader(dataset(shards, shardshuffle=False)))


def test_with_epoch_counts_per_worker_as_in_a_dataloader(shards):
    ds = dataset(shards, shardshuffle=10, seed=1).with_epoch(3)
    loader = wds.Loader(ds, workers=2)
    assert len(loader) == 6
    batches = list(loader)
    assert len(batches) == 6
    torch_loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    assert keys(batches) == keys(torch_loader)


def test_len_is_with_length_when_given(shards):
    # with_length(n) sets len() and nothing else: the epoch stays natural (10 batches).
    ds = dataset(shards, shardshuffle=False).with_length(3, silent=True)
    loader = wds.Loader(ds, workers=2)
    assert len(loader) == len(ds) == 3 and len(list(loader)) == 10
    # with_length wins over with_epoch for len(), as for the dataset.
    ds = dataset(shards, shardshuffle=False).with_epoch(5).with_length(9, silent=True)
    loader = wds.Loader(ds, workers=2)
    assert len(loader) == len(ds) == 9 and len(list(loader)) == 10


def test_torch_output_shares_the_native_batch(shards):
    import gc

    loader = wds.Loader(dataset(shards, shardshuffle=False), workers=1, to_torch=True)
    it = iter(loader)
    images, labels, names = next(it)
    assert isinstance(images, torch.Tensor) and images.shape == (4, 12, 16, 3)
    assert isinstance(labels, torch.Tensor) and labels.dtype == torch.int64
    assert names == ["s0_000", "s0_001", "s0_002", "s0_003"]
    for rest in it:  # the rest of the epoch, each batch dropped as it comes
        del rest
    gc.collect()
    # The tensors hold the loader's pooled blocks themselves (no copy): those
    # blocks stay live exactly as long as the tensors do.
    live = loader._core.pool_stats["live_bytes"]
    assert live >= 4 * 12 * 16 * 3 + 4 * 8
    del images
    gc.collect()
    after_images = loader._core.pool_stats["live_bytes"]
    assert 0 < after_images <= live - 4 * 12 * 16 * 3
    del labels
    gc.collect()
    assert loader._core.pool_stats["live_bytes"] == 0
    numpy_loader = wds.Loader(dataset(shards, shardshuffle=False), workers=1)
    arrays, _, _ = next(iter(numpy_loader))
    assert isinstance(arrays.base, _core.NativeArray)
    assert torch.from_dlpack(arrays.base).data_ptr() == arrays.ctypes.data


def test_pin_memory_without_cuda_warns_and_goes_on(shards):
    loader = wds.Loader(dataset(shards, shardshuffle=False), pin_memory=True, to_torch=True)
    if torch.cuda.is_available():
        # Torch answers is_pinned() False for every pointer until it has
        # initialised CUDA itself (the loader pinned with its own calls).
        torch.cuda.init()
        images, _, _ = next(iter(loader))
        assert loader.pinned and images.is_pinned()
    else:
        with pytest.warns(UserWarning, match="pinned memory"):
            assert len(list(loader)) == 10
        assert not loader.pinned


def test_python_stages_are_refused(shards):
    ds = wds.WebDataset(shards, shardshuffle=False).map(lambda s: s).batched(4)
    with pytest.raises(ValueError, match=r"^webdataset_cpp.Loader runs only native pipelines; "
                                         r"these stages run Python: map \(iterate the dataset itself, or through a torch "
                                         r"DataLoader\)$"):
        wds.Loader(ds)
    with pytest.raises(ValueError, match=r"^webdataset_cpp.Loader runs only native pipelines; "
                                         r"these steps call Python: decode \(iterate"):
        wds.Loader(wds.WebDataset(shards, shardshuffle=False).decode(lambda k, d: None))
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        wds.Loader(dataset(shards, shardshuffle=False), workers=0)


def test_more_workers_than_shards_names_the_counts(shards):
    with pytest.raises(ValueError, match=r"^4 shards cannot feed 8 workers: worker 4 has none\."):
        wds.Loader(dataset(shards, shardshuffle=False), workers=8)
    loader = wds.Loader(dataset(shards, shardshuffle=False, empty_check=False), workers=8)
    assert len(keys(loader)) == 40


def test_errors_reach_the_consumer_in_order(shards, tmp_path):
    missing = str(tmp_path / "gone.tar")
    loader = wds.Loader(wds.WebDataset([shards[0], missing], shardshuffle=False).batched(5))
    it = iter(loader)
    assert len(next(it)["__key__"]) == 5
    assert len(next(it)["__key__"]) == 5
    with pytest.raises(FileNotFoundError, match="gone.tar"):
        next(it)


def test_state_dict_resumes_mid_epoch_with_identical_batches(shards):
    ds = (wds.WebDataset(shards, shardshuffle=10, seed=4).shuffle(6).decode("rgb8")
          .to_tuple("jpg", "cls", "__key__").batched(4))
    expected = list(wds.Loader(ds, workers=2))
    assert len(expected) > 4
    for stop in range(len(expected) + 1):
        first = wds.Loader(ds, workers=2)
        it = iter(first)
        head = [next(it) for _ in range(stop)]
        state = first.state_dict()
        first.close()
        buffer = io.BytesIO()
        torch.save({"loader": state}, buffer)  # goes into a checkpoint with the model
        buffer.seek(0)
        second = wds.Loader(ds, workers=2)
        second.load_state_dict(torch.load(buffer)["loader"])
        tail = list(second)
        assert keys(head + tail) == keys(expected)
        for (a, la, _), (b, lb, _) in zip(head + tail, expected):
            assert np.array_equal(a, b) and np.array_equal(la, lb)
        assert second.epoch == 1


def test_an_unseeded_shuffle_is_named_when_a_state_cannot_resume(shards, monkeypatch):
    # It was refused as "another recipe": each Loader drew its own shuffle seed.
    monkeypatch.delenv("WDS_SEED", raising=False)
    unseeded = lambda: wds.Loader(wds.WebDataset(shards, shardshuffle=10).shuffle(5)  # noqa: E731
                                  .decode("rgb8").to_tuple("jpg", "cls").batched(4))
    why = ("shuffle() without a seed draws a new order every run, which a state cannot replay "
           "(pass seed= to shuffle, or give the pipeline a seed: WebDataset(seed=...), "
           "DataPipeline.seed or $WDS_SEED)")
    loader = unseeded()
    next(iter(loader))
    state = loader.state_dict()
    assert state["resumable"] is False and state["reason"] == why
    message = f"load_state_dict: this loader's position cannot be restored: {why}"
    with pytest.raises(ValueError) as e:
        unseeded().load_state_dict(state)
    assert str(e.value) == message
    seeded = wds.Loader(dataset(shards, shardshuffle=10, seed=4)).state_dict()
    with pytest.raises(ValueError) as e:
        unseeded().load_state_dict(seeded)
    assert str(e.value) == message


def test_load_state_dict_refuses_another_recipe(shards):
    state = wds.Loader(dataset(shards, shardshuffle=10, seed=4), workers=2).state_dict()
    other = wds.Loader(dataset(shards, shardshuffle=10, seed=5), workers=2)
    with pytest.raises(ValueError, match="the state was taken with another recipe"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="taken by rank 0 of 1 with 2 workers, not rank 0 of 1 "
                                         "with 3"):
        wds.Loader(dataset(shards, shardshuffle=10, seed=4), workers=3).load_state_dict(state)
    with pytest.raises(ValueError, match="not a webdataset_cpp Loader state_dict"):
        other.load_state_dict({"epoch": 3})
    shuffled_batches = wds.Loader(dataset(shards, shardshuffle=10, seed=4).shuffle(3))
    running = iter(shuffled_batches)
    next(running)
    with pytest.raises(ValueError, match="put Shuffle before Batched"):
        shuffled_batches.state_dict()


def test_unordered_takes_batches_as_they_come(shards):
    # Worker 0 reads shards 0 and 2 through a command that first sleeps.
    slow = [f"pipe:sleep 1.5 && cat {shards[0]}", shards[1],
            f"pipe:sleep 1.5 && cat {shards[2]}", shards[3]]
    ordered = keys(wds.Loader(dataset(slow, shardshuffle=False), workers=2))
    unordered = keys(wds.Loader(dataset(slow, shardshuffle=False), workers=2, ordered=False))
    assert sorted(ordered) == sorted(unordered) == sorted(
        f"s{s}_{i:03d}" for s in range(4) for i in range(10))
    assert ordered[:4] == ["s0_000", "s0_001", "s0_002", "s0_003"]  # round-robin waits
    assert {k[:2] for k in unordered[:20]} == {"s1", "s3"}  # the fast worker's come first


def test_prefetch_bounds_how_far_workers_run_ahead(shards, tmp_path):
    def started_after_first_batch(prefetch):
        log = tmp_path / f"started-{prefetch}"
        log.write_text("")
        urls = [f"pipe:echo {i} >> {log} && cat {shard}" for i, shard in enumerate(shards)]
        ds = wds.WebDataset(urls, shardshuffle=False).to_tuple("cls").batched(10)
        it = iter(wds.Loader(ds, workers=1, prefetch=prefetch))
        next(it)  # shard 0's batch
        deadline = time.monotonic() + 5
        expected = min(len(shards), 2 + prefetch)
        while time.monotonic() < deadline and len(log.read_text().split()) < expected:
            time.sleep(0.05)
        time.sleep(0.3)  # room for a run-away worker to show itself
        started = len(log.read_text().split())
        it.close()
        return started

    # One batch per shard: after the first is taken, `prefetch` more wait in
    # the queue and the worker holds one more it cannot push yet.
    assert started_after_first_batch(1) == 3
    assert started_after_first_batch(2) == 4
    with pytest.raises(ValueError, match="prefetch must be >= 1, got 0"):
        wds.Loader(dataset(shards, shardshuffle=False), prefetch=0)
