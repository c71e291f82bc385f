"""Batches from DataLoader workers reach the main process without a copy:
collated into reused shared-memory blocks, sent as descriptors, mapped once
by the main process, and given back to the worker when the main process
drops them (see webdataset_cpp/_shared.py)."""

import gc
import multiprocessing
import os
import signal
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import webdataset_cpp as wds
from webdataset_cpp import _core, _shared

MEMFD = "/memfd:webdataset_cpp-batch"


def memfd_ranges():
    """(start, end) of this process's mappings of shared batch blocks."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            if MEMFD in line:
                start, end = line.split()[0].split("-")
                out.append((int(start, 16), int(end, 16)))
    return out


def nbytes(tensor):
    return tensor.element_size() * tensor.nelement()


def in_shared_block(tensor):
    ptr = tensor.data_ptr()
    return any(start <= ptr and ptr + nbytes(tensor) <= end for start, end in memfd_ranges())


def block_of(tensor):
    """(pid, inode) of the cached mapping holding `tensor`, else None."""
    ptr = tensor.data_ptr()
    for m in _core.shared_mappings():
        if m["address"] <= ptr < m["address"] + m["bytes"]:
            return m["pid"], m["inode"]
    return None


def dataset(shards, batch=5):
    return (wds.WebDataset(shards, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls")
            .batched(batch))


def copied_batches(shards, monkeypatch, workers=2, **kw):
    """The batches through torch's own (copying) path, for comparison."""
    monkeypatch.setenv("WDS_SHARED_BATCH_BYTES", "0")
    batches = list(DataLoader(dataset(shards, **kw), batch_size=None, num_workers=workers,
                              multiprocessing_context="fork"))
    monkeypatch.delenv("WDS_SHARED_BATCH_BYTES")
    assert all(images.is_shared() for images, _ in batches)  # torch's shared memory
    return batches


def dev_shm():
    """Named shared memory, but for multiprocessing's semaphores (which any
    process on the machine, this test's spawn context included, makes and
    removes as it goes)."""
    return sorted(n for n in os.listdir("/dev/shm") if not n.startswith("sem."))


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_batches_cross_without_a_copy_and_equal_torchs(shards, monkeypatch, context):
    expected = copied_batches(shards, monkeypatch, batch=2)
    before = dev_shm()
    loader = DataLoader(dataset(shards, batch=2).repeat(3), batch_size=None, num_workers=2,
                        multiprocessing_context=context)
    got, blocks, pointers = [], set(), {}
    for images, labels in loader:
        # What default_convert made before: a list of two tensors.
        assert type(images) is torch.Tensor and type(labels) is torch.Tensor
        assert not images.is_shared()  # not torch's segment: ours
        assert in_shared_block(images) and in_shared_block(labels)
        for t in (images, labels):
            blocks.add(block_of(t))
            pointers.setdefault(block_of(t), set()).add(t.data_ptr())
        got.append((images.clone(), labels.clone()))
    assert len(got) == 3 * len(expected) == 60
    for (images, labels), (want_images, want_labels) in zip(got, expected * 3):
        assert images.dtype == want_images.dtype == torch.uint8
        assert images.shape == want_images.shape == (2, 12, 16, 3)
        assert images.stride() == want_images.stride()
        assert labels.dtype == want_labels.dtype == torch.int64
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)
    # Each worker reused its blocks: 120 storages in at most 24 blocks (per
    # worker: one batch being filled, two queued, two held here while the
    # next is unpickled, one awaiting the worker's sweep), each mapped here
    # once, at one address.
    assert None not in blocks and len(blocks) <= 24
    assert all(len(p) == 1 for p in pointers.values())
    assert dev_shm() == before


def test_a_held_batch_keeps_its_bytes_while_later_batches_reuse_blocks(shards, monkeypatch):
    expected = copied_batches(shards, monkeypatch, batch=2)
    loader = DataLoader(dataset(shards, batch=2).repeat(3), batch_size=None, num_workers=2,
                        multiprocessing_context="fork")
    it = iter(loader)
    held = [next(it) for _ in range(3)]
    held_blocks = {block_of(images) for images, _ in held}
    later_blocks = set()
    count = 3
    for images, labels in it:
        later_blocks.add(block_of(images))
        assert torch.equal(images, expected[count % 20][0])
        count += 1
    assert count == 60
    # The held batches' blocks were never handed out again.
    assert not held_blocks & later_blocks and len(later_blocks) >= 2
    for (images, labels), (want_images, want_labels) in zip(held, expected):
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)


def exited(pid, within=10.0):
    """Whether process `pid` has exited (a zombie, or reaped: its descriptors
    are closed and its SIGCHLD sent) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.01)
    return False


def drain(it):
    for batch in it:
        del batch  # the traceback must not keep one


def test_a_killed_worker_leaves_held_batches_intact_and_nothing_behind(shards, monkeypatch):
    expected = copied_batches(shards, monkeypatch, batch=2)
    before = dev_shm()
    loader = DataLoader(dataset(shards, batch=2), batch_size=None, num_workers=2,
                        multiprocessing_context="fork")
    it = iter(loader)
    held = [next(it) for _ in range(4)]
    pids = {block_of(images)[0] for images, _ in held}
    assert len(pids) == 2
    # torch finds the deaths when it next checks its workers, or a batch still
    # queued can no longer be mapped (the worker's files are gone). Its
    # SIGCHLD handler would raise the same error asynchronously, at any point
    # until the iterator is gone (even inside pytest.raises' own code, or in
    # the iterator's __del__), at the death of any child: it is set aside
    # until then.
    sigchld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        with pytest.raises((RuntimeError, OSError), match=r"DataLoader worker"):
            for w in it._workers:
                os.kill(w.pid, signal.SIGKILL)
            drain(it)
        # The other worker may still be exiting; a block counts as its
        # worker's while the worker's descriptor is open.
        for pid in pids:
            assert exited(pid), pid
        for (images, labels), (want_images, want_labels) in zip(held, expected):
            images += 0  # still mapped and writable
            assert torch.equal(images, want_images) and torch.equal(labels, want_labels)
        ranges = {(m["address"], m["bytes"]) for m in _core.shared_mappings() if m["pid"] in pids}
        del it, loader, images, labels, held
        gc.collect()
    finally:
        signal.signal(signal.SIGCHLD, sigchld)
    # Releasing a dead worker's block unmaps every unused block of it.
    assert not [m for m in _core.shared_mappings() if m["pid"] in pids]
    assert not [r for r in memfd_ranges() if (r[0] + 4096, r[1] - r[0] - 4096) in ranges]
    assert dev_shm() == before


def test_persistent_workers_reuse_their_blocks_across_epochs(shards):
    loader = DataLoader(dataset(shards), batch_size=None, num_workers=2,
                        persistent_workers=True, multiprocessing_context="fork")
    epochs = []
    for _ in range(2):
        epochs.append({block_of(t) for batch in loader for t in batch})
    assert None not in epochs[0] | epochs[1]
    assert epochs[0] & epochs[1] and len(epochs[0] | epochs[1]) <= 24


def test_beyond_the_limit_batches_take_torchs_path(shards, monkeypatch):
    expected = copied_batches(shards, monkeypatch, workers=1)
    # Room for one image block and one label block (4 KiB each + a header page).
    monkeypatch.setenv("WDS_SHARED_BATCH_BYTES", str(4 * 4096))
    loader = DataLoader(dataset(shards), batch_size=None, num_workers=1)
    held = list(loader)  # all held: the worker's blocks run out
    assert [images.is_shared() for images, _ in held] == [False] + [True] * 7
    for (images, labels), (want_images, want_labels) in zip(held, expected):
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)


@pytest.mark.parametrize("value,message", [
    ("x", "WDS_SHARED_BATCH_BYTES='x' is not an integer"),
    ("-1", "WDS_SHARED_BATCH_BYTES='-1' must be >= 0"),
])
def test_a_bad_limit_is_a_value_error(shards, monkeypatch, value, message):
    monkeypatch.setenv("WDS_SHARED_BATCH_BYTES", value)
    with pytest.raises(ValueError, match=message):
        list(DataLoader(dataset(shards), batch_size=None, num_workers=1))


def keep_arrays(batch):
    return batch


def test_a_collate_fn_that_keeps_numpy_arrays_still_gets_them(shards, monkeypatch):
    expected = copied_batches(shards, monkeypatch)
    got = list(DataLoader(dataset(shards), batch_size=None, num_workers=2,
                          collate_fn=keep_arrays, multiprocessing_context="fork"))
    assert len(got) == 8
    for (images, labels), (want_images, want_labels) in zip(got, expected):
        assert type(images) is np.ndarray and images.dtype == np.uint8
        assert np.array_equal(images, want_images.numpy())
        assert np.array_equal(labels, want_labels.numpy())


def test_outside_a_worker_nothing_is_shared(shards):
    assert _shared.worker_blocks() is None
    images, _ = next(iter(DataLoader(dataset(shards), batch_size=None, num_workers=0)))
    assert not in_shared_block(images)


# ---------------------------------------------------------------- in one process


@pytest.fixture
def blocks(monkeypatch):
    """A SharedBlocks pool that this process's chains use, as a worker's do."""
    pool = _core.SharedBlocks(1 << 20)
    monkeypatch.setattr(_shared, "worker_blocks", lambda: pool)
    return pool


def test_a_lent_block_is_the_same_memory_and_returns_on_release(shards, blocks):
    images, labels = next(iter(dataset(shards)))
    assert blocks.stats["regions"] == 2 and blocks.stats["fallbacks"] == 0
    lent = blocks.lend(images.ctypes.data, images.nbytes, images)
    pid, fd, inode, map_bytes, offset = lent
    assert pid == os.getpid() and map_bytes == 4096 + 4096 and offset == 4096
    tensor = _core.attach_shared(*lent, images.nbytes)
    view = tensor.view(torch.uint8).reshape(images.shape)
    assert tensor.data_ptr() != images.ctypes.data  # another mapping ...
    view[0, 0, 0, 0] = 255 - int(images[0, 0, 0, 0])
    assert images[0, 0, 0, 0] == view[0, 0, 0, 0]  # ... of the same pages
    mapping = [m for m in _core.shared_mappings() if m["inode"] == inode]
    assert [(m["leases"], m["held"]) for m in mapping] == [(1, 1)]
    blocks.sweep()
    assert blocks.stats["in_flight"] == 1  # held elsewhere: kept
    del view, tensor
    gc.collect()
    blocks.sweep()
    assert blocks.stats["in_flight"] == 0 and blocks.stats["lent"] == 1
    # Outside any block, or straddling its end: not lendable.
    assert blocks.lend(labels.ctypes.data, 1 << 16, labels) is None
    assert blocks.lend(np.zeros(8).ctypes.data, 64, None) is None


def test_a_forked_child_dropping_an_inherited_batch_does_not_release_it(shards, blocks):
    images, _ = next(iter(dataset(shards)))
    lent = blocks.lend(images.ctypes.data, images.nbytes, images)
    holder = [_core.attach_shared(*lent, images.nbytes)]

    def drop(conn):
        holder.clear()
        gc.collect()
        conn.send(True)

    parent, child = multiprocessing.get_context("fork").Pipe()
    proc = multiprocessing.get_context("fork").Process(target=drop, args=(child,))
    proc.start()
    assert parent.recv()
    proc.join(10)
    assert [m["held"] for m in _core.shared_mappings() if m["inode"] == lent[2]] == [1]
    holder.clear()
    gc.collect()
    assert [m["held"] for m in _core.shared_mappings() if m["inode"] == lent[2]] == [0]
    blocks.sweep()
    assert blocks.stats["in_flight"] == 0


def test_lent_gpu_jobs_are_the_same_jobs_over_the_block_and_return_on_release(shards, blocks):
    jobs_dataset = (wds.WebDataset(shards, shardshuffle=False).decode("rgb8", device="cuda")
                    .to_tuple("jpg", "__key__").batched(5))
    jobs, keys = next(iter(jobs_dataset))
    lent = blocks.lend_gpu_jobs(jobs)
    pid, fd, inode, map_bytes, offset, nbytes, lent_keys, urls = lent
    assert pid == os.getpid() and lent_keys == keys == jobs.keys
    assert urls == []  # to_tuple kept no __url__ column
    back = _core.attach_gpu_jobs(*lent)
    assert back.keys == keys and back.layout() == jobs.layout()
    assert np.array_equal(back.to_array(), jobs.to_array())
    mapping = [m for m in _core.shared_mappings() if m["inode"] == inode]
    assert [(m["leases"], m["held"]) for m in mapping] == [(1, 1)]
    blocks.sweep()
    assert blocks.stats["in_flight"] == 1  # the attached jobs hold the block
    del back
    gc.collect()
    blocks.sweep()
    assert blocks.stats["in_flight"] == 0
    # A lent block that holds no packed jobs (a batch's images) is refused.
    images, _ = next(iter(dataset(shards)))
    image_loan = blocks.lend(images.ctypes.data, images.nbytes, images)
    with pytest.raises(ValueError, match=rf"packed GPU jobs \({images.nbytes} bytes\): "):
        _core.attach_gpu_jobs(*image_loan, images.nbytes, [], [])


def test_bad_descriptors(shards, blocks):
    images, _ = next(iter(dataset(shards)))
    pid, fd, inode, map_bytes, offset = blocks.lend(images.ctypes.data, images.nbytes, images)
    with pytest.raises(ValueError, match="shared batch block: 8192 bytes at offset 4096 do not "
                                         "fit in 8192"):
        _core.attach_shared(pid, fd, inode, map_bytes, offset, map_bytes)
    with pytest.raises(ValueError, match="do not fit"):
        _core.attach_shared(pid, fd, inode, map_bytes, 0, 16)  # the header is not data
    with pytest.raises(OSError) as e:
        _core.attach_shared(pid, fd, inode + 1000, map_bytes, offset, 16)
    assert str(e.value) == (f"[Errno 116] cannot map the batch memory of DataLoader worker {pid} "
                            f"(/proc/{pid}/fd/{fd}): the worker no longer has that block: Stale "
                            f"file handle: '/proc/{pid}/fd/{fd}'")
    with pytest.raises(FileNotFoundError) as e:
        _core.attach_shared(2**31 - 2, fd, inode, map_bytes, offset, 16)
    assert e.value.filename == f"/proc/{2**31 - 2}/fd/{fd}"
    assert e.value.strerror.startswith("cannot map the batch memory of DataLoader worker "
                                       "2147483646")
    not_ours = os.memfd_create("other")
    os.ftruncate(not_ours, 8192)
    with pytest.raises(ValueError, match=f"/proc/{pid}/fd/{not_ours} is not a webdataset_cpp "
                                         "batch block"):
        _core.attach_shared(pid, not_ours, os.fstat(not_ours).st_ino, 8192, 4096, 16)
    os.close(not_ours)


def test_the_main_process_forgets_blocks_their_worker_freed(shards, monkeypatch):
    def inodes():
        return [m["inode"] for m in _core.shared_mappings()]

    pool = _core.SharedBlocks(1 << 20)
    monkeypatch.setattr(_shared, "worker_blocks", lambda: pool)
    images, _ = next(iter(dataset(shards)))
    lent = pool.lend(images.ctypes.data, images.nbytes, images)
    tensor = _core.attach_shared(*lent, images.nbytes)
    del images, tensor
    gc.collect()
    pool.sweep()
    assert lent[2] in inodes()  # released, but the worker still has it: kept for reuse
    monkeypatch.setattr(_shared, "worker_blocks", lambda: None)
    del pool
    gc.collect()  # the "worker" frees its blocks
    time.sleep(1.1)  # the cache sweeps at most once a second, at the next attach
    other = _core.SharedBlocks(1 << 20)
    monkeypatch.setattr(_shared, "worker_blocks", lambda: other)
    images, _ = next(iter(dataset(shards)))
    fresh = _core.attach_shared(*other.lend(images.ctypes.data, images.nbytes, images),
                                images.nbytes)
    assert lent[2] not in inodes() and nbytes(fresh) == images.nbytes


def test_the_pin_memory_thread_copies_and_gives_every_block_back(shards, monkeypatch):
    """pin_memory=True: torch's pin thread receives the batches and copies
    them into page-locked memory. This torch has no CUDA, so the copy is
    stood in for by clone() (what matters here is that the thread, not the
    main thread, rebuilds the tensors and drops them after the copy)."""
    from torch.utils.data._utils import pin_memory as pin_module

    expected = copied_batches(shards, monkeypatch, batch=2)
    threads = set()

    def copy_as_pinning(data, device=None):
        import threading

        if not isinstance(data, list):
            return data  # a worker's end-of-data marker
        threads.add(threading.current_thread().name)
        return [t.clone() for t in data]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(pin_module, "pin_memory", copy_as_pinning)
    it = iter(DataLoader(dataset(shards, batch=2), batch_size=None, num_workers=2,
                         pin_memory=True, multiprocessing_context="fork"))
    pids = {w.pid for w in it._workers}
    got = list(it)  # all held: they are the copies
    assert len(got) == 20 and threads and "MainThread" not in threads
    for (images, labels), (want_images, want_labels) in zip(got, expected):
        assert not in_shared_block(images)
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)
    lent = [m for m in _core.shared_mappings() if m["pid"] in pids]
    # Every block came back after its copy, so a few blocks served 40 storages.
    assert lent and len(lent) <= 24 and all(m["held"] == 0 for m in lent)


def test_the_next_epochs_workers_do_not_inherit_finished_workers_blocks(shards):
    def inodes_mapped(pid):
        with open(f"/proc/{pid}/maps") as f:
            return {int(line.split()[4]) for line in f if MEMFD in line}

    loader = DataLoader(dataset(shards), batch_size=None, num_workers=2,
                        multiprocessing_context="fork")
    first = {block_of(t) for batch in loader for t in batch}  # each batch dropped at once
    gc.collect()
    first_pids = {pid for pid, _ in first}
    # Those workers have exited; their blocks are still mapped here, idle
    # (unless a batch was dropped only after its worker had freed its
    # blocks: that release unmapped them already, which a loaded machine
    # sees now and then)...
    idle = {m["inode"] for m in _core.shared_mappings() if m["pid"] in first_pids}
    assert idle <= {inode for _, inode in first}
    it = iter(loader)  # ... until the next workers are forked
    assert not {m["pid"] for m in _core.shared_mappings()} & first_pids
    for w in it._workers:
        assert not inodes_mapped(w.pid) & {inode for _, inode in first}
    assert sum(len(labels) for _, labels in it) == 40


def _attach_as_nobody(conn, lent, nbytes):
    os.setgid(65534)
    os.setuid(65534)
    try:
        _core.attach_shared(*lent, nbytes)
        conn.send(None)
    except OSError as e:
        conn.send((type(e).__name__, e.errno, e.strerror))


@pytest.mark.skipif(os.geteuid() != 0,
                    reason="a child must switch to user nobody to be refused the block, which "
                           "only root can do (CI runs as root)")
def test_a_process_that_may_not_open_the_block_is_told_how_to_turn_it_off(shards, blocks):
    images, _ = next(iter(dataset(shards)))
    lent = blocks.lend(images.ctypes.data, images.nbytes, images)
    parent, child = multiprocessing.get_context("fork").Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_attach_as_nobody,
                                                       args=(child, lent, images.nbytes))
    proc.start()
    name, err, message = parent.recv()
    proc.join(10)
    assert (name, err) == ("PermissionError", 13)
    assert message == (f"cannot map the batch memory of DataLoader worker {lent[0]} "
                       f"(/proc/{lent[0]}/fd/{lent[1]}) (where /proc/<pid>/fd is closed to this "
                       "process, set WDS_SHARED_BATCH_BYTES=0: batches then take torch's own "
                       "transfer): Permission denied")
