"""Equal steps on every rank: the core's epoch plans, agreed over torch.distributed.

DDP hangs when ranks run different numbers of steps. Before an epoch every
rank plans it exactly as it will run: the epoch's shard permutation and
rank/worker split (the same code the shard source uses), per-shard sample
counts from the dataset's ``dataset_index``, the ``.idx`` sidecars (``wds-shard
index`` or ``webdataset_cpp.write_index``; else a header-only scan of the tar),
read once per process, and one batch sequence per DataLoader worker taken
round-robin. An all-gather then agrees on the number of steps, which
``with_epoch(steps, across_workers=True)`` enforces (steps are a rank's
batches over all its workers; a plain ``with_epoch(n)`` counts n per worker),
and checks that every rank splits the data alike.

>>> import torch
>>> import webdataset_cpp as wds
>>> with wds.ShardWriter("train-%06d.tar", maxcount=7, verbose=0, index=True) as sink:
...     for i in range(30):                # shards of 7, 7, 7, 7 and 2 samples
...         sink.write({"__key__": f"{i:06d}", "cls": i % 10})
>>> dataset = (wds.WebDataset("train-{000000..000004}.tar", shardshuffle=100,
...                           nodesplitter=wds.split_by_node)
...            .decode().to_tuple("cls").batched(4, partial=False))
>>> for epoch in range(2):
...     dataset.set_epoch(epoch)
...     steps = wds.agreed_steps(dataset, num_workers=2)   # the same on every rank
...     loader = torch.utils.data.DataLoader(dataset.with_epoch(steps, across_workers=True),
...                                          batch_size=None, num_workers=2)
...     print(epoch, steps, sum(1 for _ in loader))    # exactly `steps` batches per rank
0 6 6
1 6 6

(The shards have sidecars, so samples are shared out: 15 per worker, 3 full
batches each. With split="shards" the workers would read 3 and 2 whole
shards: 16 and 14 samples, or 21 and 9, depending on the epoch.)

Policies: "drop" (the smallest rank's batches that repeat no sample: some
samples of the larger ranks are left out this epoch), "wrap" (the largest
rank's count: smaller ranks' workers continue into their next pass, so every
sample is seen and some twice) and, for evaluation, "pad" (the largest rank's
natural batch count: every sample exactly once, the smaller ranks running
padding steps after their last batch; iterate the natural epoch, without
with_epoch, through ``padded_epoch``):

>>> val = (wds.WebDataset("train-{000000..000004}.tar", shardshuffle=False,
...                       nodesplitter=wds.split_by_node)
...        .decode().to_tuple("cls", "__key__").batched(4))   # partial batches: all samples
>>> steps = wds.agreed_steps(val, num_workers=2, policy="pad")
>>> for (labels, keys), real in wds.padded_epoch(
...         torch.utils.data.DataLoader(val, batch_size=None, num_workers=2), steps):
...     seen = torch.tensor([len(keys) if real else 0])  # a padding step counts nothing
...     # torch.distributed.all_reduce(seen) would pair up on every rank
>>> steps
8
"""

import sys

from . import _core, _plan
from .remote import native_options
from .utils import node_info


def _planned_source(dataset, ctx):
    segment = _plan.single_native_segment(dataset.pipeline, ctx)
    if segment is None:
        raise ValueError("plan_epoch needs a dataset whose stages are all native (a WebDataset "
                         "with decode, to_tuple, rename, shuffle and batched)")
    batching = (1, True)
    for i, stage in enumerate(segment.stages):
        kind = _plan.kind_of(stage)
        if kind == _plan.BATCHES and i == len(segment.stages) - 1:
            batching = (stage.batchsize, bool(stage.partial))
        elif kind not in (_plan.ONE_TO_ONE, _plan.SHUFFLE):
            raise ValueError(f"plan_epoch: {stage!r} may change how many samples there are")
    if segment.source.resampled:
        raise ValueError("plan_epoch: resampled datasets have no natural epoch")
    return segment.source, batching


def plan_epoch(dataset, num_workers=1, epoch=None, rank=None, world_size=None, group=None,
               remote=None, resume=None):
    """This rank's epoch: a _core.RankEpochPlan with .workers (shards,
    samples, batches per DataLoader worker), .batches, .samples and
    .local_steps(policy). Remote shards not counted yet are counted with
    `remote` (a RemoteOptions), else with the dataset's own remote options
    and cache. With `resume` (a job state dict, gather_state_dict), the plan
    is of this rank's share of what that job left of its epoch (workers name
    no shards)."""
    if rank is None or world_size is None:
        rank, world_size = node_info(group)
    epoch = dataset.epoch if epoch is None else epoch
    num_workers = max(1, num_workers)  # DataLoader(num_workers=0) reads in the main process
    ctx = _plan.Context(rank, world_size, 0, num_workers, epoch, 0, dataset.seed)
    source, (batch_size, partial) = _planned_source(dataset, ctx)
    if resume is not None:
        segment = _plan.single_native_segment(dataset.pipeline, ctx)
        chain, _, _ = segment.build(None, ctx)
        return _core.plan_resumed_epoch(chain, _job_text(resume), rank=rank,
                                        world_size=world_size, num_workers=num_workers,
                                        batch_size=batch_size, partial=partial)
    return _core.plan_rank_epoch(source.urls, **source.list_args(ctx), rank=rank,
                                 world_size=world_size, num_workers=num_workers, epoch=epoch,
                                 seed=source.seed(ctx), batch_size=batch_size, partial=partial,
                                 split_samples=source.split_samples,
                                 dataset_index=source.dataset_index,
                                 index_remote=source.index_remote(),
                                 index_digest=source.index_digest,
                                 remote=(native_options(remote) if remote is not None
                                         else source.tar.core_remote()))


def agreed_steps(dataset, num_workers=1, policy="drop", epoch=None, group=None, remote=None,
                 resume=None, allow_empty=False):
    """The steps every rank runs this epoch: this rank's plan (counts read
    as plan_epoch reads them, `remote` included), then the MIN ("drop") or
    MAX ("wrap", "pad") over `group` when torch.distributed is initialized (an
    all-gather, which also checks that every rank splits the data alike:
    ValueError on every rank, naming them, otherwise). With `resume` (a job
    state dict), the steps of the rest of that job's epoch on this layout.

    A rank whose plan fails (a shard that cannot be counted, a worker
    without shards) raises its error, and every other rank a ValueError
    naming it, rather than wait for it in the all-gather. Under "pad" a
    rank without a batch has nothing to pad with: ValueError on every rank,
    unless allow_empty=True (then give padded_epoch a fill)."""
    if policy not in ("drop", "wrap", "pad"):
        raise ValueError(f"policy must be 'drop', 'wrap' or 'pad', got {policy!r}")
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    distributed = dist is not None and dist.is_available() and dist.is_initialized()
    try:
        local = plan_epoch(dataset, num_workers=num_workers, epoch=epoch, group=group,
                           remote=remote, resume=resume)
    except Exception as e:
        if not distributed:
            raise
        failed = e
        mine = [-1, 0, 0, 0, 0]
    else:
        failed = None
        # Every rank's steps, split and list: ranks that split differently
        # (split=None seeing different sidecars), or over other lists or
        # counts (a stale copy of the index), would read overlapping or
        # missing samples.
        digest = (local.list_digest - (1 << 64) if local.list_digest >= (1 << 63)
                  else local.list_digest)
        mine = [local.local_steps(policy), int(_split_samples(dataset)), digest,
                local.dataset_shards, local.dataset_samples]
    if not distributed:
        rows = [mine]
    else:
        mine = torch.tensor(mine, dtype=torch.int64, device=reduce_device(group))
        gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(gathered, mine, group=group)
        rows = [row.tolist() for row in gathered]

    def ranks_where(test):
        """The global ranks of the rows that pass `test`."""
        return [_global_rank(dist, group, i) if distributed else 0
                for i, row in enumerate(rows) if test(row)]

    if failed is not None:
        raise failed
    broken = ranks_where(lambda row: row[0] < 0)
    if broken:
        raise ValueError(f"agreed_steps: rank(s) {broken} could not plan their epoch (their own "
                         "error says why), so the ranks cannot agree on its steps")
    counts = [row[0] for row in rows]
    agreed = min(counts) if policy == "drop" else max(counts)
    empty = ranks_where(lambda row: row[0] == 0) if policy == "pad" else []
    if policy == "pad" and empty and agreed > 0 and not allow_empty:
        raise ValueError(
            f"agreed_steps: rank(s) {empty} have no batch this epoch, so padded_epoch would have "
            "nothing to pad their steps with: give every rank data (split='samples', more "
            "shards or fewer ranks), or pass allow_empty=True and padded_epoch(..., fill=<a "
            "batch>)")
    if not distributed:
        return agreed
    if all(row[2] == 0 for row in rows):  # no rank splits its list by node: nothing to compare
        return agreed
    if all(row[2] != 0 for row in rows) and len({row[1] for row in rows}) > 1:
        by_samples = [_global_rank(dist, group, i) for i, row in enumerate(rows) if row[1]]
        by_shards = [_global_rank(dist, group, i) for i, row in enumerate(rows) if not row[1]]
        raise ValueError(
            f"agreed_steps: the ranks do not split the data alike: ranks {by_samples} share out "
            f"samples, ranks {by_shards} whole shards, so their shares would overlap or leave "
            "samples out (a dataset made with split=None chooses by the .idx sidecars and "
            "dataset_index its rank sees: make them visible to every rank, or pass "
            "split='samples' or split='shards')")
    if len({row[2] for row in rows}) > 1:
        lists = {}  # digest -> (its ranks, shards, samples), in the order of their first rank
        for i, (_, _, d, shards, samples) in enumerate(rows):
            lists.setdefault(d, ([], shards, samples, d == 0))[0].append(
                _global_rank(dist, group, i))
        seen = "; ".join(f"ranks {ranks} {shards} shards" + (f", {n} samples" if n else "") +
                         (" of their own (not split by node)" if own else "")
                         for ranks, shards, n, own in lists.values())
        raise ValueError(
            f"agreed_steps: the ranks do not see the same shard list and counts ({seen}), so "
            "their shares would overlap or leave samples out: give every rank the same list and "
            "the same dataset index (a stale copy of the index, or a directory listed while "
            "shards are written, differ)")
    return agreed


class padded_epoch:
    """Exactly `steps` steps over one natural epoch of `loader`, for an
    evaluation that sees every sample once while every rank runs the same
    steps (agreed_steps(..., policy="pad")): iterating yields (batch, True)
    for each batch the loader yields, then (its last batch, False) for the
    steps left, so that a per-step collective (a metric's all-reduce, a
    Lightning log with sync_dist=True) pairs up on every rank while padding
    counts nothing. len() is `steps`; each iter() runs the loader's epoch
    once.

    `loader` is a DataLoader, wds.Loader or WebLoader (or any iterable)
    over the dataset's natural epoch. `fill` pads a rank whose loader yields
    no batch at all (else ValueError, then). The steps are one epoch's: a
    dataset read without shardshuffle has the same every epoch, so one
    padded_epoch serves every evaluation; with shardshuffle, agree on the
    steps and make a padded_epoch for each epoch.

    ValueError for steps < 0, a dataset sized by with_epoch or repeat (its
    workers would repeat samples from another pass instead of padding), and
    when the loader yields more than `steps` batches: the plans the ranks
    agreed with do not describe this rank's epoch, and nothing after step
    `steps` is yielded."""

    _NONE = object()

    def __init__(self, loader, steps, fill=_NONE):
        steps = int(steps)
        if steps < 0:
            raise ValueError(f"padded_epoch: steps {steps} < 0")
        sizing = _epoch_sizing(loader)
        if sizing is not None:
            raise ValueError(f"padded_epoch: the dataset has {sizing}, so its workers would "
                             "repeat samples from another pass instead of padding: iterate its "
                             "natural epoch")
        self.loader = loader
        self.steps = steps
        self.fill = fill

    def __len__(self):
        return self.steps

    def __iter__(self):
        taken, last = 0, self._NONE
        for batch in self.loader:
            if taken == self.steps:
                raise ValueError(
                    f"padded_epoch: this rank's loader yielded more than the {self.steps} agreed "
                    "steps, so the plans the ranks agreed with do not describe its epoch (other "
                    f"counts, workers or batching?); the batches after step {self.steps} were "
                    "not yielded")
            yield batch, True
            last = batch
            taken += 1
        if taken == self.steps:
            return
        if last is self._NONE:
            last = self.fill
        if last is self._NONE:
            raise ValueError(f"padded_epoch: this rank's loader yielded no batch to pad its "
                             f"{self.steps} steps with: pass fill=<a batch of the usual shape>")
        for _ in range(self.steps - taken):
            yield last, False


def _epoch_sizing(loader):
    """What sizes the epoch of `loader` beyond its data ("with_epoch(...)",
    "repeat(...)"), looking through a DataLoader's or wds.Loader's dataset
    and a WebLoader's DataLoader, else None."""
    from . import extradatasets
    from .pipeline import DataPipeline

    pending, seen = [loader], set()
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, extradatasets.with_epoch):
            return "with_epoch(...)"
        if isinstance(item, extradatasets.repeatedly):
            return "repeatedly(...)"
        if isinstance(item, DataPipeline):
            if item.epoch_length is not None or item.nsamples > 0:
                return "with_epoch(...)"
            if item.repetitions != 1:
                return "repeat(...)"
            pending.extend(item.pipeline[:1])  # a WebLoader's DataLoader
        pending.append(getattr(item, "dataset", None))
    return None


def gather_state_dict(source, group=None, worker_states=None):
    """One job state dict of the whole job at this step, the same on every
    rank: load_state_dict takes it on any world size and number of workers
    (an elastic resume). Every rank must call it at the same step.

    `source` is a wds.Loader: its state_dict() is gathered over `group`
    (all_gather_object). Or it is the dataset a DataLoader iterates, with
    `worker_states` this rank's workers' dataset states (as a
    StatefulDataLoader keeps them): every rank's are gathered. Without
    torch.distributed, the job is this process alone."""
    mine = source.state_dict() if worker_states is None else list(worker_states)
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        gathered = [mine]
    else:
        gathered = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, mine, group=group)
    if worker_states is None:
        return source.job_state_dict(gathered)
    return source.job_state_dict([state for rank in gathered for state in rank])


def _job_text(state_dict):
    """The core's job state text of a job state dict."""
    if not isinstance(state_dict, dict) or _plan.JOB_KEY not in state_dict:
        raise ValueError("resume: not a job state dict (gather_state_dict, "
                         "Loader.job_state_dict or DataPipeline.job_state_dict make one)")
    return state_dict[_plan.JOB_KEY]


def _split_samples(dataset):
    """Whether the dataset's shard source shares out samples."""
    segment = _plan.single_native_segment(dataset.pipeline, _plan.Context(seed=dataset.seed))
    return segment is not None and bool(segment.source.split_samples)


def _global_rank(dist, group, rank):
    """The global rank of `rank` of `group` (None: the default group)."""
    return rank if group is None else dist.get_global_rank(group, rank)


def reduce_device(group=None):
    """Where a tensor must be for an all-reduce over `group`: the current CUDA
    device when its backend is NCCL alone (NCCL reduces only CUDA tensors),
    else the CPU (Gloo, MPI, UCC, and groups that also have a CPU backend,
    such as "cpu:gloo,cuda:nccl")."""
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend and "cpu:" not in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def count_samples(url, remote=None):
    """Samples in one shard: from its .idx sidecar (for a remote shard,
    "<url>.idx" when the server has it), else a header-only scan (of all of a
    pipe: or remote shard); remote URLs with `remote` (a RemoteOptions) when
    given, else the environment's settings."""
    return _core.count_samples(url, native_options(remote))


def write_index(url):
    """Writes the .idx sidecar of a local shard; returns its sample count."""
    return _core.write_index(url)
