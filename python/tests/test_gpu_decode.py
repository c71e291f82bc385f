"""decode(..., device="cuda") and Loader(device="cuda"): the workers read and
plan the images, the consumer decodes whole batches. Without a GPU (here and
in CI) the batches are decoded on the host with the same draws, which is what
these tests compare with the CPU path; the cases marked `cuda` run where a
GPU is (scripts/gpu_check.sh) and skip elsewhere."""

import numpy as np
import pytest
import torch

import webdataset_cpp as wds

from conftest import encode_image, image_array, write_shards, write_tar

cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="decodes on a CUDA device, and this machine has none "
                                 "(scripts/gpu_check.sh runs it on a GPU machine)")


def dataset(pattern, device=None, **decode):
    return (wds.WebDataset(pattern, shardshuffle=100, seed=3).shuffle(8)
            .decode("rgb8", device=device, **decode).to_tuple("jpg", "cls", "__key__")
            .batched(5))


def drain(loader):
    keys, labels, images = [], [], []
    for batch_images, batch_labels, batch_keys in loader:
        keys += list(batch_keys)
        labels += list(np.asarray(batch_labels))
        images.append(np.asarray(batch_images))
    return keys, labels, images


def test_host_decode_has_the_cpu_paths_keys_order_crops_and_pixels(pattern):
    crops = dict(size=(8, 10), crop="random", hflip=0.5)
    cpu = drain(wds.Loader(dataset(pattern, **crops), workers=2))
    gpu = drain(wds.Loader(dataset(pattern, device="cuda", **crops), workers=2))
    assert len(cpu[0]) == 40
    assert gpu[0] == cpu[0] and gpu[1] == cpu[1]
    for a, b in zip(gpu[2], cpu[2]):
        assert a.shape == b.shape and a.dtype == np.uint8
        # The same crop and flip; libjpeg decodes only the crop's window on the
        # CPU path, the whole image here: chroma at the window's edge may differ.
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 3


def test_loader_state_is_the_cpu_paths(pattern):
    cpu = wds.Loader(dataset(pattern), workers=2)
    gpu = wds.Loader(dataset(pattern, device="cuda"), workers=2)
    running = [iter(cpu), iter(gpu)]  # kept: a dropped iterator ends its epoch
    for it in running:
        next(it), next(it)
    assert '"running":true' in cpu.state_dict()["webdataset_cpp.Loader"]
    assert gpu.state_dict() == cpu.state_dict()


def test_normalized_float16_torch_spec(pattern):
    mean, std = (0.5, 0.25, 0.0), (0.5, 2.0, 0.25)
    ds = (wds.WebDataset(pattern, shardshuffle=False)
          .decode("torchrgb", device="cuda", size=(6, 6), crop="center", normalize=(mean, std),
                  float16=True)
          .to_tuple("jpg").batched(4))
    ref = (wds.WebDataset(pattern, shardshuffle=False)
           .decode("rgb8", device="cuda", size=(6, 6), crop="center").to_tuple("jpg").batched(4))
    (half,), (u8,) = next(iter(wds.Loader(ds, to_torch=True))), next(iter(wds.Loader(ref)))
    assert isinstance(half, torch.Tensor) and half.dtype == torch.float16
    assert tuple(half.shape) == (4, 3, 6, 6)
    want = (u8.transpose(0, 3, 1, 2) / 255.0 - np.array(mean)[:, None, None]) / np.array(std)[
        :, None, None]
    np.testing.assert_allclose(half.float().numpy(), want, atol=2e-3, rtol=1e-3)


def test_what_the_gpu_cannot_serve_is_refused_when_built(pattern):
    def unshuffled():
        return wds.WebDataset(pattern, shardshuffle=False)

    with pytest.raises(ValueError, match='image spec "l8" has 1 channel'):
        unshuffled().decode("l8", device="cuda")
    with pytest.raises(ValueError, match="normalize needs a float spec"):
        unshuffled().decode("rgb8", device="cuda", normalize=((0, 0, 0), (1, 1, 1)))
    with pytest.raises(ValueError, match="normalize and float16 need device='cuda'"):
        unshuffled().decode("rgb", normalize=((0, 0, 0), (1, 1, 1)))
    with pytest.raises(ValueError, match="device must be None or 'cuda'"):
        unshuffled().decode("rgb8", device="tpu")


def test_batches_iterated_without_a_loader_decode_with_decode_gpu_jobs(pattern):
    batch = next(iter(dataset(pattern, device="cuda")))
    assert isinstance(batch[0], wds._core.GpuJobs) and len(batch[0]) == 5
    assert batch[0].layout() == ("uint8", (5, 12, 16, 3))
    images, labels, keys = wds.decode_gpu_jobs(batch)
    cpu_images, cpu_labels, cpu_keys = next(iter(dataset(pattern)))
    assert list(keys) == list(cpu_keys)
    assert np.abs(images.astype(int) - cpu_images.astype(int)).max() <= 3


def by_key(batches):
    """{key: (image, label)} of decoded (images, labels, keys) batches."""
    out = {}
    for images, labels, keys in batches:
        for image, label, key in zip(np.asarray(images), np.asarray(labels), keys):
            out[key] = (image, int(label))
    return out


@pytest.mark.parametrize("shared_bytes", [None, "0", "1024"])
def test_dataloader_workers_send_their_gpu_jobs(pattern, monkeypatch, shared_bytes):
    # A torch DataLoader's workers pickle each batch to the main process. The
    # jobs go packed into a shared batch block, which the main process maps
    # (no copy there); with the blocks turned off (0) or past their limit,
    # as one bytes object. An unpicklable batch would stop the DataLoader for
    # good: timeout= turns that into an error.
    if shared_bytes is not None:
        monkeypatch.setenv("WDS_SHARED_BATCH_BYTES", shared_bytes)

    def jobs_and_keys():  # no arrays: only the jobs could lie in shared blocks
        return (wds.WebDataset(pattern, shardshuffle=100, seed=3).decode("rgb8", device="cuda")
                .to_tuple("jpg", "__key__").batched(5))

    before = {(m["pid"], m["inode"]) for m in wds._core.shared_mappings()}
    batches = list(torch.utils.data.DataLoader(jobs_and_keys(), batch_size=None, num_workers=2,
                                               timeout=60))
    mapped = [m for m in wds._core.shared_mappings()
              if (m["pid"], m["inode"]) not in before and m["leases"] > 0]
    assert bool(mapped) == (shared_bytes is None)
    assert all(isinstance(b, list) and isinstance(b[0], wds._core.GpuJobs) for b in batches)
    got = {}
    for images, keys in (wds.decode_gpu_jobs(b) for b in batches):
        got.update(zip(keys, images))
    want = {}
    for images, keys in (wds.decode_gpu_jobs(b) for b in jobs_and_keys()):
        want.update(zip(keys, images))
    assert len(got) == 40 and got.keys() == want.keys()
    for key, image in want.items():
        assert np.array_equal(got[key], image), key


def test_pickled_gpu_jobs_are_the_same_jobs(pattern):
    import pickle

    jobs = next(iter(dataset(pattern, device="cuda", size=(8, 10), crop="center")))[0]
    back = pickle.loads(pickle.dumps(jobs))
    assert back.keys == jobs.keys and len(back) == len(jobs) == 5
    assert back.layout() == jobs.layout() == ("uint8", (5, 8, 10, 3))
    assert np.array_equal(back.to_array(), jobs.to_array())


def test_dataloader_collating_single_jobs_gives_batches_decode_gpu_jobs_takes(pattern):
    # Without .batched(n): torch's default collation makes a list of the
    # jobs' bytes, which decode_gpu_jobs takes as a column.
    single = (wds.WebDataset(pattern, shardshuffle=False).decode("rgb8", device="cuda")
              .to_tuple("jpg", "__key__"))
    got = {}
    for batch in torch.utils.data.DataLoader(single, batch_size=5, num_workers=2, timeout=60):
        assert isinstance(batch[0], (list, tuple)) and isinstance(batch[0][0], bytes)
        images, keys = wds.decode_gpu_jobs(batch)
        assert images.shape == (5, 12, 16, 3)
        got.update(zip(keys, images))
    want = {}
    for images, keys in (wds.decode_gpu_jobs(b) for b in single.batched(5)):
        want.update(zip(keys, images))
    assert len(got) == 40 and got.keys() == want.keys()
    for key, image in want.items():
        assert np.array_equal(got[key], image), key
    # Lists of other bytes are left as they are.
    other = [b"plain", b"WDSGPUJ1 but no job"]
    assert wds.decode_gpu_jobs((other, ["a", "b"])) == (other, ["a", "b"])


def test_keys_that_are_not_utf8_cross_the_dataloader(tmp_path, monkeypatch):
    # Keys reach Python with undecodable bytes as surrogates, as elsewhere; a
    # batch holding such keys is pickled and lent like any other.
    path = str(tmp_path / "odd.tar")
    write_tar(path, [(b"\xffa.jpg".decode("utf-8", "surrogateescape"), encode_image(image_array(3), "JPEG")),
                     ("b.jpg", encode_image(image_array(4), "JPEG"))])
    ds = (wds.WebDataset(path, shardshuffle=False).decode("rgb8", device="cuda")
          .to_tuple("jpg", "__key__").batched(2))
    jobs, keys = next(iter(ds))
    want = ["\udcffa", "b"]
    assert keys == jobs.keys == want
    import pickle
    assert pickle.loads(pickle.dumps(jobs)).keys == want
    for shared_bytes in (None, "0"):
        if shared_bytes is not None:
            monkeypatch.setenv("WDS_SHARED_BATCH_BYTES", shared_bytes)
        batches = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1,
                                                   timeout=60))
        assert [b[0].keys for b in batches] == [want]
        assert [list(b[1]) for b in batches] == [want]


@pytest.mark.parametrize("state, error", [
    ((b"1234567", [], []), r"packed GPU jobs \(7 bytes\): too short for the count"),
    ((b"\x00" * 8 + b"xy", [], []), r"packed GPU jobs \(10 bytes\): 2 bytes after the last job"),
    ((b"\x01" + b"\x00" * 7 + b"\x04" + b"\x00" * 7 + b"junk", [], []),
     r"packed GPU jobs \(20 bytes\): job 0 is not a GPU job"),
    (("text", [], []), r"a pickled state is \(bytes, keys, urls\)"),
    ((b"",), r"a pickled state is \(bytes, keys, urls\)"),
    ((b"\x00" * 8, None, []), r"GpuJobs: the keys are not a list"),
    ((b"\x00" * 8, [], [1]), r"GpuJobs: 1 urls for 0 jobs"),
])
def test_malformed_pickled_gpu_jobs_are_refused_naming_what(state, error):
    jobs = wds._core.GpuJobs.__new__(wds._core.GpuJobs)
    with pytest.raises(ValueError, match=error):
        jobs.__setstate__(state)


def test_decode_gpu_jobs_on_cuda_without_a_gpu_is_refused(pattern, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a GPU machine
    batch = next(iter(dataset(pattern, device="cuda")))
    with pytest.raises(ValueError, match=r"decode_gpu_jobs\(device='cuda'\): "
                                         r"torch.cuda.is_available\(\) is False"):
        wds.decode_gpu_jobs(batch, device="cuda")
    with pytest.raises(ValueError, match=r"decode_gpu_jobs: device must be"):
        wds.decode_gpu_jobs(batch, device="tpu")
    images, _, _ = wds.decode_gpu_jobs(batch, device="cpu")  # the host, as without device
    assert images.shape == (5, 12, 16, 3)


def test_host_decoded_batches_recycle_their_memory(pattern):
    jobs = next(iter(dataset(pattern, device="cuda")))[0]
    first = jobs.to_array()
    second = jobs.to_array()
    assert first.ctypes.data != second.ctypes.data and np.array_equal(first, second)
    # Pool blocks, page-aligned (malloc would not align a 2,880-byte array so).
    assert first.ctypes.data % 4096 == 0 and second.ctypes.data % 4096 == 0
    address, want = second.ctypes.data, second.copy()
    del second
    # The next batch of that size takes the memory the last one freed.
    third = jobs.to_array()
    assert third.ctypes.data == address and np.array_equal(third, want)


def test_decoder_on_the_host_counts_images_and_times_its_phases(pattern):
    jobs = next(iter(dataset(pattern, device="cuda")))[0]
    dtype, shape = jobs.layout()
    out = np.zeros(shape, dtype=dtype)
    decoder = wds._core.GpuBatchDecoder(-1)  # kHost: the kernel's arithmetic on the CPU
    decoder.decode(jobs, out.ctypes.data, 0)
    assert np.array_equal(out, wds.decode_gpu_jobs((jobs,))[0])
    stats = decoder.stats()
    assert (stats["batches"], stats["images"], stats["cpu_fallback_images"]) == (1, 5, 5)
    assert stats["images_read_in_place"] == 0  # no staging on the host
    seconds = stats["seconds"]
    assert sorted(seconds) == ["cpu_decode", "gather", "kernel", "nvjpeg", "parse", "wait"]
    # No staging and no nvJPEG on the host; the rest took time.
    assert seconds["gather"] == seconds["nvjpeg"] == seconds["wait"] == 0
    assert min(seconds["parse"], seconds["cpu_decode"], seconds["kernel"]) > 0


def truncated(jpeg):
    # nvJPEG decodes a JPEG cut short without an error: the worker sends one
    # without an end-of-image marker to the CPU decoder instead.
    return jpeg[: jpeg.index(b"\xff\xda") + 24]


def stray_marker(jpeg):
    # A marker libjpeg does not know, in the scan: the worker's walk of the
    # markers sends it to the CPU decoder too.
    at = jpeg.index(b"\xff\xda") + 30
    return jpeg[:at] + b"\xff\x06" + jpeg[at:]


@pytest.mark.parametrize("damage, error", [(truncated, "truncated JPEG"),
                                           (stray_marker, "corrupt JPEG: Unsupported marker")])
def test_damaged_jpeg_fails_in_the_worker_as_on_the_cpu_path(tmp_path, damage, error):
    good = encode_image(image_array(1), "JPEG", quality=90)
    path = write_tar(tmp_path / "bad-000000.tar",
                     [("a.jpg", good), ("b.jpg", damage(good)), ("c.jpg", good)])
    for device in (None, "cuda"):
        ds = wds.WebDataset(path, shardshuffle=False).decode("rgb8", device=device).batched(3)
        with pytest.raises(wds.DecodingError, match=rf"bad-000000.tar: key b: field jpg: {error}"):
            list(wds.Loader(ds))
    skipping = (wds.WebDataset(path, shardshuffle=False)
                .decode("rgb8", device="cuda", handler=wds.warn_and_continue).batched(3))
    with pytest.warns(UserWarning):
        (batch,) = list(wds.Loader(skipping))
    assert batch["__key__"] == ["a", "c"]


def test_loader_without_a_gpu_decodes_in_its_workers(pattern):
    # The core loader's workers decode the batches' jobs on the host when the
    # consumer has no GPU (its one thread would otherwise decode them all).
    ds = dataset(pattern, device="cuda", size=(8, 10), crop="random", hflip=0.5)
    ctx = wds._plan.Context(0, 1, 0, 2, 0, 0, ds.seed)
    chain, kinds, names = wds._plan.single_native_segment(ds.pipeline, ctx).build(None, ctx)

    def first(decode_gpu_jobs_on_host):
        core = wds._core.Loader(chain, workers=2, kinds=kinds, kind_names=names,
                                decode_gpu_jobs_on_host=decode_gpu_jobs_on_host)
        return core.next()

    jobs, decoded = first(False), first(True)
    assert isinstance(jobs[0], wds._core.GpuJobs)
    assert isinstance(decoded[0], np.ndarray) and decoded[0].shape == (5, 8, 10, 3)
    assert np.array_equal(decoded[0], wds.decode_gpu_jobs(jobs)[0])
    assert list(decoded[2]) == list(jobs[2])
    assert isinstance(next(iter(wds.Loader(ds, workers=2)))[0], np.ndarray)


def test_workers_decoding_ahead_give_pending_images_that_finish_into_the_batch(pattern):
    # Workers with decoders (here on the host, -1) decode the jobs ahead; the
    # consumer finishes each batch into memory it owns: the bytes of the
    # host decode, the same keys.
    ds = dataset(pattern, device="cuda", size=(8, 10), crop="random", hflip=0.5)
    ctx = wds._plan.Context(0, 1, 0, 2, 0, 0, ds.seed)
    chain, kinds, names = wds._plan.single_native_segment(ds.pipeline, ctx).build(None, ctx)
    decoders = wds._core.GpuWorkerDecoders(-1, decoders=2)
    assert (decoders.device, decoders.decoder, decoders.nvjpeg_hardware) == (-1, "cpu", False)
    assert decoders.decoders == 2
    ahead = wds._core.Loader(chain, workers=2, kinds=kinds, kind_names=names,
                             gpu_decoders=decoders)
    on_host = wds._core.Loader(chain, workers=2, kinds=kinds, kind_names=names,
                               decode_gpu_jobs_on_host=True)
    batches = 0
    while True:
        pending, decoded = ahead.next(), on_host.next()
        if pending is None:
            assert decoded is None
            break
        images = pending[0]
        assert isinstance(images, wds._core.PendingImages)
        assert len(images) == len(decoded[0]) and images.device == -1
        assert images.layout() == ("uint8", decoded[0].shape)
        assert "images decoded on the host, not yet finished into a batch" in repr(images)
        out = np.full(decoded[0].shape, 7, dtype=np.uint8)
        images.finish(out.ctypes.data, 0)
        assert np.array_equal(out, decoded[0])
        assert list(pending[2]) == list(decoded[2])
        batches += 1
    assert batches == 8
    stats = decoders.stats()
    assert stats["batches"] == 8 and stats["images"] == 40
    assert decoders.decoders == 2  # made up front, one per worker
    with pytest.raises(ValueError, match="decode_gpu_jobs_on_host and gpu_decoders exclude each "
                                         "other"):
        wds._core.Loader(chain, workers=2, kinds=kinds, kind_names=names, gpu_decoders=decoders,
                         decode_gpu_jobs_on_host=True).next()


def test_decode_in_workers_needs_a_cuda_device(pattern):
    with pytest.raises(ValueError, match=r"Loader\(decode_in_workers=True\) needs device='cuda' "
                                         r"\(without a GPU the workers always decode\)"):
        wds.Loader(dataset(pattern, device="cuda"), workers=2, decode_in_workers=True)


def test_undecodable_scan_names_the_shard_key_and_field_when_the_batch_is_decoded(tmp_path):
    good = encode_image(image_array(1), "JPEG", quality=90)
    # Sound markers, but the scan uses Huffman tables no DHT defines: planned
    # for nvJPEG, it fails only when the batch is decoded (by the consumer on
    # a GPU, by the workers without one), past the handler.
    sos = good.index(b"\xff\xda")
    bad = good[:sos + 6] + b"\x33" + good[sos + 7:]
    path = write_tar(tmp_path / "bad-000000.tar", [("a.jpg", good), ("b.jpg", bad)])
    ds = wds.WebDataset(path, shardshuffle=False).decode("rgb8", device="cuda").batched(2)
    with pytest.raises(ValueError, match=r"decode on cuda: .*bad-000000.tar: key b: field jpg: "):
        list(wds.Loader(ds))
    # Tuples keep no keys: the jobs name themselves.
    tuples = (wds.WebDataset(path, shardshuffle=False).decode("rgb8", device="cuda")
              .to_tuple("jpg").batched(2))
    with pytest.raises(ValueError, match=r"decode on cuda: .*bad-000000.tar: key b: field jpg: "):
        list(wds.Loader(tuples))


def test_loader_on_cuda_without_a_gpu_is_refused(pattern, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a GPU machine
    with pytest.raises(ValueError, match=r"torch.cuda.is_available\(\) is False"):
        wds.Loader(dataset(pattern, device="cuda"), device="cuda")


@cuda
def test_loader_on_cuda_yields_cuda_tensors_written_in_place(pattern):
    loader = wds.Loader(dataset(pattern, device="cuda", size=(8, 10), crop="random", hflip=0.5),
                        workers=2, device="cuda", pin_memory=True)
    host = drain(wds.Loader(dataset(pattern, device="cuda", size=(8, 10), crop="random",
                                    hflip=0.5), workers=2))
    keys, labels, images = [], [], []
    for batch_images, batch_labels, batch_keys in loader:
        assert batch_images.is_cuda and batch_labels.is_cuda
        assert batch_images.dtype == torch.uint8
        # The kernel wrote the tensor's own storage: no copy, no view.
        assert batch_images.untyped_storage().data_ptr() == batch_images.data_ptr()
        keys += list(batch_keys)
        labels += batch_labels.cpu().tolist()  # copied without blocking, through pinned memory
        images.append(batch_images.cpu().numpy())
    assert keys == host[0]
    assert labels == [int(x) for x in host[1]]
    for a, b in zip(images, host[2]):
        assert np.abs(a.astype(int) - b.astype(int)).max() <= 2
    stats = loader.gpu_decoder.stats()
    assert stats["images"] == 40
    print("decoder:", loader.gpu_decoder.decoder, stats)


@cuda
def test_loader_on_cuda_decoding_in_its_workers_is_the_consumers_decode(pattern):
    def run(decode_in_workers):
        loader = wds.Loader(dataset(pattern, device="cuda", size=(8, 10), crop="random",
                                    hflip=0.5), workers=2, device="cuda",
                            decode_in_workers=decode_in_workers)
        keys, images = [], []
        for batch_images, _, batch_keys in loader:
            assert batch_images.is_cuda and batch_images.dtype == torch.uint8
            assert batch_images.untyped_storage().data_ptr() == batch_images.data_ptr()
            keys += list(batch_keys)
            images.append(batch_images.cpu().numpy())
        return loader, keys, images

    workers, keys, images = run(True)
    consumer, want_keys, want_images = run(False)
    assert isinstance(workers.gpu_decoder, wds._core.GpuWorkerDecoders)
    assert isinstance(consumer.gpu_decoder, wds._core.GpuBatchDecoder)
    assert keys == want_keys
    for a, b in zip(images, want_images):
        assert np.array_equal(a, b)  # the same nvJPEG, the same kernel
    assert workers.gpu_decoder.stats()["images"] == 40
    assert workers.gpu_decoder.decoders == 2  # one per worker, made by Loader


class _FakeTorch:
    """torch as _local_gpu sees it: `count` visible GPUs, `current` the current one."""

    def __init__(self, count, current):
        self.cuda = type("cuda", (), {"device_count": staticmethod(lambda: count),
                                      "current_device": staticmethod(lambda: current)})


def test_cuda_is_the_launchers_local_rank_where_visible_else_the_current_device(monkeypatch):
    from webdataset_cpp.loader import _local_gpu

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    assert wds._core.launcher_local_rank() is None
    assert _local_gpu(_FakeTorch(count=4, current=2)) == 2  # one process: set_device's choice
    monkeypatch.setenv("SLURM_LOCALID", "3")  # srun without torchrun
    assert wds._core.launcher_local_rank() == 3
    assert _local_gpu(_FakeTorch(count=4, current=0)) == 3
    assert _local_gpu(_FakeTorch(count=1, current=0)) == 0  # each rank sees its own GPU only
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert _local_gpu(_FakeTorch(count=4, current=0)) == 1
    monkeypatch.setenv("LOCAL_RANK", "3x")
    with pytest.raises(ValueError, match='LOCAL_RANK="3x" is not an integer'):
        wds._core.launcher_local_rank()
    monkeypatch.setenv("LOCAL_RANK", "-1")
    with pytest.raises(ValueError, match="device -1 from LOCAL_RANK must be >= 0"):
        wds._core.launcher_local_rank()


@cuda
def test_decode_gpu_jobs_on_cuda_is_the_loaders_decode(pattern):
    # A DataLoader's batches decoded on the GPU in the main process: the
    # same nvJPEG and kernel as Loader(device="cuda"), the other fields untouched.
    spec = dict(size=(8, 10), crop="center")
    loader = torch.utils.data.DataLoader(dataset(pattern, device="cuda", **spec),
                                         batch_size=None, num_workers=2, timeout=60)
    got = {}
    for batch in loader:
        images, labels, keys = wds.decode_gpu_jobs(batch, device="cuda")
        assert images.is_cuda and images.dtype == torch.uint8
        assert images.untyped_storage().data_ptr() == images.data_ptr()
        assert not labels.is_cuda  # left as the DataLoader gave it
        got.update(by_key([(images.cpu(), labels, keys)]))
    want = {}
    for images, labels, keys in wds.Loader(dataset(pattern, device="cuda", **spec), workers=2,
                                           device="cuda"):
        want.update(by_key([(images.cpu(), labels.cpu(), keys)]))
    assert got.keys() == want.keys() and len(got) == 40
    for key, (image, label) in want.items():
        assert got[key][1] == label
        assert np.array_equal(got[key][0], image), key
