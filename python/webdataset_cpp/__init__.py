"""webdataset_cpp: WebDataset shards at native speed, with the reference
``webdataset`` package's API.

>>> import webdataset_cpp as wds
>>> dataset = (wds.WebDataset("train-{000000..000099}.tar", shardshuffle=100,
...                           nodesplitter=wds.split_by_node)
...            .shuffle(1000).decode("rgb8").to_tuple("jpg", "cls").batched(64))

Reading, shuffling, decoding and batching run in the native core with the GIL
released; Python callables run where they are placed. Batches are NumPy arrays
(or torch tensors) sharing the native memory. Iterate the dataset directly,
through a torch DataLoader (each worker process runs its own native chain), or
with the native threaded ``Loader``. docs/PYTHON.md lists every difference from
the reference. ``install_as_webdataset()`` makes ``import webdataset`` give this
package, for code you cannot edit.
"""

from . import _core
from . import autodecode, cache, compat, distributed, extradatasets, filters, loader
from . import (handlers, mix, pipeline, pytorch, remote, shardlists, tariterators, tenbin, utils,
               writer)
from .autodecode import (Continue, Decoder, gzfilter, handle_extension, imagehandler,
                         pytorch_weights_only, torch_audio, torch_loads, torch_video)
from ._install import install_as_webdataset
from .cache import LMDBCached, LRUCleanup, pipe_cleaner
from .compat import FluidInterface, FluidWrapper, WebDataset, WebLoader
from .distributed import (agreed_steps, count_samples, gather_state_dict, padded_epoch,
                          plan_epoch, write_index)
from .errors import (CommandError, DataError, DecodingError, ObjectChangedError, PipeShardError,
                     ShardReadError)
from .extradatasets import MockDataset, with_epoch, with_length
from .filters import (Cached, associate, batched, decode, detshuffle, extract_keys, getfirst,
                      info, map, map_dict, map_tuple, pipelinefilter, rename, rename_keys,
                      rsample, select, shuffle, slice, to_tuple, transform_with, unbatched,
                      xdecode)
from .gopen import gopen, gopen_schemes
from .handlers import (ignore_and_continue, ignore_and_stop, reraise_exception,
                       warn_and_continue, warn_and_stop)
from .loader import Loader, decode_gpu_jobs
from .mix import RandomMix, RoundRobin
from .pipeline import DataPipeline
from .remote import RemoteOptions
from .shardlists import (MultiShardSample, ResampledShards, SimpleShardList, epoch_shuffle,
                         non_empty, resampled, shardspec, single_node_only, split_by_node,
                         split_by_worker)
from .tariterators import tarfile_samples, tarfile_to_samples
from .utils import PipelineStage, pytorch_worker_info, pytorch_worker_seed, repeatedly
from .writer import ShardWriter, TarWriter, numpy_dumps, torch_dumps

__version__ = "0.1.0"

__all__ = [
    "Cached",
    "CommandError",
    "Continue",
    "DataError",
    "DataPipeline",
    "Decoder",
    "DecodingError",
    "FluidInterface",
    "FluidWrapper",
    "LMDBCached",
    "LRUCleanup",
    "Loader",
    "MockDataset",
    "MultiShardSample",
    "ObjectChangedError",
    "PipeShardError",
    "PipelineStage",
    "RandomMix",
    "RemoteOptions",
    "ResampledShards",
    "RoundRobin",
    "ShardReadError",
    "ShardWriter",
    "SimpleShardList",
    "TarWriter",
    "WebDataset",
    "WebLoader",
    "agreed_steps",
    "associate",
    "autodecode",
    "batched",
    "cache",
    "compat",
    "count_samples",
    "decode",
    "detshuffle",
    "distributed",
    "epoch_shuffle",
    "errors",
    "extract_keys",
    "extradatasets",
    "filters",
    "gather_state_dict",
    "getfirst",
    "gopen",
    "gopen_schemes",
    "gzfilter",
    "handle_extension",
    "handlers",
    "ignore_and_continue",
    "ignore_and_stop",
    "imagehandler",
    "info",
    "install_as_webdataset",
    "loader",
    "map",
    "map_dict",
    "map_tuple",
    "mix",
    "non_empty",
    "numpy_dumps",
    "padded_epoch",
    "pipe_cleaner",
    "pipeline",
    "pipelinefilter",
    "plan_epoch",
    "pytorch",
    "pytorch_weights_only",
    "pytorch_worker_info",
    "pytorch_worker_seed",
    "remote",
    "rename",
    "rename_keys",
    "repeatedly",
    "reraise_exception",
    "resampled",
    "rsample",
    "select",
    "shardlists",
    "shardspec",
    "shuffle",
    "single_node_only",
    "slice",
    "split_by_node",
    "split_by_worker",
    "tarfile_samples",
    "tarfile_to_samples",
    "tariterators",
    "tenbin",
    "to_tuple",
    "torch_audio",
    "torch_dumps",
    "torch_loads",
    "torch_video",
    "transform_with",
    "unbatched",
    "utils",
    "warn_and_continue",
    "warn_and_stop",
    "with_epoch",
    "with_length",
    "write_index",
    "writer",
    "xdecode",
]
