"""webdataset_cpp.wids: indexed datasets over shards (the reference's wids API)
on the native random-access reader; its descriptors, fetching of remote
shards, decoding, and the samplers' orders and equal per-rank lengths."""

import hashlib
import io
import json
import multiprocessing
import os
import pickle
import random
import re
import shutil
import tarfile
import time
import warnings
from collections import Counter

import numpy as np
import PIL.Image
import pytest

import webdataset_cpp as wds
from conftest import write_shards, write_tar
from webdataset_cpp import wids

FIELDS = [".jpg", ".cls", ".txt", ".json"]
META = ["__key__", "__dataset__", "__index__", "__shard__", "__shardindex__"]


def members(path):
    with tarfile.open(path) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def descriptors(paths, n=10):
    return [{"url": p, "nsamples": n} for p in paths]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_shards(str(tmp_path_factory.mktemp("wids")), 4, 10)


@pytest.fixture(scope="module")
def raw(shards):
    return wids.ShardListDataset(descriptors(shards), transformations=[])


def test_every_sample_by_index_is_its_members_bytes(shards, raw):
    assert len(raw) == 40
    for s, path in enumerate(shards):
        content = members(path)
        for i in range(10):
            sample = raw[s * 10 + i]
            assert list(sample) == FIELDS + META
            key = f"s{s}_{i:03d}"
            assert sample["__key__"] == key
            for field in FIELDS:
                assert sample[field].read() == dict(content)[key + field]
            assert sample["__index__"] == s * 10 + i
            assert sample["__shard__"] == path
            assert sample["__shardindex__"] == i
            assert sample["__dataset__"] is None
    assert raw[-1]["__key__"] == "s3_009"
    assert raw[-40]["__key__"] == "s0_000"
    assert raw[np.int64(12)]["__key__"] == "s1_002"


def test_indexes_outside_the_dataset(raw):
    for index in (40, -41, 10**12):
        with pytest.raises(IndexError, match=f"index {index} of 40 samples"):
            raw[index]
    with pytest.raises(TypeError):
        raw["3"]


def test_default_transformations_decode_as_the_reference(shards):
    sample = wids.ShardListDataset(descriptors(shards))[13]
    assert isinstance(sample[".jpg"], PIL.Image.Image)
    assert sample[".jpg"].size == (16, 12)
    assert sample[".cls"] == 3
    assert sample[".txt"] == "text 13"
    assert sample[".json"] == {"i": 13, "name": "s1_003"}
    array = wids.ShardListDataset(descriptors(shards), transformations="numpy")[13][".jpg"]
    assert isinstance(array, np.ndarray) and array.shape == (12, 16, 3)
    assert array.dtype == np.uint8
    np.testing.assert_array_equal(array, np.asarray(sample[".jpg"]))


def test_image_specs_decode_natively_as_the_streaming_api(shards):
    dataset = wids.ShardListDataset(descriptors(shards), transformations="rgb8")
    raw = wids.ShardListDataset(descriptors(shards), transformations=[])
    sample, plain = dataset[13], raw[13]
    assert list(sample) == FIELDS + META
    want = np.asarray(PIL.Image.open(plain[".jpg"]).convert("RGB"))
    assert sample[".jpg"].dtype == np.uint8 and sample[".jpg"].shape == want.shape
    assert np.array_equal(sample[".jpg"], want)  # libjpeg-turbo's decode, as PIL's
    assert sample[".cls"] == 3 and sample[".txt"] == "text 13"
    assert sample[".json"] == json.loads(raw[13][".json"].read())
    assert sample["__key__"] == "s1_003" and sample["__index__"] == 13
    streamed = next(iter(wds.WebDataset(shards[1], shardshuffle=False).decode("rgb8")
                         .slice(3, 4)))
    assert np.array_equal(sample[".jpg"], streamed["jpg"])
    torch = pytest.importorskip("torch")
    decoder = wds.Decoder([wds.imagehandler("torchrgb8", size=(16, 24), crop="center")])
    tensor = wids.ShardListDataset(descriptors(shards), transformations=decoder)[13][".jpg"]
    assert isinstance(tensor, torch.Tensor) and tuple(tensor.shape) == (3, 16, 24)
    with pytest.raises(ValueError, match="an image spec \\(l8, rgb8"):
        wids.ShardListDataset(descriptors(shards), transformations="rgb9")


def test_a_corrupt_image_names_its_shard_and_key(tmp_path):
    path = write_tar(tmp_path / "bad.tar", [("a.jpg", b"\xff\xd8\xff\xe0 not a jpeg")])
    dataset = wids.ShardListDataset([{"url": path, "nsamples": 1}], transformations="rgb8")
    with pytest.raises(wds.DecodingError, match=re.escape(f"{path}: key a: field jpg")):
        dataset[0]


def test_transformations_run_in_order(shards):
    calls = []

    def first(sample):
        calls.append("first")
        return {**sample, "n": 1}

    def second(sample):
        calls.append("second")
        return {**sample, "n": sample["n"] + 1}

    dataset = wids.ShardListDataset(descriptors(shards), transformations=[first])
    assert dataset.add_transform(second) is dataset
    assert dataset[0]["n"] == 2
    assert calls == ["first", "second"]
    with pytest.raises(ValueError, match=re.escape(
            "'tensor': a transformation is 'PIL', 'numpy', an image spec (l8, rgb8, rgba8, ")):
        wids.ShardListDataset(descriptors(shards), transformations=["tensor"])


def test_gz_fields_and_basic_extensions(tmp_path):
    import gzip

    path = write_tar(tmp_path / "g.tar", [
        ("a.txt.gz", gzip.compress(b"hello")),
        ("a.cls2", b"7"),
        ("a.npy", _npy(np.arange(3))),
        ("a.gz", b"left"),
        ("a.bin", b"\x00\x01"),
    ])
    with pytest.warns(UserWarning, match="a plain .gz field is not decompressed"):
        sample = wids.ShardListDataset([{"url": path, "nsamples": 1}])[0]
    assert sample[".txt.gz"] == "hello"
    assert sample[".cls2"] == 7
    np.testing.assert_array_equal(sample[".npy"], np.arange(3))
    assert sample[".gz"].read() == b"left"
    assert sample[".bin"].read() == b"\x00\x01"


def _npy(array):
    stream = io.BytesIO()
    np.save(stream, array)
    return stream.getvalue()


def test_a_descriptor_written_by_wds_shard(shards, tmp_path):
    directory = tmp_path / "data"
    shutil.copytree(os.path.dirname(shards[0]), directory)
    index = str(directory / "index.json")
    names = [os.path.basename(p) for p in shards]
    from conftest import tool
    import subprocess

    subprocess.run([tool("wds-shard"), "index", "--json", index, *names], cwd=directory,
                   check=True, capture_output=True)
    dataset = wids.ShardListDataset(index, transformations=[])
    assert len(dataset) == 40
    assert dataset[25]["__shard__"] == str(directory / names[2])
    assert dataset[25]["__key__"] == "s2_005"
    # The same from an open file, whose URLs are then relative to the working directory.
    os.chdir(directory)
    try:
        with open(index) as f:
            assert wids.ShardListDataset(f, transformations=[])[25]["__shard__"] == names[2]
    finally:
        os.chdir("/")


def test_descriptors_with_components(shards, tmp_path):
    part = tmp_path / "part"
    part.mkdir()
    for p in shards[2:]:
        shutil.copy(p, part)
    with open(part / "more.json", "w") as f:
        json.dump({"wids_version": 1, "name": "more", "shardlist": [
            {"url": os.path.basename(p), "nsamples": 10} for p in shards[2:]]}, f)
    top = tmp_path / "top.json"
    with open(top, "w") as f:
        json.dump({"wids_version": 1, "name": "all",
                   "shardlist": descriptors(shards[:1]),
                   "datasets": [{"source_url": str(part / "more.json"), "weight": 2},
                                {"name": "inline", "shardlist": descriptors(shards[1:2])}]}, f)
    dataset = wids.ShardListDataset(str(top), transformations=[])
    assert dataset.dataset_name == "all"
    assert len(dataset) == 40
    assert [s["url"] for s in dataset.shards] == [shards[0], str(part / os.path.basename(
        shards[2])), str(part / os.path.basename(shards[3])), shards[1]]
    assert dataset.shards[1]["weight"] == 2
    assert dataset.shards[1]["source_url"] == str(part / "more.json")
    assert dataset[0]["__dataset__"] is None
    assert dataset[10]["__dataset__"] == "more"
    assert dataset[35]["__dataset__"] == "inline"
    assert dataset[35]["__key__"] == "s1_005"


@pytest.mark.parametrize("content,message", [
    ({"shardlist": []}, "'wids_version' must be 1, found None"),
    ({"wids_version": 2, "shardlist": []}, "'wids_version' must be 1, found 2"),
    ({"wids_version": 1, "shardlist": [{"url": "a.tar"}]}, "shard 0 needs a 'url' and 'nsamples'"),
    ({"wids_version": 1, "shardlist": [{"url": "a.tar", "nsamples": "3"}]},
     "shard a.tar: 'nsamples' must be a count, not '3'"),
    ({"wids_version": 1, "shardlist": []}, "the description lists no shards"),
    ({"wids_version": 1, "datasets": [{"name": "x"}]}, "a component of .* has no 'shardlist'"),
    ([1, 2], "a dataset description is a JSON object"),
])
def test_bad_descriptors_are_named(tmp_path, content, message):
    path = str(tmp_path / "d.json")
    with open(path, "w") as f:
        json.dump(content, f)
    with pytest.raises(ValueError, match=f"^{path}: {message}"):
        wids.ShardListDataset(path)


def test_a_descriptor_that_is_not_json(tmp_path):
    path = tmp_path / "d.json"
    path.write_text("{oops")
    with pytest.raises(ValueError, match=f"{path}: not a JSON dataset description"):
        wids.ShardListDataset(str(path))
    with pytest.raises(FileNotFoundError):
        wids.ShardListDataset(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="the list of shards is empty"):
        wids.ShardListDataset([])


def test_a_shard_whose_count_differs_from_its_description(shards):
    dataset = wids.ShardListDataset(descriptors(shards[:1], n=11), transformations=[])
    with pytest.raises(wds.DataError, match=f"{shards[0]}: 10 samples, but the description "
                                            "says 11"):
        dataset[0]


def test_compressed_and_missing_shards(shards, tmp_path):
    gz = str(tmp_path / "s.tar.gz")
    with tarfile.open(gz, "w:gz") as tar:
        tar.add(shards[0], arcname="x.bin")
    dataset = wids.ShardListDataset([{"url": gz, "nsamples": 1}], transformations=[])
    with pytest.raises(wds.DataError, match=f"{gz}: a gzip-compressed tar; random access needs "
                                            "an uncompressed one"):
        dataset[0]
    missing = str(tmp_path / "missing.tar")
    with pytest.raises(FileNotFoundError) as e:
        wids.ShardListDataset([{"url": missing, "nsamples": 1}])[0]
    assert e.value.filename == missing


def test_a_stale_sidecar_fails_loudly(tmp_path):
    path = write_tar(tmp_path / "s.tar", [("a.txt", b"one"), ("b.txt", b"two")])
    assert wds.write_index(path) == 2
    write_tar(path, [("a.txt", b"ONE!"), ("b.txt", b"two")])
    dataset = wids.ShardListDataset([{"url": path, "nsamples": 2}], transformations=[])
    assert dataset[1][".txt"].read() == b"two"
    with pytest.raises(wds.DataError, match="the tar header before member a.txt at offset 512 "
                                            "is not that member's \\(3 bytes\\)"):
        dataset[0]


def test_a_repeated_field_is_an_error(tmp_path):
    path = write_tar(tmp_path / "s.tar", [("a.TXT", b"1"), ("a.txt", b"2")])
    dataset = wids.ShardListDataset([{"url": path, "nsamples": 1}], transformations=[])
    assert list(dataset[0]) == [".TXT", ".txt"] + META
    path = write_tar(tmp_path / "t.tar", [("a.txt", b"1"), ("a.txt", b"2")])
    dataset = wids.ShardListDataset([{"url": path, "nsamples": 1}], transformations=[])
    with pytest.raises(wds.DataError, match="sample a has two .txt members"):
        dataset[0]


def test_open_shards_are_bounded_and_counted(shards):
    dataset = wids.ShardListDataset(descriptors(shards), transformations=[], lru_size=2)
    for i in (0, 1, 10, 11, 0, 20, 10):
        dataset[i]
    assert list(dataset._open) == [shards[0], shards[2], shards[1]][1:]
    assert dataset.get_stats() == (7, 4)
    with pytest.warns(UserWarning, match="lru_size above 200"):
        wids.ShardListDataset(descriptors(shards), lru_size=201)


def test_cache_misses_warn_once(shards):
    dataset = wids.ShardListDataset(descriptors(shards), transformations=[], lru_size=1)
    with pytest.warns(UserWarning, match="accesses opened a shard") as caught:
        for i in range(120):
            dataset[(i * 10) % 40]
    assert len([w for w in caught if "opened a shard" in str(w.message)]) == 1


def test_pickles_for_spawned_workers(shards):
    dataset = wids.ShardListDataset(descriptors(shards))
    dataset[0]
    copy = pickle.loads(pickle.dumps(dataset))
    assert len(copy._open) == 0
    assert copy[5][".txt"] == "text 5"


def test_a_dataloader_reads_every_index_once(shards):
    torch = pytest.importorskip("torch")
    dataset = wids.ShardListDataset(descriptors(shards), transformations=[])
    dataset[0]  # the parent has a shard open when the workers fork
    sampler = wids.ChunkedSampler(dataset, chunksize=7, seed=3)
    loader = torch.utils.data.DataLoader(dataset, batch_size=5, sampler=sampler, num_workers=2,
                                         collate_fn=list)
    seen = [(s["__index__"], s["__key__"], s[".txt"]) for batch in loader for s in batch]
    assert sorted(i for i, _, _ in seen) == list(range(40))
    for i, key, text in seen:
        assert key == f"s{i // 10}_{i % 10:03d}"
        assert text.read() == f"text {i}".encode()


# --- remote shards


@pytest.fixture
def served(shards, tmp_path):
    from test_remote import Server

    root = tmp_path / "www"
    root.mkdir()
    for p in shards:
        shutil.copy(p, root)
    with open(root / "index.json", "w") as f:
        json.dump({"wids_version": 1, "shardlist": [
            {"url": os.path.basename(p), "nsamples": 10} for p in shards]}, f)
    server = Server(str(root), str(tmp_path))
    yield server
    server.stop()


def test_remote_shards_are_fetched_once_into_the_cache(served, tmp_path, monkeypatch):
    monkeypatch.delenv("WDS_CACHE", raising=False)
    cache = str(tmp_path / "cache")
    dataset = wids.ShardListDataset(served.url("index.json"), cache_dir=cache,
                                    transformations=[])
    assert dataset.shards[1]["url"] == served.url("shard-000001.tar")
    assert dataset[15]["__key__"] == "s1_005"
    assert dataset[15]["__shard__"] == served.url("shard-000001.tar")
    again = wids.ShardListDataset(served.url("index.json"), cache_dir=cache, transformations=[])
    assert again[19][".txt"].read() == b"text 19"
    assert served.gets().count("/shard-000001.tar") == 1
    assert sorted(os.listdir(cache)) == ["shard-000001.tar"]


def test_default_cache_names_are_quoted_urls(served, tmp_path, monkeypatch):
    monkeypatch.setenv("WIDS_CACHE", str(tmp_path / "wc"))
    dataset = wids.ShardListDataset(served.url("index.json"), transformations=[])
    dataset[0]
    assert os.listdir(tmp_path / "wc") == [
        served.url("shard-000000.tar").replace(":", "%3A").replace("/", "%2F")]


def test_a_failed_fetch_leaves_no_file(served, tmp_path):
    cache = str(tmp_path / "cache")
    dataset = wids.ShardListDataset(
        [{"url": served.url("missing.tar"), "nsamples": 1}], cache_dir=cache)
    with pytest.raises(FileNotFoundError):
        dataset[0]
    served.fault("shard-000000.tar", cut_after=1000, times=50)
    dataset = wids.ShardListDataset(
        [{"url": served.url("shard-000000.tar"), "nsamples": 10}], cache_dir=cache,
        remote=wds.RemoteOptions(max_attempts=2))
    with pytest.raises(ConnectionError):
        dataset[0]
    assert os.listdir(cache) == []


# --- remote shards read by ranges


def _ranged(served, **kwargs):
    return wids.ShardListDataset(served.url("index.json"), transformations=[],
                                 remote_reads="ranges", **kwargs)


def test_ranges_read_each_sample_with_one_request(served, shards, tmp_path, monkeypatch):
    monkeypatch.setenv("WIDS_CACHE", str(tmp_path / "wc"))
    root = os.path.dirname(served.url("x"))
    for p in shards:  # the server-side index of each shard
        wds.write_index(os.path.join(tmp_path, "www", os.path.basename(p)))
    dataset = _ranged(served)
    local = wids.ShardListDataset(descriptors(shards), transformations=[])
    for i in (15, 3, 39, 16):
        got, want = dataset[i], local[i]
        assert list(got) == FIELDS + META
        for field in FIELDS:
            assert got[field].read() == want[field].read()
        assert got["__key__"] == want["__key__"]
        assert got["__shard__"] == served.url(os.path.basename(want["__shard__"]))
    gets = [(e["path"], e["headers"].get("range")) for e in served.log() if e["method"] == "GET"]
    assert [path for path, _ in gets] == [
        "/index.json", "/shard-000001.tar", "/shard-000001.tar.idx", "/shard-000001.tar",
        "/shard-000000.tar", "/shard-000000.tar.idx", "/shard-000000.tar",
        "/shard-000003.tar", "/shard-000003.tar.idx", "/shard-000003.tar", "/shard-000001.tar"]
    assert gets[1][1] == "bytes=0-511"
    assert all(r is not None and r.startswith("bytes=") and not r.endswith("-")
               for path, r in gets if path.endswith(".tar"))
    assert not os.path.exists(tmp_path / "wc")  # nothing fetched, nothing stored
    assert root.startswith("http://127.0.0.1:")


def test_ranges_without_a_server_side_index_scan_once(served):
    dataset = _ranged(served)
    assert dataset[12][".txt"].read() == b"text 12"
    assert dataset[18][".txt"].read() == b"text 18"
    gets = [(e["path"], e["headers"].get("range")) for e in served.log() if e["method"] == "GET"]
    assert gets[1:] == [("/shard-000001.tar", "bytes=0-511"), ("/shard-000001.tar.idx", None),
                        ("/shard-000001.tar", None)] + [("/shard-000001.tar", r) for _, r in
                                                        gets[4:]]
    assert len(gets) == 6


def test_ranges_keep_each_shards_index_in_the_native_cache(served, tmp_path):
    cache = tmp_path / "cache"
    remote = wds.RemoteOptions(cache_dir=str(cache))
    dataset = _ranged(served, remote=remote, lru_size=1)
    assert dataset[12][".txt"].read() == b"text 12"  # shard 1: its first block, .idx, a scan
    assert dataset[3][".txt"].read() == b"text 3"  # shard 0; shard 1 is closed (lru_size 1)
    assert [e["path"] for e in served.log()].count("/shard-000000.tar.idx") == 1
    start = len(served.log())
    # Opened again, and by another process (a dataset of its own): the first
    # block tells the version, whose index the cache keeps; nothing is
    # scanned or asked for the .idx again.
    assert dataset[18][".txt"].read() == b"text 18"
    other = _ranged(served, remote=remote)
    assert [s[".txt"].read() for s in other.__getitems__([5, 15])] == [b"text 5", b"text 15"]
    gets = [(e["path"], e["headers"].get("range")) for e in served.log()[start:]
            if e["method"] == "GET" and e["path"] != "/index.json"]  # the other's descriptor
    assert sorted(path for path, r in gets if r == "bytes=0-511") == [
        "/shard-000000.tar", "/shard-000001.tar", "/shard-000001.tar"]
    assert len(gets) == 6 and all(path.endswith(".tar") and r for path, r in gets)
    # What the cache holds: each shard's index (its first line the version
    # read), never a copy of a shard.
    kept = {hashlib.sha256(f"index of {served.url(f'shard-00000{s}.tar')}".encode()).hexdigest(): s
            for s in (0, 1)}
    assert sorted(os.listdir(cache)) == sorted([".size"] + list(kept) + [k + ".meta" for k in kept])
    for name, s in kept.items():
        version, text = (cache / name).read_text().split("\n", 1)
        data = (tmp_path / "www" / f"shard-00000{s}.tar").read_bytes()
        assert version.startswith(f'etag "{hashlib.sha256(data).hexdigest()[:16]}" modified ')
        assert version.endswith(f" GMT size {len(data)}")
        assert text.startswith("v1.2 10\n") and f"s{s}_009.txt" in text


def test_getitems_is_getitem_of_each_index(served, shards):
    dataset = _ranged(served, lru_size=2, read_threads=4)
    indices = [39, 0, 17, 0, 25, 8, -1]
    batch = dataset.__getitems__(indices)
    one_by_one = _ranged(served)
    assert len(batch) == len(indices)
    for got, i in zip(batch, indices):
        want = one_by_one[i]
        assert list(got) == list(want)
        for key in FIELDS:
            assert got[key].read() == want[key].read()
        for key in META:
            assert got[key] == want[key]
    local = wids.ShardListDataset(descriptors(shards), transformations=[], lru_size=1)
    batch = local.__getitems__([5, 35, 15])
    assert [s["__key__"] for s in batch] == ["s0_005", "s3_005", "s1_005"]
    assert [s[".txt"].read() for s in batch] == [b"text 5", b"text 35", b"text 15"]
    with pytest.raises(IndexError, match="index 40 of 40"):
        local.__getitems__([1, 40])


def test_getitems_opens_a_batchs_shards_at_once(served):
    # Each shard's first answer is held back a moment, so that four opens in
    # flight at once need four connections however the threads are scheduled
    # (an open that ended first would hand its connection to the next).
    for s in range(4):
        served.fault(f"shard-00000{s}.tar", stall=0.5, stall_after=0)
    dataset = _ranged(served, lru_size=2, read_threads=4)
    batch = dataset.__getitems__([35, 5, 25, 15, 6])
    assert [s[".txt"].read() for s in batch] == [b"text 35", b"text 5", b"text 25", b"text 15",
                                                 b"text 6"]
    firsts = [e for e in served.log() if e["headers"].get("range") == "bytes=0-511"]
    assert sorted(e["path"] for e in firsts) == [f"/shard-00000{s}.tar" for s in range(4)]
    # Four opens in flight at once, each on a connection of its own (one after
    # another, they would share one).
    assert len({e["peer"] for e in firsts}) == 4
    assert dataset.get_stats() == (5, 5)  # lru_size 2: shard 0 reopened from the batch's
    assert len(dataset._open) == 2
    requests = len(served.log())
    dataset.__getitems__([0, 1])  # open: one read each, nothing opened
    assert len(served.log()) == requests + 2


def test_an_empty_batch_is_empty(served, shards):
    assert _ranged(served).__getitems__([]) == []
    assert wids.ShardListDataset(descriptors(shards)).__getitems__([]) == []
    assert wds._core.read_samples([]) == [] and wds._core.open_shards([]) == []


def test_getitems_calls_a_subclasss_get_shard(served):
    calls = []

    class Counted(wids.ShardListDataset):
        def get_shard(self, index):
            calls.append(index)
            return super().get_shard(index)

    dataset = Counted(served.url("index.json"), remote_reads="ranges", transformations=[])
    for s in range(2):  # held back, so that the two opens overlap (see above)
        served.fault(f"shard-00000{s}.tar", stall=0.5, stall_after=0)
    assert [s["__key__"] for s in dataset.__getitems__([12, 3])] == ["s1_002", "s0_003"]
    assert calls == [12, 3]
    firsts = [e for e in served.log() if e["headers"].get("range") == "bytes=0-511"]
    assert len({e["peer"] for e in firsts}) == 2  # still opened at once


def test_getitems_names_a_shard_that_cannot_be_opened(served):
    url = served.url("missing.tar")
    dataset = wids.ShardListDataset([{"url": served.url("shard-000000.tar"), "nsamples": 10},
                                     {"url": url, "nsamples": 1}], remote_reads="ranges",
                                    transformations=[])
    with pytest.raises(FileNotFoundError) as caught:
        dataset.__getitems__([0, 10])
    assert caught.value.filename == url
    wrong = wids.ShardListDataset([{"url": served.url("shard-000000.tar"), "nsamples": 10},
                                   {"url": served.url("shard-000001.tar"), "nsamples": 9}],
                                  remote_reads="ranges", transformations=[])
    with pytest.raises(wds.DataError, match=re.escape(
            f"{served.url('shard-000001.tar')}: 10 samples, but the description says 9")):
        wrong.__getitems__([0, 10])
    with pytest.raises(ValueError, match="x.tar is not a remote URL"):
        wds._core.open_shards(["x.tar"])


def test_getitems_applies_the_transformations(served):
    dataset = wids.ShardListDataset(served.url("index.json"), remote_reads="ranges")
    sample = dataset.__getitems__([7])[0]
    assert isinstance(sample[".jpg"], PIL.Image.Image)
    assert sample[".cls"] == 7 % 10 and sample[".txt"] == "text 7"


def test_ranges_pin_the_version_first_read_and_reopen_a_replaced_shard_once(served):
    dataset = _ranged(served)
    assert dataset[0]["__key__"] == "s0_000"
    url = served.url("shard-000000.tar")
    # The next request sees another version: the shard is opened again (its
    # new index and version) and the read retried, with a warning.
    served.fault("shard-000000.tar", etag='"v2"')
    with pytest.warns(UserWarning, match=re.escape(f"{url} changed since it was opened")):
        assert dataset[1][".txt"].read() == b"text 1"
    served.fault("shard-000000.tar", etag='"v3"')
    with pytest.warns(UserWarning, match=re.escape(f"{url} changed since it was opened")):
        assert [s[".txt"].read() for s in dataset.__getitems__([2, 12])] == [b"text 2",
                                                                            b"text 12"]
    # Only the shard that changed is opened again.
    dataset[15]
    served.fault("shard-000000.tar", etag='"v4"')
    with pytest.warns(UserWarning) as caught:
        dataset.__getitems__([4, 16])
    assert [str(w.message) for w in caught] == [
        f"ShardListDataset: {url} changed since it was opened; reading its new version"]
    # A shard that changes at every request fails after one reopening.
    for tag in ('"a"', '"b"', '"c"'):
        served.fault("shard-000000.tar", etag=tag)
    with pytest.warns(UserWarning), pytest.raises(wds.ObjectChangedError, match=re.escape(
            f"{url}: member s0_003.jpg at offset 14336: the object changed since it was first "
            "read (HTTP 412 to a request for bytes 13824-17945 with If-Match: \"b\")")):
        dataset[3]
    assert issubclass(wds.ObjectChangedError, wds.DataError)


def test_ranges_refuse_a_server_that_ignores_them(served):
    served.fault("shard-000000.tar", status=200, body="not a range")
    dataset = _ranged(served, remote=wds.RemoteOptions(max_attempts=1))
    url = served.url("shard-000000.tar")
    with pytest.raises(wds.DataError, match=re.escape(
            f"{url}: HTTP 200 to a request for bytes 0-511 (expected 206 Partial Content): the "
            "server ignores Range requests")):
        dataset[0]


def test_a_bad_remote_reads_mode_is_named():
    with pytest.raises(ValueError, match="remote_reads='range'"):
        wids.ShardListDataset([{"url": "x.tar", "nsamples": 1}], remote_reads="range")


def test_ranged_shards_opened_before_a_fork_read_through_the_childs_connections(served):
    dataset = _ranged(served)
    assert dataset[3][".txt"].read() == b"text 3"  # shard 0 open in the parent
    requests = len(served.log())
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    # Not pickled: the children inherit the dataset and its open shard.
    children = [context.Process(target=_texts_of, args=(dataset, [i, i + 1], queue))
                for i in (4, 6)]
    for child in children:
        child.start()
    texts = sorted(queue.get(timeout=60) for _ in children)
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    assert texts == [[b"text 4", b"text 5"], [b"text 6", b"text 7"]]
    log = served.log()[requests:]
    # One ranged request per sample, none to open the shard again, each on a
    # connection of the child's own.
    assert [e["path"] for e in log] == ["/shard-000000.tar"] * 4
    parent_peers = {e["peer"] for e in served.log()[:requests]}
    assert not parent_peers & {e["peer"] for e in log}
    assert dataset[8][".txt"].read() == b"text 8"  # the parent's shard still reads


def _texts_of(dataset, indices, queue):
    queue.put([s[".txt"].read() for s in dataset.__getitems__(indices)])


def test_ctrl_c_while_a_batch_waits_on_a_stalled_server(served):
    from test_interrupts import SigintAfter

    dataset = _ranged(served, read_threads=2)
    dataset[0], dataset[10]  # both shards open
    served.fault("shard-000001.tar", stall=30, stall_after=0)
    timer = SigintAfter(0.5)
    with pytest.raises(KeyboardInterrupt):
        # The caller's thread reads sample 1, a helper the stalled sample 11.
        dataset.__getitems__([1, 11])
    elapsed = time.monotonic() - timer.sent
    timer.timer.join()
    assert elapsed < 3.0, elapsed
    served.fault("shard-000000.tar", stall=30, stall_after=0)
    timer = SigintAfter(0.5)
    with pytest.raises(KeyboardInterrupt):
        _ranged(served)[2]  # opening the shard: its first block stalls
    assert time.monotonic() - timer.sent < 3.0
    timer.timer.join()
    served.fault("shard-000001.tar", stall=30, stall_after=0)
    timer = SigintAfter(0.5)
    with pytest.raises(KeyboardInterrupt):
        _ranged(served).__getitems__([2, 12])  # two opens at once, one stalls
    assert time.monotonic() - timer.sent < 3.0
    timer.timer.join()


def test_getitems_calls_a_subclasss_getitem(shards):
    class Labelled(wids.ShardListDataset):
        def __getitem__(self, index):
            sample = super().__getitem__(index)
            sample["label"] = index * 2
            return sample

    dataset = Labelled(descriptors(shards), transformations=[])
    assert [s["label"] for s in dataset.__getitems__([1, 12])] == [2, 24]


def test_read_samples_keeps_its_shards_alive(served):
    import threading

    items = [(wds._core.IndexedShard(served.url("shard-000000.tar")), 0)]  # the only reference
    served.fault("shard-000000.tar", stall=1, stall_after=0)
    clear = threading.Timer(0.3, items.clear)  # while the read waits on the server
    clear.start()
    key, fields = wds._core.read_samples(items)[0]
    clear.join()
    assert items == [] and key == "s0_000" and dict(fields)["txt"] == b"text 0"


def test_read_samples_refuses_a_missing_shard():
    with pytest.raises(TypeError, match="an item's shard is NoneType, not an IndexedShard"):
        wds._core.read_samples([(None, 0)])


def test_pipe_shards(shards, tmp_path):
    cache = str(tmp_path / "cache")
    for url in (f"pipe:cat {shards[2]}", f"pipe:cp {shards[2]} {{local}}"):
        dataset = wids.ShardListDataset([{"url": url, "nsamples": 10}],
                                        localname=lambda u: os.path.join(cache, str(len(u))),
                                        transformations=[])
        assert dataset[4]["__key__"] == "s2_004"
    with pytest.raises(wds.CommandError, match="the command exited with status 1"):
        wids.ShardListDataset([{"url": "pipe:false {local}", "nsamples": 1}],
                              cache_dir=cache)[0]
    assert sorted(os.listdir(cache)) == sorted([str(len(f"pipe:cat {shards[2]}")),
                                                str(len(f"pipe:cp {shards[2]} {{local}}"))])


def test_cache_size_removes_the_least_recently_used(served, tmp_path):
    cache = str(tmp_path / "cache")
    dataset = wids.ShardListDataset(served.url("index.json"), cache_dir=cache,
                                    transformations=[], lru_size=1)
    dataset[0]
    shard_size = os.path.getsize(os.path.join(cache, "shard-000000.tar"))
    dataset.cache_size = 2 * shard_size
    os.utime(os.path.join(cache, "shard-000000.tar"), (1, 1))
    dataset[10]
    dataset[20]
    assert sorted(os.listdir(cache)) == ["shard-000001.tar", "shard-000002.tar"]


def test_eviction_touches_only_this_datasets_shards_not_in_use(served, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in ("notes.txt", "index.json", "other.tar", "other.tar.idx"):
        (cache / name).write_bytes(b"x" * 200000)
    live = os.getppid()  # a running process, not this one (whose fetches use its pid)
    for name, age in (("shard-000003.tar.99999999.tmp", 7200), ("shard-000002.tar.lock", 7200),
                      ("shard-000001.tar.99999998.tmp", 0), (f"shard-000000.tar.{live}.tmp", 7200),
                      ("other.tar.lock", 7200)):
        (cache / name).write_bytes(b"")
        os.utime(cache / name, (time.time() - age,) * 2)
    dataset = wids.ShardListDataset(served.url("index.json"), cache_dir=str(cache),
                                    transformations=[], lru_size=3, cache_size=1 << 20)
    for i in (0, 10, 20):  # three shards open: held, so none is removed
        dataset[i]
    names = sorted(os.listdir(cache))
    assert names == sorted(["notes.txt", "index.json", "other.tar", "other.tar.idx",
                            "other.tar.lock", "shard-000001.tar.99999998.tmp",
                            f"shard-000000.tar.{live}.tmp", "shard-000000.tar",
                            "shard-000001.tar", "shard-000002.tar"])
    dataset.cache_size = 1  # in bytes: everything but the shard being read
    dataset.lru_size = 1
    with pytest.warns(UserWarning, match="cache_size is in bytes"):
        wids.ShardListDataset(served.url("index.json"), cache_dir=str(cache), cache_size=4)
    dataset[30]
    assert "shard-000003.tar" in os.listdir(cache)
    left = {n for n in os.listdir(cache) if n.startswith("shard-") and n.endswith(".tar")}
    assert left == {"shard-000003.tar"}


def _reader(cache, urls, seed, out):
    try:
        dataset = wids.ShardListDataset([{"url": u, "nsamples": 10} for u in urls],
                                        cache_dir=cache, cache_size=250000, lru_size=1,
                                        transformations=[])
        rng = random.Random(seed)
        wrong = 0
        for _ in range(40):
            i = rng.randrange(len(dataset))
            sample = dataset[i]
            wrong += sample["__key__"] != f"s{i // 10}_{i % 10:03d}"
            wrong += sample[".txt"].read() != f"text {i}".encode()
        out.put((seed, wrong, None))
    except Exception as e:  # reported, not lost in the child
        out.put((seed, None, repr(e)))


def test_processes_sharing_a_small_cache(tmp_path):
    paths = write_shards(str(tmp_path / "src"), 8, 10)
    urls = [f"pipe:cat {p}" for p in paths]
    cache = str(tmp_path / "cache")
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(cache, urls, seed, out)) for seed in range(4)]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    assert results == [(seed, 0, None) for seed in range(4)]


def test_a_held_lock_is_no_leftover(served, tmp_path):
    import fcntl

    cache = tmp_path / "cache"
    cache.mkdir()
    lock = cache / "shard-000002.tar.lock"
    lock.write_bytes(b"")
    os.utime(lock, (time.time() - 7200,) * 2)
    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a fetch that has run for two hours
        dataset = wids.ShardListDataset(served.url("index.json"), cache_dir=str(cache),
                                        transformations=[], cache_size=1 << 30)
        dataset[0]
        assert lock.exists()


def test_a_cached_shard_that_fails_to_open_closes_its_descriptor_once(shards, tmp_path):
    import gc

    gz = str(tmp_path / "s.tar.gz")
    with tarfile.open(gz, "w:gz") as tar:
        tar.add(shards[0], arcname="x.bin")
    dataset = wids.ShardListDataset([{"url": f"pipe:cat {gz}", "nsamples": 1}],
                                    cache_dir=str(tmp_path / "c"))
    with pytest.raises(wds.DataError, match="gzip-compressed"):
        dataset[0]
    with open(shards[1], "rb") as victim:  # may get the number of the descriptor closed above
        gc.collect()
        assert victim.read(5) == members(shards[1])[0][0][:5].encode()


def test_cache_files_that_would_collide_are_refused(tmp_path):
    urls = ["http://a.example/train/s.tar", "http://a.example/val/s.tar"]
    with pytest.raises(ValueError, match=f"{urls[0]} and {urls[1]} would share the cache file"):
        wids.ShardListDataset([{"url": u, "nsamples": 1} for u in urls],
                              cache_dir=str(tmp_path))
    dataset = wids.ShardListDataset([{"url": u, "nsamples": 1} for u in urls])
    assert len(dataset) == 2  # the default names are whole URLs


def test_pipe_urls_in_a_descriptor_are_not_resolved(shards, tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"wids_version": 1, "shardlist": [
        {"url": f"pipe:cat {shards[1]}", "nsamples": 10}, {"url": "x.tar", "nsamples": 1}]}))
    dataset = wids.ShardListDataset(str(path), cache_dir=str(tmp_path / "c"),
                                    transformations=[])
    assert [s["url"] for s in dataset.shards] == [f"pipe:cat {shards[1]}", str(tmp_path / "x.tar")]
    assert dataset[3]["__key__"] == "s1_003"


# --- samplers


def test_shard_list_sampler_keeps_shards_together():
    sampler = wids.ShardListSampler(None, lengths=[3, 5, 2], seed=1)
    first = list(sampler)
    assert sorted(first) == list(range(10))
    assert sorted(first[:3]) == [0, 1, 2] and sorted(first[3:8]) == [3, 4, 5, 6, 7]
    second = list(sampler)
    assert sorted(second) == list(range(10)) and second != first
    for block in ([0, 1, 2], [3, 4, 5, 6, 7], [8, 9]):  # each shard's samples stay together
        start = min(second.index(i) for i in block)
        assert sorted(second[start:start + len(block)]) == block
    assert sampler.epoch == 2
    sampler.set_epoch(1)
    assert list(sampler) == second
    assert len(sampler) == 10


def test_chunked_sampler_orders():
    sampler = wids.ChunkedSampler(None, num_samples=(10, 33), chunksize=5, seed=7)
    assert len(sampler) == 23
    first = list(sampler)
    chunks = [range(10, 15), range(15, 20), range(20, 25), range(25, 30), range(30, 33)]
    position = 0
    for chunk in chunks:  # the first epoch keeps the chunks in order
        assert sorted(first[position:position + len(chunk)]) == list(chunk)
        position += len(chunk)
    second = list(sampler)
    assert sorted(second) == list(range(10, 33)) and second != first
    sampler.set_epoch(1)
    assert list(sampler) == second
    plain = wids.ChunkedSampler(None, num_samples=9, chunksize=4, shuffle=False)
    assert list(plain) == list(range(9)) and list(plain) == list(range(9))
    with pytest.raises(ValueError, match="chunksize must be at least 1"):
        wids.ChunkedSampler(None, num_samples=9, chunksize=0)


def test_the_reference_orders():
    """Sequences the reference's wids gives for these arguments (taken from it)."""
    sampler = wids.ChunkedSampler(None, num_samples=20, chunksize=6, seed=3)
    assert list(sampler) == [0, 2, 3, 5, 4, 1, 7, 9, 8, 6, 10, 11, 16, 17, 12, 13, 14, 15, 18, 19]
    assert list(sampler) == [13, 14, 12, 15, 16, 17, 0, 4, 1, 5, 3, 2, 18, 19, 8, 10, 9, 11, 6, 7]
    sampler = wids.ShardedSampler(None, lengths=[3, 4, 5], seed=2)
    assert list(sampler) == [1, 2, 0, 5, 6, 4, 3, 8, 7, 10, 11, 9]
    assert list(sampler) == [3, 5, 4, 6, 9, 11, 8, 10, 7, 2, 1, 0]
    sampler = wids.ChunkedSampler(None, num_samples=(7, 14), chunksize=3, seed=5,
                                  shufflefirst=True)
    assert list(sampler) == [7, 8, 9, 11, 10, 12, 13]


@pytest.mark.parametrize("total", [40, 37, 3, 1])
@pytest.mark.parametrize("world", [1, 3, 4, 8])
def test_every_rank_yields_the_same_count(total, world):
    per_rank = -(-total // world)
    seen = Counter()
    for rank in range(world):
        sampler = wids.DistributedChunkedSampler(None, num_samples=total, num_replicas=world,
                                                 rank=rank, chunksize=4, seed=5)
        indexes = list(sampler)
        assert len(indexes) == len(sampler) == per_rank
        own = range(min(rank * per_rank, total), min((rank + 1) * per_rank, total))
        top_up = range(per_rank - len(own))  # from the start of the dataset
        assert Counter(indexes) == Counter(own) + Counter(top_up)
        seen.update(indexes)
    assert set(seen) == set(range(total))
    kept = []
    for rank in range(world):
        sampler = wids.DistributedChunkedSampler(None, num_samples=total, num_replicas=world,
                                                 rank=rank, drop_last=True)
        indexes = list(sampler)
        assert len(indexes) == len(sampler) == total // world
        kept += indexes
    assert sorted(kept) == list(range(total // world * world))


def test_distributed_sampler_placement(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    explicit = wids.DistributedChunkedSampler(None, num_samples=10, num_replicas=2, rank=0,
                                              shuffle=False)
    assert list(explicit) == [0, 1, 2, 3, 4]
    from_env = wids.DistributedChunkedSampler(None, num_samples=10, shuffle=False)
    assert list(from_env) == [5, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="rank 2 of 2 replicas"):
        wids.DistributedChunkedSampler(None, num_samples=10, rank=2)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    for name in ("SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.warns(UserWarning, match="assuming a single process"):
        single = wids.DistributedChunkedSampler(None, num_samples=10, shuffle=False)
    assert list(single) == list(range(10))


def test_sampler_with_a_dataset(raw):
    sampler = wids.DistributedChunkedSampler(raw, num_replicas=3, rank=2, chunksize=8)
    indexes = list(sampler)
    assert len(indexes) == 14
    assert set(indexes) == set(range(28, 40)) | {0, 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(wids.ShardedSampler(raw)) == 40


def _ddp_rank(rank, world_size, shards):
    """One rank of a Gloo group: a DataLoader over its DistributedChunkedSampler
    (placement from torch.distributed), an all_reduce per step. Workers from a
    forkserver, not forks of a rank whose Gloo threads run."""
    import torch
    import torch.distributed as dist

    dataset = wids.ShardListDataset(descriptors(shards), transformations=[])
    sampler = wids.DistributedChunkedSampler(dataset, chunksize=6, seed=1)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2,
                                         collate_fn=list, multiprocessing_context="forkserver")
    indexes, steps = [], 0
    for batch in loader:
        dist.all_reduce(torch.ones(1))  # a rank that ran out early would hang the others
        indexes += [s["__index__"] for s in batch]
        steps += 1
    return len(sampler), steps, indexes


def test_ddp_ranks_run_the_same_steps_over_an_uneven_split(shards, tmp_path):
    pytest.importorskip("torch")
    from test_distributed import run_ranks

    results = run_ranks(_ddp_rank, 3, tmp_path, shards)
    assert [r[:2] for r in results] == [(14, 4)] * 3  # 40 samples: 14 a rank, 4 batches
    assert [len(r[2]) for r in results] == [14] * 3
    assert set(results[0][2]) == set(range(14))
    assert set(results[1][2]) == set(range(14, 28))
    assert set(results[2][2]) == set(range(28, 40)) | {0, 1}  # topped up from the start
