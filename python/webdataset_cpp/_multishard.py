"""MultiShardSample: the reference's obsolete YAML shard specs (re-exported by
shardlists and the package).

As in the reference, making one raises utils.ObsoleteException unless the
environment has ALLOW_OBSOLETE=1.

>>> import os
>>> os.environ["ALLOW_OBSOLETE"] = "1"
>>> spec = {"datasets": [{"shards": "a-{0..2}.tar"}, {"shards": "b-{0..9}.tar", "choose": 1}]}
>>> sample = MultiShardSample(spec)
>>> sample.set_epoch(0)
>>> len(list(sample))
4
>>> del os.environ["ALLOW_OBSOLETE"]
"""

import dataclasses
import os
import random

from . import _core
from .pipeline import IterableDataset
from .utils import obsolete

# Shared by every MultiShardSample until set_epoch, as in the reference.
_default_rng = random.Random()


@dataclasses.dataclass
class MSSource:
    """One dataset of a spec: its shards, and how many to take per epoch."""

    name: str = ""
    perepoch: int = -1
    resample: int = -1
    urls: list = dataclasses.field(default_factory=list)


def _expand(s):
    return os.path.expanduser(os.path.expandvars(s))


def _checked_keys(mapping, allowed, where):
    unknown = sorted(set(mapping) - set(allowed.split()))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown} (allowed: {allowed})")


def _source(ds, prefix, default_buckets, where):
    _checked_keys(ds, "buckets name shards resample choose", where)
    buckets = ds.get("buckets", default_buckets)
    buckets = [_expand(b) for b in ([buckets] if isinstance(buckets, str) else buckets)] or [""]
    if len(buckets) != 1:
        raise ValueError(f"{where}: {buckets}: more than one bucket is not supported")
    shards = ds["shards"] if not isinstance(ds["shards"], str) else [ds["shards"]]
    urls = [prefix + os.path.join(buckets[0], u)
            for pattern in shards for u in _core.expand_urls(_expand(pattern))]
    resample, choose = ds.get("resample", -1), ds.get("choose", -1)
    if choose > len(urls):
        raise ValueError(f"perepoch {choose} must be no greater than the number of shards")
    if choose > 0 and resample > 0:
        raise ValueError("specify only one of perepoch or choose")
    return MSSource(name=ds.get("name", "@" + buckets[0]), urls=urls, perepoch=choose,
                    resample=resample)


class MultiShardSample(IterableDataset):
    """Shards drawn each epoch from several datasets of a spec (a dict, or the
    name of a YAML file): ``{"prefix": ..., "buckets": ..., "datasets": [{"name",
    "buckets", "shards", "resample": n (drawn with replacement) or "choose": n
    (without)}]}``; all of a dataset's shards otherwise. Yields ``{"url": ...}``
    in an order shuffled by the generator set_epoch(seed) seeds.

    Unlike the reference, a malformed spec is a ValueError (not an
    AssertionError), and nothing is printed.
    """

    @obsolete(reason="this is going to be replaced with the WIDS JSON format")
    def __init__(self, fname):
        super().__init__()
        self.epoch = -1
        self.parse_spec(fname)

    def parse_spec(self, fname):
        self.rng = _default_rng
        if isinstance(fname, dict):
            spec, fname = fname, "{dict}"
        else:
            import yaml

            with open(fname) as stream:
                spec = yaml.safe_load(stream)
        _checked_keys(spec, "prefix datasets buckets", fname)
        prefix = _expand(spec.get("prefix", ""))
        self.sources = [_source(ds, prefix, spec.get("buckets", []), fname)
                        for ds in spec["datasets"]]

    def set_epoch(self, seed):
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
            yield dict(url=url)
