"""How a pipeline's stage list runs: native chains and Python in between.

A pipeline is a list of stages. Consecutive stages that the native core can
run (the shard source, shuffle, decode, to_tuple, rename, batched, slice) are
grouped into one native chain that runs with the GIL released; everything else
(plain Python callables, generator functions, stages given Python callables)
runs in Python, where the user put it, on the chain's output. A native stage
after Python code is fed by that code's iterator.

The first stages fuse into the core's shard source when they are a
SimpleShardList (or ResampledShards), optionally an epoch_shuffle, the
reference's split_by_node / single_node_only and split_by_worker, and
tarfile_to_samples(): the shard list is then permuted, split and read natively.
"""

import dataclasses
import itertools
import sys

from . import _core

TORCH = 1
JSON = 2


@dataclasses.dataclass(frozen=True)
class Context:
    """Where and when one iteration runs."""

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1
    epoch: int = 0
    pass_: int = 0
    seed: int = 0
    # The Position of the iteration this context runs (see DataPipeline.state_dict).
    position: object = dataclasses.field(default=None, compare=False, repr=False)

    @classmethod
    def current(cls, epoch=0, seed=0, group=None):
        from .utils import node_info, worker_info

        rank, world_size = node_info(group)
        worker, num_workers = worker_info()
        return cls(rank, world_size, worker, num_workers, epoch, 0, seed)

    def with_pass(self, pass_):
        return dataclasses.replace(self, pass_=pass_)

    def open_args(self):
        return dict(rank=self.rank, world_size=self.world_size, worker=self.worker,
                    num_workers=self.num_workers, epoch=self.epoch, pass_=self.pass_)


class Stage:
    """A stage object made by this package.

    ``native(ctx)`` returns the native stage (a ``_core.Stage``), or None when
    the stage must run in Python as ``python(src, ctx)``. ``kinds(fn)`` maps a
    field-kind function through the stage (see ``FieldKinds``). Calling the
    object on an iterator runs it, as the reference's curried filters do:

    >>> import webdataset_cpp as wds
    >>> list(wds.slice(2)(iter([{"a": 1}, {"a": 2}, {"a": 3}])))
    [{'a': 1}, {'a': 2}]
    """

    def is_native(self, ctx):
        return False

    def native(self, ctx):
        raise NotImplementedError

    def python(self, src, ctx):
        raise NotImplementedError

    def kinds(self, fn, ctx):
        return fn

    def name_sets(self):
        return []

    def __call__(self, src):
        ctx = Context.current()
        return run_stages([_Given(src), self], ctx)

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class _Given:
    """An iterator given to a stage called directly: the pipeline's source."""

    def __init__(self, it):
        self.it = it


def _no_kind(name):
    return 0


def _set_kind(names):
    return lambda name: TORCH if name in names else 0


class FieldKinds:
    """Composes the kind functions of a native chain's stages, from the
    source's (fields that entered as torch tensors) to the chain's output."""

    def __init__(self, source_names=None):
        self.fn = _set_kind(source_names) if source_names is not None else _no_kind
        self.name_sets = [source_names] if source_names is not None else []

    def add(self, stage, ctx):
        self.fn = stage.kinds(self.fn, ctx)
        self.name_sets.extend(stage.name_sets())


def alternatives_kind(fn, spec):
    """The kind of a field chosen among ';' alternatives: only what every
    alternative would be (a field whose origin is ambiguous stays plain)."""
    kind = TORCH | JSON
    for alt in spec.split(";"):
        kind &= fn(alt)
    return kind


class NativeSegment:
    """A run of native stages and their source.

    source: ("shards", ShardSource) fused from the first stages, ("urls",
    TarfileToSamples) fed by a Python iterator of URLs, or ("samples", None)
    fed by a Python iterator of samples.
    """

    def __init__(self, kind, source, stages):
        self.kind = kind
        self.source = source
        self.stages = stages

    def build(self, upstream, ctx, kinds_extra=0):
        """(chain, kind function, the NameSets it reads) for one iteration."""
        if self.kind == "shards":
            source = self.source.core_source(ctx)
            kinds = FieldKinds()
        elif self.kind == "urls":
            from .shardlists import secure_urls

            source = _core.url_source(secure_urls(upstream), self.source.core_handler(),
                                      self.source.core_remote())
            kinds = FieldKinds()
        else:
            source = _core.sample_source(upstream)
            kinds = FieldKinds(source.tensor_names)
        stages = []
        for stage in self.stages:
            stages.append(stage.native(ctx))
            kinds.add(stage, ctx)
        chain = _core.Chain(source, stages, ctx.seed)
        fn = kinds.fn
        if kinds_extra:
            fn = lambda name, base=fn: base(name) | kinds_extra  # noqa: E731
        return chain, fn, kinds.name_sets

    def open(self, upstream, ctx, length=None):
        """Runs the chain. The shard source's chain reports to ctx.position
        and starts at its pending restore, if any."""
        from ._shared import worker_blocks

        chain, fn, names = self.build(upstream, ctx)
        position = ctx.position if self.kind == "shards" else None
        # The restore is taken, not read: only the first shard chain of a
        # restored iteration (the pass its checkpoint was taken in) starts at
        # it; the chains of its later passes (with_epoch, repeat) open at
        # their pass's start, and the checkpoint is the new chain's from now.
        restore = position.take_restore() if position is not None else None
        it = chain.open(**ctx.open_args(), length=length, kinds=fn, kind_names=names,
                        shared_blocks=worker_blocks(), restore=restore)
        if position is not None:
            position.chain = it
        # A chain restored after some samples is not empty, whatever follows.
        restored = restore is not None and restore[1] > 0
        return _iterate(it, self.source if self.kind == "shards" else None, ctx, restored)

    def fully_native(self):
        return self.kind == "shards"


def _iterate(it, shard_source, ctx, restored=False):
    """Yields from a native iterator, closing it when abandoned, and runs the
    source's empty check at the end."""
    try:
        yield from it
        if shard_source is not None and not restored:
            shard_source.check_count(it.count, ctx)
    finally:
        it.close()


def plan(stages, ctx):
    """Splits a stage list into steps: NativeSegments and Python callables."""
    from .shardlists import fuse_source

    steps = []
    i = 0
    if stages and isinstance(stages[0], _Given):
        steps.append(stages[0])
        i = 1
    else:
        fused = fuse_source(stages, ctx)
        if fused is None and getattr(stages[0] if stages else None, "split", None) == "samples":
            raise ValueError(
                "split='samples' needs the native shard source: the shard list, epoch_shuffle, "
                "split_by_node / split_by_worker and tarfile_to_samples with a native handler, "
                "with no Python stage between them")
        if fused is not None:
            source, i = fused
            steps.append(NativeSegment("shards", source, []))
    while i < len(stages):
        stage = stages[i]
        i += 1
        native = isinstance(stage, Stage) and stage.is_native(ctx)
        if not native:
            steps.append(stage)
            continue
        last = steps[-1] if steps else None
        if getattr(stage, "reads_urls", False):
            steps.append(NativeSegment("urls", stage, []))
        elif isinstance(last, NativeSegment):
            last.stages.append(stage)
        else:
            steps.append(NativeSegment("samples", None, [stage]))
    return steps


def invoke(f, *args):
    """Runs one Python step as the reference's DataPipeline.invoke does."""
    torch = sys.modules.get("torch")
    if torch is not None and not args:
        data = torch.utils.data
        if isinstance(f, (data.IterableDataset, data.DataLoader)):
            return iter(f)
    from .utils import PipelineStage

    if isinstance(f, PipelineStage):
        return f.run(*args)
    if isinstance(f, list):
        return iter(f)
    if callable(f):
        return f(*args)
    raise ValueError(f"{f}: not a valid pipeline stage")


def run_steps(steps, ctx):
    it = None
    for step in steps:
        if isinstance(step, _Given):
            it = iter(step.it)
        elif isinstance(step, NativeSegment):
            it = step.open(it, ctx)
        elif isinstance(step, Stage):
            it = step.python(it, ctx)
        elif it is None:
            it = invoke(step)
        else:
            it = invoke(step, it)
    if it is None:
        return iter(())
    return it


def run_stages(stages, ctx):
    return run_steps(plan(stages, ctx), ctx)


def single_native_segment(stages, ctx):
    """The NativeSegment when the whole list is one native chain from the
    shard source on, else None."""
    steps = plan(stages, ctx)
    if len(steps) == 1 and isinstance(steps[0], NativeSegment) and steps[0].fully_native():
        return steps[0]
    return None


def worker_share(n, worker, num_workers):
    """Items worker `worker` yields of an epoch of n taken round-robin."""
    return max(0, (n - worker + num_workers - 1) // num_workers)


def take_passes(run_pass, share, what, first_pass=0, taken=0):
    """Yields `share` items (None: forever) from passes 0, 1, ... of run_pass.

    A restored iteration starts at `first_pass`, `taken` items in (which then
    had items, so it is not empty however few more it yields)."""
    if share is not None and taken >= share:
        return
    for pass_ in itertools.count(first_pass):
        got = 1 if taken > 0 and pass_ == first_pass else 0
        it = run_pass(pass_)
        try:
            for item in it:
                yield item
                taken += 1
                got += 1
                if share is not None and taken >= share:
                    return
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
        if got == 0:
            raise ValueError(f"{what}: pass {pass_} of this worker's data yielded nothing "
                             f"({taken} of {share} items so far)")


# ------------------------------------------------------------ checkpoints


class Position:
    """Where one iteration of a pipeline stands, in positions, not data: what
    DataPipeline.state_dict() records.

    The shard source's chain keeps the core's checkpoint (its pass, and how
    many samples its source and its shuffle buffer yielded) after each item;
    the iteration counts the items it yielded and notes its end. `restore`
    is a checkpoint the next shard chain of the iteration opens at.
    """

    def __init__(self, ctx, restore=None, yielded=0, ended=False):
        self.ctx = dataclasses.replace(ctx, position=None)
        self.restore = restore
        self.yielded = yielded
        self.ended = ended
        self.chain = None
        self.recipe = None

    def take_restore(self):
        """The checkpoint to open the next shard chain at, once: see
        NativeSegment.open."""
        restore, self.restore = self.restore, None
        return restore

    def checkpoint(self):
        """(checkpoint, why not): the shard chain's [pass, source_out,
        shuffle_out] and, when a stage before its shuffle dropped samples,
        their runs [[first, end], ...]; None before its first item. `why not`
        is None, or why the chain's position cannot be restored from."""
        # A restore not taken yet (no shard chain opened since the state was
        # loaded) is where the iteration stands; once NativeSegment.open took
        # it, the chain it opened reports (from the restore on).
        if self.restore is not None:
            return _listed(self.restore), None
        if self.chain is None:
            return None, None
        checkpoint = self.chain.checkpoint  # asked at every step: the common case first
        if checkpoint is None:
            return None, self.chain.unrecordable or None
        return (list(checkpoint) if len(checkpoint) == 3 else _listed(checkpoint)), None


def _listed(checkpoint):
    """A checkpoint as plain lists (what a state holds)."""
    out = list(checkpoint[:3])
    if len(checkpoint) > 3:
        out.append([list(run) for run in checkpoint[3]])
    return out


class Unrecordable(ValueError):
    """Why a state cannot record a pipeline's position (see resume_recipe)."""


def _step_name(step):
    if isinstance(step, Stage):
        return getattr(step, "name", None) or type(step).__name__
    return getattr(step, "__qualname__", None) or type(step).__name__


def _holds_items(step):
    """Whether a Python step is known to hold items between two outputs."""
    from . import filters

    if isinstance(step, filters.Cached):
        return True
    return isinstance(step, filters.PythonFilter) and step.f in (filters._unbatched,
                                                                 filters._unlisted)


def resume_recipe(stages, ctx):
    """What a state records of the pipeline (its native chains' recipes and
    its Python steps' names); Unrecordable naming what a state cannot record.

    A state holds the shard chain's position only. Everything after it starts
    afresh at a restore, which is exact when nothing there holds items between
    two outputs: native chains without a shuffle or slice, and Python steps
    that take what they give (map, select, to_tuple, batched...). Python steps
    are the user's to keep so; unbatched, unlisted and Cached are refused.

    The shuffle of the shard chain may follow stages that drop samples (a
    decode with warn_and_continue): the chain records what they dropped. A
    batched before it is refused: the shuffle would hold batches, whose
    samples the chain's counts cannot name."""
    from . import filters

    steps = plan(stages, ctx)
    first = steps[0] if steps else None
    if not isinstance(first, NativeSegment) or first.kind != "shards":
        raise Unrecordable(
            "the pipeline must start with the native shard source (a WebDataset, or "
            "SimpleShardList, epoch_shuffle, split_by_node, split_by_worker and "
            "tarfile_to_samples with a native handler); the position of a Python source cannot "
            "be recorded")
    if first.source.resampled:
        raise Unrecordable("resampled shards have no position to record (draws are endless); "
                           "resume them by epoch")
    if not isinstance(first.source.tar.core_handler(), str):
        raise Unrecordable("a Python handler callable reads the shards one at a time, which a "
                           "state cannot record (use a named handler such as warn_and_continue)")
    batched = [i for i, s in enumerate(first.stages) if isinstance(s, filters.Batched)]
    shuffles = [i for i, s in enumerate(first.stages) if isinstance(s, filters.Shuffle)]
    if batched and shuffles and batched[0] < shuffles[-1]:
        raise Unrecordable("a shuffle after batched holds batches, whose samples a state cannot "
                           "name (shuffle before batched)")
    parts = []
    for i, step in enumerate(steps):
        if not isinstance(step, NativeSegment):
            if _holds_items(step):
                raise Unrecordable(f"{_step_name(step)} holds items between its outputs, which a "
                                   "state cannot record")
            parts.append(_step_name(step))
            continue
        if i > 0 and step.kind == "urls":
            raise Unrecordable("a tar reader fed by Python (tarfile_to_samples after a Python "
                               "stage) cannot record its position")
        chain = step.build(iter(()), ctx)[0]
        if chain.checkpoint_blocker:
            raise Unrecordable(f"the {chain.checkpoint_blocker} stage keeps a position a state "
                               "cannot record")
        if i > 0 and any(isinstance(s, filters.Shuffle) for s in step.stages):
            raise Unrecordable("a shuffle after a Python stage holds samples the shard source's "
                               "position does not describe (shuffle before any Python stage)")
        parts.append(chain.recipe)
    return "|".join(parts)
