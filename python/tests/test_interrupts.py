"""Ctrl-C while native code waits: a stalled pipe: command or FIFO must not
delay KeyboardInterrupt, and nothing may be left behind (no thread, no
child process)."""

import os
import signal
import threading
import time
import warnings

import pytest

import webdataset_cpp as wds
from conftest import threads_at_rest, threads_settle_to


def children():
    """PIDs of this process's child processes (every thread's)."""
    out = set()
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            out |= {int(p) for p in f.read().split()}
    return out


def process_group_gone(pgid, within=10.0):
    """Whether process group `pgid` is empty within `within` seconds (its
    members may take a moment to die and be reaped by init)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


class SigintAfter:
    """Sends SIGINT to this process `delay` seconds from now (from a timer
    thread), and once `ready()` (if given) is true or 20 s have passed (a
    loaded machine may be slow to start a command), noting when, and which
    children existed just before."""

    def __init__(self, delay, ready=None):
        self.sent = None
        self.children = set()
        self.ready = ready
        self.timer = threading.Timer(delay, self._fire)
        self.timer.start()

    def _fire(self):
        deadline = time.monotonic() + 20
        while self.ready is not None and not self.ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.children = children()
        self.sent = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)


def stalled(shards, seconds=60):
    """A pipe: URL that says nothing for `seconds`, then gives a real shard."""
    return f"pipe:sleep {seconds} && cat {shards[0]}"


def assert_interrupted_promptly(run, expect_children=1):
    before_threads, before_children = threads_at_rest(), children()
    timer = SigintAfter(0.5, ready=lambda: len(children() - before_children) >= expect_children)
    with pytest.raises(KeyboardInterrupt):
        run()
    elapsed = time.monotonic() - timer.sent
    timer.timer.join()
    # Liveness with room for a loaded machine: milliseconds unloaded, and the
    # shortest stall here lasts 5 s.
    assert elapsed < 3.0, elapsed
    # The command was running (a shell, in its own process group) and is gone.
    started = timer.children - before_children
    assert len(started) == expect_children
    for pid in started:
        assert process_group_gone(pid)
    assert children() == before_children
    assert threads_settle_to(before_threads) == before_threads


def test_a_stalled_pipe_in_a_single_process_chain(shards):
    ds = wds.WebDataset(stalled(shards), shardshuffle=False).decode("rgb8").batched(4)
    assert_interrupted_promptly(lambda: list(ds))


def test_handlers_do_not_swallow_the_interrupt(shards):
    ds = wds.WebDataset([stalled(shards), shards[1]], shardshuffle=False,
                        handler=wds.warn_and_continue)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_interrupted_promptly(lambda: list(ds))
    assert caught == []  # the interrupted shard was not "skipped with a warning"


@pytest.mark.parametrize("counting", ["iteration", "plan_epoch", "count_samples"])
def test_a_stalled_pipe_while_counting(shards, counting):
    # A sample split counts every shard before the first sample: a stalled
    # count must be as interruptible as a stalled read. (A URL of its own:
    # counts are cached per process.)
    url = f"{stalled(shards, seconds=5)} && : {counting}"
    ds = wds.WebDataset([url, shards[1]], shardshuffle=False, split="samples")
    run = {"iteration": lambda: list(ds),
           "plan_epoch": lambda: wds.plan_epoch(ds),
           "count_samples": lambda: wds.count_samples(url)}[counting]
    assert_interrupted_promptly(run)


def test_a_stalled_pipe_in_the_native_loader(shards):
    ds = wds.WebDataset([stalled(shards), stalled(shards)], shardshuffle=False).batched(4)
    loader = wds.Loader(ds, workers=2)
    # Both workers are stalled; leaving the loop stops and joins them.
    assert_interrupted_promptly(lambda: list(loader), expect_children=2)
    assert not loader._core.running and loader.epoch == 1


def test_a_fifo_without_data(tmp_path):
    fifo = str(tmp_path / "shard.tar")
    os.mkfifo(fifo)
    keep_open = os.open(fifo, os.O_RDWR)  # a writer that never writes
    try:
        assert_interrupted_promptly(lambda: list(wds.WebDataset(fifo, shardshuffle=False)),
                                    expect_children=0)
    finally:
        os.close(keep_open)


def test_a_fifo_without_a_writer(tmp_path):
    fifo = str(tmp_path / "shard.tar")
    os.mkfifo(fifo)  # open() itself waits for a writer
    assert_interrupted_promptly(lambda: list(wds.WebDataset(fifo, shardshuffle=False)),
                                expect_children=0)


def test_a_handler_that_does_not_raise_lets_the_wait_go_on(shards):
    calls = []
    previous = signal.signal(signal.SIGINT, lambda *args: calls.append(time.monotonic()))
    try:
        ds = wds.WebDataset(stalled(shards, seconds=3), shardshuffle=False)
        timer = SigintAfter(0.3)
        keys = [s["__key__"] for s in ds]
    finally:
        signal.signal(signal.SIGINT, previous)
    # The handler ran during the wait (with room for a loaded machine), not
    # when the 3 s stall ended.
    assert len(keys) == 10 and len(calls) == 1 and calls[0] - timer.sent < 2.0
