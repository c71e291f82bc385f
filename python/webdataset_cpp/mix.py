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


def _probs(probs, count):
    """The probabilities of `count` sources: `probs`, else uniform."""
    probs = [1.0] * count if probs is None else list(probs)
    if len(probs) != count:
        raise ValueError(f"RandomMix: {count} datasets but {len(probs)} probs")
    return probs


class _Mixing:
    """One iteration of random_samples: the live sources (and their indexes
    among the datasets), their probabilities and the random generator, which
    RandomMix.state_dict() reads between two items."""

    def __init__(self, sources, probs, longest, rng, indexes=None):
        self.sources = list(sources)
        self.probs = _probs(probs, len(self.sources))
        self.indexes = list(range(len(self.sources))) if indexes is None else list(indexes)
        self.longest = longest
        self.rng = rng
        self.ended = False

    def __iter__(self):
        return self

    def __next__(self):
        while self.sources and not self.ended:
            total = sum(self.probs)
            if total <= 0:
                break
            r, i = self.rng.random() * total, 0
            while i < len(self.probs) - 1 and r >= self.probs[i]:
                r -= self.probs[i]
                i += 1
            try:
                return next(self.sources[i])
            except StopIteration:
                if not self.longest:
                    break
                del self.sources[i], self.probs[i], self.indexes[i]
        self.ended = True
        raise StopIteration


def random_samples(sources, probs=None, longest=False, rng=random):
    """Items of randomly chosen iterators (with probabilities `probs`,
    default uniform), drawn with rng.random() (Python's global random, as the
    reference). It stops when a chosen iterator is exhausted, or with
    longest=True drops it and goes on."""
    yield from _Mixing(sources, probs, longest, rng)


_STATE_FORMAT = "webdataset_cpp.RandomMix"
_STATE_VERSION = 1


class RandomMix(IterableDataset):
    """Items of randomly chosen datasets: see random_samples. `seed` (not in
    the reference) draws from random.Random(seed), the same mix every
    iteration; seed=None uses Python's global random, as the reference.

    With a seed, and datasets that have state_dict() (WebDataset,
    DataPipeline, another RandomMix), it follows torchdata's
    StatefulDataLoader protocol: state_dict() is where the latest iteration
    in this process (a DataLoader worker's) stands after its last item, each
    dataset's state with the random generator's and the datasets still
    drawn from; after load_state_dict(state) the next iter() continues it.
    Otherwise state_dict() says why it records no position, and loading that
    state is a ValueError."""

    def __init__(self, datasets, probs=None, longest=False, seed=None):
        super().__init__()
        self.datasets = datasets
        self.probs = _probs(probs, len(datasets))
        self.longest = longest
        self.seed = seed
        self._mixing = None  # the latest iteration in this process
        self._restore = None  # a loaded state, for the next iteration

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_mixing"] = None  # an iteration stays in its process
        return state

    def __iter__(self):
        if self.seed is None:
            self._mixing = _Mixing([iter(d) for d in self.datasets], self.probs, self.longest,
                                   random)
            return self._mixing
        rng = random.Random(self.seed)
        live, ended = list(range(len(self.datasets))), False
        if self._restore is not None:
            state, self._restore = self._restore, None
            rng.setstate(_as_tuples(state["rng"]))
            live, ended = ([], True) if state["ended"] else (list(state["live"]), False)
            for i, (d, s) in enumerate(zip(self.datasets, state["datasets"])):
                if i in live:
                    d.load_state_dict(s)  # continued below
                elif s.get("started") and callable(getattr(d, "set_epoch", None)):
                    # Not drawn from again in this iteration: its next one is
                    # the epoch after, as it would have been.
                    d.set_epoch(s["epoch"] + 1)
        self._mixing = _Mixing([iter(self.datasets[i]) for i in live],
                               [self.probs[i] for i in live], self.longest, rng, live)
        self._mixing.ended = ended
        return self._mixing

    def _recipe(self):
        return [len(self.datasets), [float(p) for p in self.probs], bool(self.longest),
                repr(self.seed)]

    def _unrecordable(self):
        if self.seed is None:
            return "RandomMix without seed= draws from Python's global random, which no state " \
                   "can replay"
        for i, d in enumerate(self.datasets):
            if not callable(getattr(d, "state_dict", None)):
                return f"RandomMix: dataset {i} ({type(d).__name__}) has no state_dict()"
        return None

    def state_dict(self):
        """Where the latest iteration in this process stands (see the class);
        before any, that none started. Never raises."""
        base = {"format": _STATE_FORMAT, "version": _STATE_VERSION}
        why_not = self._unrecordable()
        if why_not is not None:
            return dict(base, started=True, resumable=False, reason=why_not)
        mixing = self._mixing
        if mixing is None:
            return dict(base, started=False)
        return dict(base, started=True, recipe=self._recipe(), live=list(mixing.indexes),
                    ended=mixing.ended, rng=mixing.rng.getstate(),
                    datasets=[d.state_dict() for d in self.datasets])

    def load_state_dict(self, state_dict):
        """Makes the next iter() continue the iteration `state_dict` describes:
        the random generator where it stood, and each dataset still drawn
        from continued from its own state (load_state_dict); one no longer
        drawn from moves on to its next epoch (set_epoch). ValueError for a
        state of another mix (datasets, probs, longest, seed) or one that
        records no position; a dataset's own refusal comes from that iter()."""
        state = state_dict
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise ValueError(f"load_state_dict: not a RandomMix state (no 'format': "
                             f"{_STATE_FORMAT!r})")
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"load_state_dict: RandomMix state version {state.get('version')!r} "
                             f"is unknown (this version reads {_STATE_VERSION})")
        if state.get("resumable", True) is not True:
            raise ValueError(f"load_state_dict: this state records no position to resume from: "
                             f"{state.get('reason')}")
        if not state.get("started"):
            self._restore = None
            return
        if state.get("recipe") != self._recipe():
            raise ValueError("load_state_dict: the state was taken with another RandomMix (its "
                             "number of datasets, probs, longest or seed differ)")
        self._restore = state  # applied to the datasets by the next iter()


def _as_tuples(value):
    """A random generator's state with its lists (from a serializer that
    turned tuples into lists) made tuples again."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value
