"""Mixing datasets: RoundRobin and RandomMix.

>>> list(RoundRobin([[1, 2, 3], [10, 20]]))
[1, 10, 2, 20, 3]
>>> list(RoundRobin([[1, 2, 3], [10, 20]], longest=True))
[1, 10, 2, 20, 3]
"""

import random

from .pipeline import IterableDataset


class RoundRobin(IterableDataset):
    """One item of each dataset in turn. It stops when one is exhausted, or with
    longest=True drops exhausted ones and goes on."""

    def __init__(self, datasets, longest=False):
        super().__init__()
        self.datasets = datasets
        self.longest = longest

    def __iter__(self):
        sources = [iter(d) for d in self.datasets]
        while sources:
            for source in list(sources):
                try:
                    yield next(source)
                except StopIteration:
                    if not self.longest:
                        return
                    sources.remove(source)


class RandomMix(IterableDataset):
    """Items of randomly chosen datasets (with probabilities `probs`, default
    uniform). It stops when a chosen dataset is exhausted, or with longest=True
    drops it and goes on. `seed` makes the choices reproducible (the
    reference uses Python's global random; so does seed=None)."""

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
        sources = [iter(d) for d in self.datasets]
        probs = list(self.probs)
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
                if not self.longest:
                    return
                del sources[i], probs[i]
