"""Mixing datasets: RoundRobin and RandomMix, and their generator functions.

>>> list(RoundRobin([[1, 2, 3], [10, 20]]))
[1, 10, 2, 20, 3]
>>> list(RoundRobin([[1, 2, 3], [10, 20, 30, 40]], longest=True))
[1, 10, 2, 20, 3, 30, 40]
"""

import random

from .pipeline import IterableDataset


def round_robin_shortest(*sources):
    """One item of each iterator in turn, until one is exhausted."""
    while sources:
        for source in sources:
            try:
                yield next(source)
            except StopIteration:
                return


def round_robin_longest(*sources):
    """One item of each iterator in turn; an exhausted one is dropped and the
    others go on."""
    sources = list(sources)
    i = 0
    while sources:
        i %= len(sources)
        try:
            item = next(sources[i])
        except StopIteration:
            del sources[i]
            continue
        i += 1
        yield item


class RoundRobin(IterableDataset):
    """One item of each dataset in turn. It stops when one is exhausted, or with
    longest=True drops exhausted ones and goes on."""

    def __init__(self, datasets, longest=False):
        super().__init__()
        self.datasets = datasets
        self.longest = longest

    def __iter__(self):
        sources = [iter(d) for d in self.datasets]
        return round_robin_longest(*sources) if self.longest else round_robin_shortest(*sources)


def random_samples(sources, probs=None, longest=False, rng=random):
    """Items of randomly chosen iterators (with probabilities `probs`,
    default uniform), drawn with rng.random() (Python's global random, as the
    reference). It stops when a chosen iterator is exhausted, or with
    longest=True drops it and goes on."""
    sources = list(sources)
    probs = [1.0] * len(sources) if probs is None else list(probs)
    if len(probs) != len(sources):
        raise ValueError(f"RandomMix: {len(sources)} datasets but {len(probs)} probs")
    while sources:
        total = sum(probs)
        if total <= 0:
            return
        r, i = rng.random() * total, 0
        while i < len(probs) - 1 and r >= probs[i]:
            r -= probs[i]
            i += 1
        try:
            yield next(sources[i])
        except StopIteration:
            if not longest:
                return
            del sources[i], probs[i]


class RandomMix(IterableDataset):
    """Items of randomly chosen datasets: see random_samples. `seed` (not in
    the reference) draws from random.Random(seed), the same mix every
    iteration; seed=None uses Python's global random, as the reference."""

    def __init__(self, datasets, probs=None, longest=False, seed=None):
        super().__init__()
        self.datasets = datasets
        self.probs = [1.0] * len(datasets) if probs is None else list(probs)
        if len(self.probs) != len(datasets):
            raise ValueError(f"RandomMix: {len(datasets)} datasets but {len(self.probs)} probs")
        self.longest = longest
        self.seed = seed

    def __iter__(self):
        rng = random if self.seed is None else random.Random(self.seed)
        return random_samples([iter(d) for d in self.datasets], self.probs, self.longest, rng)
