"""Writers and decoders against the reference webdataset 1.0.2's observed output:
the tenbin format byte for byte, .ten/.mp fields, pipe: outputs, and the
reference's public names of the writer, tenbin, gopen and autodecode modules."""

import glob
import importlib
import io
import os
import re
import subprocess
import sys
import tarfile

import msgpack
import numpy as np
import pytest

import webdataset_cpp as wds
from webdataset_cpp import autodecode, tenbin, writer

# The package's `gopen` is the function (as in the reference), so the module is imported by name.
gopen = importlib.import_module("webdataset_cpp.gopen")

little_endian_only = pytest.mark.skipif(sys.byteorder != "little",
                                        reason="tenbin writes the machine's byte order; the "
                                               "reference bytes are little-endian")

# The reference's tenbin.encode_buffer of these two arrays (observed with
# webdataset 1.0.2 on x86-64): per array a header chunk ("~TenBin~", length 40,
# then dtype "i2", info "", ndim 2, dims 2 and 3 as int64, padded to 64 bytes)
# and a data chunk (length 12, the int16s, padded to 64 bytes).
EXAMPLE = [np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int16), np.array([0.5], dtype=np.float32)]
EXAMPLE_BYTES = bytes.fromhex(
    "7e54656e42696e7e280000000000000069320000000000000000000000000000"
    "0200000000000000020000000000000003000000000000000000000000000000"
    "000000000000000000000000000000007e54656e42696e7e0c00000000000000"
    "0100020003000400050006000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "7e54656e42696e7e200000000000000066340000000000000000000000000000"
    "0100000000000000010000000000000000000000000000000000000000000000"
    "000000000000000000000000000000007e54656e42696e7e0400000000000000"
    "0000003f00000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000")
# encode_buffer([np.arange(3, dtype=np.uint8)], infos=["lbl"]) by the reference.
INFO_BYTES = bytes.fromhex(
    "7e54656e42696e7e200000000000000075310000000000006c626c0000000000"
    "0100000000000000030000000000000000000000000000000000000000000000"
    "000000000000000000000000000000007e54656e42696e7e0300000000000000"
    "0001020000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000")


def same_arrays(got, want):
    return len(got) == len(want) and all(
        g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)
        for g, w in zip(got, want))


@little_endian_only
def test_tenbin_bytes_are_the_references():
    buf = tenbin.encode_buffer(EXAMPLE)
    assert isinstance(buf, bytearray) and bytes(buf) == EXAMPLE_BYTES
    assert bytes(tenbin.encode_buffer([np.arange(3, dtype=np.uint8)], infos=["lbl"])) == \
        INFO_BYTES
    stream = io.BytesIO()
    tenbin.write(stream, EXAMPLE)
    assert stream.getvalue() == EXAMPLE_BYTES
    # A transposed (not C-contiguous) array is written in C order, as the reference does.
    transposed = np.array([[1, 4], [2, 5], [3, 6]], dtype=np.int16).T
    assert bytes(tenbin.encode_buffer([transposed, EXAMPLE[1]])) == EXAMPLE_BYTES
    assert tenbin.magic_bytes == b"~TenBin~" and tenbin.magic == tenbin.str64("~TenBin~")


def test_tenbin_decodes_the_references_bytes():
    assert same_arrays(tenbin.decode_buffer(EXAMPLE_BYTES), EXAMPLE)
    arrays, infos = tenbin.decode_buffer(INFO_BYTES, infos=True)
    assert same_arrays(arrays, [np.arange(3, dtype=np.uint8)]) and infos == ["lbl"]
    assert same_arrays(tenbin.read(io.BytesIO(EXAMPLE_BYTES)), EXAMPLE)
    assert same_arrays(tenbin.read(io.BytesIO(EXAMPLE_BYTES), n=1), EXAMPLE[:1])
    assert tenbin.decode_buffer(INFO_BYTES, infos=["lbl"])[0].tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match=r"^tenbin: array 0: info 'lbl' does not match the "
                                         r"required info 'x'$"):
        tenbin.decode_buffer(INFO_BYTES, infos=["x"])


def test_tenbin_round_trips_what_the_reference_cannot():
    # The reference refuses uint32 (its table misspells it), raises TypeError
    # decoding 0-d arrays, and writes big-endian data unconverted.
    cases = [np.array([1, 2**32 - 1], dtype=np.uint32), np.array(3.5), np.zeros((2, 0, 3)),
             np.array([1, 256], dtype=">i4"), np.arange(24, dtype=np.float16).reshape(2, 3, 4)]
    back = tenbin.decode_buffer(tenbin.encode_buffer(cases))
    assert [a.shape for a in back] == [(2,), (), (2, 0, 3), (2,), (2, 3, 4)]
    assert back[0].dtype == np.uint32 and back[0].tolist() == [1, 2**32 - 1]
    assert back[1] == 3.5 and back[3].tolist() == [1, 256] and back[3].dtype == np.int32
    assert np.array_equal(back[4], cases[4])


def test_tenbin_bad_input_names_what_is_wrong():
    with pytest.raises(ValueError, match="^tenbin: encode_buffer requires a list of arrays, "
                                         "got tuple$"):
        tenbin.encode_buffer((np.zeros(1),))
    with pytest.raises(ValueError, match="^tenbin: unsupported dtype bool$"):
        tenbin.encode_buffer([np.zeros(1, dtype=bool)])
    with pytest.raises(ValueError, match="^tenbin: 'abcdefghi' is longer than 8 characters$"):
        tenbin.encode_buffer([np.zeros(1)], infos=["abcdefghi"])
    with pytest.raises(ValueError, match="^tenbin: 1 arrays but 2 infos$"):
        tenbin.encode_buffer([np.zeros(1)], infos=["a", "b"])
    with pytest.raises(ValueError, match="^tenbin: no chunk magic '~TenBin~' at offset 0$"):
        tenbin.decode_buffer(b"x" * 16)
    with pytest.raises(ValueError, match="^tenbin: chunk at offset 80 announces 12 bytes, "
                                         "0 follow$"):
        tenbin.decode_buffer(EXAMPLE_BYTES[:96])
    with pytest.raises(ValueError, match="^tenbin: premature end of stream in a chunk: "
                                         "4 of 12 bytes$"):
        tenbin.read(io.BytesIO(EXAMPLE_BYTES[:100]))
    with pytest.raises(ValueError, match="^tenbin: required_infos must be a tuple or list"):
        tenbin.decode_buffer(EXAMPLE_BYTES, infos="x")


def test_tenbin_save_and_load(tmp_path):
    path = str(tmp_path / "a.ten")
    tenbin.save(path, *EXAMPLE, infos=["x", "y"])
    with open(path, "rb") as f:
        assert len(f.read()) == len(EXAMPLE_BYTES)
    assert same_arrays(tenbin.load(path), EXAMPLE)
    assert tenbin.load(path, infos=True)[1] == ["x", "y"]
    other = str(tmp_path / "a.bin")
    with pytest.raises(ValueError, match=f"^tenbin: {other}: file name should end in .ten"):
        tenbin.save(other, *EXAMPLE)
    tenbin.save(other, *EXAMPLE, nocheck=True)
    assert same_arrays(tenbin.load(other, nocheck=True), EXAMPLE)


def tar_members(path):
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}


@little_endian_only
def test_writer_encodes_ten_and_msgpack_fields_as_the_reference(tmp_path):
    path = str(tmp_path / "t.tar")
    with wds.TarWriter(path) as sink:
        sink.write({"__key__": "s0", "ten": EXAMPLE, "x.tenbin": EXAMPLE[0],
                    "tb": np.arange(3, dtype=np.uint8), "mp": {"a": [1, 2], "b": b"x"},
                    "msgpack": [1, "two"], "msg": 3})
    data = tar_members(path)
    assert data["s0.ten"] == EXAMPLE_BYTES
    # A single array is written as a list of one, as the reference does.
    assert data["s0.x.tenbin"] == EXAMPLE_BYTES[:160]
    assert data["s0.tb"] == bytes(tenbin.encode_buffer([np.arange(3, dtype=np.uint8)]))
    # The reference's msgpack.packb output for these values.
    assert data["s0.mp"] == b"\x82\xa1a\x92\x01\x02\xa1b\xc4\x01x"
    assert data["s0.msgpack"] == b"\x92\x01\xa3two"
    assert data["s0.msg"] == b"\x03"
    assert msgpack.unpackb(data["s0.mp"]) == {"a": [1, 2], "b": b"x"}


def test_decode_returns_ten_as_a_list_of_arrays_and_msgpack_as_the_reference(tmp_path):
    path = str(tmp_path / "d.tar")
    with tarfile.open(path, "w") as tar:  # an independent writer
        for name, payload in (("s0.ten", EXAMPLE_BYTES), ("s0.tb", INFO_BYTES),
                              ("s0.tenbin", EXAMPLE_BYTES), ("s0.mp", b"\x92\x01\xa3two"),
                              ("s0.msg", b"\x03"), ("s0.msgpack", b"\x92\x01\xa3two")):
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    native = next(iter(wds.WebDataset(path, shardshuffle=False).decode()))
    fields = {name[len("s0."):]: payload for name, payload in tar_members(path).items()}
    python = wds.Decoder([])({"__key__": "s0", **fields})
    for sample in (native, python):
        assert isinstance(sample["ten"], list) and same_arrays(sample["ten"], EXAMPLE)
        assert same_arrays(sample["tb"], [np.arange(3, dtype=np.uint8)])
        assert sample["mp"] == [1, "two"] and sample["msg"] == 3
        # The reference's decoders leave .tenbin and .msgpack as bytes.
        assert sample["tenbin"] == EXAMPLE_BYTES and sample["msgpack"] == b"\x92\x01\xa3two"


def test_written_ten_fields_read_back(tmp_path):
    path = str(tmp_path / "r.tar")
    arrays = [np.eye(3, dtype=np.float32), np.arange(4, dtype=np.int64)]
    with wds.TarWriter(path) as sink:
        sink.write({"__key__": "a", "ten": arrays, "mp": {"k": 1}})
    back = next(iter(wds.WebDataset(path, shardshuffle=False).decode()))
    assert same_arrays(back["ten"], arrays) and back["mp"] == {"k": 1}


def test_tar_writer_writes_to_pipe_urls(tmp_path):
    local, piped = str(tmp_path / "local.tar"), str(tmp_path / "piped.tar")
    samples = [{"__key__": f"k{i}", "txt": "x" * i * 1000, "cls": i} for i in range(30)]
    for target in (local, f"pipe:cat > {piped}"):
        with wds.TarWriter(target) as sink:
            for s in samples:
                sink.write(s)
    with open(local, "rb") as a, open(piped, "rb") as b:
        assert a.read() == b.read()
    gz = str(tmp_path / "piped.tar.gz")
    with wds.TarWriter(f"pipe:cat > {gz}") as sink:  # compressed by the name, as the reference
        sink.write(samples[1])
    with open(gz, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"


def test_tar_writer_pipe_failure_names_the_command(tmp_path):
    command = f"cat > {tmp_path}/missing/x.tar"
    with pytest.raises(OSError, match=f"^{re.escape(command)}: exit 2$"):  # sh cannot redirect
        with wds.TarWriter(f"pipe:{command}") as sink:
            sink.write({"__key__": "a", "txt": "x"})
    # A command that stops reading early fails the write or the close.
    with pytest.raises(OSError, match="^exit 3: exit 3$"):
        with wds.TarWriter("pipe:exit 3") as sink:
            for i in range(100):
                sink.write({"__key__": f"k{i}", "bin": b"x" * 100000})
    # A command that exits without reading everything, even successfully.
    with pytest.raises(BrokenPipeError, match=r"^\[Errno 32\] true: the command stopped "
                                              r"reading the archive \(/dev/fd/\d+: "):
        with wds.TarWriter("pipe:true") as sink:
            for i in range(100):
                sink.write({"__key__": f"k{i}", "bin": b"x" * 100000})
    with pytest.raises(ValueError, match="^nope://x: no gopen handler defined$"):
        wds.TarWriter("nope://x")


def test_shard_writer_writes_to_pipe_urls_as_to_files(tmp_path):
    os.mkdir(tmp_path / "a")
    os.mkdir(tmp_path / "b")
    samples = [{"__key__": f"k{i:03d}", "bin": b"y" * (700 * (i % 5))} for i in range(40)]
    posted = []
    with wds.ShardWriter(str(tmp_path / "a" / "s-%02d.tar"), maxcount=7, maxsize=9000,
                         verbose=0) as sink:
        for s in samples:
            sink.write(s)
    with wds.ShardWriter(f"pipe:cat > {tmp_path}/b/s-%02d.tar", maxcount=7, maxsize=9000,
                         verbose=0, post=posted.append) as sink:
        for s in samples:
            sink.write(s)
        assert sink.shard == len(posted)
    files = sorted(os.listdir(tmp_path / "a"))
    assert len(files) > 40 // 7 + 1  # maxsize rolled over too
    assert sorted(os.listdir(tmp_path / "b")) == files
    for name in files:
        with open(tmp_path / "a" / name, "rb") as a, open(tmp_path / "b" / name, "rb") as b:
            assert a.read() == b.read(), name
    assert posted == [f"pipe:cat > {tmp_path}/b/{name}" for name in files]
    with pytest.raises(ValueError,
                       match=r"^ShardWriter\(index=True\) writes local, s3:// and gs:// \(with GCS "
                             r"credentials in the environment\) shards only, not 'pipe:cat > "):
        wds.ShardWriter("pipe:cat > x-%d.tar", index=True)


def test_shard_writer_opener_receives_each_shard(tmp_path):
    opened = []

    def opener(name):
        opened.append(name)
        return open(tmp_path / name, "wb")

    with wds.ShardWriter("o-%d.tar", maxcount=2, opener=opener, verbose=0) as sink:
        for i in range(5):
            sink.write({"__key__": f"k{i}", "cls": i})
    assert opened == ["o-0.tar", "o-1.tar", "o-2.tar"]
    shards = sorted(glob.glob(str(tmp_path / "o-*.tar")))
    back = [s["cls"] for s in wds.WebDataset(shards, shardshuffle=False).decode()]
    assert back == list(range(5))


def test_reference_encoder_names():
    assert writer.bytestr(3) == b"3" and writer.bytestr("a") == b"a"
    assert writer.bytestr(b"\0") == b"\0"
    assert isinstance(writer.tenbin_dumps(EXAMPLE[0]), memoryview)
    assert writer.mp_dumps({"a": 1}) == b"\x81\xa1a\x01"
    handlers = {}
    writer.add_handlers(handlers, "a b", len)
    writer.add_handlers(handlers, ["c"], len)
    assert handlers == {"a": len, "b": len, "c": len}
    assert {"ten", "tenbin", "tb", "mp", "msgpack", "msg", "cbor"} <= set(writer.default_handlers)
    assert writer.imageencoder(np.zeros((2, 2), np.uint8), "jpg")[:2] == b"\xff\xd8"
    assert writer.imageencoder(np.zeros((2, 2), np.uint8))[:4] == b"\x89PNG"


def test_reference_decoder_names():
    assert autodecode.imagespecs["torch"] == ("torch", "float", "rgb")
    assert autodecode.imagespecs["pill"] == ("pil", None, "l")
    assert list(autodecode.imagespecs) == list(autodecode.IMAGE_SPECS)
    assert {"ten", "tb", "mp", "msg"} <= set(autodecode.decoders)
    assert "msgpack" not in autodecode.decoders and "tenbin" not in autodecode.decoders
    assert same_arrays(autodecode.tenbin_loads(EXAMPLE_BYTES), EXAMPLE)
    assert autodecode.msgpack_loads(b"\x03") == 3
    assert autodecode.call_extension_handler("a.SEG.png", b"x", len, ["seg.png"]) == 1
    assert autodecode.call_extension_handler("png", b"x", len, ["seg.png"]) is None
    assert autodecode.default_decoder({"__key__": "a", "cls": b"1"}) == {"__key__": "a", "cls": 1}


def test_reference_gopen_names(tmp_path, monkeypatch):
    assert gopen.reader("pipe:printf abc").read() == b"abc"
    pipe = gopen.gopen("pipe:printf abc")
    assert gopen.set_options(pipe, timeout=5.0) and pipe.timeout == 5.0
    assert not gopen.set_options(io.BytesIO())
    pipe.close()
    failing = gopen.Pipe("exit 2", mode="rb", shell=True)
    with pytest.raises(OSError, match="^exit 2: exit 2$"):
        failing.read()
    path = tmp_path / "f.bin"
    path.write_bytes(b"data")
    with gopen.gopen_file(f"file://{path}") as f:
        assert f.read() == b"data"
    monkeypatch.setenv("GOPEN_REWRITE", f"other/=file://{tmp_path}/")
    assert gopen.rewrite_url("other/f.bin") == f"file://{tmp_path}/f.bin"
    with gopen.gopen("other/f.bin") as f:
        assert f.read() == b"data"
    assert {"ais", "htgs", "hf"} <= set(gopen.gopen_schemes)
    assert gopen.PIPE == subprocess.PIPE and gopen.Popen is subprocess.Popen


def test_shard_writer_takes_the_tarwriter_arguments_the_reference_passes_on(tmp_path):
    pattern = str(tmp_path / "u-%d.tar")
    with wds.ShardWriter(pattern, user="bigdata", group="bigdata", mode=0o444, format="ustar",
                         verbose=0) as sink:
        sink.write({"__key__": "a", "cls": 1})
    assert os.listdir(tmp_path) == ["u-0.tar"]
    with pytest.raises(ValueError, match="^ShardWriter writes owner bigdata, group bigdata, "
                                         "mode 0o444 only$"):
        wds.ShardWriter(pattern, mode=0o644)
    with pytest.raises(TypeError, match=r"^ShardWriter: unexpected arguments \['colour'\]$"):
        wds.ShardWriter(pattern, colour=1)
