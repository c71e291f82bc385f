"""Equal steps on every rank: epoch plans from .idx sidecars, an all-reduce,
and torchrun jobs with 3 ranks on 7 uneven shards.

The shards have sidecars, so WebDataset's default split shares out samples;
the tests of shard-granular behaviour (the reference's) ask for
split="shards"."""

import json
import multiprocessing
import os
import queue
import socket
import subprocess
import sys
import types

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
                                 seed=11, split="shards").batched(batch, partial=False))
            ds.set_epoch(epoch)
            out[rank, worker] = [len(b["__key__"]) for b in ds]
    for name in ("RANK", "WORLD_SIZE", "WORKER", "NUM_WORKERS"):
        monkeypatch.delenv(name)
    return out


def test_plans_match_what_the_workers_read(uneven, monkeypatch):
    ds = wds.WebDataset(uneven, shardshuffle=100, nodesplitter=wds.split_by_node, seed=11,
                        split="shards").decode().to_tuple("cls").batched(2, partial=False)
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
    with pytest.raises(ValueError, match="policy must be 'drop', 'wrap' or 'pad', got 'even'"):
        wds.agreed_steps(ds, policy="even")
    # "pad": this rank's natural batches; "wrap": those covering its pass round-robin.
    plan = wds.plan_epoch(ds, num_workers=2)
    assert plan.local_steps("pad") == sum(w.batches for w in plan.workers)
    assert plan.local_steps("wrap") == plan.batches_covering_pass()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torchrun(pattern, tmp_path, split, epochs=2, policy="drop"):
    """The reports of ddp_equal_steps.py's 3 ranks."""
    script = os.path.join(os.path.dirname(__file__), "ddp_equal_steps.py")
    torchrun(3, tmp_path / "logs", [script, pattern, str(tmp_path), str(epochs), split, policy])
    return [json.load(open(tmp_path / f"rank{r}.json")) for r in range(3)]


PORT_TAKEN = "The server socket has failed to listen on any local network address"


def torchrun(ranks, log_dir, script_and_args, timeout=120, tries=3):
    """Runs a script under torchrun with `ranks` ranks on this host; fails
    with its output when it fails or runs past `timeout` seconds (a rank
    still running after 50 s has printed its threads' stacks into that
    output). The master port is a free one; when another process takes it
    before torchrun's store binds it (the agent then fails at once, before
    any rank starts), the job runs again on another, `tries` times in all."""
    for attempt in range(tries):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
               "--nproc_per_node", str(ranks), "--master_addr", "127.0.0.1", "--master_port",
               str(free_port()), "--log_dir", str(log_dir), *script_and_args]
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            err = e.stderr or b""
            err = err.decode(errors="replace") if isinstance(err, bytes) else err
            raise AssertionError(f"torchrun ran past {timeout} s:\n{err[-8000:]}") from None
        if result.returncode != 0 and PORT_TAKEN in result.stderr and attempt + 1 < tries:
            continue
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return


def test_torchrun_runs_again_on_another_port_when_its_port_was_taken(uneven, tmp_path,
                                                                     monkeypatch):
    script = os.path.join(os.path.dirname(__file__), "ddp_equal_steps.py")
    job = [script, uneven, str(tmp_path), "1", "shards"]
    really_free_port = free_port
    picked = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        # The first port picked is taken; the second is free.
        monkeypatch.setattr(sys.modules[__name__], "free_port", lambda: picked.append(1) or (
            taken.getsockname()[1] if len(picked) == 1 else really_free_port()))
        torchrun(2, tmp_path / "logs", job)
        assert len(picked) == 2
        assert [json.load(open(tmp_path / f"rank{r}.json"))["world_size"]
                for r in range(2)] == [2, 2]
        # Every port picked is taken: three tries, then the bind error.
        monkeypatch.setattr(sys.modules[__name__], "free_port",
                            lambda: picked.append(1) or taken.getsockname()[1])
        with pytest.raises(AssertionError, match=PORT_TAKEN):
            torchrun(2, tmp_path / "logs", job)
        assert len(picked) == 5


def test_torchrun_three_ranks_run_equal_steps(uneven, tmp_path):
    reports = run_torchrun(uneven, tmp_path, "shards")
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


def sample_split_keys(pattern, rank, world_size, worker, workers, monkeypatch, epoch=1, **kw):
    for name, value in (("RANK", rank), ("WORLD_SIZE", world_size), ("WORKER", worker),
                        ("NUM_WORKERS", workers)):
        monkeypatch.setenv(name, str(value))
    ds = wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node, seed=11,
                        split="samples", **kw)
    ds.set_epoch(epoch)
    return [s["__key__"] for s in ds]


def test_torchrun_sample_split_reads_each_sample_once(uneven, tmp_path, monkeypatch):
    """The default split of shards with sidecars shares out samples: the 3 ranks hold 16, 17
    and 17 of the 50 samples, run equal steps, and read no sample twice; left out are only
    what does not fill a worker's last batch (here one sample on two workers)."""
    from webdataset_cpp._plan import worker_share

    reports = run_torchrun(uneven, tmp_path, "default")
    for epoch in range(2):
        runs = [r["epochs"][epoch] for r in reports]
        steps = {run["steps"] for run in runs}
        assert len(steps) == 1 and all(run["ran"] == run["steps"] for run in runs)
        steps = steps.pop()
        assert [run["samples"] for run in runs] == [16, 17, 17]
        assert [run["worker_samples"] for run in runs] == [[8, 8], [8, 9], [8, 9]]
        keys = [k for run in runs for k in run["keys"]]
        assert len(keys) == len(set(keys))
        # Each worker's slice, read in this process: the ranks saw exactly the first
        # ceil((steps - w) / 2) batches of every worker w's slice.
        expected, left_out = set(), []
        for rank in range(3):
            for worker in range(2):
                mine = sample_split_keys(uneven, rank, 3, worker, 2, monkeypatch, epoch=epoch)
                n = 2 * worker_share(steps, worker, 2)
                expected |= set(mine[:n])
                left_out += mine[n:]
        assert set(keys) == expected
        assert len(keys) == 48 and len(left_out) == 2
        assert set(keys) | set(left_out) == {
            k for r in range(3) for w in range(2)
            for k in sample_split_keys(uneven, r, 3, w, 2, monkeypatch, epoch=epoch)}
    assert reports[0]["epochs"][0]["keys"] != reports[0]["epochs"][1]["keys"]


@pytest.mark.parametrize("split", ["shards", "default"])
def test_torchrun_padded_evaluation_reads_every_sample_once_with_equal_steps(uneven, tmp_path,
                                                                             split):
    """policy="pad": 3 ranks run the largest rank's natural batches, each step an all-reduce;
    the smaller ranks pad after their last batch, and the real batches hold each of the 50
    samples exactly once, partial batches included."""
    reports = run_torchrun(uneven, tmp_path, split, epochs=2, policy="pad")
    every = sorted(s["__key__"] for s in wds.WebDataset(uneven, shardshuffle=False))
    assert len(every) == len(set(every)) == 50
    padded_somewhere = False
    for epoch in range(2):
        runs = [r["epochs"][epoch] for r in reports]
        steps = {run["steps"] for run in runs}
        assert len(steps) == 1
        steps = steps.pop()
        assert steps == max(run["natural"] for run in runs)
        for run in runs:
            assert run["ran"] == steps
            # Its own batches, then padding to the end.
            assert run["padded"] == list(range(run["natural"], steps))
            assert run["reduced"] == 50  # every step's all-reduce counted real samples only
        keys = [k for run in runs for k in run["keys"]]
        assert sorted(keys) == every
        padded_somewhere |= any(run["padded"] for run in runs)
    if split == "shards":
        assert padded_somewhere  # the shards are uneven


def agree_with_errors(tmp_path, counts, split, policy):
    """The reports of ddp_agree_errors.py's 3 ranks over shards of `counts`."""
    directory = tmp_path / "shards"
    paths = write_shards(directory, len(counts), counts, jpeg=False)
    for p in paths:
        wds.write_index(p)
    pattern = os.path.join(directory, f"shard-{{000000..{len(counts) - 1:06d}}}.tar")
    script = os.path.join(os.path.dirname(__file__), "ddp_agree_errors.py")
    torchrun(3, tmp_path / "logs", [script, pattern, str(tmp_path), split, policy])
    return [json.load(open(tmp_path / f"rank{r}.json")) for r in range(3)]


def test_torchrun_a_rank_that_cannot_plan_fails_agreed_steps_on_every_rank(tmp_path):
    """2 shards over 3 ranks, split by shards: rank 2 has none. It raises its own error, the
    others one naming it, at once instead of waiting in the all-gather."""
    reports = agree_with_errors(tmp_path, [4, 6], "shards", "drop")
    assert "rank 2" in reports[2]["error0"] and "agreed_steps" not in reports[2]["error0"]
    for r in (0, 1):
        assert reports[r]["error0"] == ("agreed_steps: rank(s) [2] could not plan their epoch "
                                        "(their own error says why), so the ranks cannot agree "
                                        "on its steps")


def test_torchrun_pad_refuses_a_rank_without_a_batch_on_every_rank(tmp_path):
    """3 shards of 5, 0 and 4 samples, one per rank: the rank holding the empty one has no batch
    to pad with, which every rank says, unless allow_empty (then the steps: 3)."""
    reports = agree_with_errors(tmp_path, [5, 0, 4], "shards", "pad")
    errors = {report["error0"] for report in reports}
    assert errors == {"agreed_steps: rank(s) [1] have no batch this epoch, so padded_epoch would "
                      "have nothing to pad their steps with: give every rank data "
                      "(split='samples', more shards or fewer ranks), or pass allow_empty=True "
                      "and padded_epoch(..., fill=<a batch>)"}
    assert [report["steps1"] for report in reports] == [3, 3, 3]


def test_padded_epoch_yields_the_batches_then_pads_with_the_last(uneven):
    import torch.utils.data
    assert list(wds.padded_epoch([1, 2, 3], 5)) == [(1, True), (2, True), (3, True), (3, False),
                                                    (3, False)]
    steps = wds.padded_epoch(iter([]), 2, fill="x")
    assert len(steps) == 2
    assert list(steps) == [("x", False), ("x", False)]
    assert list(wds.padded_epoch([], 0)) == []
    exact = wds.padded_epoch([1, 2], 2)
    assert list(exact) == list(exact) == [(1, True), (2, True)]  # each iter() runs an epoch
    got = []
    with pytest.raises(ValueError, match=r"^padded_epoch: this rank's loader yielded more than "
                                         r"the 2 agreed steps, so the plans the ranks agreed with "
                                         r"do not describe its epoch \(other counts, workers or "
                                         r"batching\?\); the batches after step 2 were not "
                                         r"yielded$"):
        for item in wds.padded_epoch([1, 2, 3], 2):
            got.append(item)
    assert got == [(1, True), (2, True)]
    with pytest.raises(ValueError, match=r"^padded_epoch: this rank's loader yielded no batch to "
                                         r"pad its 3 steps with: pass fill=<a batch of the usual "
                                         r"shape>$"):
        list(wds.padded_epoch([], 3))
    with pytest.raises(ValueError, match=r"^padded_epoch: steps -1 < 0$"):
        wds.padded_epoch([1], -1)
    dataset = wds.WebDataset(uneven, shardshuffle=False).batched(4)
    assert len(wds.padded_epoch(wds.Loader(dataset), 3)) == 3
    assert len(wds.padded_epoch(torch.utils.data.DataLoader(dataset, batch_size=None), 3)) == 3
    assert len(wds.padded_epoch(wds.WebLoader(dataset, batch_size=None), 3)) == 3
    # Epochs sized beyond the data, however the loader wraps the dataset.
    sized = {
        "with_epoch": lambda: wds.WebDataset(uneven, shardshuffle=False).batched(4).with_epoch(3),
        "repeat": lambda: wds.WebDataset(uneven, shardshuffle=False).batched(4).repeat(2),
        "repeatedly": lambda: wds.extradatasets.repeatedly(dataset, nepochs=2),
    }
    for name, make in sized.items():
        for wrap in (lambda d: d, wds.Loader, lambda d: torch.utils.data.DataLoader(d, None),
                     lambda d: wds.WebLoader(d, batch_size=None)):
            if name != "with_epoch" and wrap is wds.Loader:
                continue  # a wds.Loader refuses these itself
            with pytest.raises(ValueError, match=rf"^padded_epoch: the dataset has {name}"
                                                 r"\(\.\.\.\), so its workers would repeat "
                                                 r"samples from another pass instead of padding"):
                wds.padded_epoch(wrap(make()), 3)
    with pytest.raises(ValueError, match=r"^padded_epoch: the dataset has with_epoch"):
        wds.padded_epoch(torch.utils.data.DataLoader(
            wds.extradatasets.with_epoch(dataset, 3), batch_size=None), 3)
    with pytest.raises(ValueError, match=r"^padded_epoch: the dataset has with_epoch"):
        wds.padded_epoch(wds.WebLoader(dataset, batch_size=None).with_epoch(3), 3)


def test_padded_epoch_of_a_loader_reads_the_natural_epoch_once(uneven):
    """One rank of one: a wds.Loader's natural epoch through padded_epoch, padded by 2."""
    dataset = wds.WebDataset(uneven, shardshuffle=False).batched(4)
    steps = wds.agreed_steps(dataset, num_workers=2, policy="pad")
    ran = list(wds.padded_epoch(wds.Loader(dataset, workers=2), steps + 2))
    assert [real for _, real in ran] == [True] * steps + [False, False]
    assert ran[-1][0] is ran[-2][0] is ran[steps - 1][0]
    keys = [k for batch, real in ran if real for k in batch["__key__"]]
    assert len(keys) == len(set(keys)) == sum(COUNTS)


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
    with pytest.raises(ValueError, match="split must be None, 'shards' or 'samples', not 'rows'"):
        wds.WebDataset(uneven, shardshuffle=False, split="rows")
    with pytest.raises(ValueError, match="split='samples' needs a native handler"):
        sample_split_keys(uneven, 0, 1, 0, 1, monkeypatch, handler=lambda e: True)


# ------------------------------------------------ rank sources and Gloo groups


def _gloo_rank(rank, world_size, pattern, epoch):
    """One rank of a Gloo group made from a FileStore (no launcher). The
    environment claims another placement: torch.distributed must win, in the
    DataLoader's workers too. They come from a forkserver, so they have no
    torch.distributed of their own: the dataset brings them its rank's. (Not
    forks of the rank: a fork of a process whose Gloo threads run can leave
    the child stuck on a lock one of them held.)"""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(world_size - 1 - rank), str(3 - world_size)
    result = {"node_info": wds.utils.node_info(),
              "split": list(wds.split_by_node(iter(range(10))))}
    try:
        result["single_node_only"] = len(list(wds.WebDataset(pattern, shardshuffle=False)))
    except ValueError as e:
        result["single_node_only"] = str(e)
    dataset = (wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node,
                              seed=11, split="shards").decode().to_tuple("cls", "__key__")
               .batched(2, partial=False))
    dataset.set_epoch(epoch)
    for policy in ("drop", "wrap"):
        steps = wds.agreed_steps(dataset, num_workers=2, policy=policy)
        keys, ran = [], 0
        dataset.set_epoch(epoch)
        loader = DataLoader(dataset.with_epoch(steps, across_workers=True), batch_size=None,
                            num_workers=2, multiprocessing_context="forkserver")
        for _, batch_keys in loader:
            step = torch.ones(1)
            dist.all_reduce(step)  # a rank that ran out early would hang the others
            keys += batch_keys
            ran += 1
        result[policy] = (steps, ran, keys)
    return result


RANK_TIMEOUT_S = 100  # a rank still running then prints its threads' stacks and exits


def _rank_main(target, rank, world_size, store_path, args, out):
    """A forked rank: joins a Gloo group made from a FileStore (no launcher),
    sends (rank, True, target(rank, world_size, *args)), or (rank, False, the
    traceback), on `out`, and exits.

    The message is flushed before anything else can block. The ranks then
    meet at a barrier, so that none closes its connections before every
    collective is done, and leave by os._exit, without destroy_process_group:
    it is reported to hang now and then (pytorch/pytorch#75097), and Gloo's
    teardown holds the GIL meanwhile (pytorch/pytorch#154976), which would
    keep a queued message from being sent. The process's exit closes the
    connections. (One CI run lost a rank's result this way or otherwise;
    it has not been reproduced.)"""
    import faulthandler
    import traceback

    import torch.distributed as dist

    # Into the captured stderr. (Not in the rank's DataLoader workers: a forked child that arms
    # the timer waits forever for the parent's watchdog thread, which it does not have.)
    faulthandler.dump_traceback_later(RANK_TIMEOUT_S, exit=True)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world_size), rank=rank,
                            world_size=world_size)
    try:
        message = (rank, True, target(rank, world_size, *args))
    except Exception:  # noqa: BLE001 - the parent fails the test with it
        message = (rank, False, traceback.format_exc())
    out.put(message)
    out.close()
    out.join_thread()
    if message[1]:
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if message[1] else 1)


def run_ranks(target, world_size, tmp_path, *args):
    """Runs target(rank, world_size, *args) in a forked process per rank, the
    ranks a Gloo group over a FileStore; returns what each returned. A rank
    that raises fails the test with its traceback; one that hangs, with its
    stacks (printed into the test's captured stderr)."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    store = str(tmp_path / f"store-{world_size}")
    procs = [ctx.Process(target=_rank_main, args=(target, r, world_size, store, args, out))
             for r in range(world_size)]
    for p in procs:
        p.start()
    try:
        results = {}
        for _ in procs:
            try:
                rank, ok, value = out.get(timeout=RANK_TIMEOUT_S + 20)
            except queue.Empty:
                missing = sorted(set(range(world_size)) - set(results))
                raise AssertionError(f"ranks {missing} sent nothing in {RANK_TIMEOUT_S + 20} s "
                                     "(their stacks are in the captured stderr)") from None
            assert ok, f"rank {rank} failed:\n{value}"
            results[rank] = value
        for rank, p in enumerate(procs):
            p.join(60)
            assert p.exitcode == 0, f"rank {rank} exited with {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world_size)]


def run_gloo_group(world_size, tmp_path, pattern, epoch=0):
    return run_ranks(_gloo_rank, world_size, tmp_path, pattern, epoch)


def uneven_epoch(uneven):
    """An epoch in which the two ranks' step counts differ: (epoch, {policy:
    [rank 0's local steps, rank 1's]})."""
    ds = wds.WebDataset(uneven, shardshuffle=100, nodesplitter=wds.split_by_node,
                        seed=11, split="shards").batched(2, partial=False)
    for epoch in range(20):
        plans = [wds.plan_epoch(ds, num_workers=2, epoch=epoch, rank=r, world_size=2)
                 for r in range(2)]
        steps = {policy: [p.local_steps(policy) for p in plans] for policy in ("drop", "wrap")}
        if steps["drop"][0] != steps["drop"][1] and steps["wrap"][0] != steps["wrap"][1]:
            return epoch, steps
    raise AssertionError("no uneven epoch")


def natural_keys(pattern, rank, epoch, monkeypatch):
    """The keys rank `rank` of 2 reads in `epoch` with 2 workers, left alone."""
    keys = set()
    for worker in range(2):
        for name, value in (("RANK", rank), ("WORLD_SIZE", 2), ("WORKER", worker),
                            ("NUM_WORKERS", 2)):
            monkeypatch.setenv(name, str(value))
        ds = (wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node,
                             seed=11, split="shards").batched(2, partial=False))
        ds.set_epoch(epoch)
        keys |= {k for b in ds for k in b["__key__"]}
    for name in ("RANK", "WORLD_SIZE", "WORKER", "NUM_WORKERS"):
        monkeypatch.delenv(name)
    return keys


def test_a_gloo_group_wins_over_the_environment_and_agrees_on_steps(uneven, tmp_path,
                                                                   monkeypatch):
    epoch, natural = uneven_epoch(uneven)
    ranks = run_gloo_group(2, tmp_path, uneven, epoch)
    own = [natural_keys(uneven, r, epoch, monkeypatch) for r in range(2)]
    assert [r["node_info"] for r in ranks] == [(0, 2), (1, 2)]  # not the environment's
    assert [r["split"] for r in ranks] == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    assert [r["single_node_only"] for r in ranks] == [
        "you need to add an explicit nodesplitter to your input pipeline for multi-node "
        f"training (rank {r} of 2): nodesplitter=wds.split_by_node shares the shards out among "
        "the ranks; nodesplitter=None has every rank read every shard (with resampled=True, or "
        "a shard list of its own)" for r in range(2)]
    drop = [r["drop"] for r in ranks]
    wrap = [r["wrap"] for r in ranks]
    # drop: every rank runs the smaller count; no sample twice.
    low = min(natural["drop"])
    assert [(steps, ran) for steps, ran, _ in drop] == [(low, low)] * 2
    dropped = drop[0][2] + drop[1][2]
    assert len(dropped) == len(set(dropped))
    assert set(drop[0][2]) < own[0] or set(drop[1][2]) < own[1]  # some left out
    # wrap: every rank runs the larger count, the smaller rank repeating some
    # of its samples, so every sample of the epoch is seen.
    high = max(natural["wrap"])
    assert [(steps, ran) for steps, ran, _ in wrap] == [(high, high)] * 2
    short = natural["wrap"].index(min(natural["wrap"]))
    assert len(wrap[short][2]) > len(set(wrap[short][2]))
    assert set(wrap[0][2]) >= own[0] and set(wrap[1][2]) >= own[1]


def test_a_group_of_one_wins_over_an_environment_of_two(uneven, tmp_path):
    (rank,) = run_gloo_group(1, tmp_path, uneven)
    assert rank["node_info"] == (0, 1)
    assert rank["split"] == list(range(10))
    assert rank["single_node_only"] == sum(COUNTS)  # the environment said 2 ranks


def test_a_pickled_placement_counts_only_in_a_dataloader_worker_of_another_process(
        monkeypatch):
    """The rule behind the tests above, without a group: a dataset unpickled
    in a DataLoader worker brings its rank's placement; one pickled inside
    its own process, or used outside a worker, does not."""
    import torch.utils.data

    monkeypatch.setattr(wds.utils, "_pickled_placement", None)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    in_worker = []
    monkeypatch.setattr(torch.utils.data, "get_worker_info",
                        lambda: object() if in_worker else None)
    assert wds.utils.placement_to_pickle() is None  # no group here
    wds.utils.unpickled_placement((os.getpid(), 2, 3))  # pickled in this process
    in_worker.append(True)
    assert wds.utils.node_info() == (1, 4)
    wds.utils.unpickled_placement((os.getpid() + 1, 2, 3))  # in the parent rank
    assert wds.utils.node_info() == (2, 3)
    assert list(wds.split_by_node(iter(range(7)))) == [2, 5]
    in_worker.clear()
    assert wds.utils.node_info() == (1, 4)
    # A worker forked from the process that unpickled it is no part of that rank.
    in_worker.append(True)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if wds.utils.node_info() == (1, 4) else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_a_dataset_brings_its_ranks_placement_through_pickle_but_not_through_a_copy(
        uneven, monkeypatch):
    """What a DataLoader does with the dataset: pickle.dumps in the rank,
    pickle.loads in the worker (here: a placement pickled by another pid,
    rank 2 of 3). A copy made in one process (copy.copy, copy.deepcopy,
    pickle there and back) leaves the placement alone."""
    import copy
    import pickle

    import torch.utils.data

    monkeypatch.setattr(wds.utils, "_pickled_placement", None)
    worker = types.SimpleNamespace(id=0, num_workers=1)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: worker)
    dataset = wds.WebDataset(uneven, shardshuffle=False, nodesplitter=wds.split_by_node,
                             split="shards")
    monkeypatch.setattr(wds.pipeline, "placement_to_pickle", lambda: (os.getpid(), 1, 2))
    for copied in (copy.copy(dataset), copy.deepcopy(dataset),
                   pickle.loads(pickle.dumps(dataset))):
        assert wds.utils.node_info() == (0, 1)
        assert len(list(copied)) == sum(COUNTS)
    mine = [uneven.replace("{000000..000006}", f"{i:06d}") for i in (2, 5)]
    want = [s["__key__"] for s in wds.WebDataset(mine, shardshuffle=False)]
    assert len(want) == COUNTS[2] + COUNTS[5]
    monkeypatch.setattr(wds.pipeline, "placement_to_pickle", lambda: (os.getpid() + 1, 2, 3))
    in_worker = pickle.loads(pickle.dumps(dataset))
    assert wds.utils.node_info() == (2, 3)
    assert [s["__key__"] for s in in_worker] == want


def _split_rank(rank, world_size, pattern):
    """One rank of a Gloo group whose ranks ask for the split their own way
    (as ranks do whose split=None saw different sidecars)."""
    split = "samples" if rank != 1 else "shards"
    dataset = wds.WebDataset(pattern, shardshuffle=100, nodesplitter=wds.split_by_node,
                             seed=11, split=split).batched(2, partial=False)
    try:
        return wds.agreed_steps(dataset, num_workers=2)
    except ValueError as e:
        return str(e)


def test_ranks_that_split_differently_fail_agreed_steps_on_every_rank(uneven, tmp_path):
    results = dict(enumerate(run_ranks(_split_rank, 3, tmp_path, uneven)))
    assert results == {r: (
        "agreed_steps: the ranks do not split the data alike: ranks [0, 2] share out samples, "
        "ranks [1] whole shards, so their shares would overlap or leave samples out (a dataset "
        "made with split=None chooses by the .idx sidecars and dataset_index its rank sees: "
        "make them visible to every rank, or pass split='samples' or split='shards')")
        for r in range(3)}


def _stale_index_rank(rank, world_size, pattern, indexes):
    """One rank of a Gloo group reading its own copy of the dataset index."""
    urls = wds.shardlists.expand_urls(pattern)
    results = []
    cases = ((urls, indexes[0], wds.split_by_node), (urls, indexes[rank], wds.split_by_node),
             (urls[:-1] if rank == 2 else urls, None, wds.split_by_node),
             (urls[rank::world_size], None, None))  # a list of its own: may differ
    for listed, index, nodesplitter in cases:
        dataset = wds.WebDataset(listed, shardshuffle=100, nodesplitter=nodesplitter,
                                 seed=11, dataset_index=index,
                                 split=None if index else "shards").batched(2)
        try:
            results.append(wds.agreed_steps(dataset, num_workers=2))
        except ValueError as e:
            results.append(str(e))
    return results


def test_ranks_that_see_other_counts_or_lists_fail_agreed_steps_on_every_rank(uneven, tmp_path):
    """Rank 1 reads a stale copy of the dataset index (one count differs),
    then rank 2 lists one shard fewer; ranks that each read a list of their
    own (no node split) agree on steps whatever their lists."""
    urls = wds.shardlists.expand_urls(uneven)
    indexes = []
    for copy, counts in enumerate((COUNTS, COUNTS[:3] + [COUNTS[3] + 1] + COUNTS[4:])):
        path = tmp_path / f"index-{copy}.json"
        path.write_text(json.dumps({"__kind__": "wids-shard-index-v1", "wids_version": 1,
                                    "shardlist": [{"url": u, "nsamples": n}
                                                  for u, n in zip(urls, counts)]}))
        indexes.append(str(path))
    indexes.append(indexes[0])
    results = dict(enumerate(run_ranks(_stale_index_rank, 3, tmp_path, uneven, indexes)))
    total = sum(COUNTS)
    advice = ("so their shares would overlap or leave samples out: give every rank the same list "
              "and the same dataset index (a stale copy of the index, or a directory listed while "
              "shards are written, differ)")
    alike = wds.WebDataset(uneven, shardshuffle=100, nodesplitter=wds.split_by_node, seed=11,
                           dataset_index=indexes[0]).batched(2)
    agreed = min(wds.plan_epoch(alike, num_workers=2, rank=r, world_size=3).local_steps("drop")
                 for r in range(3))
    own = min(wds.plan_epoch(wds.WebDataset(urls[r::3], shardshuffle=100, nodesplitter=None,
                                            seed=11, split="shards").batched(2),
                             num_workers=2, rank=r, world_size=3).local_steps("drop")
              for r in range(3))
    assert results == {r: [
        agreed,
        f"agreed_steps: the ranks do not see the same shard list and counts (ranks [0, 2] "
        f"{len(COUNTS)} shards, {total} samples; ranks [1] {len(COUNTS)} shards, {total + 1} "
        f"samples), " + advice,
        f"agreed_steps: the ranks do not see the same shard list and counts (ranks [0, 1] "
        f"{len(COUNTS)} shards; ranks [2] {len(COUNTS) - 1} shards), " + advice,
        own]
        for r in range(3)}


def test_slurm_variables_count_when_torchrun_sets_none(monkeypatch):
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "2")
    monkeypatch.setenv("SLURM_NTASKS", "3")
    assert wds.utils.node_info() == (2, 3)
    assert list(wds.split_by_node(iter(range(8)))) == [2, 5]
    with pytest.raises(ValueError, match="explicit nodesplitter"):
        list(wds.single_node_only(iter(range(8))))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert wds.utils.node_info() == (1, 4)  # torchrun's variables come first
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("SLURM_NTASKS")
    with pytest.raises(ValueError, match="SLURM_NTASKS"):
        wds.utils.node_info()


def test_the_all_reduce_runs_where_the_backend_reduces(monkeypatch):
    import torch
    import torch.distributed as dist

    from webdataset_cpp import distributed

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    for backend, device in [("nccl", torch.device("cuda", 3)), ("gloo", torch.device("cpu")),
                            ("cpu:gloo,cuda:nccl", torch.device("cpu")),
                            ("mpi", torch.device("cpu"))]:
        monkeypatch.setattr(dist, "get_backend", lambda group=None, b=backend: b)
        assert distributed.reduce_device() == device
    # agreed_steps reduces a tensor made on that device (here: a stand-in).
    # agreed_steps gathers (steps, split, list digest, shards, samples) of
    # every rank on that device (here: a stand-in for a group of 3) and takes
    # the MIN or MAX. A digest of 2^63 or more travels as its two's complement.
    calls = []

    def all_gather(tensors, tensor, group):
        calls.append((tensor.device, tensor.tolist(), group))
        for steps, t in zip([5, 9, 7], tensors):
            t.copy_(torch.tensor([steps, 0, -2, 1, 0]))

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 3)
    monkeypatch.setattr(dist, "all_gather", all_gather)
    monkeypatch.setattr(distributed, "reduce_device",
                        lambda group=None: calls.append(("device for", group)) or
                        torch.device("cpu"))
    ds = wds.WebDataset(os.devnull, shardshuffle=False).batched(2)
    monkeypatch.setattr(distributed, "plan_epoch", lambda *a, **kw: type(
        "Plan", (), {"local_steps": lambda self, policy: 7, "list_digest": (1 << 64) - 2,
                     "dataset_shards": 1, "dataset_samples": 0})())
    assert wds.agreed_steps(ds, policy="wrap", group="g") == 9
    assert wds.agreed_steps(ds, policy="drop", group="g") == 5
    assert calls == [("device for", "g"), (torch.device("cpu"), [7, 0, -2, 1, 0], "g")] * 2
