"""Where this process sits (rank, DataLoader worker), and small helpers.

Rank and world size come from ``torch.distributed`` when it is initialized
(the group's rank), else from the launcher's environment (``RANK`` /
``WORLD_SIZE`` from torchrun, else ``SLURM_PROCID`` / ``SLURM_NTASKS``; one of
a pair without the other is a ValueError naming it), else 0 of 1. The DataLoader
worker comes from ``torch.utils.data.get_worker_info()``, else ``WORKER`` /
``NUM_WORKERS``, else 0 of 1.

>>> import webdataset_cpp as wds
>>> wds.pytorch_worker_info()       # one plain process
(0, 1, 0, 1)
"""

import itertools
import os
import sys

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
    """True for objects iter() accepts."""
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


def node_info(group=None):
    """(rank, world_size) of this process, as described in the module doc."""
    dist = _torch_distributed()
    if dist is not None:
        return dist.get_rank(group=group), dist.get_world_size(group=group)
    return tuple(_core.resolve_placement())


def worker_info():
    """(worker, num_workers) of this process inside a DataLoader, else (0, 1)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        info = torch.utils.data.get_worker_info()
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


def repeatedly(source, nepochs=None, nbatches=None, nsamples=None, batchsize=None):
    """Iterates `source` again and again, up to nepochs passes, nbatches items
    or nsamples samples (each item's first element counted by len()).

    >>> list(repeatedly([1, 2], nepochs=2))
    [1, 2, 1, 2]
    """
    batches = samples = 0
    for epoch in itertools.count():
        if nepochs is not None and epoch >= nepochs:
            return
        for item in source:
            yield item
            batches += 1
            if nbatches is not None and batches >= nbatches:
                return
            if nsamples is not None:
                samples += len(item[0])
                if samples >= nsamples:
                    return
