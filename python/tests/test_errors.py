"""Bad inputs give the documented exceptions, and interruptions leave no
thread, descriptor or child process behind."""

import gzip
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import webdataset_cpp as wds
from webdataset_cpp import _core
from conftest import threads, threads_at_rest, threads_settle_to, write_tar


def children():
    """PIDs of this process's child processes."""
    me = str(os.getpid())
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == me:
                        out.append(int(pid))
            except OSError:
                pass
    return out


def test_missing_shard(shards, tmp_path):
    missing = str(tmp_path / "nope.tar")
    with pytest.raises(FileNotFoundError) as e:
        list(wds.WebDataset([shards[0], missing], shardshuffle=False))
    assert e.value.filename == missing
    assert str(e.value) == f"[Errno 2] No such file or directory: '{missing}'"
    kept = wds.WebDataset([missing, shards[0]], shardshuffle=False,
                          handler=wds.ignore_and_continue)
    assert len(list(kept)) == 10
    seen = []
    kept = wds.WebDataset([missing, shards[0]], shardshuffle=False,
                          handler=lambda exn: seen.append(exn) or True)
    assert len(list(kept)) == 10 and [type(x) for x in seen] == [FileNotFoundError]
    assert _core._open_shard_descriptors() == 0


def test_truncated_and_corrupt_shards(tmp_path):
    from conftest import write_shards

    shard = write_shards(tmp_path, 1, 3)[0]
    with open(shard, "rb") as f:
        data = f.read()

    def cut(name, size, content=None):
        path = str(tmp_path / name)
        with open(path, "wb") as f:
            f.write(data[:size] if content is None else content)
        return path

    def error(url):
        with pytest.raises(wds.DataError) as e:
            list(wds.WebDataset(url, shardshuffle=False))
        return str(e.value)

    # s0_000.jpg (721 bytes of data) starts at 0, s0_000.cls at 1536.
    middle = cut("middle.tar", 512 + 300)
    assert error(middle) == (f"{middle}: member s0_000.jpg at offset 0: truncated or corrupt "
                             "after 0 of 721 bytes: Truncated tar archive")
    boundary = cut("boundary.tar", 1536)  # right after a member: silent in the reference
    assert error(boundary) == (f"{boundary}: truncated: the data ends at offset 1536 after "
                               "member s0_000.jpg without an end-of-archive block")
    junk = cut("junk.tar", 0, b"this is not a tar file" * 40)
    assert error(junk) == f"{junk}: not a tar archive (Unrecognized archive format)"
    packed = gzip.compress(data)
    no_trailer = cut("trailer.tar.gz", 0, packed[:-8])
    # (Found while the first member's data was read: the whole stream is one chunk.)
    assert error(no_trailer) == (f"{no_trailer}: truncated gzip data: the stream ends at "
                                 f"compressed offset {len(packed) - 8} inside a gzip member "
                                 "(member s0_000.jpg at offset 0)")
    # With a continue handler the rest of a broken shard is skipped, and the
    # sample the damage cut short is dropped (the reference yields it partial).
    kept = wds.WebDataset([boundary, shard], shardshuffle=False, handler=wds.ignore_and_continue)
    assert [s["__key__"] for s in kept] == ["s0_000", "s0_001", "s0_002"]
    assert list(kept)[0]["__url__"] == shard
    assert _core._open_shard_descriptors() == 0


def test_duplicate_fields_and_failing_pipe_commands(tmp_path):
    before = set(children())
    dup = write_tar(tmp_path / "dup.tar", [("a.cls", b"1"), ("a.cls", b"2")])
    with pytest.raises(wds.DataError) as e:
        list(wds.WebDataset(dup, shardshuffle=False))
    assert str(e.value) == (f"{dup}: duplicate field 'cls' in sample a (member a.cls at offset "
                            "1024)")
    ok = write_tar(tmp_path / "ok.tar", [("a.cls", b"1"), ("b.cls", b"2")])
    url = f"pipe:cat {ok}; exit 3"
    keys = []
    with pytest.raises(wds.DataError) as e:
        for sample in wds.WebDataset(url, shardshuffle=False):
            keys.append(sample["__key__"])
    # The reference misses this failure; here the error ends the shard in place
    # of its last sample, which a failed command may have cut short.
    assert keys == ["a"]
    assert str(e.value) == f"{url}: command failed with exit status 3 (its output may be incomplete)"
    assert set(children()) == before


def test_wrong_arguments():
    with pytest.raises(ValueError, match="cannot handle urls of type <class 'float'>"):
        wds.WebDataset(1.5, shardshuffle=False)
    with pytest.raises(ValueError, match="batchsize must be an int >= 1, got 'x'"):
        wds.batched("x")
    with pytest.raises(TypeError, match="to_tuple: fields are str, got 3"):
        wds.to_tuple(3)
    with pytest.raises(ValueError, match="shuffle: bufsize and initial must be >= 0, got -1, 100"):
        wds.shuffle(-1)
    with pytest.raises(TypeError, match="^handler must be callable, got 3$"):
        list(wds.DataPipeline([[{"a": b"1"}]], wds.decode(handler=3)))
    with pytest.raises(ValueError, match=r"^unknown error handler \"bogus\""):
        list(wds.DataPipeline([[{"a": b"1"}]], wds.decode(handler="bogus")))
    with pytest.raises(ValueError, match="maxcount and maxsize must be > 0, got 0 and"):
        wds.ShardWriter("/tmp/x-%d.tar", maxcount=0)


def test_an_exception_in_a_python_stage_closes_the_chain(shards):
    def boom(src):
        for i, s in enumerate(src):
            if i == 2:
                raise RuntimeError("boom")
            yield s

    before_threads = threads_at_rest()
    ds = wds.WebDataset(shards, shardshuffle=False).compose(boom).shuffle(3)
    with pytest.raises(RuntimeError, match="^boom$"):
        list(ds)
    assert _core._open_shard_descriptors() == 0
    assert threads_settle_to(before_threads) == before_threads


def test_leaving_a_native_loader_early_joins_its_threads_and_stops_pipes(shards):
    urls = [f"pipe:cat {s}" for s in shards]
    loader = wds.Loader(wds.WebDataset(urls, shardshuffle=False).decode("rgb8").batched(2),
                        workers=2)
    before_threads, before = threads_at_rest(), set(children())
    with pytest.raises(KeyboardInterrupt):
        for i, batch in enumerate(loader):
            assert threads() == before_threads + 2
            assert len(set(children()) - before) >= 1
            if i == 1:
                raise KeyboardInterrupt
    assert threads_settle_to(before_threads) == before_threads
    assert set(children()) == before
    assert len(list(loader)) == 20  # the next epoch starts afresh


def test_ctrl_c_stops_a_native_loader_promptly(shards, tmp_path):
    marker = f"wds-sigint-{os.getpid()}"
    script = tmp_path / "interrupted.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, time
        import webdataset_cpp as wds
        urls = ["pipe:cat {shards[0]}; sleep 30 # {marker}"] * 2
        loader = wds.Loader(wds.WebDataset(urls, shardshuffle=False).batched(1), workers=2)
        for batch in loader:
            print("batch", flush=True)
            time.sleep(30)
    """))
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    assert proc.stdout.readline() == "batch\n"
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    # Liveness with room for a loaded machine: the script sleeps 30 s.
    assert time.monotonic() - start < 15
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    leftovers = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert leftovers == ""


@pytest.fixture(scope="module")
def large_images(tmp_path_factory):
    """32 JPEGs of 384x512: decoding a batch of 16 takes tens of milliseconds."""
    import numpy as np

    from conftest import encode_image

    rng = np.random.default_rng(0)
    members = []
    for i in range(32):
        image = rng.integers(0, 255, size=(384, 512, 3), dtype=np.uint8)
        members += [(f"{i:04d}.jpg", encode_image(image, "JPEG", quality=90)),
                    (f"{i:04d}.cls", b"1")]
    return write_tar(tmp_path_factory.mktemp("large") / "large.tar", members)


def test_python_thread_progresses_while_native_code_decodes(large_images):
    """The GIL is released while native stages read, decode and wait: a Python
    thread that ticks every millisecond keeps ticking while each batch is
    being made, not only between batches (with the GIL held, the ticker could
    not run at all inside next())."""
    ds = wds.WebDataset([large_images] * 2, shardshuffle=False).decode("rgb8").batched(16)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    for source in (ds, wds.Loader(ds, workers=1)):
        ticks.clear()
        stop.clear()
        thread = threading.Thread(target=ticker)
        thread.start()
        intervals = []  # (asked, received) of each batch
        it = iter(source)
        while True:
            asked = time.monotonic()
            batch = next(it, None)
            if batch is None:
                break
            intervals.append((asked, time.monotonic()))
        stop.set()
        thread.join()
        assert len(intervals) == 4
        # Decoding 16 images of 384 x 512 takes tens of milliseconds: the
        # ticker ran inside each of those batches, in both halves of it (not
        # only while the GIL was free at one end). A loaded machine may delay
        # single ticks, so no bound on a gap.
        long = [(a, b) for a, b in intervals if b - a >= 0.02]
        assert long, intervals
        for a, b in long:
            inside = [t for t in ticks if a < t < b]
            assert len(inside) >= 5, (b - a, len(inside))
            middle = (a + b) / 2
            assert inside[0] < middle < inside[-1], (b - a, inside)
