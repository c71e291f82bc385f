"""Shard lists: URL patterns, epoch permutations, rank and worker splits.

The first stages of a pipeline, when they are a SimpleShardList (or
ResampledShards), optionally ``epoch_shuffle()``, ``split_by_node`` (or
``single_node_only``), ``split_by_worker`` and ``tarfile_to_samples()`` in this
order, run as the core's shard source. Its shard order is a permutation by
(seed, epoch, pass) made before any split, the same on every rank, so ranks
and workers read disjoint shards that change every epoch. Anywhere else these
stages run in Python on iterators of ``{"url": ...}`` dicts, as in the
reference.

>>> import webdataset_cpp as wds
>>> wds.shardlists.expand_urls("a-{0..2}.tar::b.tar")
['a-0.tar', 'a-1.tar', 'a-2.tar', 'b.tar']
>>> list(wds.SimpleShardList("a-{0..1}.tar"))
[{'url': 'a-0.tar'}, {'url': 'a-1.tar'}]
"""

import dataclasses
import glob
import itertools
import os
import random
import re
import sys
import time
import warnings
from typing import List

from . import _core
from ._plan import RESAMPLED_SHARDS, SEED_MASK, SHARD_LIST, SHARD_SHUFFLE, Stage, kind_of
from .filters import PythonFilter, _seed_given, pipelinefilter  # noqa: F401 (as the reference)
from .pipeline import IterableDataset
from .remote import native_options
from .utils import (PipelineStage, is_iterable, node_info, obsolete, pytorch_worker_seed,
                    worker_info)

_ENV_VARIABLE = re.compile(r"\$\{(\w+)\}")


def envlookup(m):
    """The value of $WDS_<name> for a match of ${name}; a ValueError naming
    the variable when it is not set (the reference asserts)."""
    name = "WDS_" + m.group(1)
    if name not in os.environ:
        raise ValueError(f"the environment variable {name} is not set")
    return os.environ[name]


def envsubst(s):
    """`s` with every ${name} replaced by $WDS_<name>."""
    return _ENV_VARIABLE.sub(envlookup, s)


def expand(s):
    """`s` with ~ and $VARIABLES expanded."""
    return os.path.expanduser(os.path.expandvars(s))


def expand_urls(urls):
    """Expands '::' lists and brace patterns; ${NAME} is $WDS_NAME.

    A str gives its expansion; any other iterable is listed as it is.
    """
    if not isinstance(urls, str):
        return list(urls)
    try:
        substituted = envsubst(urls)
    except ValueError as e:
        raise ValueError(f"{urls}: {e}") from None
    return _core.expand_urls(substituted)


def expand_source(source, max_urls=int(1e9)):
    """A list of URLs: a str expanded (expand_urls), a list as it is, another
    iterable's first `max_urls`; anything else is a ValueError."""
    if isinstance(source, str):
        return expand_urls(source)
    if isinstance(source, list):
        return source
    if is_iterable(source):
        return list(itertools.islice(source, max_urls))
    raise ValueError(f"cannot handle {type(source)}")


def check_secure(urls):
    """While webdataset_cpp.utils.enforce_security is set (WDS_SECURE=1, or at
    run time) no shard list may run commands (pipe: URLs). Local shards are
    read, as the reference's WebDataset reads them."""
    from . import utils

    if not utils.enforce_security:
        return
    for url in urls:
        if url.startswith("pipe:"):
            raise ValueError(f"{url}: pipe: URLs are refused while "
                             f"webdataset_cpp.utils.enforce_security is set (WDS_SECURE=1)")


def secure_urls(items):
    """Passes URLs (or {"url": ...} dicts) through, checked by check_secure."""
    for item in items:
        check_secure([item["url"] if isinstance(item, dict) else item])
        yield item


class SimpleShardList(PipelineStage):
    """A list of shard URLs, iterated as ``{"url": url}`` dicts.

    `seed` (an attribute too: ``dataset.stage(0).seed = epoch``) shuffles
    the list at each iteration by random.Random(seed), as the reference's
    (the same order every epoch while the seed stays; seed=True: a seed from
    the clock, once); use epoch_shuffle() for a new permutation every epoch.
    An empty list is a ValueError.

    split="samples" makes the split_by_node / split_by_worker that follow it
    share out samples instead of whole shards: every rank (worker) reads an
    equal run of the epoch's samples, starting and ending inside shards
    (counts from the dataset index, SHARD.idx sidecars, else one header scan
    per shard). It needs the native shard source (a native handler, no
    Python stage between the list and tarfile_to_samples). split=None (the
    default) chooses "samples" when the native source reads the list and
    every shard's count is known without reading it (listed in
    dataset_index, or a local file with a sidecar), else "shards", as the
    C++ WebDataset does. Whether the counts are known is decided when the
    list is made (``counts_known``) and travels with it to DataLoader
    workers, so that a worker that sees sidecars appear or vanish later
    still splits as the process that made the list.

    dataset_index: the path or URL (http(s)://, s3://, gs://) of a dataset
    index (``wds-shard index --json``, the reference's wids shard index)
    giving every shard's count from one file, read once per process (a
    remote one with `remote`'s options, a RemoteOptions, else the
    environment's; never from the cache). Its URLs must match the list's
    (relative ones are relative to the index's directory, or its URL's); a
    UserWarning says how many it does not list.
    """

    _wds_kind = SHARD_LIST

    def __init__(self, urls, seed=None, split=None, dataset_index=None, remote=None):
        if split not in (None, "shards", "samples"):
            raise ValueError(f"SimpleShardList: split must be None, 'shards' or 'samples', not "
                             f"{split!r}")
        self.split = split
        self.dataset_index = None if dataset_index is None else os.fspath(dataset_index)
        self.remote = remote
        native_options(remote)  # a TypeError for anything but a RemoteOptions
        self.urls = expand_urls(urls)
        if not self.urls:
            raise ValueError("SimpleShardList: the shard list is empty")
        for url in self.urls:
            if not isinstance(url, str):
                raise TypeError(f"SimpleShardList: shard URLs must be str, got {url!r}")
        self.seed = time_seed() if seed is True else seed
        # The counts and whether they are known are cached per process; an
        # index that cannot be read raises now.
        self.counts_known = None
        self.index_digest = 0  # what every process of this dataset must read as the index
        if split is None or self.dataset_index is not None:
            consequence = (", and split=None then shares out whole shards unless each of them "
                           "has a sidecar" if split is None else "")
            known, self.index_digest = _read_counts(self.urls, self.dataset_index, remote,
                                                    consequence)
            if split is None:
                self.counts_known = known

    def __len__(self):
        return len(self.urls)

    def ordered_urls(self):
        """The URLs in this iteration's order (shuffled by `seed`)."""
        urls = list(self.urls)
        if self.seed is not None:
            random.Random(self.seed).shuffle(urls)
        return urls

    def __iter__(self):
        for url in self.ordered_urls():
            yield {"url": url}

    def run(self, *args):
        return iter(self)


def _read_counts(urls, dataset_index, remote, consequence=""):
    """(whether every count of `urls` is known without reading a shard, the
    digest of the index's counts): the index is read now (once per process),
    an error naming it, and a UserWarning names what it does not list."""
    known, unlisted, first, digest = _core.counts_known(urls, dataset_index or "",
                                                        native_options(remote))
    if unlisted:
        warnings.warn(
            f"dataset_index {dataset_index} does not list {unlisted} of the {len(urls)} shards "
            f"(the first: {first}): their counts come from sidecars or reading them{consequence}",
            stacklevel=3)
    return known, digest


def _checked_weights(weights, shards):
    """`weights` as a list of floats; ValueError (the core's check) unless
    there are `shards` finite values >= 0, not all 0."""
    try:
        weights = [float(w) for w in weights]
    except OverflowError as e:
        raise ValueError(f"shard weights: {e}") from None
    _core.check_shard_weights(weights, shards)
    return weights


def time_seed():
    import time

    return int(time.time())


class ResampledShards(PipelineStage):
    """`nshards` URLs drawn with replacement from `urls`, per iteration.

    Without a seed (and deterministic=False) every iteration of every
    instance draws another sequence, as the reference's. With a seed, or
    deterministic=True (then the pipeline's seed), the draws repeat for
    (seed, epoch, rank, worker), different per rank, worker and epoch.
    Unlike the reference, seed defaults to None: a seed given (0 included)
    means repeatable draws. As the first stage of a fused pipeline the draws
    are native; a `worker_seed` callable makes them run in Python with
    Python's random, as in the reference.

    dataset_index (not in the reference; as SimpleShardList's, `remote` for
    a remote one): the drawn shards' counts, which resuming mid-epoch
    (load_state_dict) needs for the shards drawn before the checkpoint;
    without it they come from sidecars, else from reading those shards.

    weights (not in the reference): each shard's relative chance of being
    drawn, one per URL (finite, >= 0, not all 0), to mix sources in chosen
    proportions (the weights of a source's shards add up to its share); the
    draws stay seeded and resumable. None draws uniformly.
    """

    _wds_kind = RESAMPLED_SHARDS

    def __init__(self, urls, nshards=sys.maxsize, seed=None, worker_seed=None,
                 deterministic=False, max_urls=int(1e6), empty_check=True, *,
                 dataset_index=None, remote=None, weights=None):
        urls = list(expand_source(urls, max_urls))
        if not urls and empty_check:
            raise ValueError("empty_check=True, but no shards found in ResampledShards")
        if not urls:
            raise ValueError("ResampledShards: the shard list is empty")
        native_options(remote)  # a TypeError for anything but a RemoteOptions
        self.dataset_index = None if dataset_index is None else os.fspath(dataset_index)
        self.remote = remote
        if self.dataset_index is not None:
            _read_counts(urls, self.dataset_index, remote)  # an index that cannot be read raises
        self.weights = None if weights is None else _checked_weights(weights, len(urls))
        self.urls = urls
        self.nshards = nshards
        self.seed = seed
        self.worker_seed = worker_seed
        self.deterministic = deterministic
        self.epoch = -1

    def native_ok(self):
        return self.worker_seed is None

    def repeatable(self):
        """Whether the draws repeat: a seed given, or deterministic=True."""
        return self.deterministic or (self.seed is not None and _seed_given(self.seed))

    def native_seed(self, ctx):
        """The seed of one iteration's native draws (fresh without one)."""
        if not self.repeatable():
            return int.from_bytes(os.urandom(8), "little")
        return ctx.seed if self.seed is None else int(self.seed) & SEED_MASK

    def __iter__(self):
        self.epoch += 1
        worker_seed = (self.worker_seed or pytorch_worker_seed)()
        rng = (random.Random(hash((worker_seed, self.epoch, self.seed))) if self.repeatable()
               else random.Random())
        running = None if self.weights is None else list(itertools.accumulate(self.weights))
        for _ in range(self.nshards):
            if running is None:
                yield {"url": rng.choice(self.urls)}
            else:
                yield {"url": rng.choices(self.urls, cum_weights=running)[0]}

    def run(self, *args):
        return iter(self)


ResampledShardList = ResampledShards


def check_pid_is_running(pid):
    """Whether a process `pid` exists."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def without_last_extension(fname):
    """`fname` without its last ".ext"."""
    return re.sub(r"\.[^.]*$", "", fname)


def get_pid_from_filename(fname):
    """The pid in a name "NAME._PID_" (a shard DirectoryShardList is
    reading), else None."""
    match = re.match(r"^(.*)\._(\d+)_$", fname)
    return int(match.group(2)) if match else None


class DirectoryShardList(IterableDataset):
    """Shards taken from a directory as they appear, one process each: a
    shard being read is renamed "NAME._PID_" (so that no other process takes
    it) and afterwards, by `mode`, put back ("resample"), renamed
    "NAME._done_" ("keep") or deleted ("unlink"). `select` takes the "random"
    or the "oldest" candidate. With no candidate it waits `poll` seconds (None:
    ends); it ends after `timeout` seconds. Shards left "._PID_" by processes
    that are gone are recycled. As the reference's; `fate` is unused there
    too. Unlike it, a bad path or mode is a ValueError (an assert there)."""

    def __init__(self, path, pattern="*.{tar,tgz,tar.tgz}", poll=1, timeout=1e12,
                 mode="resample", select="random", fate=None):
        if not path.endswith("/") or not os.path.isdir(path):
            raise ValueError(f"DirectoryShardList: {path!r} must be a directory ending in '/'")
        if mode not in ("resample", "keep", "unlink"):
            raise ValueError(f"DirectoryShardList: mode must be 'resample', 'keep' or 'unlink', "
                             f"not {mode!r}")
        self.path, self.pattern, self.poll, self.timeout = path, pattern, poll, timeout
        self.mode, self.select, self.fate = mode, select, fate

    def recycle(self, activename):
        """Puts a shard that was read back, keeps it as done, or deletes it."""
        if self.mode == "unlink":
            os.unlink(activename)
        elif self.mode == "keep":
            os.rename(activename, without_last_extension(activename) + "._done_")
        else:
            os.rename(activename, without_last_extension(activename))

    def cleanup_files_without_processes(self):
        """Recycles the shards of processes that no longer run."""
        for fname in glob.glob(os.path.join(self.path, "*._*_")):
            pid = get_pid_from_filename(fname)
            if pid is not None and not check_pid_is_running(pid):
                self.recycle(fname)

    def candidates(self):
        return sorted(url for p in expand_urls(self.pattern) for url in glob.glob(self.path + p))

    def choose(self, candidates):
        if self.select == "oldest":
            return min(candidates, key=lambda fn: os.stat(fn).st_mtime)
        if self.select == "random":
            return random.choice(candidates)
        raise ValueError(f"unknown selection strategy {self.select}")

    def __iter__(self):
        start = time.time()
        while time.time() - start < self.timeout:
            candidates = self.candidates()
            if not candidates:
                if self.poll is None:
                    return
                time.sleep(self.poll)
                continue
            candidate = self.choose(candidates)
            activename = candidate + f"._{os.getpid()}_"
            try:
                os.rename(candidate, activename)
            except FileNotFoundError:  # another process took it
                time.sleep(self.poll or 0)
                continue
            yield {"url": activename}
            self.recycle(activename)
            self.cleanup_files_without_processes()


@dataclasses.dataclass
class MSSource:
    """One source of a MultiShardSample spec."""

    name: str = ""
    perepoch: int = -1
    resample: bool = False
    urls: List[str] = dataclasses.field(default_factory=list)


default_rng = random.Random()


class MultiShardSample(IterableDataset):
    """Shards from a YAML spec (or its dict) of several sources, as the
    reference's (obsolete there too: ObsoleteException unless the
    environment has ALLOW_OBSOLETE=1): {"prefix": ..., "buckets": ...,
    "datasets": [{"name", "buckets", "shards", "resample": k (k drawn with
    replacement), "choose": k (k without)}]}; each iteration shuffles the
    epoch's list. set_epoch(seed) reseeds it. Needs PyYAML for a file."""

    @obsolete(reason="this is going to be replaced with the WIDS JSON format")
    def __init__(self, fname):
        self.epoch = -1
        self.parse_spec(fname)

    def parse_spec(self, fname):
        self.rng = default_rng
        if isinstance(fname, dict):
            spec = fname
        else:
            import yaml

            with open(fname) as stream:
                spec = yaml.safe_load(stream)
        _check_keys("spec", spec, {"prefix", "datasets", "buckets"})
        prefix = expand(spec.get("prefix", ""))
        self.sources = [self._source(ds, spec, prefix) for ds in spec["datasets"]]

    @staticmethod
    def _source(ds, spec, prefix):
        _check_keys("dataset", ds, {"buckets", "name", "shards", "resample", "choose"})
        buckets = ds.get("buckets", spec.get("buckets", []))
        buckets = [expand(b) for b in ([buckets] if isinstance(buckets, str) else buckets)] or [""]
        if len(buckets) != 1:
            raise ValueError(f"MultiShardSample: one bucket per dataset, got {buckets}")
        shards = ds["shards"]
        urls = [prefix + os.path.join(buckets[0], u)
                for pattern in ([shards] if isinstance(shards, str) else shards)
                for u in expand_urls(expand(pattern))]
        resample, choose = ds.get("resample", -1), ds.get("choose", -1)
        if choose > len(urls):
            raise ValueError(f"perepoch {choose} must be no greater than the number of shards")
        if choose > 0 and resample > 0:
            raise ValueError("specify only one of perepoch or choose")
        return MSSource(name=ds.get("name", "@" + buckets[0]), urls=urls, perepoch=choose,
                        resample=resample)

    def set_epoch(self, seed):
        """Draws the next epochs' shards from random.Random(seed)."""
        self.rng = random.Random(seed)

    def get_shards_for_epoch(self):
        result = []
        for source in self.sources:
            if source.resample > 0:
                result += self.rng.choices(source.urls, k=source.resample)
            elif source.perepoch > 0:
                urls = list(source.urls)
                self.rng.shuffle(urls)
                result += urls[:source.perepoch]
            else:
                result += source.urls
        self.rng.shuffle(result)
        return result

    def __iter__(self):
        for url in self.get_shards_for_epoch():
            yield {"url": url}


def _check_keys(what, spec, allowed):
    unknown = set(spec) - allowed
    if unknown:
        raise ValueError(f"MultiShardSample: unknown {what} keys {sorted(unknown)} (allowed: "
                         f"{sorted(allowed)})")

    def run(self, *args):
        return iter(self)


def shardspec(spec):
    """A MultiShardSample for a ".yaml" spec, else a SimpleShardList."""
    if isinstance(spec, str) and spec.endswith(".yaml"):
        return MultiShardSample(spec)
    return SimpleShardList(spec)


def split_by_node(src, group=None):
    """Keeps this rank's URLs: every world_size-th from the rank's."""
    rank, world_size = node_info(group)
    yield from itertools.islice(src, rank, None, world_size)


def single_node_only(src, group=None):
    """Passes everything through in a one-rank job; an error otherwise (the
    default nodesplitter, so that no rank silently reads every shard)."""
    rank, world_size = node_info(group)
    if world_size > 1:
        raise ValueError(
            "you need to add an explicit nodesplitter to your input pipeline for multi-node "
            f"training (rank {rank} of {world_size}): nodesplitter=wds.split_by_node shares "
            "the shards out among the ranks; nodesplitter=None has every rank read every shard "
            "(with resampled=True, or a shard list of its own)")
    yield from src


def split_by_worker(src):
    """Keeps this DataLoader worker's URLs."""
    worker, num_workers = worker_info()
    yield from itertools.islice(src, worker, None, num_workers)


class epoch_shuffle(Stage):
    """Permutes the shard list by (seed, epoch, pass), identically on every
    rank; placed before the splitters (WebDataset(shardshuffle=...) adds it).
    seed=None uses the pipeline's seed."""

    _wds_kind = SHARD_SHUFFLE

    def __init__(self, seed=None):
        self.seed = seed

    def python(self, src, ctx):
        urls = [item["url"] if isinstance(item, dict) else item for item in src]
        if not urls:
            return
        seed = ctx.seed if self.seed is None else self.seed
        order = _core.shards_for_worker(urls, shuffle=True, split_nodes=False,
                                        split_workers=False, allow_empty=True, epoch=ctx.epoch,
                                        pass_=ctx.pass_, seed=seed)
        for url in order:
            yield {"url": url}


def resampled_(src, n=sys.maxsize):
    """Reads `src` and yields n items drawn from it with replacement, a new
    sequence every run (as the reference's; it also prints two lines to
    stderr, ours does not)."""
    items = list(src)
    rng = random.Random()  # seeded from os.urandom
    for _ in range(n):
        yield rng.choice(items)


def resampled(src=None, n=sys.maxsize):
    """resampled(n) (or resampled()): the stage that yields n items drawn
    with replacement from its input, as the reference's. Called on an
    iterable, resampled(src, n) yields them at once (ours before; also what
    a bare ``resampled`` in a DataPipeline runs)."""
    if src is None or isinstance(src, int):
        return PythonFilter(resampled_, n if src is None else src, _name="resampled")
    return resampled_(src, n)


def non_empty(src):
    """Passes everything through; a ValueError if there was nothing."""
    n = 0
    for item in src:
        yield item
        n += 1
    if n == 0:
        raise ValueError("pipeline stage received no data at all and this was declared as an "
                         "error")


_EMPTY_HINT = "Turn off using empty_check=False in the WebDataset constructor."


def check_empty(source):
    """WebDataset's empty_check: an error when this worker got no samples."""
    n = 0
    for sample in source:
        yield sample
        n += 1
    if n == 0:
        rank, world_size, worker, num_workers = node_info() + worker_info()
        raise ValueError(f"No samples found in dataset (rank {rank} of {world_size}, worker "
                         f"{worker} of {num_workers}).\n{_EMPTY_HINT}")


class ShardSource:
    """The fused first stages: the core's shard source.

    split: "samples", "shards" or None (samples when every count is known
    without reading a shard and the handler is native; see SimpleShardList).
    """

    def __init__(self, urls, resampled, nshards, shuffle, shuffle_seed, nodesplitter,
                 split_workers, tar, empty_check, split=None, dataset_index=None,
                 counts_known=None, index_remote=None, index_digest=0, weights=None):
        self.split = split
        self.dataset_index = dataset_index or ""
        self._index_remote = index_remote  # the shard list's RemoteOptions, if it has them
        self.index_digest = index_digest
        self.counts_known = counts_known
        self._split_samples = None
        self.urls = urls
        self.resampled = resampled
        self.nshards = nshards
        self.shuffle = shuffle and not resampled
        self.shuffle_seed = shuffle_seed
        self.nodesplitter = nodesplitter
        self.split_workers = split_workers
        self.tar = tar
        self.empty_check = empty_check
        self.resampler = None  # the ResampledShards that draws the shards
        self.weights = weights  # of the resampled draws (None: uniform)

    @property
    def split_samples(self):
        """Whether samples (not whole shards) are shared out."""
        if self._split_samples is None:
            if self.resampled:
                self._split_samples = False
            elif self.split is not None:
                self._split_samples = self.split == "samples"
            else:
                # Decided where the shard list was made (SimpleShardList.counts_known).
                self._split_samples = (isinstance(self.tar.core_handler(), str) and
                                       bool(self.counts_known))
        return self._split_samples

    def seed(self, ctx):
        if self.resampler is not None:
            return self.resampler.native_seed(ctx)
        return ctx.seed if self.shuffle_seed is None else self.shuffle_seed

    def list_args(self, ctx):
        return dict(shuffle=self.shuffle, split_nodes=self.nodesplitter is split_by_node,
                    split_workers=self.split_workers)

    def index_remote(self):
        """The native remote options a remote dataset index is read with:
        the shard list's (None: the environment's), as when the list was
        made, so that every process reads the same index the same way."""
        return native_options(self._index_remote)

    def core_source(self, ctx):
        check_secure(self.urls)
        if self.nodesplitter is single_node_only and ctx.world_size > 1:
            list(single_node_only([]))  # raises the reference's error
        if self.checks_shards():
            self.check_shards(ctx)
        return _core.shard_source(
            self.urls, **self.list_args(ctx), resampled=self.resampled, nshards=self.nshards,
            allow_empty=not self.empty_check, seed=self.seed(ctx),
            handler=self.tar.core_handler(), split_samples=self.split_samples,
            dataset_index=self.dataset_index, remote=self.tar.core_remote(),
            index_remote=self.index_remote(), index_digest=self.index_digest,
            weights=list(self.weights or ()))

    def checks_shards(self):
        """Whether a worker without shards is an error to raise before
        reading: a sample-granular split feeds more workers than shards (the
        core says so itself if one gets no sample), a resampled source draws
        from all of them."""
        return self.empty_check and not self.resampled and not self.split_samples

    def check_shards(self, ctx):
        try:
            _core.shards_for_worker(self.urls, **self.list_args(ctx), allow_empty=False,
                                    rank=ctx.rank, world_size=ctx.world_size, worker=ctx.worker,
                                    num_workers=ctx.num_workers, epoch=ctx.epoch,
                                    pass_=ctx.pass_, seed=self.seed(ctx))
        except ValueError as e:
            message = str(e).replace(" (allow_empty permits this)", "")
            raise ValueError(f"{message}.\n{_EMPTY_HINT}") from None

    def check_count(self, count, ctx):
        if self.empty_check and count == 0:
            raise ValueError(
                f"No samples found in dataset: rank {ctx.rank} of {ctx.world_size}, worker "
                f"{ctx.worker} of {ctx.num_workers} read its shards of {len(self.urls)} and got "
                f"no samples.\n{_EMPTY_HINT}")


def fuse_source(stages, ctx):
    """(ShardSource, index of the first stage after it), or None: the stages
    are asked what they are (their `_wds_kind`; a tar reader `reads_urls`)."""
    if not stages:
        return None
    first = stages[0]
    if kind_of(first) == SHARD_LIST:
        urls, resampled, nshards = first.ordered_urls(), False, None
    elif kind_of(first) == RESAMPLED_SHARDS and first.native_ok():
        urls, resampled = first.urls, True
        nshards = None if first.nshards == sys.maxsize else first.nshards
    else:
        return None
    i, shuffle, shuffle_seed, node, split_workers = 1, False, None, None, False
    while i < len(stages):
        s = stages[i]
        if kind_of(s) == SHARD_SHUFFLE and not (shuffle or node or split_workers):
            shuffle, shuffle_seed = True, s.seed
        elif (s is split_by_node or s is single_node_only) and not (node or split_workers):
            node = s
        elif s is split_by_worker and not split_workers:
            split_workers = True
        else:
            break
        i += 1
    if i == len(stages) or not getattr(stages[i], "reads_urls", False):
        return None
    tar = stages[i]
    if not tar.fusable():
        return None
    i += 1
    empty_check = i < len(stages) and stages[i] is check_empty
    if empty_check:
        i += 1
    source = ShardSource(urls, resampled, nshards, shuffle, shuffle_seed, node, split_workers,
                         tar, empty_check, getattr(first, "split", "shards"),
                         getattr(first, "dataset_index", None),
                         getattr(first, "counts_known", None), getattr(first, "remote", None),
                         getattr(first, "index_digest", 0),
                         getattr(first, "weights", None) if resampled else None)
    source.resampler = first if resampled else None
    return source, i
