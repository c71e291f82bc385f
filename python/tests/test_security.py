"""webdataset_cpp.utils.enforce_security, the reference 1.0.2's switch: set from
WDS_SECURE at import or at run time, it refuses what the reference refuses
(pipe: URLs, local files in gopen and the writers, GOPEN_REWRITE, pickle and
torch.load decoding), with errors naming the URL or field."""

import importlib
import io
import os
import pickle
import re
import subprocess
import sys

import pytest

import webdataset_cpp as wds
from conftest import write_tar
from webdataset_cpp import autodecode, utils

# The package's `gopen` is the function (as in the reference), so the module is imported by name.
gopen = importlib.import_module("webdataset_cpp.gopen")

SECURITY = "while webdataset_cpp.utils.enforce_security is set (WDS_SECURE=1)"


@pytest.fixture
def secure(monkeypatch):
    monkeypatch.setattr(utils, "enforce_security", True)


def refused(url, what):
    return f"^{re.escape(f'{url}: {what} refused {SECURITY}')}$"


@pytest.mark.parametrize("value, expected", [("1", True), ("0", False), ("2", True)])
def test_enforce_security_starts_from_wds_secure(value, expected):
    env = dict(os.environ, WDS_SECURE=value)
    out = subprocess.run([sys.executable, "-c", "import webdataset_cpp.utils as u; "
                          "print(u.enforce_security)"], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == str(expected)


def test_gopen_refuses_pipes_local_files_and_rewrites(secure, tmp_path, monkeypatch):
    path = str(tmp_path / "f.bin")
    with open(path, "wb") as f:
        f.write(b"x")
    with pytest.raises(ValueError, match=refused("pipe:cat f", "pipe: URLs are")):
        gopen.gopen("pipe:cat f")
    with pytest.raises(ValueError, match=refused(path, "local files are")):
        gopen.gopen(path)
    with pytest.raises(ValueError, match=refused(f"file:{path}", "local files are")):
        wds.gopen(f"file:{path}", "wb")
    monkeypatch.setenv("GOPEN_REWRITE", "a=b")
    with pytest.raises(ValueError, match=refused("http://h/x", "rewriting URLs with "
                                                               "GOPEN_REWRITE is")):
        gopen.gopen("http://h/x")


def test_switching_it_off_at_run_time_allows_them_again(monkeypatch):
    monkeypatch.setattr(utils, "enforce_security", True)
    with pytest.raises(ValueError):
        gopen.gopen("pipe:printf a")
    monkeypatch.setattr(utils, "enforce_security", False)
    with gopen.gopen("pipe:printf a") as stream:
        assert stream.read() == b"a"


def test_shard_reading_refuses_pipes_but_reads_local_shards(secure, shards):
    url = f"pipe:cat {shards[0]}"
    message = refused(url, "pipe: URLs are")
    with pytest.raises(ValueError, match=message):
        next(iter(wds.WebDataset(url, shardshuffle=False)))
    with pytest.raises(ValueError, match=message):
        next(iter(wds.DataPipeline(wds.SimpleShardList([url]), wds.tarfile_to_samples())))
    # As the reference's WebDataset, local shards are read.
    assert next(iter(wds.WebDataset(shards[0], shardshuffle=False)))["__key__"] == "s0_000"


def test_decoding_refuses_pickle_and_torch_load(secure, tmp_path):
    for field in ("pyd", "pickle", "pkl"):
        path = write_tar(tmp_path / f"{field}.tar", [(f"a.{field}", pickle.dumps(1))])
        with pytest.raises(wds.DecodingError) as e:
            next(iter(wds.WebDataset(path, shardshuffle=False).decode()))
        assert e.value.k == field and f"field {field}" in str(e.value)
        assert str(e.value.__cause__) == f"unpickling is refused {SECURITY}"
    with pytest.raises(wds.DecodingError) as e:
        wds.Decoder([])({"__key__": "a", "__url__": "u.tar", "x.pth": b"\x80"})
    assert str(e.value).startswith("u.tar: key a: field x.pth: ")
    assert str(e.value.__cause__) == f"torch.load is refused {SECURITY}"
    with pytest.raises(ValueError, match=f"^unpickling is refused {re.escape(SECURITY)}$"):
        autodecode.basichandlers(".pyd", pickle.dumps(1))
    # Other fields still decode.
    assert autodecode.basichandlers(".cls", b"4") == 4


def test_writers_refuse_pipes_and_local_files_but_write_streams(secure, tmp_path):
    path = str(tmp_path / "w.tar")
    with pytest.raises(ValueError, match=refused(path, "writing local files is")):
        wds.TarWriter(path)
    with pytest.raises(ValueError, match=refused(f"pipe:cat > {path}", "pipe: URLs are")):
        wds.TarWriter(f"pipe:cat > {path}")
    pattern = str(tmp_path / "s-%d.tar")
    with pytest.raises(ValueError, match=refused(pattern, "writing local files is")):
        wds.ShardWriter(pattern)
    # The first shard's URL is refused when the first sample opens it.
    with pytest.raises(ValueError, match=refused(f"pipe:cat > {pattern % 0}", "pipe: URLs are")):
        with wds.ShardWriter(f"pipe:cat > {pattern}", verbose=0) as sink:
            sink.write({"__key__": "a", "txt": "x"})
    assert not os.listdir(tmp_path)
    stream = io.BytesIO()
    with wds.TarWriter(stream) as sink:
        sink.write({"__key__": "a", "txt": "x"})
    assert stream.getvalue()[:5] == b"a.txt"
