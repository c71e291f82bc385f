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
import sys

from . import _core

TORCH = 1
JSON = 2

# What a stage does to the stream, declared by the stage as its `_wds_kind`
# attribute (a curried filter by its function's): the planner, the resume
# recipe and the epoch planner ask it instead of testing classes. A stage that
# declares nothing may change the stream in any way.
ONE_TO_ONE = "one_to_one"  # one output per input, in order (decode, rename, to_tuple)
SHUFFLE = "shuffle"  # one output per input, reordered through a buffer
BATCHES = "batches"  # one output per `batchsize` inputs; has batchsize and partial
HOLDS = "holds"  # holds inputs between its outputs (mcached, unbatched, unlisted)

SEED_MASK = 2**64 - 1  # seeds cross to the core as uint64
# What the native shard source fuses (see shardlists.fuse_source):
SHARD_LIST = "shard_list"  # a list of shard URLs with ordered_urls() (SimpleShardList)
RESAMPLED_SHARDS = "resampled_shards"  # URLs drawn with replacement (ResampledShards)
SHARD_SHUFFLE = "shard_shuffle"  # permutes the URLs by (seed, epoch, pass) (epoch_shuffle)


# Methods by which a subclass changes what a stage does: one that redefines
# any of them below the class declaring `_wds_kind` is not that kind.
_BEHAVIOUR = ("__iter__", "__call__", "run")


def kind_of(stage):
    """The `_wds_kind` a stage declares, or None (a class is no stage; a
    subclass that redefines how the declaring class iterates is a Python
    step, as the reference would run it)."""
    if isinstance(stage, type):
        return None
    kind = getattr(stage, "_wds_kind", None)
    if kind is None:
        return getattr(getattr(stage, "f", None), "_wds_kind", None)
    for cls in type(stage).__mro__:
        if "_wds_kind" in vars(cls):
            break
        if any(name in vars(cls) for name in _BEHAVIOUR):
            return None
    return kind


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
        return run_steps([PythonStep(lambda: iter(src)), *plan([self], ctx)], ctx)

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class PythonStep:
    """A stage that runs in Python: a Stage's python(), else the stage run
    as the reference's DataPipeline runs it."""

    native = False

    def __init__(self, stage):
        self.stage = stage

    def open(self, upstream, ctx):
        if isinstance(self.stage, Stage):
            return self.stage.python(upstream, ctx)
        return invoke(self.stage) if upstream is None else invoke(self.stage, upstream)


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

    native = True

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
                                      self.source.core_remote(),
                                      select_files=self.source.select_files,
                                      rename_files=self.source.rename_files)
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
        elastic = position.elastic if position is not None else None
        it = chain.open(**ctx.open_args(), length=length, kinds=fn, kind_names=names,
                        shared_blocks=worker_blocks(), restore=restore, elastic=elastic)
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
    """Splits a stage list into steps (each with .native and .open(upstream,
    ctx)): NativeSegments and PythonSteps."""
    from .shardlists import fuse_source

    steps = []
    i = 0
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
            steps.append(PythonStep(stage))
            continue
        if getattr(stage, "reads_urls", False):
            steps.append(NativeSegment("urls", stage, []))
        elif steps and steps[-1].native:
            steps[-1].stages.append(stage)
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
        it = step.open(it, ctx)
    return iter(()) if it is None else it


def run_stages(stages, ctx):
    return run_steps(plan(stages, ctx), ctx)


def single_native_segment(stages, ctx):
    """The NativeSegment when the whole list is one native chain from the
    shard source on, else None."""
    steps = plan(stages, ctx)
    if len(steps) == 1 and steps[0].native and steps[0].fully_native():
        return steps[0]
    return None


def worker_share(n, worker, num_workers):
    """Items worker `worker` yields of an epoch of n taken round-robin."""
    return max(0, (n - worker + num_workers - 1) // num_workers)


def take_passes(run_pass, limit, first_pass=0, taken=0, passes=sys.maxsize, strict=None):
    """Yields at most `limit` items (None: no limit) from passes first_pass,
    first_pass + 1, ... (fewer than `passes`) of run_pass.

    A pass that yields nothing ends the iteration, as in the reference; with
    `strict` (what promised `limit` items) it is a ValueError naming it. A
    restored iteration starts at `first_pass`, `taken` items in (which then
    had items, so it is not empty however few more it yields)."""
    if limit is not None and taken >= limit:
        return
    for pass_ in range(first_pass, passes):
        got = 1 if taken > 0 and pass_ == first_pass else 0
        it = run_pass(pass_)
        try:
            for item in it:
                yield item
                taken += 1
                got += 1
                if limit is not None and taken >= limit:
                    return
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
        if got == 0 and strict:
            raise ValueError(f"{strict}: pass {pass_} of this worker's data yielded nothing "
                             f"({taken} of {limit} items so far)")
        if got == 0:
            return


# ------------------------------------------------------------ checkpoints


# JOB_KEY is the key of a job state dict (Loader.job_state_dict,
# DataPipeline.job_state_dict, gather_state_dict): the core's job state text,
# which resumes an epoch on any layout (wds/loader/elastic.h).
JOB_KEY = "webdataset_cpp.job_state"


def shard_chain(stages, ctx):
    """The native chain that reads the shards of `stages` in ctx (the first
    step), or ValueError."""
    steps = plan(stages, ctx)
    if not steps or not steps[0].native or steps[0].kind != "shards":
        raise ValueError("an elastic resume needs a pipeline that starts with the native shard "
                         "source (a WebDataset)")
    chain, _, _ = steps[0].build(None, ctx)
    return chain


class Position:
    """Where one iteration of a pipeline stands, in positions, not data: what
    DataPipeline.state_dict() records.

    The shard source's chain keeps the core's checkpoint (its pass, and how
    many samples its source and its shuffle buffer yielded) after each item;
    the iteration counts the items it yielded and notes its end. `restore`
    is a checkpoint the next shard chain of the iteration opens at.
    """

    def __init__(self, ctx, restore=None, yielded=0, ended=False, elastic=None):
        self.ctx = dataclasses.replace(ctx, position=None)
        self.restore = restore
        # elastic: the job state whose leftover this epoch's pass 0 reads.
        self.elastic = elastic
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


def _step_name(stage):
    if isinstance(stage, Stage):
        return getattr(stage, "name", None) or type(stage).__name__
    return getattr(stage, "__qualname__", None) or type(stage).__name__


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
    steps = plan(stages, ctx)
    first = steps[0] if steps else None
    if first is None or not first.native or not first.fully_native():
        raise Unrecordable(
            "the pipeline must start with the native shard source (a WebDataset, or "
            "SimpleShardList, epoch_shuffle, split_by_node, split_by_worker and "
            "tarfile_to_samples with a native handler); the position of a Python source cannot "
            "be recorded")
    resampler = first.source.resampler
    if resampler is not None and not resampler.repeatable():
        raise Unrecordable("shards resampled without a seed are drawn anew every run, which no "
                           "state can replay: give the dataset a seed (WebDataset(seed=...), "
                           "$WDS_SEED) or ResampledShards(seed=...)")
    if not isinstance(first.source.tar.core_handler(), str):
        raise Unrecordable("a Python handler callable reads the shards one at a time, which a "
                           "state cannot record (use a named handler such as warn_and_continue)")
    batched = [i for i, s in enumerate(first.stages) if kind_of(s) == BATCHES]
    shuffles = [i for i, s in enumerate(first.stages) if kind_of(s) == SHUFFLE]
    if batched and shuffles and batched[0] < shuffles[-1]:
        raise Unrecordable("a shuffle after batched holds batches, whose samples a state cannot "
                           "name (shuffle before batched)")
    parts = []
    for i, step in enumerate(steps):
        if not step.native:
            if kind_of(step.stage) == HOLDS:
                raise Unrecordable(f"{_step_name(step.stage)} holds items between its outputs, "
                                   "which a state cannot record")
            parts.append(_step_name(step.stage))
            continue
        if i > 0 and step.kind == "urls":
            raise Unrecordable("a tar reader fed by Python (tarfile_to_samples after a Python "
                               "stage) cannot record its position")
        chain = step.build(iter(()), ctx)[0]
        if chain.checkpoint_blocker:
            raise Unrecordable(f"the {chain.checkpoint_blocker} stage keeps a position a state "
                               "cannot record")
        if i > 0 and any(kind_of(s) == SHUFFLE for s in step.stages):
            raise Unrecordable("a shuffle after a Python stage holds samples the shard source's "
                               "position does not describe (shuffle before any Python stage)")
        parts.append(chain.recipe)
    why = unrecordable_stage(stages, ctx)
    if why is not None:
        raise Unrecordable(why)
    return "|".join(parts)


def unrecordable_stage(stages, ctx):
    """Why a stage says a state cannot record its position (an unseeded
    shuffle: its `_wds_unrecordable(ctx)`), or None."""
    for stage in stages:
        why = getattr(stage, "_wds_unrecordable", None)
        reason = why(ctx) if why is not None else None
        if reason:
            return reason
    return None
