"""Batches from torch DataLoader workers to the main process without a copy.

torch's DataLoader moves every tensor a worker yields to the main process by
copying its storage into a fresh shared-memory segment, which the main process
then maps: two passes over every byte and first-touch page faults on both
sides, for every batch. Inside a DataLoader worker, webdataset_cpp's native
chains instead collate batches into blocks of shared memory (anonymous memfd
files, see python/src/shared_batches.h) that are reused from batch to batch,
and the worker's pickler sends a storage in such a block as a small
descriptor. The main process maps each block once (and keeps the mapping),
and rebuilds the very tensor torch would have rebuilt (same type, dtype,
shape, strides, values) over that mapping. A batch's GPU jobs
(decode(device="cuda")) are packed into such a block and come back as
GpuJobs over the mapping. When the tensor's storage is freed
there (the user dropped the batch, or pin_memory copied it), a counter in the
block's header drops, and the worker reuses the block for a later batch.

What changes for the user: nothing but speed; a tensor received this way is
not "torch shared" (``is_shared()`` is False), so sending it on to yet another
process copies it, as for any ordinary tensor.

Bounds: each worker keeps at most ``WDS_SHARED_BATCH_BYTES`` (default 1 GiB)
of shared blocks; when the main process holds more batches than that, later
ones are allocated normally and take torch's copying path. ``0`` turns the
mechanism off. Cached mappings of a worker that has exited go when a batch
from it is released, at the next batch received (at most once a second), or
before this process forks (so new workers do not inherit them).
"""

import os
import warnings

from . import _core

DEFAULT_LIMIT_BYTES = 1 << 30

_state = None  # (pid, SharedBlocks or None) of this process


def limit_bytes():
    """The per-worker limit from $WDS_SHARED_BATCH_BYTES (0: off)."""
    text = os.environ.get("WDS_SHARED_BATCH_BYTES")
    if text is None:
        return DEFAULT_LIMIT_BYTES
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"WDS_SHARED_BATCH_BYTES={text!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"WDS_SHARED_BATCH_BYTES={text!r} must be >= 0")
    return value


def worker_blocks():
    """This DataLoader worker's SharedBlocks, made on first use; None outside
    a torch DataLoader worker or when turned off."""
    global _state
    pid = os.getpid()
    if _state is not None and _state[0] == pid:
        return _state[1]
    blocks = None
    data = _torch_data()
    if data is not None and data.get_worker_info() is not None:
        limit = limit_bytes()
        if limit > 0:
            blocks = _core.SharedBlocks(limit)
            _install_reducer()
    _state = (pid, blocks)
    return blocks


def _torch_data():
    import sys

    torch = sys.modules.get("torch")
    return getattr(getattr(torch, "utils", None), "data", None) if torch is not None else None


def _install_reducer():
    """Makes this process's multiprocessing pickler send storages that lie in
    shared blocks as descriptors; every other storage goes torch's way."""
    import torch
    import torch.multiprocessing.reductions as reductions
    from multiprocessing.reduction import ForkingPickler

    torch_reduce = reductions.reduce_storage

    def reduce_storage(storage):
        # This runs in the queue's feeder thread, where an exception would
        # lose the batch and leave the main process waiting: anything
        # unexpected takes torch's path instead.
        state = _state
        if state is not None and state[0] == os.getpid() and state[1] is not None:
            try:
                lent = None
                if storage.device.type == "cpu":
                    lent = state[1].lend(storage.data_ptr(), storage.nbytes(), storage)
                if lent is not None:
                    return (rebuild_storage, lent + (storage.nbytes(),))
            except Exception as e:  # noqa: BLE001 (see above)
                warnings.warn(f"webdataset_cpp: a batch takes torch's copying path: {e!r}")
        return torch_reduce(storage)

    ForkingPickler.register(torch.UntypedStorage, reduce_storage)

    def reduce_gpu_jobs(jobs):
        # A batch's GPU jobs (decode(device="cuda")) go packed into a shared
        # block (one copy here, none in the main process), else as bytes.
        state = _state
        if state is not None and state[0] == os.getpid() and state[1] is not None:
            try:
                lent = state[1].lend_gpu_jobs(jobs)
                if lent is not None:
                    return (rebuild_gpu_jobs, lent)
            except Exception as e:  # noqa: BLE001 (as in reduce_storage)
                warnings.warn(f"webdataset_cpp: GPU jobs take the copying path: {e!r}")
        return jobs.__reduce_ex__(4)

    ForkingPickler.register(_core.GpuJobs, reduce_gpu_jobs)


def rebuild_storage(pid, fd, inode, map_bytes, offset, nbytes):
    """In the receiving process: an UntypedStorage over the lent block
    (mapped once per block and process)."""
    tensor = _core.attach_shared(pid, fd, inode, map_bytes, offset, nbytes)
    untyped = getattr(tensor, "untyped_storage", None)
    if untyped is not None:
        return untyped()
    return tensor.storage().untyped()


def rebuild_gpu_jobs(pid, fd, inode, map_bytes, offset, nbytes, keys, urls):
    """In the receiving process: the GpuJobs over the lent block (a Python
    function: pickle cannot name a compiled one)."""
    return _core.attach_gpu_jobs(pid, fd, inode, map_bytes, offset, nbytes, keys, urls)
