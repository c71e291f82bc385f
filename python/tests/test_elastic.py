"""Elastic resume through the Python Loader: a job state gathered from every
rank's state_dict() resumes the epoch on another number of ranks and workers,
every sample once (but what the resumed equalization leaves out)."""

import json
import os
import shutil

import pytest

import webdataset_cpp as wds
from conftest import write_shards
from test_distributed import torchrun

SIZES = [37, 5, 61, 23, 44, 9, 30, 54]
BATCH = 4


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    directory = tmp_path_factory.mktemp("elastic")
    paths = write_shards(directory, len(SIZES), SIZES, jpeg=False)
    assert [wds.write_index(p) for p in paths] == SIZES
    return os.path.join(directory, "shard-{000000..000007}.tar")


def all_keys():
    return {f"s{s}_{i:03d}" for s, n in enumerate(SIZES) for i in range(n)}


def dataset(pattern):
    return (wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node, seed=11)
            .shuffle(16).decode().to_tuple("__key__", "cls").batched(BATCH, partial=False))


def run(pattern, ranks, workers, monkeypatch, take=None, resume=None):
    """Each rank's Loader (RANK/WORLD_SIZE set as a launcher would) runs the
    epoch, equalized, or the rest of `resume`'s, or its first `take` steps;
    returns (keys, the loaders, their state_dicts after `take` steps, the
    samples the plans leave out)."""
    plans = [wds.plan_epoch(dataset(pattern), num_workers=workers, rank=r, world_size=ranks,
                            resume=resume) for r in range(ranks)]
    steps = min(p.local_steps("drop") for p in plans)
    left_out = sum(p.samples - p.samples_in_first(steps) for p in plans)
    keys, loaders, states = [], [], []
    for r in range(ranks):
        monkeypatch.setenv("RANK", str(r))
        monkeypatch.setenv("WORLD_SIZE", str(ranks))
        loader = wds.Loader(dataset(pattern).with_epoch(steps, across_workers=True),
                            workers=workers)
        if resume is not None:
            loader.load_state_dict(resume)
        batches = 0
        for batch_keys, _ in loader:
            keys += batch_keys
            batches += 1
            if batches == take:
                states.append(loader.state_dict())  # inside the epoch: leaving it ends it
                break
        assert batches == (take or steps), f"rank {r} ran {batches} of {steps} steps"
        loaders.append(loader)
    return keys, loaders, states, left_out


@pytest.mark.parametrize("ranks,workers", [(2, 1), (4, 3)])
def test_three_ranks_of_two_workers_resume_on_another_layout(shards, monkeypatch, ranks,
                                                             workers):
    head, loaders, states, _ = run(shards, 3, 2, monkeypatch, take=5)
    job = loaders[2].job_state_dict(states)
    assert job == loaders[0].job_state_dict(list(reversed(states)))
    tail, _, _, left_out = run(shards, ranks, workers, monkeypatch, resume=job)
    trained = head + tail
    assert len(trained) == len(set(trained)), "a sample was trained twice"
    assert set(trained) <= all_keys()
    assert len(trained) == len(all_keys()) - left_out
    assert left_out < ranks * workers * BATCH  # drop_last: under a batch per worker
    again, _, _, _ = run(shards, ranks, workers, monkeypatch, resume=job)
    assert again == tail  # resuming twice from one state: the same keys, in order


def test_job_states_say_what_they_cannot_do(shards, monkeypatch):
    _, loaders, states, _ = run(shards, 3, 2, monkeypatch, take=2)
    with pytest.raises(ValueError, match="2 rank states for a world of 3"):
        loaders[0].job_state_dict(states[:2])
    with pytest.raises(ValueError, match="not a webdataset_cpp Loader state_dict"):
        loaders[0].job_state_dict(states[:2] + [{}])
    with pytest.raises(ValueError, match="not a job state dict"):
        wds.plan_epoch(dataset(shards), resume=states[0])
    job = loaders[0].job_state_dict(states)
    other = (wds.WebDataset(shards, shardshuffle=100, nodesplitter=wds.split_by_node, seed=12)
             .shuffle(16).decode().to_tuple("__key__", "cls").batched(BATCH, partial=False))
    with pytest.raises(ValueError, match="another recipe"):
        wds.plan_epoch(other, num_workers=1, rank=0, world_size=2, resume=job)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="another recipe"):
        wds.Loader(other.with_epoch(3, across_workers=True)).load_state_dict(job)


def test_torchrun_three_ranks_resume_on_two_and_on_four(shards, tmp_path):
    script = os.path.join(os.path.dirname(__file__), "elastic_resume.py")

    def run(ranks, phase, workers, out):
        torchrun(ranks, out / f"logs-{phase}-{ranks}", [script, shards, str(out), phase,
                                                        str(workers)])
        return [json.load(open(out / f"{phase}-{ranks}-rank{r}.json")) for r in range(ranks)]

    first = run(3, "first", 2, tmp_path)
    head = [k for report in first for k in report["keys"]]
    assert len(head) == 3 * 5 * BATCH
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(tmp_path / "job.json", copy / "job.json")
    for ranks, workers, out in ((2, 1, tmp_path), (4, 3, copy)):
        reports = run(ranks, "resume", workers, out)
        assert len({(r["steps"], r["ran"]) for r in reports}) == 1  # equal steps
        trained = head + [k for report in reports for k in report["keys"]]
        assert len(trained) == len(set(trained)), "a sample was trained twice"
        missing = len(all_keys()) - len(trained)
        assert 0 <= missing < ranks * workers * BATCH


def worker_run(pattern, ranks, workers, monkeypatch, rounds=None, resume=None):
    """The DataLoader path, each worker in turn in this process (RANK,
    WORLD_SIZE, WORKER, NUM_WORKERS set as a launcher and a DataLoader worker
    would see them): the dataset with with_epoch(steps, across_workers=True),
    and `resume` loaded first; with `rounds`, every worker stops after that
    many batches (a DataLoader taking batches round-robin stopped after
    rounds * workers). Returns (keys, worker states, samples left out)."""
    plans = [wds.plan_epoch(dataset(pattern), num_workers=workers, rank=r, world_size=ranks,
                            resume=resume) for r in range(ranks)]
    steps = min(p.local_steps("drop") for p in plans)
    left_out = sum(p.samples - p.samples_in_first(steps) for p in plans)
    keys, states = [], []
    for r in range(ranks):
        ran = 0
        for w in range(workers):
            for name, value in (("RANK", r), ("WORLD_SIZE", ranks), ("WORKER", w),
                                ("NUM_WORKERS", workers)):
                monkeypatch.setenv(name, str(value))
            ds = dataset(pattern)
            if resume is not None:
                ds.load_state_dict(resume)
            for batch_keys, _ in ds.with_epoch(steps, across_workers=True):
                keys += batch_keys
                ran += 1
                if rounds is not None and ran % rounds == 0 and ran // rounds == w + 1:
                    states.append(ds.state_dict())
                    break
        if rounds is None:
            assert ran == steps, f"rank {r} ran {ran} of {steps} steps"
    return keys, states, left_out


@pytest.mark.parametrize("ranks,workers", [(2, 1), (4, 3)])
def test_dataloader_worker_states_resume_on_another_layout(shards, monkeypatch, ranks, workers):
    head, states, _ = worker_run(shards, 3, 2, monkeypatch, rounds=3)
    assert len(states) == 6 and len(head) == 3 * 2 * 3 * BATCH
    job = dataset(shards).job_state_dict(states)
    # Without torch.distributed the "job" is this process, here every worker.
    assert wds.gather_state_dict(dataset(shards), worker_states=states) == job
    tail, _, left_out = worker_run(shards, ranks, workers, monkeypatch, resume=job)
    trained = head + tail
    assert len(trained) == len(set(trained)), "a sample was trained twice"
    assert len(trained) == len(all_keys()) - left_out
    assert left_out < ranks * workers * BATCH
    # The same job state resumes a wds.Loader alike (the same shares).
    loader_tail, _, _, _ = run(shards, ranks, workers, monkeypatch, resume=job)
    assert sorted(loader_tail) == sorted(tail)


def test_dataloader_job_states_say_what_is_wrong(shards, monkeypatch):
    _, states, _ = worker_run(shards, 3, 2, monkeypatch, rounds=2)
    with pytest.raises(ValueError, match="no state of rank 2 worker 1"):
        dataset(shards).job_state_dict(states[:-1])
    with pytest.raises(ValueError, match="rank 0 worker 0's state is there twice"):
        dataset(shards).job_state_dict(states + states[:1])
    other = (wds.WebDataset(shards, shardshuffle=100, nodesplitter=wds.split_by_node, seed=12)
             .shuffle(16).decode().to_tuple("__key__", "cls").batched(BATCH, partial=False))
    with pytest.raises(ValueError, match="another pipeline"):
        other.job_state_dict(states)
    job = dataset(shards).job_state_dict(states)
    with pytest.raises(ValueError, match="another recipe"):
        other.load_state_dict(job)


def test_a_real_dataloader_resumes_a_job_state(shards, monkeypatch):
    torch = pytest.importorskip("torch")
    head, states, _ = worker_run(shards, 3, 2, monkeypatch, rounds=3)
    job = dataset(shards).job_state_dict(states)
    emulated, _, _ = worker_run(shards, 1, 2, monkeypatch, resume=job)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    for name in ("WORKER", "NUM_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    steps = wds.agreed_steps(dataset(shards), num_workers=2, resume=job)
    ds = dataset(shards)
    ds.load_state_dict(job)  # before the workers are made: it travels with the dataset
    loader = torch.utils.data.DataLoader(ds.with_epoch(steps, across_workers=True),
                                         batch_size=None, num_workers=2)
    keys = [k for batch_keys, _ in loader for k in batch_keys]
    assert sorted(keys) == sorted(emulated)  # the DataLoader interleaves its workers
    assert not set(keys) & set(head)
