"""Shared fixtures: shards written by Python's tarfile (an independent
writer), with images encoded by PIL, so that every test checks the package
against other implementations."""

import io
import json
import os
import signal
import tarfile
import time

import numpy as np
import PIL.Image
import pytest

# A shell starts a background job (`pytest ... &`) with SIGINT ignored, and a Python started
# so installs no KeyboardInterrupt handler, nor do the scripts the tests start (they inherit the
# disposition). The tests of Ctrl-C need Python's usual handler, in this process and in them.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

BUILD_DIR = os.environ.get("WDS_BUILD_DIR",
                           os.path.join(os.path.dirname(__file__), "..", "..", "build"))


def threads():
    """This process's threads, as the kernel lists them."""
    return len(os.listdir("/proc/self/task"))


def threads_at_rest(within=2.0):
    """The thread count once it has held still for 0.1 s (or after `within`
    seconds): a baseline that threads joined earlier, still exiting, do not
    inflate."""
    deadline = time.monotonic() + within
    count, since = threads(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < 0.1:
        time.sleep(0.02)
        if threads() != count:
            count, since = threads(), time.monotonic()
    return count


def threads_settle_to(count, within=2.0):
    """The thread count once it is `count`, or after `within` seconds: a
    joined thread may stay in /proc/self/task until its OS thread has
    finished exiting (the join returns first), so a count taken right after
    a join can be one too many."""
    deadline = time.monotonic() + within
    while threads() != count and time.monotonic() < deadline:
        time.sleep(0.02)
    return threads()


def tool(name):
    return os.path.join(BUILD_DIR, "tools", name)


def image_array(seed, height=12, width=16, channels=3):
    rng = np.random.default_rng(seed)
    base = np.linspace(0, 255, width, dtype=np.float64)[None, :, None]
    noise = rng.integers(0, 40, size=(height, width, channels))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def encode_image(array, fmt, **kw):
    stream = io.BytesIO()
    PIL.Image.fromarray(array).save(stream, format=fmt, **kw)
    return stream.getvalue()


def write_tar(path, members, mode="w"):
    """members: list of (name, bytes), in order."""
    with tarfile.open(path, mode, format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def sample_members(key, index, jpeg=True):
    members = []
    if jpeg:
        members.append((f"{key}.jpg", encode_image(image_array(index), "JPEG", quality=90)))
    members.append((f"{key}.cls", str(index % 10).encode()))
    members.append((f"{key}.txt", f"text {index}".encode()))
    members.append((f"{key}.json", json.dumps({"i": index, "name": key}).encode()))
    return members


def write_shards(directory, shards, per_shard, prefix="shard", jpeg=True):
    """shards x per_shard samples; keys s<shard>_<i>; returns the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    index = 0
    for s in range(shards):
        count = per_shard[s] if isinstance(per_shard, (list, tuple)) else per_shard
        members = []
        for i in range(count):
            members += sample_members(f"s{s}_{i:03d}", index, jpeg)
            index += 1
        paths.append(write_tar(os.path.join(directory, f"{prefix}-{s:06d}.tar"), members))
    return paths


@pytest.fixture(scope="session")
def shards(tmp_path_factory):
    """4 shards x 10 samples (jpg, cls, txt, json)."""
    return write_shards(tmp_path_factory.mktemp("shards"), 4, 10)


@pytest.fixture(scope="session")
def pattern(shards):
    return os.path.join(os.path.dirname(shards[0]), "shard-{000000..000003}.tar")
