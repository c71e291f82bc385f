"""MockDataset.

>>> list(MockDataset({"a": 1}, 2))
[{'a': 1}, {'a': 1}]
"""

from .pipeline import IterableDataset


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
