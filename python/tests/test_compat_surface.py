"""The reference 1.0.2's surface: its exception kinds. Expected values are
the reference's observed behaviour."""

import gzip
import pickle
import tarfile

import pytest

import webdataset_cpp as wds
from webdataset_cpp import tariterators
from conftest import write_tar


# Exceptions: either the reference's except clause or ours catches them.


def broken_shards(tmp_path):
    good = write_tar(tmp_path / "good.tar", [("a.txt", b"x" * 700), ("a.cls", b"1")])
    with open(good, "rb") as f:
        data = f.read()
    packed = gzip.compress(data)
    contents = {"cut.tar": data[:800], "junk.tar": b"this is no tar" * 100,
                "bad.tar.gz": packed[:20] + bytes(b ^ 0x55 for b in packed[20:40]) + packed[40:],
                "cut.tar.gz": packed[:len(packed) // 2]}
    paths = []
    for name, content in contents.items():
        (tmp_path / name).write_bytes(content)
        paths.append(str(tmp_path / name))
    return paths


def test_a_corrupt_shard_is_a_tarfile_read_error_and_a_data_error(tmp_path):
    for path in broken_shards(tmp_path):
        with pytest.raises(tarfile.ReadError) as e:
            list(wds.WebDataset(path, shardshuffle=False))
        assert isinstance(e.value, wds.DataError) and type(e.value) is wds.ShardReadError
        assert str(e.value).startswith(f"{path}: ")
        with pytest.raises(ValueError):
            list(wds.WebDataset(path, shardshuffle=False))
        # The same through the tariterators steps (the native reader there too).
        with pytest.raises(tarfile.ReadError, match=f"^{path}: "):
            list(tariterators.tarfile_samples([path]))


def test_a_failing_pipe_command_is_an_os_error(tmp_path):
    ok = write_tar(tmp_path / "ok.tar", [("a.cls", b"1")])
    url = f"pipe:cat {ok}; exit 3"
    with pytest.raises(OSError) as e:
        list(wds.WebDataset(url, shardshuffle=False))
    assert type(e.value) is wds.CommandError and isinstance(e.value, wds.DataError)
    assert str(e.value) == f"{url}: command failed with exit status 3 (its output may be incomplete)"
    # A command that fails before writing anything (curl -f of a missing
    # object): the reference raises OSError, a bad output ReadError; both work.
    for caught in (OSError, tarfile.ReadError):
        with pytest.raises(caught) as e:
            list(wds.WebDataset("pipe:exit 22", shardshuffle=False))
        assert type(e.value) is wds.PipeShardError
        assert str(e.value) == "pipe:exit 22: not a tar archive (no data)"


def test_a_failing_native_decoder_raises_decoding_error(tmp_path):
    path = write_tar(tmp_path / "bad.tar", [("a.cls", b"x")])
    with pytest.raises(wds.DecodingError) as e:
        list(wds.WebDataset(path, shardshuffle=False).decode())
    assert (e.value.url, e.value.key, e.value.k, e.value.sample) == (path, "a", "cls", None)
    assert str(e.value) == f'{path}: key a: field cls: "x" is not an integer'
    assert isinstance(e.value, wds.DataError)
    copy = pickle.loads(pickle.dumps(e.value))  # as it leaves a DataLoader worker
    assert (copy.url, copy.key, copy.k, str(copy)) == (path, "a", "cls", str(e.value))


def test_other_data_errors_stay_data_errors(tmp_path):
    dup = write_tar(tmp_path / "dup.tar", [("a.cls", b"1"), ("a.cls", b"2")])
    with pytest.raises(wds.DataError) as e:
        list(wds.WebDataset(dup, shardshuffle=False))
    assert type(e.value) is wds.DataError
    s = [{"__key__": "a", "__url__": "x.tar", "jpg": b""}]
    with pytest.raises(wds.DataError) as e:
        list(wds.to_tuple("png")(iter(s)))
    assert type(e.value) is wds.DataError
