"""Native threads that take the GIL: a fork while they do must leave a
working child, and the interpreter's exit while a daemon thread iterates a
Loader must be a clean exit (CPython ends such a thread by unwinding its
stack when it asks for the GIL back)."""

import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

import webdataset_cpp as wds
from conftest import write_tar


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory):
    """4 shards x 200 samples whose .jpg does not decode: each sample makes
    a Loader worker thread warn, which takes the GIL."""
    directory = tmp_path_factory.mktemp("corrupt")
    for s in range(4):
        write_tar(directory / f"bad-{s:06d}.tar",
                  [m for i in range(200)
                   for m in ((f"k{s}_{i:04d}.jpg", b"not a jpeg"), (f"k{s}_{i:04d}.cls", b"1"))])
    return str(directory / "bad-{000000..000003}.tar")


def warning_loader(pattern, workers=2):
    dataset = (wds.WebDataset(pattern, shardshuffle=False)
               .decode("rgb8", handler=wds.warn_and_continue).to_tuple("jpg", "cls").batched(4))
    return wds.Loader(dataset, workers=workers)


def test_a_fork_while_loader_threads_take_the_gil_leaves_a_working_child(corrupt):
    stop = threading.Event()
    epochs = []

    def iterate():
        loader = warning_loader(corrupt)
        while not stop.is_set():
            assert list(loader) == []  # every sample is skipped, with a warning
            epochs.append(1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thread = threading.Thread(target=iterate)
        thread.start()
        try:
            while not caught:
                time.sleep(0.01)
            hung = None
            for _ in range(1500):
                pid = os.fork()
                if pid == 0:
                    os._exit(7)
                deadline = time.monotonic() + 10
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        assert os.waitstatus_to_exitcode(status) == 7
                        break
                    if time.monotonic() > deadline:
                        hung = pid
                        os.kill(pid, 9)
                        os.waitpid(pid, 0)
                        break
                    time.sleep(0.0005)
                if hung:
                    break
        finally:
            stop.set()
            thread.join()
    assert hung is None, "a forked child hung in os.fork (a thread held CPython's thread-state lock)"
    assert epochs and len(caught) > 800  # the threads warned while the forks ran
    assert all(re.search(r"bad-00000\d\.tar: key k\d_\d{4}: field jpg: ", str(w.message))
               for w in caught)


EXIT_SCRIPT = """
import sys, threading, time, warnings
import webdataset_cpp as wds
from test_threads import warning_loader

warnings.simplefilter("ignore")
pattern, warn = sys.argv[1], sys.argv[2] == "warn"
if warn:
    loader = warning_loader(pattern)
else:
    loader = wds.Loader(wds.WebDataset(pattern, shardshuffle=False).to_tuple("cls").batched(4),
                        workers=2)
started = threading.Event()

def iterate():
    while True:
        for _ in loader:
            started.set()
        started.set()

threading.Thread(target=iterate, daemon=True).start()
started.wait()
time.sleep(0.2)
print("exiting", flush=True)
"""


@pytest.mark.parametrize("warn", ["warn", "quiet"])
def test_exit_while_a_daemon_thread_iterates_a_loader_is_clean(corrupt, warn):
    for _ in range(3):
        result = subprocess.run([sys.executable, "-c", textwrap.dedent(EXIT_SCRIPT), corrupt, warn],
                                capture_output=True, text=True, timeout=60,
                                cwd=os.path.dirname(__file__))
        assert (result.returncode, result.stdout, result.stderr) == (0, "exiting\n", "")


TRACED_FORK_SCRIPT = """
import os, sys, threading, warnings
import tracemalloc
from test_threads import warning_loader

pattern, forks = sys.argv[1], int(sys.argv[2])
assert tracemalloc.is_tracing()
stop, warned = threading.Event(), threading.Event()
warnings.showwarning = lambda *args, **kwargs: warned.set()

def iterate():
    loader = warning_loader(pattern)
    while not stop.is_set():
        assert list(loader) == []

thread = threading.Thread(target=iterate)
thread.start()
warned.wait()
for _ in range(forks):
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
stop.set()
thread.join()
print("forked", forks)
"""


def test_a_fork_under_tracemalloc_while_loader_threads_make_thread_states_does_not_hang(corrupt):
    """Under tracemalloc, making a thread state takes the GIL (to trace its
    allocation): the forking process, which holds the GIL, must not wait for
    a thread doing so without letting it have the GIL. (Before, the parent
    hung in its fork handler within the first few forks.)"""
    forks = 400
    result = subprocess.run([sys.executable, "-X", "tracemalloc", "-c",
                             textwrap.dedent(TRACED_FORK_SCRIPT), corrupt, str(forks)],
                            capture_output=True, text=True, timeout=120,
                            cwd=os.path.dirname(__file__))
    assert (result.returncode, result.stdout, result.stderr) == (0, f"forked {forks}\n", "")
