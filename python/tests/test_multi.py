"""multi.MultiLoader: a dataset iterated in worker processes without torch, each
sample once, with a worker's failure or death raised in the consumer instead
of a wait that never ends."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import webdataset_cpp as wds
from webdataset_cpp.multi import MultiLoader
from conftest import write_shards, write_tar


@pytest.fixture(scope="module")
def four_shards(tmp_path_factory):
    directory = tmp_path_factory.mktemp("multi")
    write_shards(directory, 4, [5, 7, 3, 6], jpeg=False)
    return os.path.join(directory, "shard-{000000..000003}.tar")


def keys(samples):
    return sorted(s["__key__"] for s in samples)


def test_the_workers_share_out_the_shards_and_each_sample_comes_once(four_shards):
    dataset = wds.WebDataset(four_shards, shardshuffle=False)
    every = keys(dataset)
    assert len(every) == 21
    loader = MultiLoader(dataset, workers=3)
    assert keys(loader) == every
    assert keys(loader) == every  # each iteration runs new workers
    assert loader.pids == []  # stopped and joined


def test_it_runs_without_torch(four_shards):
    code = f"""
        import sys
        sys.modules["torch"] = None  # "import torch" fails
        import webdataset_cpp as wds
        from webdataset_cpp.multi import MultiLoader
        loader = MultiLoader(wds.WebDataset({four_shards!r}, shardshuffle=False), workers=2)
        print(len(list(loader)))
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["21"]


class Failing:
    """Worker 1 raises after its first sample; worker 0 yields its three."""

    def __iter__(self):
        worker = int(os.environ["WORKER"])
        for i in range(3):
            if worker == 1 and i == 1:
                raise KeyError(f"no sample {i}")
            yield {"worker": worker, "i": i}


class Dying:
    """Worker 1 exits (as a crash would) after its first sample."""

    def __iter__(self):
        worker = int(os.environ["WORKER"])
        for i in range(3):
            if worker == 1 and i == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            yield {"worker": worker, "i": i}


def test_a_workers_exception_is_raised_in_the_consumer_with_its_traceback():
    loader = MultiLoader(Failing(), workers=2)
    with pytest.raises(KeyError, match="no sample 1") as raised:
        list(loader)
    note = "\n".join(raised.value.__notes__)
    assert note.startswith("in MultiLoader worker 1:\nTraceback")
    assert "raise KeyError" in note
    assert loader.pids == []


def test_a_worker_that_dies_is_an_error_naming_it():
    loader = MultiLoader(Dying(), workers=2)
    with pytest.raises(RuntimeError, match=r"^MultiLoader: worker 1 ended before its last sample "
                                           r"\(exit code -9\)$"):
        list(loader)


def test_a_corrupt_shard_fails_as_it_does_without_workers(tmp_path):
    path = write_tar(tmp_path / "bad.tar", [("a.cls", b"1"), ("b.cls", b"2")])
    with open(path, "r+b") as f:
        f.truncate(700)  # inside b.cls's data
    dataset = wds.WebDataset(str(path), shardshuffle=False)
    with pytest.raises(Exception) as alone:
        list(dataset)
    with pytest.raises(type(alone.value)) as raised:
        list(MultiLoader(dataset, workers=1))
    assert str(raised.value) == str(alone.value)


def test_leaving_the_loop_early_stops_the_workers(four_shards):
    loader = MultiLoader(wds.WebDataset(four_shards, shardshuffle=False), workers=2)
    it = iter(loader)
    next(it)
    pids = list(loader.pids)
    it.close()
    assert loader.pids == []
    assert all(p is None or not p.is_alive() for p in pids)
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        MultiLoader([], workers=0)
