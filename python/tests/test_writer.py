"""TarWriter and ShardWriter: encodings, and the output read back by Python's
tarfile and by the C++ reader."""

import glob
import gzip
import io
import json
import os
import pickle
import subprocess
import tarfile

import numpy as np
import PIL.Image
import pytest

import webdataset_cpp as wds
from conftest import tool


def members(path):
    with tarfile.open(path) as tar:
        return [(m.name, m.mode, m.uname, m.gname, m.mtime, tar.extractfile(m).read())
                for m in tar]


def test_tar_writer_encodes_by_extension(tmp_path):
    path = str(tmp_path / "out.tar")
    image = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    with wds.TarWriter(path) as sink:
        n = sink.write({"__key__": "s0", "cls": 3, "txt": "héllo", "json": {"a": [1]},
                        "npy": np.eye(2, dtype=np.float32), "pyd": {"x": 1}, "raw.bin": b"\x00",
                        "png": image, "txt.gz": "zip", "__url__": "ignored"})
    got = members(path)
    assert [m[0] for m in got] == ["s0.cls", "s0.json", "s0.npy", "s0.png", "s0.pyd",
                                   "s0.raw.bin", "s0.txt", "s0.txt.gz"]
    assert {m[1:5] for m in got} == {(0o444, "bigdata", "bigdata", 0)}
    data = {name: payload for name, *_, payload in got}
    assert n == sum(len(v) for v in data.values())
    assert data["s0.cls"] == b"3" and data["s0.txt"] == "héllo".encode()
    assert json.loads(data["s0.json"]) == {"a": [1]}
    assert np.array_equal(np.load(io.BytesIO(data["s0.npy"])), np.eye(2, dtype=np.float32))
    assert pickle.loads(data["s0.pyd"]) == {"x": 1}
    assert np.array_equal(np.asarray(PIL.Image.open(io.BytesIO(data["s0.png"]))), image)
    assert gzip.decompress(data["s0.txt.gz"]) == b"zip"


def test_writer_output_reads_back_through_the_pipeline_and_the_cpp_reader(tmp_path):
    path = str(tmp_path / "round.tar")
    with wds.TarWriter(path) as sink:
        for i in range(5):
            sink.write({"__key__": f"{i:04d}", "cls": i, "txt": f"t{i}",
                        "npy": np.full(3, i, np.int32)})
    back = list(wds.WebDataset(path, shardshuffle=False).decode())
    assert [(s["__key__"], s["cls"], s["txt"], s["npy"].tolist()) for s in back] == \
        [(f"{i:04d}", i, f"t{i}", [i] * 3) for i in range(5)]
    listing = subprocess.run([tool("wds-shard"), "ls", "--json", path], check=True,
                             capture_output=True, text=True).stdout.splitlines()
    assert [json.loads(line)["__key__"] for line in listing] == [f"{i:04d}" for i in range(5)]
    subprocess.run([tool("wds-shard"), "verify", path], check=True, capture_output=True)


def test_file_objects_and_compression(tmp_path):
    stream = io.BytesIO()
    writer = wds.TarWriter(stream, encoder=False)
    writer.write({"__key__": "a", "bin": b"xyz"})
    writer.close()
    with tarfile.open(fileobj=io.BytesIO(stream.getvalue())) as tar:
        assert [(m.name, tar.extractfile(m).read()) for m in tar] == [("a.bin", b"xyz")]
    gz = str(tmp_path / "c.tar.gz")
    with wds.TarWriter(gz) as sink:
        sink.write({"__key__": "a", "txt": "x"})
    with open(gz, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    assert members(gz)[0][0] == "a.txt"
    with wds.TarWriter(str(tmp_path / "m.tar"), keep_meta=True) as sink:
        sink.write({"__key__": "a", "__url__": "u", "txt": "x"})
    assert [m[0] for m in members(str(tmp_path / "m.tar"))] == ["a.__url__", "a.txt"]


def _compressible_samples(n):
    return [{"__key__": f"{i:05d}", "txt": f"sample {i} " * 300,
             "bin": bytes((i * 7 + j) % 251 for j in range(3000))} for i in range(n)]


def test_compress_threads_write_the_same_shards_that_tarfile_streams(tmp_path):
    samples = _compressible_samples(400)  # about 3 MB of tar: several 128 KiB blocks
    shards = {}
    for ext in ("tar", "tar.gz", "tar.zst"):
        for threads in (1, 2, 3):
            directory = tmp_path / f"{ext}-{threads}"
            directory.mkdir()
            with wds.ShardWriter(str(directory / f"s-%03d.{ext}"), maxcount=250, verbose=0,
                                 compress_threads=threads) as sink:
                for s in samples:
                    sink.write(s)
            shards[ext, threads] = [open(p, "rb").read()
                                    for p in sorted(glob.glob(str(directory / "s-*")))]
            assert len(shards[ext, threads]) == 2
    # gzip: the same bytes whatever the threads; zstd: from two threads on.
    assert shards["tar.gz", 1] == shards["tar.gz", 2] == shards["tar.gz", 3]
    assert shards["tar.zst", 2] == shards["tar.zst", 3]
    for gz, plain in zip(shards["tar.gz", 3], shards["tar", 1]):
        assert gzip.decompress(gz) == plain
        # One member, which tarfile's streaming mode (the reference's reader) reads whole.
        with tarfile.open(fileobj=io.BytesIO(gz), mode="r|gz") as tar:
            streamed = [(m.name, tar.extractfile(m).read()) for m in tar]
        with tarfile.open(fileobj=io.BytesIO(plain)) as tar:
            assert streamed == [(m.name, tar.extractfile(m).read()) for m in tar]
    back = list(wds.WebDataset(sorted(glob.glob(str(tmp_path / "tar.zst-3" / "s-*"))),
                               shardshuffle=False))
    assert [(s["__key__"], s["txt"], s["bin"]) for s in back] == [
        (s["__key__"], s["txt"].encode(), s["bin"]) for s in samples]
    # TarWriter takes them too.
    with wds.TarWriter(str(tmp_path / "one.tar.gz"), compress_threads=4) as sink:
        sink.write(samples[0])
    assert members(str(tmp_path / "one.tar.gz"))[0][0] == "00000.bin"
    for bad, error in ((0, ValueError), (257, ValueError), ("2", TypeError), (True, TypeError)):
        with pytest.raises(error, match="compress_threads"):
            wds.ShardWriter(str(tmp_path / "x-%03d.tar.gz"), compress_threads=bad)
        with pytest.raises(error, match="compress_threads"):
            wds.TarWriter(str(tmp_path / "x.tar.gz"), compress_threads=bad)


def test_writer_errors(tmp_path):
    path = str(tmp_path / "e.tar")
    with wds.TarWriter(path) as sink:
        with pytest.raises(ValueError, match="^object must contain a __key__$"):
            sink.write({"txt": "x"})
        with pytest.raises(ValueError, match="^no handler found for weird$"):
            sink.write({"__key__": "a", "weird": 3})
        with pytest.raises(ValueError, match="^the values of metadata must be of string type$"):
            sink.write({"__key__": 5, "txt": "x"})
        with pytest.raises(ValueError, match="^text fields hold str, got int$"):
            sink.write({"__key__": "a", "txt": 5})
    with pytest.raises(ValueError, match=r"^bin doesn't map to a bytes after encoding"):
        wds.TarWriter(path, encoder=False).write({"__key__": "a", "bin": 5})
    with pytest.raises(ValueError, match="compress must be"):
        wds.TarWriter(path, compress="bz2")
    missing = str(tmp_path / "missing" / "x.tar")
    with pytest.raises(FileNotFoundError) as e:
        wds.TarWriter(missing)
    assert str(e.value) == f"[Errno 2] No such file or directory: '{missing}'"
    with pytest.raises(ValueError, match="owner bigdata"):
        wds.TarWriter(path, user="me")
    with wds.TarWriter(path) as sink:
        with pytest.raises(ValueError, match=r"^key 'd/\.x' cannot be written: its basename is "):
            sink.write({"__key__": "d/.x", "txt": "x"})
        sink.write({"__key__": "d.x/a", "txt": "x"})  # a dot in a directory is fine
    with pytest.raises(ValueError, match="^write to a closed TarWriter$"):
        sink.write({"__key__": "a", "txt": "x"})


def test_shard_writer_rolls_over_and_indexes(tmp_path, capsys):
    pattern = str(tmp_path / "part-%03d.tar")
    closed = []
    with wds.ShardWriter(pattern, maxcount=3, post=closed.append, index=True) as sink:
        for i in range(7):
            sink.write({"__key__": f"k{i}", "cls": i})
    shards = sorted(glob.glob(str(tmp_path / "part-*.tar")))
    assert [os.path.basename(s) for s in shards] == ["part-000.tar", "part-001.tar",
                                                     "part-002.tar"]
    assert closed == shards
    assert [wds.count_samples(s) for s in shards] == [3, 3, 1]
    assert all(os.path.exists(s + ".idx") for s in shards)
    assert capsys.readouterr().out.splitlines()[0] == f"# writing {shards[0]} 3 0.0 GB 3"
    back = [s["cls"] for s in wds.WebDataset(shards, shardshuffle=False).decode()]
    assert back == list(range(7))


def test_shard_writer_maxsize_and_bad_keys(tmp_path):
    pattern = str(tmp_path / "s-%d.tar")
    with wds.ShardWriter(pattern, maxsize=5000, verbose=0) as sink:
        for i in range(4):
            sink.write({"__key__": f"k{i}", "bin": b"x" * 1000})
    # Each sample takes 1536 bytes of tar (header + padded data); the end of
    # the archive 1024: two samples fit in 5000 bytes, three would not.
    sizes = [os.path.getsize(p) for p in sorted(glob.glob(str(tmp_path / "s-*.tar")))]
    assert sizes == [4096, 4096]
    with pytest.raises(ValueError) as e:
        with wds.ShardWriter(str(tmp_path / "d-%d.tar"), verbose=0) as sink:
            sink.write({"__key__": "a.b", "txt": "x"})
    assert str(e.value) == ("key 'a.b' cannot be written: its basename is empty or holds a dot, "
                            "so a reader would split its member names differently")
    with pytest.raises(ValueError, match="^write to a closed ShardWriter$"):
        sink.write({"__key__": "a", "txt": "x"})
    with pytest.raises(ValueError, match="is not a %-format pattern"):
        wds.ShardWriter(str(tmp_path / "{0}.tar"))


def test_pil_images_and_rgba_arrays(tmp_path):
    path = str(tmp_path / "pil.tar")
    image = PIL.Image.fromarray(np.full((6, 8, 3), 120, np.uint8))
    rgba = np.zeros((4, 4, 4), np.uint8)
    with wds.TarWriter(path) as sink:
        sink.write({"__key__": "a", "jpg": image, "png": rgba, "ppm": image})
    back = next(iter(wds.WebDataset(path, shardshuffle=False).decode("rgba8")))
    assert back["jpg"].shape == (6, 8, 4) and abs(int(back["jpg"][0, 0, 0]) - 120) <= 1
    assert np.array_equal(back["png"], rgba)
    assert back["ppm"].shape == (6, 8, 4) and back["ppm"][0, 0, 0] == 120
    with pytest.raises(ValueError, match=r"images are \(H, W\) or \(H, W, 1\|3\|4\) arrays"):
        wds.TarWriter(str(tmp_path / "x.tar")).write({"__key__": "a", "png": np.zeros(3)})
