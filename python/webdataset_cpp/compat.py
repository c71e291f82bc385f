"""WebDataset, the fluent interface, and WebLoader.

>>> import webdataset_cpp as wds
>>> dataset = (wds.WebDataset("train-{000000..000099}.tar", shardshuffle=100,
...                           nodesplitter=wds.split_by_node)
...            .shuffle(1000).decode("rgb8").to_tuple("jpg", "cls").batched(64))
"""

import warnings

from . import filters
from .cache import cache_options, warn_uncached_pipes
from .handlers import reraise_exception
from .pipeline import DataPipeline
from .shardlists import (ResampledShards, SimpleShardList, check_empty, epoch_shuffle,
                         expand_urls, single_node_only, split_by_worker)
from .filters import pipelinefilter  # noqa: F401 (the reference's compat module has them)
from .tariterators import group_by_keys, tar_file_expander, tarfile_to_samples  # noqa: F401


class FluidInterface:
    """The fluent methods: each returns a copy with one more stage (except
    with_epoch, with_length and repeat, which change the object, as in the
    reference)."""

    def batched(self, batchsize, collation_fn=filters.default_collation_fn, partial=True):
        return self.compose(filters.batched(batchsize, collation_fn=collation_fn,
                                            partial=partial))

    def unbatched(self):
        return self.compose(filters.unbatched())

    def listed(self, batchsize, partial=True):
        """Batches as plain lists (honours partial, unlike the reference)."""
        return self.compose(filters.batched(batchsize, collation_fn=None, partial=partial))

    def unlisted(self):
        return self.compose(filters.unlisted())

    def log_keys(self, logfile=None):
        return self.compose(filters.log_keys(logfile))

    def shuffle(self, size, **kw):
        if size < 1:
            return self
        return self.compose(filters.shuffle(size, **kw))

    def map(self, f, handler=reraise_exception):
        return self.compose(filters.map(f, handler=handler))

    def decode(self, *args, pre=None, post=None, only=None, partial=False,
               handler=reraise_exception, **resize):
        return self.compose(filters.decode(*args, pre=pre, post=post, only=only,
                                           partial=partial, handler=handler, **resize))

    def map_dict(self, handler=reraise_exception, **kw):
        return self.compose(filters.map_dict(handler=handler, **kw))

    def select(self, predicate, **kw):
        return self.compose(filters.select(predicate, **kw))

    def to_tuple(self, *args, **kw):
        return self.compose(filters.to_tuple(*args, **kw))

    def map_tuple(self, *args, handler=reraise_exception):
        return self.compose(filters.map_tuple(*args, handler=handler))

    def slice(self, *args):
        return self.compose(filters.slice(*args))

    def rename(self, **kw):
        return self.compose(filters.rename(**kw))

    def rsample(self, p=0.5):
        return self.compose(filters.rsample(p))

    def rename_keys(self, *args, **kw):
        return self.compose(filters.rename_keys(*args, **kw))

    def extract_keys(self, *args, **kw):
        return self.compose(filters.extract_keys(*args, **kw))

    def xdecode(self, *args, **kw):
        return self.compose(filters.xdecode(*args, **kw))

    def mcached(self):
        return self.compose(filters.Cached())

    def lmdb_cached(self, *args, **kw):
        """Caches samples in an LMDB database: filters.LMDBCached(*args, **kw)."""
        return self.compose(filters.LMDBCached(*args, **kw))


class FluidWrapper(DataPipeline, FluidInterface):
    """A DataPipeline with the fluent methods, starting from `initial`."""

    def __init__(self, initial):
        super().__init__()
        self.append(initial)


def _urls_of(urls):
    if isinstance(urls, str):
        if urls.endswith((".yaml", ".yml")):
            raise ValueError(f"{urls}: YAML shard specs (MultiShardSample) are not supported")
        if urls.endswith(".json"):
            raise ValueError(f"{urls}: JSON shard specs are not supported")
        if urls.endswith("/"):
            raise ValueError(f"{urls}: directory shard lists are not supported")
        return expand_urls(urls)
    if isinstance(urls, dict):
        raise ValueError("dict shard specs (MultiShardSample) are not supported")
    try:
        return list(urls)
    except TypeError:
        raise ValueError(f"cannot handle urls of type {type(urls)}") from None


class WebDataset(DataPipeline, FluidInterface):
    """Samples of WebDataset shards: the reference's WebDataset.

    urls: a brace pattern ("train-{000000..000099}.tar", "::" joins several),
    or a list of URLs (local paths, file:, pipe:CMD, http(s)://, s3://, gs://).

    Differences from the reference (docs/PYTHON.md has them all):

    * shardshuffle=True or N > 0 permutes the whole shard list every epoch by
      (seed, epoch), the same permutation on every rank, before split_by_node;
      ranks and workers always get disjoint shards, new ones each epoch. The
      reference shuffles with a buffer of N after the split, with the same
      order every epoch.
    * seed=None means $WDS_SEED, else 0 (the reference draws a random seed
      per object, which would give ranks different permutations).
    * empty_check counts shards per worker before reading (a clear error
      naming the counts) and samples after.
    * A callable handler is consulted once per failing shard; returning True
      skips the rest of that shard.
    * split (not in the reference): "samples" shares out samples instead of
      whole shards: with nodesplitter=split_by_node every rank reads an
      equal run of N / world_size samples of the epoch's shard list (and each
      worker an equal part of it), slices starting and ending inside shards,
      so that ranks run equal steps and each sample is read once per epoch.
      "shards" shares out whole shards, as the reference does. None (the
      default) is "samples" when every shard's count is known without
      reading it (dataset_index lists it, or it is a local file with a
      SHARD.idx sidecar from write_index) and the handler is native, else
      "shards" (so shards without counts read as in the reference).
    * dataset_index (not in the reference): the path or URL (s3://, gs://,
      http(s)://) of a dataset index (``wds-shard index --json``) giving
      every shard's count from one file, read once per process (counts are
      cached per process either way); a remote one with `remote`'s options,
      never from the cache. With resampled=True its counts spare resuming
      mid-epoch the reads of the shards drawn before the checkpoint.
    * shard_weights (not in the reference), with resampled=True: each
      shard's relative chance of being drawn (ResampledShards' weights).
    * Remote shards (http(s)://, s3://, gs://) are read in-process, resumed
      byte-exactly after faults; remote=RemoteOptions(...) (not in the
      reference) sets their TLS, timeouts and retries.
    * cache_dir (else $WDS_CACHE) caches remote shards under the SHA-256 of
      their URL, shared by processes; cache_size (else $WDS_CACHE_SIZE)
      bounds it, least recently used first; 0 turns caching off. Local files
      are read in place; a pipe: shard's output is cached too once its
      command exited 0, as the reference caches it (unless WDS_CACHE_PIPES=0
      or remote=RemoteOptions(cache_pipes=False)). The next remote shard is
      opened while one is read (RemoteOptions(open_ahead=...)). repeat,
      verbose, url_to_name, mode and detshuffle are accepted and have no
      effect (as in the reference, for most of them: its WebDataset does not
      pass url_to_name to its cache either).
    """

    def __init__(self, urls, handler=reraise_exception, mode=None, resampled=False, repeat=False,
                 shardshuffle=None, cache_size=-1, cache_dir=None, url_to_name=None,
                 detshuffle=False, nodesplitter=single_node_only, workersplitter=split_by_worker,
                 select_files=None, rename_files=None, empty_check=True, verbose=False,
                 seed=None, split=None, dataset_index=None, remote=None, shard_weights=None):
        super().__init__()
        if resampled and shardshuffle not in (False, None):
            warnings.warn("WebDataset(shardshuffle=...) is ignored for resampled datasets")
        elif shardshuffle is None:
            warnings.warn("WebDataset(shardshuffle=...) is None; set explicitly to False or a "
                          "number")
        if shardshuffle is True:
            warnings.warn("set WebDataset(shardshuffle=...) to a positive integer or 0 or False")
        if seed is not None:
            self.seed = int(seed)
        shard_urls = _urls_of(urls)
        if not shard_urls:
            raise ValueError("WebDataset: the shard list is empty")
        remote = cache_options(cache_dir, cache_size, remote)
        if resampled:
            self.append(ResampledShards(shard_urls, seed=self.seed, dataset_index=dataset_index,
                                        remote=remote, weights=shard_weights))
        elif shard_weights is not None:
            raise ValueError("WebDataset: shard_weights weigh resampled draws; pass "
                             "resampled=True")
        else:
            self.append(SimpleShardList(shard_urls, split=split, dataset_index=dataset_index,
                                        remote=remote))
            if shardshuffle:
                self.append(epoch_shuffle())
        if nodesplitter is not None:
            self.append(nodesplitter)
        if workersplitter:
            self.append(workersplitter)
        warn_uncached_pipes(shard_urls, remote)
        self.append(tarfile_to_samples(handler=handler, select_files=select_files,
                                       rename_files=rename_files, remote=remote))
        if empty_check:
            self.append(check_empty)


class WebLoader(DataPipeline, FluidInterface):
    """A torch DataLoader with the fluent methods (which run in the main
    process, on the loader's output).

    >>> dataset = wds.WebDataset("train-{000000..000099}.tar", shardshuffle=100).batched(16)
    >>> loader = wds.WebLoader(dataset, batch_size=None, num_workers=2)
    >>> loader = loader.unbatched().shuffle(1000).batched(64)   # rebatch across workers

    Each iteration first calls set_epoch(e) on the dataset (e = 0, 1, ...;
    set_epoch on the WebLoader chooses it), so that DataLoader workers, which
    get a fresh copy of the dataset every epoch, run a new epoch each time.
    """

    def __init__(self, *args, **kw):
        from torch.utils.data import DataLoader

        super().__init__()
        self.append(DataLoader(*args, **kw))
        self.loader_epoch = 0

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        self.loader_epoch = int(epoch)

    def __iter__(self):
        dataset = getattr(self.pipeline[0], "dataset", None)
        if hasattr(dataset, "set_epoch"):
            dataset.set_epoch(self.loader_epoch)
        self.loader_epoch += 1
        return super().__iter__()
