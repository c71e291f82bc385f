"""Loader: the native threaded loader, iterated from Python.

For pipelines that are entirely native (a WebDataset with shuffle, decode,
to_tuple, rename, batched, slice stages and no Python callables), Loader runs
the core's Loader in this process: `workers` native threads each run their
own copy of the chain and fill a bounded queue of `prefetch` items, taken
round-robin (the same order for the same seed). Nothing is pickled and
nothing crosses processes; batches arrive as NumPy arrays (or torch tensors,
to_torch=True) that share the native batch memory.

>>> import numpy as np
>>> import webdataset_cpp as wds
>>> with wds.ShardWriter("train-%06d.tar", maxcount=100, verbose=0) as sink:
...     for i in range(400):
...         sink.write({"__key__": f"{i:06d}", "cls": i % 10, "npy": np.full(3, i)})
>>> dataset = (wds.WebDataset("train-{000000..000003}.tar", shardshuffle=100)
...            .decode().to_tuple("npy", "cls").batched(64))
>>> loader = wds.Loader(dataset, workers=2)
>>> for epoch in range(2):
...     loader.set_epoch(epoch)
...     for arrays, labels in loader:      # int64 [64, 3], int64 [64]
...         pass
>>> arrays.shape, labels.shape             # the last batch of each worker is partial
((8, 3), (8,))

Threads exist only while an epoch is being iterated: they start with its
first batch and are joined at its end, when the loop is left early (break,
an exception, KeyboardInterrupt) and when the Loader goes; none exists when
a DataLoader forks its workers. `len(loader)` is the items of a with_epoch(n)
epoch (n per worker, as in a DataLoader, or n with across_workers=True), or
with_length(n)'s n, for Lightning.

Decoding on the GPU: with .decode(spec, ..., device="cuda") the workers read and
plan each image, and Loader(dataset, device="cuda") decodes each batch's images
with nvJPEG straight into a torch CUDA tensor (no host copy: the kernel writes
the tensor's own memory), on a side stream the current stream then waits for.
The batch's other arrays come as CUDA tensors too. A Loader without a CUDA
device decodes the same batches on the host, in its workers (NumPy, or torch
with to_torch=True).

state_dict() / load_state_dict() save and restore the position mid-epoch
(torchdata's StatefulDataLoader protocol), so the loader goes into a
checkpoint with the model and a restarted job continues with exactly the
batches it would have seen.
"""

import time

from . import _core, _plan
from .utils import node_info


_STATE_KEY = "webdataset_cpp.Loader"


def _describe(step):
    if isinstance(step, _plan.Stage):
        return repr(step)
    return getattr(step, "__qualname__", None) or repr(step)


def _torch_dtype(name):
    """The torch dtype of a GpuJobs or PendingImages layout's dtype name (uint8, float32 or
    float16: torch and NumPy name them alike)."""
    import torch

    return getattr(torch, name)


def _resolve_device(device, caller="Loader"):
    """(the core loader's device index or None, the torch device of GPU decode or None)."""
    if device is None or isinstance(device, int):
        return device, None
    text = str(device)
    if text == "cpu":
        return None, None
    if not text.startswith("cuda"):
        raise ValueError(f"{caller}: device must be None, an index, 'cpu', 'cuda' or 'cuda:N', "
                         f"got {device!r}")
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"{caller}(device={text!r}): torch.cuda.is_available() is False (no "
                         "GPU, or a torch without CUDA)")
    index = torch.device(text).index
    if index is None:
        index = _local_gpu(torch)
    return index, torch.device("cuda", index)


def _local_gpu(torch):
    """The GPU "cuda" means: the launcher's local rank (LOCAL_RANK, else
    SLURM_LOCALID) where that GPU is visible, else torch's current device (a
    single process, whatever torch.cuda.set_device chose; or a launcher that
    shows each rank only its own GPU)."""
    local = _core.launcher_local_rank()
    if local is not None and local < torch.cuda.device_count():
        return local
    return torch.cuda.current_device()


def _is_array(value):
    return hasattr(value, "__array_interface__") or type(value).__module__ == "torch"


def _map_fields(item, fn):
    if isinstance(item, tuple):
        return tuple(fn(v) for v in item)
    if isinstance(item, list):  # a torch DataLoader's tuples
        return [fn(v) for v in item]
    if isinstance(item, dict):
        return {k: fn(v) for k, v in item.items()}
    return fn(item)


def _decode_on_host(item, to_torch):
    """`item` with any GpuJobs decoded on the host (a Loader without a GPU)."""
    def convert(value):
        if not isinstance(value, _core.GpuJobs):
            return value
        array = value.to_array()
        if to_torch:
            import torch

            return torch.from_numpy(array)
        return array

    return _map_fields(item, convert)


class _DeviceDecode:
    """Decodes the GpuJobs of batches (and finishes the PendingImages of a
    Loader's workers) into torch tensors on one CUDA device, on a side stream
    that the current stream then waits for. With move_arrays, the batches'
    other arrays go to the device too. One thread at a time decodes."""

    def __init__(self, device, move_arrays):
        import threading

        self.device = device
        self.move_arrays = move_arrays
        self.stream = None
        self.decoder = None  # the _core.GpuBatchDecoder, made at the first GpuJobs
        self._lock = threading.Lock()

    def __call__(self, item):
        with self._lock:
            return self._decode(item)

    def _decode(self, item):
        import torch

        device = self.device
        if self.stream is None:
            self.stream = torch.cuda.Stream(device)
        side = self.stream
        made = []

        def convert(value):
            if isinstance(value, _core.PendingImages):
                # Decoded by a worker: one kernel writes the tensor, after a
                # wait for that decode on the side stream.
                dtype, shape = value.layout()
                out = torch.empty(shape, dtype=_torch_dtype(dtype), device=device)
                value.finish(out.data_ptr(), side.cuda_stream)
                made.append(out)
                return out
            if isinstance(value, _core.GpuJobs):
                if self.decoder is None:
                    self.decoder = _core.GpuBatchDecoder(device.index)
                dtype, shape = value.layout()
                out = torch.empty(shape, dtype=_torch_dtype(dtype), device=device)
                self.decoder.decode(value, out.data_ptr(), side.cuda_stream)
                made.append(out)
                return out
            if self.move_arrays and _is_array(value):
                # Labels and the like: copied into a block of torch's pinned
                # host cache (always a fresh one: the batch's own memory, even
                # when pinned, goes back to its pool when dropped), which the
                # cache keeps until the copy has run. The copy runs after the
                # decode on the side stream, but the host does not wait for
                # it: a blocking .to(device) would, every batch, and the next
                # batch's host work could not overlap this one's decode.
                host = torch.as_tensor(value)
                staged = torch.empty(host.shape, dtype=host.dtype, pin_memory=True)
                staged.copy_(host)
                out = staged.to(device, non_blocking=True)
                made.append(out)
                return out
            return value

        with torch.cuda.stream(side):
            out = _map_fields(item, convert)
        current = torch.cuda.current_stream(device)
        current.wait_stream(side)
        for t in made:
            t.record_stream(current)
        return out


def _collated_gpu_jobs(value):
    """`value` as GpuJobs where it is a list or tuple of GPU jobs' bytes (torch's
    default collation of unbatched decode(device="cuda") samples)."""
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], bytes):
        jobs = _core.gpu_job_column(value)
        if jobs is not None:
            return jobs
    return value


_device_decodes = {}  # (pid, device index): this process's _DeviceDecode for decode_gpu_jobs


def decode_gpu_jobs(item, to_torch=False, device=None):
    """`item` (a batch: a tuple, list or dict) with the images of
    decode(device="cuda") decoded, for batches that did not come through
    Loader(device="cuda"): from a torch DataLoader, say, whose workers send
    the jobs to the main process pickled. The images are a GpuJobs column
    (.batched(n) in the pipeline), or a list of single jobs' bytes (the
    DataLoader's batch_size=n collating unbatched samples).

    Without `device` (or "cpu"), on the host into NumPy arrays (torch tensors
    with to_torch=True) whose memory is recycled from batch to batch. With
    device="cuda" ("cuda:N", a torch.device or an index; "cuda" is the local
    rank's GPU, as for Loader), by nvJPEG into torch CUDA tensors on a side
    stream that the current stream then waits for, as Loader(device="cuda")
    does, with a decoder per GPU kept from call to call; the batch's other
    fields are left as they are. ValueError without CUDA."""
    if isinstance(device, bool) or (isinstance(device, int) and device < 0):
        raise ValueError(f"decode_gpu_jobs: device must be None, a CUDA index, 'cpu', 'cuda' or "
                         f"'cuda:N', got {device!r}")
    if isinstance(device, int):
        device = f"cuda:{device}"
    _, gpu = _resolve_device(device, caller="decode_gpu_jobs")
    item = _map_fields(item, _collated_gpu_jobs)
    if gpu is None:
        return _decode_on_host(item, to_torch)
    import os

    key = (os.getpid(), gpu.index)
    decode = _device_decodes.get(key)
    if decode is None:
        decode = _device_decodes.setdefault(key, _DeviceDecode(gpu, move_arrays=False))
    return decode(item)


class Loader:
    """The native threaded loader (see the module doc).

    pin_memory: batch storage in CUDA page-locked memory on `device` (the
    local rank's GPU by default), for .to("cuda", non_blocking=True); without
    CUDA it warns once and uses ordinary memory.

    device: None, a CUDA device index (where pin_memory pins), or "cuda",
    "cuda:N" or a torch.device: batches are then torch tensors on that GPU,
    their decode(device="cuda") images decoded there (see the module doc;
    with pin_memory too, the workers make the encoded images in page-locked
    memory, which the GPU reads in place). "cuda" is the local rank's GPU
    (LOCAL_RANK, else SLURM_LOCALID) where it is visible, else torch's
    current device.

    decode_in_workers (with a CUDA device): the workers decode each batch's
    images on the GPU themselves, each with an nvJPEG decoder and stream of its
    own, and the iterating thread only finishes them into the batch tensor
    (one kernel launch), so nvJPEG's host work leaves this thread and runs on
    every worker. Without it, this thread decodes each batch (the default,
    until measured on GPUs). Without a CUDA device it is a ValueError: the
    workers always decode then.
    """

    def __init__(self, dataset, workers=1, prefetch=2, pin_memory=False, ordered=True,
                 to_torch=False, device=None, group=None, decode_in_workers=False):
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers!r}")
        if not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, got {prefetch!r}")
        if dataset.epoch_length is None and (dataset.repetitions != 1 or dataset.nsamples > 0):
            raise ValueError("webdataset_cpp.Loader: use .with_epoch(n) for epochs of n items; "
                             ".repeat() is not supported")
        self.dataset = dataset
        device, self._gpu = _resolve_device(device)
        self._device_decode = None if self._gpu is None else _DeviceDecode(self._gpu, True)
        rank, world_size = node_info(group)
        ctx = _plan.Context(rank, world_size, 0, workers, dataset.epoch, 0, dataset.seed)
        segment = _plan.single_native_segment(dataset.pipeline, ctx)
        if segment is None:
            steps = [s.stage for s in _plan.plan(dataset.pipeline, ctx) if not s.native]
            raise ValueError(
                "webdataset_cpp.Loader runs only native pipelines; these stages run Python: "
                f"{', '.join(_describe(s) for s in steps)} (iterate the dataset itself, or "
                "through a torch DataLoader)")
        source = segment.source
        if source.checks_shards():
            for w in range(workers):
                source.check_shards(_plan.Context(rank, world_size, w, workers, 0, 0,
                                                  dataset.seed))
        chain, kinds, names = segment.build(None, ctx, kinds_extra=_plan.TORCH if to_torch else 0)
        # with_epoch(n) counts per worker, as a DataLoader's workers do, unless
        # across_workers; the core takes the items round-robin from its workers.
        self._length = None
        if dataset.epoch_length is not None:
            self._length = sum(dataset.worker_items(w, workers) for w in range(workers))
        # len() is with_length(n)'s n (which changes nothing else), else the epoch's items.
        self._size = dataset.size if dataset.size is not None else self._length
        # The workers' decoders are made here, so that a device that cannot
        # decode fails now, and kept for every epoch's workers.
        self._gpu_workers = None
        if decode_in_workers and self._gpu is None:
            raise ValueError("Loader(decode_in_workers=True) needs device='cuda' (without a GPU "
                             "the workers always decode)")
        if decode_in_workers:
            self._gpu_workers = _core.GpuWorkerDecoders(self._gpu.index, decoders=workers)
        self._core = _core.Loader(chain, length=self._length, workers=workers, prefetch=prefetch,
                                  ordered=ordered, pin_memory=pin_memory, rank=rank,
                                  world_size=world_size, device=device,
                                  decode_gpu_jobs_on_host=self._gpu is None,
                                  gpu_decoders=self._gpu_workers, kinds=kinds, kind_names=names)
        self._core.set_epoch(dataset.epoch)
        self._unrecordable = _plan.unrecordable_stage(dataset.pipeline, ctx)
        self._stats = dict(epoch=None, items=0, wait_seconds=0.0, first_item_seconds=None)
        self._started = self._ended = None

    def set_epoch(self, epoch):
        """The epoch the next iteration runs (default: 0, then one more after
        each epoch, completed or not)."""
        self._core.set_epoch(int(epoch))

    @property
    def epoch(self):
        return self._core.epoch

    @property
    def pinned(self):
        """Whether batch memory is page-locked (pin_memory took effect)."""
        return self._core.pinned

    def state_dict(self):
        """The loader's position, for a checkpoint (torchdata's
        StatefulDataLoader protocol): a dict holding the core loader's state
        (a short JSON text of positions, not data; taking it costs
        microseconds and no I/O). Batches prefetched but not yet handed out
        are not part of it: after load_state_dict they come again.

        Never raises (StatefulDataLoader calls it at every step): a loader
        whose position cannot be replayed (an unseeded shuffle) gives
        {"resumable": False, "reason": ...}, which load_state_dict refuses."""
        if self._unrecordable is not None:
            return {_STATE_KEY: None, "resumable": False, "reason": self._unrecordable}
        return {_STATE_KEY: self._core.state()}

    def load_state_dict(self, state_dict):
        """Continues from `state_dict` (from state_dict() of a Loader over
        the same dataset, rank, world size and workers): the next batches are
        those the saved loader would have handed out, identical in bytes and
        order, even mid-epoch. Another recipe (shards, seed, stages, batch
        size), layout or state version raises ValueError, and so does a state
        of (or into) a loader that cannot replay its position, naming why.

        A job state (job_state_dict, gather_state_dict) loads on any world
        size and number of workers: on the job's own layout exactly, else this
        rank trains its share of what the job had not handed out of that
        epoch, each sample once (size the epoch with agreed_steps(...,
        resume=state_dict)), and the next epochs run as usual."""
        if isinstance(state_dict, dict) and _plan.JOB_KEY in state_dict:
            if self._unrecordable is not None:
                raise ValueError(f"load_state_dict: this loader's position cannot be restored: "
                                 f"{self._unrecordable}")
            self._core.restore(state_dict[_plan.JOB_KEY])
            return
        if not isinstance(state_dict, dict) or _STATE_KEY not in state_dict:
            raise ValueError(f"load_state_dict: not a webdataset_cpp Loader state_dict (no "
                             f"{_STATE_KEY!r} key)")
        why = state_dict.get("reason") if state_dict.get("resumable") is False else None
        why = why or self._unrecordable
        if why is not None:
            raise ValueError(f"load_state_dict: this loader's position cannot be restored: {why}")
        self._core.restore(state_dict[_STATE_KEY])

    def job_state_dict(self, state_dicts):
        """One job state of every rank's state_dict() of the same step (this
        rank's among them, in any order): the state load_state_dict takes on
        any world size and number of workers (an elastic resume). The same on
        every rank. gather_state_dict() collects the states over
        torch.distributed and calls this. ValueError for a missing or repeated
        rank, states of different steps, recipes or layouts, or a state that
        cannot be replayed."""
        texts = []
        for state in state_dicts:
            if not isinstance(state, dict) or _STATE_KEY not in state:
                raise ValueError("job_state_dict: not a webdataset_cpp Loader state_dict")
            if state.get("resumable") is False:
                raise ValueError(f"job_state_dict: a rank's position cannot be restored: "
                                 f"{state.get('reason')}")
            texts.append(state[_STATE_KEY])
        return {_plan.JOB_KEY: self._core.job_state(texts)}

    def __len__(self):
        if self._size is None:
            raise TypeError("len() of a Loader needs a dataset with .with_epoch(n) or "
                            ".with_length(n)")
        return self._size

    def stats(self):
        """How the latest iteration's epoch went (running, or the last one), as
        the iterating thread saw it: whether training waited for data. A dict:
        "epoch",
        "items" handed out, "wait_seconds" the iteration spent getting them
        (starting the workers, and a device decode, included),
        "first_item_seconds" from the epoch's start to its first item (None
        before it), and "seconds" from the epoch's start to its end or now;
        seconds - wait_seconds is the loop's own time (the training step)."""
        stats = dict(self._stats)
        if self._started is None:
            stats["seconds"] = 0.0
        else:
            ended = time.perf_counter() if self._ended is None else self._ended
            stats["seconds"] = ended - self._started
        return stats

    def __iter__(self):
        core = self._core
        finished = False
        clock = time.perf_counter
        stats = self._stats = dict(epoch=core.epoch, items=0, wait_seconds=0.0,
                                   first_item_seconds=None)
        asked = self._started = clock()
        self._ended = None
        try:
            while True:
                try:
                    item = core.next()
                    if item is not None and self._device_decode is not None:
                        item = self._device_decode(item)
                finally:  # a call that raised waited too
                    now = clock()
                    stats["wait_seconds"] += now - asked
                if item is None:
                    finished = True
                    return
                if stats["items"] == 0:
                    stats["first_item_seconds"] = now - self._started
                stats["items"] += 1
                yield item
                asked = clock()
        finally:
            if self._stats is stats:  # not a newer iteration's
                self._ended = clock()
            if not finished:
                core.stop()

    @property
    def gpu_decoder(self):
        """The _core.GpuBatchDecoder of device="cuda" (None before the first
        batch with images to decode), or with decode_in_workers the workers'
        _core.GpuWorkerDecoders: its `decoder` names nvJPEG's backends,
        stats() counts what decoded what."""
        if self._gpu_workers is not None:
            return self._gpu_workers
        return None if self._device_decode is None else self._device_decode.decoder

    def close(self):
        """Stops the running epoch's threads now."""
        self._core.stop()

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()
