"""The reference's smaller names: each does what its docstring says."""

import io
import os
import time

import numpy as np
import pytest
import torch

import webdataset_cpp as wds


def samples(n):
    return [{"__key__": f"k{i}", "cls": i} for i in range(n)]


def test_resampled_shards_in_python_with_a_worker_seed():
    urls = [f"u{i}.tar" for i in range(5)]
    shards = wds.ResampledShards(urls, nshards=8, seed=1, worker_seed=lambda: 7)
    first, second = list(shards), list(shards)
    assert len(first) == 8 and all(set(d) == {"url"} and d["url"] in urls for d in first)
    assert first != second  # the epoch advances per iteration
    again = wds.ResampledShards(urls, nshards=8, seed=1, worker_seed=lambda: 7)
    assert list(again) == first
    with pytest.raises(ValueError, match="^empty_check=True, but no shards found in "
                                         "ResampledShards$"):
        wds.ResampledShards([])
    assert [d["url"] for d in wds.resampled(iter([{"url": "a"}]), n=3)] == ["a"] * 3


def test_detshuffle_is_a_seeded_shuffle():
    def order(stage):
        return [s["__key__"] for s in wds.DataPipeline([samples(30)], stage)]

    assert order(wds.detshuffle(10, seed=3)) == order(wds.shuffle(10, seed=3))
    assert sorted(order(wds.detshuffle(10, seed=3))) == sorted(s["__key__"] for s in samples(30))


def test_listed_unlisted_rsample_info_associate_xdecode():
    ds = wds.DataPipeline([samples(5)])
    listed = wds.FluidWrapper(samples(5)).listed(2, partial=False)
    assert [[s["cls"] for s in batch] for batch in listed] == [[0, 1], [2, 3]]
    assert list(wds.filters.unlisted()(iter([[1, 2], [3]]))) == [1, 2, 3]
    import random

    random.seed(0)
    kept = [s["cls"] for s in wds.rsample(0.5)(iter(samples(100)))]
    assert 30 < len(kept) < 70
    stream = io.StringIO()
    assert len(list(wds.info(n=1, stream=stream)(iter(ds)))) == 5
    assert stream.getvalue().splitlines() == ["--- ", "__key__ 'k0'", "cls 0"]
    extra = {"k1": {"label": "one"}}
    got = list(wds.associate(extra)(iter(samples(2))))
    assert got == [{"__key__": "k0", "cls": 0}, {"__key__": "k1", "cls": 1, "label": "one"}]
    decoded = next(wds.xdecode(seg=lambda stream: stream.read().upper())(
        iter([{"__key__": "a", "x.seg": b"ab", "txt": b"hi"}])))
    assert decoded == {"__key__": "a", "x.seg": b"AB", "txt": "hi"}


def test_cached_replays_the_first_iteration():
    calls = []

    def source():
        calls.append(1)
        return iter(samples(3))

    cache = wds.Cached()
    ds = wds.DataPipeline(source, cache)
    assert [s["cls"] for s in ds] == [s["cls"] for s in ds] == [0, 1, 2]
    assert len(calls) == 2 and cache.cached is not None


def test_log_keys(tmp_path):
    log = str(tmp_path / "keys.log")
    ds = wds.FluidWrapper(samples(3)).log_keys(log)
    assert len(list(ds)) == 3
    with open(log) as f:
        assert f.read().splitlines() == ["0\t0\t0\tk0", "1\t0\t0\tk1", "2\t0\t0\tk2"]


def test_dumps_and_loads():
    array = np.arange(4, dtype=np.int16)
    assert np.array_equal(np.load(io.BytesIO(wds.numpy_dumps(array))), array)
    tensor = torch.arange(3)
    assert torch.equal(wds.torch_loads(wds.torch_dumps(tensor)), tensor)
    assert wds.pipe_cleaner("a.tar") == "a.tar"
    assert wds.shardspec("a-{0..1}.tar").urls == ["a-0.tar", "a-1.tar"]
    with pytest.raises(wds.utils.ObsoleteException):  # a MultiShardSample spec, as the reference
        wds.shardspec("missing-spec.yaml")


def test_lru_cleanup_removes_the_oldest_files(tmp_path):
    for i, name in enumerate(["old", "mid", "new"]):
        path = tmp_path / name
        path.write_bytes(b"x" * 100)
        os.utime(path, (time.time() - 100 + i, time.time() - 100 + i))
    cleanup = wds.LRUCleanup(str(tmp_path), cache_size=250, keyfn=os.path.getmtime, interval=0)
    cleanup.cleanup()
    assert sorted(os.listdir(tmp_path)) == ["mid", "new"]


def test_pytorch_worker_info_reads_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("WORKER", "1")
    monkeypatch.setenv("NUM_WORKERS", "3")
    assert wds.pytorch_worker_info() == (2, 4, 1, 3)
    assert wds.pytorch_worker_seed() == 2001
    monkeypatch.setenv("WORLD_SIZE", "x")
    with pytest.raises(ValueError, match='environment variable WORLD_SIZE="x" is not an integer'):
        wds.pytorch_worker_info()
