"""torch's DataLoader, IterableDataset and Tensor, or stand-ins without torch."""

try:
    from torch import Tensor as TorchTensor
    from torch.utils.data import DataLoader, IterableDataset
except ImportError:
    from .pipeline import IterableDataset

    class DataLoader:
        """Stands in for torch's DataLoader when torch is missing."""

        def __init__(self, *args, **kw):
            raise ImportError("DataLoader needs torch")

    class TorchTensor:
        """Stands in for torch.Tensor when torch is missing."""

__all__ = ["DataLoader", "IterableDataset", "TorchTensor"]
