"""Where this process sits (rank, DataLoader worker), and small helpers.

Rank and world size come from ``torch.distributed`` when it is initialized
(the group's rank), else, in a DataLoader worker started by ``spawn`` or
``forkserver`` (where torch.distributed is not initialized), from the default
group of the rank that pickled the dataset for it, else from the launcher's
environment (``RANK`` / ``WORLD_SIZE`` from torchrun, else ``SLURM_PROCID`` /
``SLURM_NTASKS``; one of a pair without the other is a ValueError naming it),
else 0 of 1. The DataLoader worker comes from
``torch.utils.data.get_worker_info()``, else ``WORKER`` / ``NUM_WORKERS``, else
0 of 1.

>>> import webdataset_cpp as wds
>>> wds.pytorch_worker_info()       # one plain process
(0, 1, 0, 1)
"""

import fnmatch
import functools
import glob
import importlib
import itertools
import os
import re
import sys
import warnings

from . import _core

# enforce_security: the reference's switch, read at every check (so setting it at run
# time takes effect). While true, gopen refuses pipe: URLs, local files and
# GOPEN_REWRITE, shard lists refuse pipe: URLs, and decoding refuses pickle and torch.load.
enforce_security = bool(int(os.environ.get("WDS_SECURE", "0")))


class PipelineStage:
    """Base class of stage objects: a DataPipeline calls ``stage.run(src)``."""

    def invoke(self, *args, **kw):
        raise NotImplementedError


def identity(x):
    """Returns its argument (map_tuple's placeholder)."""
    return x


def is_iterable(obj):
    """True for objects iter() accepts, except str and bytes (as the reference)."""
    if isinstance(obj, (str, bytes)):
        return False
    try:
        iter(obj)
    except TypeError:
        return False
    return True


def _torch_distributed():
    # Never import torch here: a process that uses torch.distributed has it.
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


# (pid of this process, rank, world_size): the placement of the
# torch.distributed rank that pickled a dataset this process unpickled (see
# placement_to_pickle). Only the process that unpickled it uses it: a worker
# forked from that process is no part of that rank.
_pickled_placement = None


def placement_to_pickle():
    """What a pickled dataset carries to a DataLoader worker: (pid, rank,
    world_size) of torch.distributed's default group when it is initialized
    here, else None. A worker started by spawn or forkserver has no
    torch.distributed of its own, and without this would take its rank from
    the environment: from none at all when the group was made without a
    launcher (mp.spawn, a FileStore), so every rank would read every shard."""
    dist = _torch_distributed()
    if dist is None:
        return None
    return os.getpid(), dist.get_rank(), dist.get_world_size()


def unpickled_placement(placement):
    """Keeps the placement a dataset was pickled with in another process, for
    node_info in this process if it is a DataLoader worker."""
    global _pickled_placement
    if placement is not None and placement[0] != os.getpid():
        _pickled_placement = (os.getpid(),) + tuple(placement[1:])


def node_info(group=None):
    """(rank, world_size) of this process, as described in the module doc."""
    dist = _torch_distributed()
    if dist is not None:
        return dist.get_rank(group=group), dist.get_world_size(group=group)
    # (A process group does not pickle, so a worker's nodesplitter has none.)
    if (group is None and _pickled_placement is not None
            and _pickled_placement[0] == os.getpid() and _in_dataloader_worker()):
        return _pickled_placement[1:]
    return tuple(_core.resolve_placement())


def _in_dataloader_worker():
    return _torch_worker_info() is not None


def _torch_worker_info():
    # Never import torch here, as above.
    torch = sys.modules.get("torch")
    return None if torch is None else torch.utils.data.get_worker_info()


def worker_info():
    """(worker, num_workers) of this process inside a DataLoader, else (0, 1)."""
    info = _torch_worker_info()
    if info is not None:
        return info.id, info.num_workers
    if "WORKER" in os.environ and "NUM_WORKERS" in os.environ:
        return int(os.environ["WORKER"]), int(os.environ["NUM_WORKERS"])
    return 0, 1


def pytorch_worker_info(group=None):
    """(rank, world_size, worker, num_workers), as the reference's."""
    return node_info(group) + worker_info()


def pytorch_worker_seed(group=None):
    """rank * 1000 + worker: the reference's per-worker seed."""
    rank, _, worker, _ = pytorch_worker_info(group)
    return rank * 1000 + worker


def guess_batchsize(batch):
    """The length of a batch's first element."""
    return len(batch[0])


def repeatedly0(loader, nepochs=sys.maxsize, nbatches=sys.maxsize):
    """Up to nbatches items of `loader`, nepochs times."""
    for _ in range(nepochs):
        yield from itertools.islice(loader, nbatches)


def repeatedly(source, nepochs=None, nbatches=None, nsamples=None, batchsize=guess_batchsize):
    """Iterates `source` again and again, up to nepochs passes (at least one,
    as in the reference), nbatches items or nsamples samples (counted by
    `batchsize(item)`, which the reference ignores).

    >>> list(repeatedly([1, 2], nepochs=2))
    [1, 2, 1, 2]
    """
    batches = samples = 0
    for epoch in itertools.count(1):
        for item in source:
            yield item
            batches += 1
            if nbatches is not None and batches >= nbatches:
                return
            if nsamples is not None:
                samples += batchsize(item)
                if samples >= nsamples:
                    return
        if nepochs is not None and epoch >= nepochs:
            return


def glob_with_braces(pattern):
    """The files glob finds for each brace expansion of `pattern`."""
    return [f for expanded in _core.expand_urls(pattern) for f in glob.glob(expanded)]


def fnmatch_with_braces(filename, pattern):
    """True when `filename` matches a brace expansion of `pattern` (fnmatch)."""
    return any(fnmatch.fnmatch(filename, p) for p in _core.expand_urls(pattern))


def make_seed(*args):
    """A 31-bit seed from the hashes of `args` (str hashes differ between
    processes unless PYTHONHASHSEED is set, as in the reference)."""
    seed = 0
    for arg in args:
        seed = (seed * 31 + hash(arg)) & 0x7FFFFFFF
    return seed


def safe_eval(s, expr="{}"):
    """eval(expr.format(s)) for an `s` of letters, digits and "_" only, else
    ValueError."""
    if re.fullmatch(r"[A-Za-z0-9_]*", s) is None:
        raise ValueError(f"safe_eval: illegal characters in: '{s}'")
    return eval(expr.format(s))


def lookup_sym(sym, modules):
    """The first non-None attribute `sym` of the named modules (relative names
    are this package's), else None."""
    for name in modules:
        found = getattr(importlib.import_module(name, package=__package__), sym, None)
        if found is not None:
            return found
    return None


def compute_sample_weights(n_w_pairs):
    """n * w for each (n, w), divided by the largest (a NumPy array)."""
    import numpy as np

    weighted = np.array([n for n, _ in n_w_pairs]) * np.array([w for _, w in n_w_pairs])
    return weighted / np.amax(weighted)


def deprecated(arg=None):
    """Decorator (@deprecated or @deprecated("reason")): calls warn with a
    DeprecationWarning."""
    reason = None if callable(arg) else arg

    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            message = f"Call to deprecated function {func.__name__}."
            if reason is not None:
                message += " Reason: " + reason
            warnings.warn(message, category=DeprecationWarning, stacklevel=2)
            return func(*args, **kwargs)

        return wrapper

    return decorator(arg) if callable(arg) else decorator


class ObsoleteException(Exception):
    """A call to an obsolete function without ALLOW_OBSOLETE=1."""


def obsolete(func=None, *, reason=None):
    """Decorator: the function raises ObsoleteException unless the environment
    has ALLOW_OBSOLETE=1 (read at each call).

    >>> @obsolete(reason="gone")
    ... def old(): return 1
    >>> old()
    Traceback (most recent call last):
    ...
    webdataset_cpp.utils.ObsoleteException: Call to obsolete function old. Set env ...
    """
    if func is None:
        return functools.partial(obsolete, reason=reason)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not int(os.environ.get("ALLOW_OBSOLETE", "0")):
            message = (f"Call to obsolete function {func.__name__}. "
                       "Set env ALLOW_OBSOLETE=1 to permit.")
            if reason is not None:
                message += " Reason: " + reason
            raise ObsoleteException(message)
        return func(*args, **kwargs)

    return wrapper
