"""MockDataset, and the reference's legacy dataset wrappers.

``with_epoch``, ``with_length`` and ``repeatedly`` are the reference's legacy
classes: their ``invoke(dataset)`` does what the reference's does. Unlike the
reference's, they can also be iterated themselves (the reference's raise
NotImplementedError, or AttributeError for ``repeatedly``); pipelines use
``.with_epoch(n)``, ``.with_length(n)`` and ``.repeat()`` instead.

>>> list(MockDataset({"a": 1}, 2))
[{'a': 1}, {'a': 1}]
>>> list(with_epoch([1, 2, 3], 5))
[1, 2, 3, 1, 2]
"""

from . import utils
from .pipeline import IterableDataset
from .utils import PipelineStage


class MockDataset(IterableDataset):
    """Yields the same `sample` object `length` times."""

    def __init__(self, sample, length):
        super().__init__()
        self.sample = sample
        self.length = length

    def __len__(self):
        return self.length

    def __iter__(self):
        for _ in range(self.length):
            yield self.sample


class repeatedly(IterableDataset, PipelineStage):
    """invoke(source): `source` again and again, up to nepochs passes or
    nbatches items (``length`` is only stored, as in the reference)."""

    def __init__(self, source, nepochs=None, nbatches=None, length=None):
        super().__init__()
        self.source = source
        self.nepochs = nepochs
        self.nbatches = nbatches
        self.length = length

    def invoke(self, source):
        return utils.repeatedly(source, nepochs=self.nepochs, nbatches=self.nbatches)

    def __iter__(self):
        return self.invoke(self.source)


class with_epoch(IterableDataset):
    """invoke(dataset): `length` items of `dataset`, starting it again when it
    ends early (nothing more if it is empty then)."""

    def __init__(self, dataset, length):
        super().__init__()
        self.dataset = dataset
        self.length = length
        self.source = None

    def __getstate__(self):
        # A running iterator does not pickle; the copy starts afresh.
        return dict(self.__dict__, source=None)

    def invoke(self, dataset):
        if self.source is None:
            self.source = iter(dataset)
        for _ in range(self.length):
            try:
                sample = next(self.source)
            except StopIteration:
                self.source = iter(dataset)
                try:
                    sample = next(self.source)
                except StopIteration:
                    return
            yield sample
        self.source = None

    def __iter__(self):
        return self.invoke(self.dataset)


class with_length(IterableDataset, PipelineStage):
    """`dataset`, whose len() is `length`."""

    def __init__(self, dataset, length):
        super().__init__()
        self.dataset = dataset
        self.length = length

    def invoke(self, dataset):
        return iter(dataset)

    def __iter__(self):
        return self.invoke(self.dataset)

    def __len__(self):
        return self.length
