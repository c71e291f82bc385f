"""DataPipeline: a list of stages, iterated as one stream.

>>> import webdataset_cpp as wds
>>> pipeline = wds.DataPipeline(
...     wds.SimpleShardList("train-{000000..000009}.tar"),
...     wds.split_by_node, wds.split_by_worker,
...     wds.tarfile_to_samples(),
...     wds.shuffle(1000),
...     wds.decode("rgb8"),
...     wds.to_tuple("jpg", "cls"),
...     wds.batched(64))

Consecutive native stages run as one native chain (GIL released); Python
callables run where they are placed. A DataPipeline is a torch
IterableDataset when torch is installed, and pickles as its recipe (the stage
list), never as running state, so DataLoader workers (fork or spawn) each run
their own copy, synchronously in the worker process.

Epochs: each ``iter()`` runs epoch ``self.epoch`` and then advances it;
``set_epoch(e)`` chooses the next one (call it before each epoch when a
DataLoader's workers are re-created every epoch; WebLoader does it for you).
The epoch drives the shard permutation, shuffle and random crops.

Checkpoints: ``state_dict()`` / ``load_state_dict()`` follow torchdata's
StatefulDataLoader protocol. In a DataLoader worker (or the main process with
num_workers=0) ``state_dict()`` is the position of the iteration running
there: a small dict of positions, not data. After ``load_state_dict(state)``
the next ``iter()`` continues exactly where that iteration stood, shuffle
buffer included (re-read by seeking, not by replaying the epoch). A pipeline
whose position cannot be recorded still answers ``state_dict()`` (with a
state that says why); loading that state is the error.
"""

import copy
import dataclasses
import os
import sys
import warnings
import weakref

from . import _core, _plan
from ._plan import JOB_KEY
from .utils import PipelineStage  # noqa: F401 (the reference's pipeline module has it)
from .utils import placement_to_pickle, unpickled_placement

try:
    from torch.utils.data import IterableDataset
except ImportError:  # torch is optional

    class IterableDataset:
        """Stands in for torch's IterableDataset when torch is missing."""



def add_length_method(obj):
    """Gives `obj` a len() that returns its `size` attribute, as the
    reference's helper does (a DataPipeline has one already: returned as it is,
    so that it stays picklable)."""
    if isinstance(obj, DataPipeline):
        return obj
    cls = obj.__class__
    obj.__class__ = type(cls.__name__ + "_Length", (cls,), {"__len__": lambda self: self.size})
    return obj

class _UnsetSeed(int):
    """0, the seed of a pipeline made without one and without $WDS_SEED. It
    permutes shards as 0 does; a shuffle without its own seed then draws a
    new order every run, as the reference's (see filters.shuffle)."""

    unset = True


def default_seed():
    """The seed of a pipeline made without one: $WDS_SEED as an int, else 0.

    Unlike the reference (a random seed per object), every rank and worker gets
    the same seed, which the shard permutation needs to stay disjoint."""
    text = os.environ.get("WDS_SEED")
    if text is None:
        return _UnsetSeed(0)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"WDS_SEED={text!r} is not an integer") from None


class DataPipeline(IterableDataset):
    """A pipeline of stages; see the module doc.

    A list argument is spliced into the stage list (as in the reference); None
    arguments are skipped.
    """

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.pipeline = []
        self.length = -1
        self.repetitions = 1
        self.nsamples = -1
        self.size = None
        self.epoch_length = None
        self.across_workers = False
        self.seed = default_seed()
        self.epoch = 0
        self._closed = False
        self._live = weakref.WeakSet()
        self._position = None  # of the latest iteration started in this process
        self._restore = None  # the state the next iteration continues
        # (epoch, job state text) of an elastic resume: that epoch's shard
        # chains read this worker's share of what the job left over.
        self._elastic = None
        for arg in args:
            if arg is None:
                continue
            if isinstance(arg, list):
                self.pipeline.extend(arg)
            else:
                self.pipeline.append(arg)

    # -------------------------------------------------------- pickling

    def __getstate__(self):
        # The rank's placement goes with the dataset to a DataLoader worker
        # that has no torch.distributed of its own (see utils.node_info).
        return dict(self._copied_state(), _placement=placement_to_pickle())

    def __setstate__(self, state):
        state = dict(state)
        unpickled_placement(state.pop("_placement", None))
        self.__dict__.update(state)
        self._live = weakref.WeakSet()
        self._position = None
        self.__dict__.setdefault("_restore", None)
        self.__dict__.setdefault("_elastic", None)

    def __copy__(self):
        result = type(self).__new__(type(self))
        result.__setstate__(self._copied_state())
        return result

    def _copied_state(self):
        state = dict(self.__dict__)
        state.pop("_live", None)
        state.pop("_position", None)  # running state stays in its process
        return state

    # -------------------------------------------------------- building

    def invoke(self, f, *args):
        """Runs one stage as the reference does (iter, .run, call)."""
        return _plan.invoke(f, *args)

    def stage(self, i):
        return self.pipeline[i]

    def append(self, f):
        self.pipeline.append(f)

    def compose(self, *args):
        """A copy with more stages appended (the stage objects are shared)."""
        result = copy.copy(self)
        result.pipeline = list(self.pipeline)
        for arg in args:
            result.append(arg)
        return result

    def run(self, *args):
        """As a stage of another pipeline: iterate this one (args ignored)."""
        return iter(self)

    # -------------------------------------------------------- epochs

    def set_epoch(self, epoch):
        """The epoch the next iteration runs. A state loaded for another epoch
        is dropped (that epoch is not continued)."""
        self.epoch = int(epoch)
        if self._restore is not None and self._restore["epoch"] != self.epoch:
            self._restore = None

    def with_epoch(self, nsamples=-1, nbatches=-1, *, across_workers=False):
        """Makes every epoch n = max(nsamples, nbatches) items, in place.

        As in the reference, n counts the items of each DataLoader worker (and
        of each worker of a wds.Loader): with W workers an epoch is W * n
        items; a worker whose data runs out continues with a fresh pass (a
        new shard permutation here), and a pass that yields nothing ends its
        epoch early. n = -1 repeats passes until one yields nothing.

        across_workers=True (not in the reference) makes n the items of all
        DataLoader workers of this rank together (worker w of W yields
        ceil((n - w) / W)), and a pass that yields nothing a ValueError: each
        rank runs exactly n steps, which DDP needs (see agreed_steps).
        """
        n = max(nsamples, nbatches)
        self.epoch_length = None if n < 0 else int(n)
        self.across_workers = bool(across_workers)
        self.repetitions = sys.maxsize
        self.nsamples = n
        return self

    def repeat(self, nepochs=-1, nbatches=-1):
        """Iterates nepochs passes (each a fresh pass: a new shard
        permutation), at most nbatches items in all, in place. Unlike the
        reference, nbatches also applies when nepochs is 1."""
        self.epoch_length = None
        self.repetitions = nepochs if nepochs > 0 else sys.maxsize
        self.nsamples = nbatches
        return self

    def with_length(self, n, silent=False):
        """Sets what len() returns (and nothing else), in place. Unlike the
        reference's, the object stays picklable."""
        if not silent:
            warnings.warn(".with_length() only sets the value of __len__ for compatibility with "
                          "some training environments. It does not change the number of samples "
                          "in an epoch.")
        self.size = int(n)
        return self

    def worker_items(self, worker, num_workers):
        """The items of worker `worker` of `num_workers` in a with_epoch epoch."""
        if not self.across_workers:
            return self.epoch_length
        return _plan.worker_share(self.epoch_length, worker, num_workers)

    def __len__(self):
        """with_length(n)'s n, else with_epoch(n, across_workers=True)'s n.
        A per-worker with_epoch(n) gives none (as the reference): the
        loader's length would depend on its workers."""
        if self.size is not None:
            return self.size
        if self.epoch_length is not None and self.across_workers:
            return self.epoch_length
        raise TypeError(f"object of type '{type(self).__name__}' has no len() (use "
                        f".with_length(n) or .with_epoch(n, across_workers=True))")

    # -------------------------------------------------------- iterating

    def context(self, epoch=None):
        """The Context of an iteration in this process."""
        return _plan.Context.current(self.epoch if epoch is None else epoch, self.seed)

    def iterator1(self, ctx=None):
        """One pass over the stages."""
        return _plan.run_stages(self.pipeline, ctx or self.context())

    def iterator(self, ctx, first_pass=0, taken=0):
        """The items of one epoch. A restored iteration (ctx.position holding
        the checkpoint to start at) starts at pass `first_pass`, `taken`
        items in."""
        if self.repetitions == 1 and self.nsamples <= 0:
            return self.iterator1(ctx.with_pass(first_pass))
        limit = self.nsamples if self.nsamples > 0 else None
        strict = None
        if self.epoch_length is not None:
            limit = self.worker_items(ctx.worker, ctx.num_workers)
        if self.epoch_length is not None and self.across_workers:
            segment = _plan.single_native_segment(self.pipeline, ctx)
            if segment is not None:
                return segment.open(None, ctx.with_pass(first_pass),
                                    length=max(0, limit - taken))
            strict = f"with_epoch({self.epoch_length}, across_workers=True)"
        return _plan.take_passes(lambda p: self.iterator1(ctx.with_pass(p)), limit, first_pass,
                                 taken, self.repetitions, strict)

    def __iter__(self):
        if self._closed:
            raise ValueError(f"I/O operation on a closed {type(self).__name__}")
        ctx = self.context()
        start, self._restore = self._restore, None
        elastic = self._elastic[1] if self._elastic and self._elastic[0] == ctx.epoch else None
        if start is not None:
            _check_placement(start, ctx)
            position = _plan.Position(ctx, _tuple_or_none(start["checkpoint"]), start["yielded"],
                                      start["ended"], elastic=start.get("elastic", elastic))
        else:
            position = _plan.Position(ctx, elastic=elastic)
        self._position = position
        self.epoch += 1
        if position.ended:
            return self._tracked(iter(()))
        checkpoint = position.restore
        ctx = dataclasses.replace(ctx, position=position)
        it = self.iterator(ctx, checkpoint[0] if checkpoint else 0, position.yielded)
        return self._tracked(_counted(it, position))

    # -------------------------------------------------------- checkpoints

    def state_dict(self):
        """The position of the latest iteration started in this process (in
        a DataLoader worker: that worker's), for a checkpoint: a small
        picklable dict (the epoch, items yielded, and the shard source's
        checkpoint: its pass, how many samples its source and shuffle buffer
        yielded, and the samples a stage before the shuffle dropped), no
        data. Before any iteration, just the epoch.

        Never raises: StatefulDataLoader calls it in every worker at every
        step. For a pipeline (or a position) that cannot be recorded (see
        docs/PYTHON.md, "Resuming mid-epoch") the state says so:
        {"resumable": False, "reason": ...} with the epoch, and
        load_state_dict() of it raises ValueError naming the reason."""
        position = self._position
        if position is None:
            return {"format": _STATE_FORMAT, "version": _STATE_VERSION, "epoch": self.epoch,
                    "started": False}
        ctx = position.ctx
        if position.recipe is None:
            try:
                position.recipe = self._recipe(ctx)
            except _plan.Unrecordable as e:
                position.recipe = e  # a static property of the pipeline: asked once
        if isinstance(position.recipe, _plan.Unrecordable):
            return _unresumable(ctx.epoch, str(position.recipe))
        checkpoint, why_not = position.checkpoint()
        if why_not is not None and not position.ended:
            return _unresumable(ctx.epoch, f"this position of the pipeline: {why_not}")
        state = {"format": _STATE_FORMAT, "version": _STATE_VERSION, "recipe": position.recipe,
                 "placement": [ctx.rank, ctx.world_size, ctx.worker, ctx.num_workers],
                 "epoch": ctx.epoch, "started": True, "ended": position.ended,
                 "yielded": position.yielded, "checkpoint": checkpoint}
        if position.elastic is not None:
            state["elastic"] = position.elastic  # what this epoch's pass 0 was a share of
        return state

    def load_state_dict(self, state_dict):
        """Makes the next iter() continue the iteration `state_dict` describes
        (from state_dict() of this pipeline, in the same rank and DataLoader
        worker): the same items in the same order, shuffle buffer included.
        A state taken after its iteration ended gives an empty iteration;
        the next one runs the following epoch. A state of another pipeline
        (shards, seed, stages and their parameters, epoch sizing), placement
        or version raises ValueError, and so does a state that records no
        position (state_dict() of a pipeline or position it cannot record),
        naming why: continuing from the epoch's start instead would repeat
        what was trained on, so that choice is left to the caller."""
        if isinstance(state_dict, dict) and JOB_KEY in state_dict:
            self._load_job(state_dict[JOB_KEY])
            return
        state = _checked_state(state_dict)
        if not state["started"]:
            self.epoch = state["epoch"]
            self._restore = None
            return
        ctx = self.context(state["epoch"])
        _check_placement(state, ctx)
        if self._recipe(ctx) != state["recipe"]:
            raise ValueError("load_state_dict: the state was taken with another pipeline (its "
                             "shards, seed, stages, their parameters or its epoch sizing differ)")
        self.epoch = state["epoch"]
        self._restore = state

    def job_state_dict(self, worker_states):
        """One job state of the state_dict() of every worker (every DataLoader
        worker of every rank) of this pipeline, taken at the same step: the
        state load_state_dict() (and a wds.Loader's) takes on any world size
        and number of workers (an elastic resume). StatefulDataLoader keeps
        the worker states; gather them over the ranks with all_gather_object.
        ValueError for a missing or repeated worker, states of another
        pipeline or epoch, or a state that records no position."""
        states = [_checked_state(s) for s in worker_states]
        started = [s for s in states if s["started"]]
        if not started:
            raise ValueError("job_state_dict: no worker had started its epoch")
        _, world, _, workers = started[0]["placement"]
        epoch = started[0]["epoch"]
        grid = [[None] * workers for _ in range(world)]
        for s in started:
            rank, w_world, worker, w_workers = s["placement"]
            if (w_world, w_workers, s["epoch"]) != (world, workers, epoch):
                raise ValueError(f"job_state_dict: rank {rank} worker {worker}'s state is of "
                                 "another layout or epoch than the others' (states of one step?)")
            if grid[rank][worker] is not None:
                raise ValueError(f"job_state_dict: rank {rank} worker {worker}'s state is there "
                                 "twice")
            checkpoint = s["checkpoint"]
            if checkpoint is not None and len(checkpoint) == 4 and checkpoint[3]:
                raise ValueError("job_state_dict: a stage before the shuffle dropped samples, so "
                                 "what a worker left over cannot be worked out from its position")
            grid[rank][worker] = (tuple(checkpoint[:3]) if checkpoint else (0, 0, -1)) + (
                s["ended"],)
        missing = [f"rank {r} worker {w}" for r in range(world) for w in range(workers)
                   if grid[r][w] is None]
        if missing:
            raise ValueError(f"job_state_dict: no state of {', '.join(missing)}")
        ctx = dataclasses.replace(self.context(epoch), rank=0, world_size=world, worker=0,
                                  num_workers=workers)
        # The stages must be these; the epoch sizing may differ (a resumed
        # epoch is sized anew).
        stages = _plan.resume_recipe(self.pipeline, ctx)
        if any(s["recipe"].partition(_SIZING)[0] != stages for s in started):
            raise ValueError("job_state_dict: a state was taken with another pipeline")
        bases = {s.get("elastic") for s in started}
        if len(bases) > 1:
            raise ValueError("job_state_dict: the workers' epochs resumed from different job "
                             "states")
        chain = _plan.shard_chain(self.pipeline, ctx)
        return {JOB_KEY: _core.job_state_of_workers(chain, epoch, grid, bases.pop() or "")}

    def _load_job(self, text):
        """load_state_dict of a job state: its epoch runs next, each worker's
        shard chain reading its share of what the job left over."""
        info = _core.describe_job_state(text)
        self.epoch = info["epoch"]
        self._restore = None
        self._elastic = (info["epoch"], text) if info["running"] else None
        if self._elastic is not None:
            # Refuse another recipe now, not in the workers.
            ctx = self.context(info["epoch"])
            _core.plan_resumed_epoch(_plan.shard_chain(self.pipeline, ctx), text,
                                     rank=ctx.rank, world_size=ctx.world_size,
                                     num_workers=ctx.num_workers, batch_size=1, partial=True)

    def _recipe(self, ctx):
        return (f"{_plan.resume_recipe(self.pipeline, ctx)}{_SIZING}{self.epoch_length},"
                f"across_workers={self.across_workers},repetitions={self.repetitions},"
                f"nsamples={self.nsamples}")

    def _tracked(self, it):
        try:
            self._live.add(it)
        except TypeError:  # an iterator without weak references
            it = _Closing(it)
            self._live.add(it)
        return it

    def close(self):
        """Closes every running iteration of this object (files, pipe:
        commands) and the object itself."""
        for it in list(self._live):
            it.close()
        for stage in self.pipeline:
            close = getattr(stage, "close", None)
            if callable(close):
                close()
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()


_STATE_FORMAT = "webdataset_cpp.DataPipeline"
_SIZING = ";epoch_length="  # where a state's recipe turns from the stages to the epoch sizing
_STATE_VERSION = 1
_STATE_KEYS = {"recipe": str, "placement": list, "epoch": int, "ended": bool, "yielded": int,
               "checkpoint": (list, tuple, type(None))}


def _unresumable(epoch, reason):
    """The state of a pipeline or position that cannot be recorded."""
    return {"format": _STATE_FORMAT, "version": _STATE_VERSION, "epoch": epoch, "started": True,
            "resumable": False, "reason": reason}


def _checked_state(state):
    """`state` if it is a DataPipeline state of this version that records a
    position, else ValueError."""
    if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
        raise ValueError("load_state_dict: not a webdataset_cpp DataPipeline state (no "
                         f"'format': {_STATE_FORMAT!r})")
    if state.get("version") != _STATE_VERSION:
        raise ValueError(f"load_state_dict: DataPipeline state version {state.get('version')!r} "
                         f"is unknown (this version reads {_STATE_VERSION})")
    if state.get("resumable", True) is not True:
        epoch = state.get("epoch")
        raise ValueError(f"load_state_dict: this state records no position to resume from: "
                         f"{state.get('reason')} (restore without it: set_epoch({epoch}) starts "
                         f"epoch {epoch} afresh)")
    keys = _STATE_KEYS if state.get("started") else {"epoch": int}
    for key, kind in keys.items():
        if not isinstance(state.get(key), kind):
            raise ValueError(f"load_state_dict: the state's {key!r} is missing or malformed")
    if not _checkpoint_ok(state.get("checkpoint")):
        raise ValueError("load_state_dict: the state's 'checkpoint' is malformed")
    return state


def _checkpoint_ok(checkpoint):
    """Whether a state's checkpoint has its shape: None, or [pass, source_out,
    shuffle_out] and optionally the dropped runs [[first, end], ...] (their
    values are checked when the chain opens)."""
    if checkpoint is None:
        return True
    if len(checkpoint) not in (3, 4) or not all(isinstance(v, int) for v in checkpoint[:3]):
        return False
    runs = checkpoint[3] if len(checkpoint) == 4 else []
    return isinstance(runs, (list, tuple)) and all(
        isinstance(r, (list, tuple)) and len(r) == 2 and all(isinstance(v, int) for v in r)
        for r in runs)


def _check_placement(state, ctx):
    mine = [ctx.rank, ctx.world_size, ctx.worker, ctx.num_workers]
    if list(state["placement"]) != mine:
        r, w, k, n = state["placement"]
        raise ValueError(
            f"load_state_dict: the state was taken by rank {r} of {w}, DataLoader worker {k} of "
            f"{n}, not rank {mine[0]} of {mine[1]}, worker {mine[2]} of {mine[3]} (load each "
            "worker's state in that worker, as StatefulDataLoader does; another layout is not "
            "supported)")


def _tuple_or_none(checkpoint):
    return None if checkpoint is None else tuple(checkpoint)


def _counted(it, position):
    """Yields from `it`, counting items and noting the end in `position`."""
    try:
        for item in it:
            position.yielded += 1
            yield item
        position.ended = True
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


class _Closing:
    """An iterator whose close() closes the underlying generator."""

    def __init__(self, it):
        self.it = iter(it)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.it)

    def close(self):
        close = getattr(self.it, "close", None)
        if close is not None:
            close()
