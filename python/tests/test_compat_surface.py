"""The reference 1.0.2's surface: its exception kinds, the tariterators steps
with their end-of-shard marker, the helpers of utils, cache and extradatasets,
and install_as_webdataset(). Expected values are the reference's observed
behaviour."""

import gzip
import io
import os
import pickle
import subprocess
import sys
import tarfile
import textwrap
import types

import pytest

import webdataset_cpp as wds
from webdataset_cpp import cache, extradatasets, tariterators, utils
from conftest import write_tar


@pytest.fixture
def two_shards(tmp_path):
    first = write_tar(tmp_path / "first.tar", [("a.txt", b"1"), ("a.cls", b"1"), ("b.txt", b"2")])
    second = write_tar(tmp_path / "second.tar", [("a.txt", b"3"), ("a.cls", b"4")])
    return first, second


def names(items):
    """Member names, with markers and other values as they are."""
    return [m["fname"] if isinstance(m, dict) and "fname" in m else m for m in items]


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
    assert str(e.value) == (f"{url}: command failed with exit status 3 (its output may be "
                            "incomplete)")
    # A command that fails before writing anything (curl -f of a missing
    # object): its exit status, OSError as in the reference.
    with pytest.raises(OSError) as e:
        list(wds.WebDataset("pipe:echo gone >&2; exit 22", shardshuffle=False))
    assert type(e.value) is wds.CommandError
    assert str(e.value) == ("pipe:echo gone >&2; exit 22: command failed with exit status 22 (its "
                            "output may be incomplete); stderr: gone\n")
    # Output that is no tar: the reference raises ReadError (exit 0) or
    # OSError (exit 1); the reader sees the output first, so both work.
    for url in ("pipe:echo this is no tar", "pipe:echo this is no tar; exit 1", "pipe:true"):
        for caught in (OSError, tarfile.ReadError):
            with pytest.raises(caught) as e:
                list(wds.WebDataset(url, shardshuffle=False))
            assert type(e.value) is wds.PipeShardError
            assert str(e.value).startswith(f"{url}: not a tar archive (")


def test_the_class_follows_the_kind_of_failure_not_the_message(tmp_path):
    # Names that hold the phrases of other failures' messages.
    path = str(tmp_path / "x: command failed with exit status 1.tar")
    with open(path, "wb") as f:
        f.write(b"this is no tar" * 100)
    with pytest.raises(wds.ShardReadError) as e:
        list(wds.WebDataset(path, shardshuffle=False))
    assert type(e.value) is wds.ShardReadError
    assert str(e.value) == f"{path}: not a tar archive (Unrecognized archive format)"
    bad = write_tar(tmp_path / "bad.tar", [("a: b.cls", b"x"), ("c.cls", b"1")])
    with pytest.raises(wds.DecodingError) as e:
        list(wds.WebDataset(bad, shardshuffle=False).decode())
    assert (e.value.url, e.value.key, e.value.k) == (bad, "a: b", "cls")
    assert str(e.value) == f'{bad}: key a: b: field cls: "x" is not an integer'
    # A data error that names a key and a field but is not a decoder's.
    dup = write_tar(tmp_path / "dup.tar", [("a.cls", b"1"), ("a.cls", b"2")])
    with pytest.raises(wds.DataError) as e:
        list(wds.WebDataset(dup, shardshuffle=False))
    assert type(e.value) is wds.DataError


def test_a_failing_native_decoder_raises_decoding_error(tmp_path):
    path = write_tar(tmp_path / "bad.tar", [("a.cls", b"x")])
    with pytest.raises(wds.DecodingError) as e:
        list(wds.WebDataset(path, shardshuffle=False).decode())
    assert (e.value.url, e.value.key, e.value.k, e.value.sample) == (path, "a", "cls", None)
    assert str(e.value) == f'{path}: key a: field cls: "x" is not an integer'
    assert isinstance(e.value, wds.DataError)
    copy = pickle.loads(pickle.dumps(e.value))  # as it leaves a DataLoader worker
    assert (copy.url, copy.key, copy.k, str(copy)) == (path, "a", "cls", str(e.value))


def test_a_decoding_error_from_a_dataloader_worker_keeps_its_message():
    utils_of_torch = pytest.importorskip("torch._utils")
    try:
        raise wds.DecodingError(url="x.tar", key="a", k="cls", message="x.tar: key a: bad")
    except wds.DecodingError:
        wrapped = utils_of_torch.ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(wds.DecodingError) as e:
        wrapped.reraise()
    assert str(e.value).startswith("Caught DecodingError in DataLoader worker process 0.\n")
    assert str(e.value).endswith("webdataset_cpp.errors.DecodingError: x.tar: key a: bad\n")


def test_other_data_errors_stay_data_errors(tmp_path):
    dup = write_tar(tmp_path / "dup.tar", [("a.cls", b"1"), ("a.cls", b"2")])
    with pytest.raises(wds.DataError) as e:
        list(wds.WebDataset(dup, shardshuffle=False))
    assert type(e.value) is wds.DataError
    s = [{"__key__": "a", "__url__": "x.tar", "jpg": b""}]
    with pytest.raises(wds.DataError) as e:
        list(wds.to_tuple("png")(iter(s)))
    assert type(e.value) is wds.DataError


# tariterators


def test_base_plus_ext_splits_as_the_reference():
    cases = {"a.b": ("a", "b"), "a.b.c": ("a", "b.c"), "dir.x/a.seg.png": ("dir.x/a", "seg.png"),
             "dir/sub/.cfg.json": ("dir/sub/", "cfg.json"), "a/.b": ("a/", "b"),
             "/.x": ("/", "x"), "a//.x": ("a//", "x"), "a..b": ("a", ".b"), "a.": ("a", ""),
             "sub.d/e/.f": ("sub.d/e/", "f"), "a": (None, None), ".a": (None, None),
             "dir.x/.cfg": (None, None), "x/y.z/w": (None, None), "a.b/c": (None, None),
             "a/b.c/.d.e": (None, None), "a/": (None, None), "": (None, None)}
    assert {p: tariterators.base_plus_ext(p) for p in cases} == cases


def test_valid_sample():
    assert [tariterators.valid_sample(x) for x in
            [None, {}, {"a": 1}, {"__bad__": True, "a": 1}, [1]]] == [False, False, True, False,
                                                                      False]


def test_tar_file_expander_yields_the_end_of_shard_marker(two_shards):
    first, second = two_shards
    urls = lambda: [dict(url=first), dict(url=second)]  # noqa: E731
    members = list(tariterators.tar_file_expander(tariterators.url_opener(urls())))
    assert names(members) == ["a.txt", "a.cls", "b.txt", {}, "a.txt", "a.cls", {}]
    assert members[3] is members[6]  # one marker object, as the reference's default
    assert members[0] == {"fname": "a.txt", "data": b"1", "__url__": first}
    none = tariterators.tar_file_expander(tariterators.url_opener(urls()), eof_value=None)
    assert names(none) == ["a.txt", "a.cls", "b.txt", "a.txt", "a.cls"]
    marked = tariterators.tar_file_expander(tariterators.url_opener(urls()), eof_value="EOF")
    assert names(marked) == ["a.txt", "a.cls", "b.txt", "EOF", "a.txt", "a.cls", "EOF"]


def test_a_grouping_that_ignores_the_marker_fails_as_with_the_reference(two_shards):
    # OpenCLIP's group_by_keys_nothrow reads every item's "fname": with
    # 1.0.2's default marker that is a KeyError at the first shard's end.
    def keys_of(members):
        for member in members:
            yield tariterators.base_plus_ext(member["fname"])[0]

    streams = tariterators.url_opener([dict(url=u) for u in two_shards])
    with pytest.raises(KeyError, match="fname"):
        list(keys_of(tariterators.tar_file_expander(streams, handler=wds.reraise_exception)))
    streams = tariterators.url_opener([dict(url=u) for u in two_shards])
    assert list(keys_of(tariterators.tar_file_expander(streams, eof_value=None))) == [
        "a", "a", "b", "a", "a"]


def test_group_by_keys_ends_samples_at_the_marker(two_shards):
    first, second = two_shards
    same = [dict(url=second), dict(url=second)]
    grouped = tariterators.group_by_keys(
        tariterators.tar_file_expander(tariterators.url_opener(same)))
    assert [(s["__key__"], s["txt"], s["cls"]) for s in grouped] == [("a", b"3", b"4")] * 2
    # Without markers one key at the end of a shard and the start of the next
    # is one sample: a repeated field, which the reference raises as ValueError.
    unmarked = tariterators.tar_file_expander(tariterators.url_opener(same), eof_value=None)
    with pytest.raises(ValueError, match=f"^{second}: duplicate field 'txt' in sample a"):
        list(tariterators.group_by_keys(unmarked))


def test_group_by_keys_handlers_lcase_and_suffixes(tmp_path):
    dup = write_tar(tmp_path / "dup.tar", [("a.txt", b"x"), ("a.txt", b"y"), ("b.TXT", b"z")])

    def grouped(**kw):
        return list(tariterators.group_by_keys(
            tariterators.tar_file_expander(tariterators.url_opener([dup])), **kw))

    assert [(s["__key__"], s["txt"]) for s in grouped(handler=wds.ignore_and_continue)] == [
        ("a", b"x"), ("b", b"z")]
    # Stopping still yields the sample being grouped, as the reference does.
    assert [s["__key__"] for s in grouped(handler=wds.ignore_and_stop)] == ["a"]
    lower = grouped(handler=wds.ignore_and_continue, lcase=False)
    assert [sorted(s) for s in lower][1] == ["TXT", "__key__", "__url__"]
    only = grouped(handler=wds.ignore_and_continue, suffixes={"cls"})
    assert only == [{"__key__": "a", "__url__": dup}, {"__key__": "b", "__url__": dup}]


def test_metadata_members_are_skipped_by_the_tar_iterator(tmp_path):
    path = write_tar(tmp_path / "meta.tar", [("__meta__", b"m"), ("__x__/y.txt", b"q"),
                                             ("a.txt", b"1"), ("dir/sub/.cfg.json", b"{}"),
                                             ("a/__k__/b.txt", b"z"), ("noext", b"n")])
    with open(path, "rb") as f:
        assert names(tariterators.tar_file_iterator(f)) == [
            "a.txt", "dir/sub/.cfg.json", "a/__k__/b.txt", "noext"]
    with open(path, "rb") as f:
        assert names(tariterators.tar_file_iterator(f, skip_meta=None))[0] == "__x__/y.txt"
    samples = tariterators.tarfile_samples([path])
    assert [(s["__key__"], sorted(s)[0]) for s in samples] == [
        ("a", "__key__"), ("dir/sub/", "__key__"), ("a/__k__/b", "__key__")]


def test_any_file_object_is_read_and_its_local_path_kept(two_shards, tmp_path):
    _, second = two_shards
    with open(second, "rb") as f:
        data = f.read()
    source = dict(url="mem", stream=io.BytesIO(data), local_path="/p")
    samples = list(tariterators.group_by_keys(tariterators.tar_file_expander([source])))
    assert samples == [{"__key__": "a", "__url__": "mem", "txt": b"3", "cls": b"4",
                        "__local_path__": "/p"}]
    cut = dict(url="mem", stream=io.BytesIO(data[:700]))
    with pytest.raises(tarfile.ReadError, match="^mem: unexpected end of data$"):
        list(tariterators.tar_file_expander([cut]))


def test_url_opener_opens_local_files_and_defers_commands(two_shards, tmp_path):
    first, second = two_shards
    missing = str(tmp_path / "missing.tar")
    seen = []
    opened = list(tariterators.url_opener([dict(url=missing), dict(url=first)],
                                          handler=lambda e: seen.append(e) or True))
    assert [type(e) for e in seen] == [FileNotFoundError] and seen[0].args[-1] == missing
    assert [s["url"] for s in opened] == [first] and opened[0]["stream"].read(5) == b"a.txt"
    with pytest.raises(FileNotFoundError):
        list(tariterators.url_opener([dict(url=missing)]))
    piped, = tariterators.url_opener([dict(url=f"pipe:cat {second}")])
    with open(second, "rb") as f:
        assert piped["stream"].read() == f.read()  # opened with gopen at the first read
    piped, = tariterators.url_opener([f"pipe:cat {second}"])
    assert names(tariterators.tar_file_expander([piped])) == ["a.txt", "a.cls", {}]


def test_a_remote_shard_is_requested_once_and_read_natively(two_shards, tmp_path):
    from test_remote import Server

    server = Server(os.path.dirname(two_shards[0]), str(tmp_path))
    try:
        url = server.url(os.path.basename(two_shards[1]))
        streams = tariterators.url_opener([dict(url=url)], remote=wds.RemoteOptions(max_attempts=2))
        assert names(tariterators.tar_file_expander(streams)) == ["a.txt", "a.cls", {}]
        assert server.gets() == ["/" + os.path.basename(two_shards[1])]
    finally:
        server.stop()


def test_rename_and_select_errors_go_to_the_handler(two_shards):
    def rename(name):
        if name.startswith("b"):
            raise KeyError(name)
        return "x" + name

    def members(handler):
        streams = tariterators.url_opener([dict(url=u) for u in two_shards])
        return names(tariterators.tar_file_expander(streams, handler=handler, rename_files=rename,
                                                    select_files=lambda n: n.endswith("txt")))

    assert members(wds.ignore_and_continue) == ["xa.txt", {}, "xa.txt", {}]
    assert members(wds.ignore_and_stop) == ["xa.txt", {}, "xa.txt", {}]  # ends that shard only
    with pytest.raises(KeyError):
        members(wds.reraise_exception)


def test_shardlist():
    assert list(tariterators.shardlist("a-{0..1}.tar")) == [{"url": "a-0.tar"}, {"url": "a-1.tar"}]


# utils


def test_utils_helpers(tmp_path):
    assert [utils.is_iterable(x) for x in ["ab", b"ab", [1], iter([]), 3]] == [
        False, False, True, True, False]
    assert list(utils.repeatedly([1, 2], nepochs=0)) == [1, 2]  # at least one pass
    assert list(utils.repeatedly([([1, 2],)] * 3, nsamples=3)) == [([1, 2],)] * 2
    assert len(list(utils.repeatedly([([1],)] * 3, nsamples=4))) == 4
    assert len(list(utils.repeatedly([([1],)] * 3, nsamples=4, batchsize=lambda b: 2))) == 2
    assert list(utils.repeatedly0([1, 2, 3], nepochs=2, nbatches=2)) == [1, 2, 1, 2]
    assert utils.guess_batchsize(([1, 2, 3], [4])) == 3
    for name in ["a1.tar", "a2.tar", "b1.tar"]:
        (tmp_path / name).write_bytes(b"")
    assert sorted(utils.glob_with_braces(str(tmp_path / "{a,b}1.*"))) == [
        str(tmp_path / "a1.tar"), str(tmp_path / "b1.tar")]
    assert utils.fnmatch_with_braces("x.jpg", "*.{png,jpg}")
    assert not utils.fnmatch_with_braces("x.gif", "*.{png,jpg}")
    assert utils.make_seed(1, 2) == 33
    assert utils.safe_eval("abc_1", "'{}'") == "abc_1"
    with pytest.raises(ValueError, match=r"^safe_eval: illegal characters in: 'a\(\)'$"):
        utils.safe_eval("a()")
    assert utils.lookup_sym("DataError", [".handlers", ".errors"]) is wds.DataError
    assert utils.lookup_sym("nope", [".errors"]) is None
    assert list(utils.compute_sample_weights([(1, 2), (3, 4)])) == [1 / 6, 1.0]


def test_deprecated_and_obsolete(monkeypatch):
    @utils.deprecated("use g")
    def f():
        return 1

    with pytest.warns(DeprecationWarning, match=r"^Call to deprecated function f\. Reason: use g$"):
        assert f() == 1

    @utils.obsolete
    def old():
        return 2

    monkeypatch.delenv("ALLOW_OBSOLETE", raising=False)
    with pytest.raises(utils.ObsoleteException, match=r"^Call to obsolete function old\. Set env "
                       r"ALLOW_OBSOLETE=1 to permit\.$"):
        old()
    monkeypatch.setenv("ALLOW_OBSOLETE", "1")
    assert old() == 2


# cache


def test_cache_helpers(tmp_path):
    assert cache.url_to_cache_name("https://h/a/b/c.tar") == "c.tar"
    assert cache.url_to_cache_name("https://h/a/b/c.tar", ndir=1) == "b/c.tar"
    assert cache.url_to_cache_name("pipe:cat x.tar") == "pipe%3Acat%20x.tar"
    assert cache.islocal("a.tar") and cache.islocal("file:a.tar") and not cache.islocal("s3://b")
    assert cache.pipe_cleaner("pipe:curl -s https://h/x.tar") == "https://h/x.tar"
    tar = write_tar(tmp_path / "t.tar", [("a.txt", b"1")])
    (tmp_path / "t.gz").write_bytes(gzip.compress(b"x"))
    (tmp_path / "t.txt").write_bytes(b"plain")
    assert [cache.check_tar_format(str(tmp_path / n)) for n in ["t.tar", "t.gz", "t.txt"]] == [
        True, True, False]
    assert cache.magic_filetype(tar) == f"{tar}: POSIX tar archive"
    cleanup = cache.LRUCleanup(None, cache_size=1, interval=None)
    cleanup.set_cache_dir(str(tmp_path / "none"))
    cleanup.cleanup()  # a missing directory is nothing to clean


def test_file_cache_and_streaming_open(two_shards, tmp_path):
    first, second = two_shards
    where = tmp_path / "cache"
    files = cache.FileCache(str(where))
    url = f"pipe:cat {second}"
    opened = list(files([first, dict(url=url)]))
    assert [(o["url"], o["local_path"]) for o in opened] == [
        (first, first), (url, str(where / cache.url_to_cache_name(url)))]
    assert os.listdir(where) == [cache.url_to_cache_name(url)]
    samples = tariterators.group_by_keys(tariterators.tar_file_expander(files([url])))
    assert [(s["__key__"], s["__local_path__"]) for s in samples] == [
        ("a", opened[1]["local_path"])]
    junk = f"pipe:echo junk; true {tmp_path}"
    with pytest.raises(ValueError, match="is not a tar archive, but a .*: data, contains b'junk"):
        list(files([junk]))
    assert os.listdir(where) == [cache.url_to_cache_name(url)]  # the refused file was removed
    streams = list(cache.StreamingOpen()([first, url]))
    assert [sorted(s) for s in streams] == [["local_path", "stream", "url"], ["stream", "url"]]


def test_lmdb_cached_needs_lmdb(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "lmdb", None)
    with pytest.raises(ModuleNotFoundError):
        wds.LMDBCached(str(tmp_path / "db"))


def test_lmdb_cached_replays_a_completed_pass(tmp_path):
    pytest.importorskip("lmdb")
    stage = wds.LMDBCached(str(tmp_path / "db"), map_size=1e7, chunksize=2)
    samples = [{"__key__": f"k{i}", "v": i} for i in range(3)]
    assert list(stage.run(iter(samples))) == samples
    assert stage.is_complete()
    assert list(stage.run(iter([]))) == samples


# extradatasets and MultiShardSample


def test_legacy_epoch_and_length_wrappers():
    epoch = wds.with_epoch([1, 2, 3], 5)
    assert list(epoch.invoke([1, 2, 3])) == [1, 2, 3, 1, 2]
    assert list(epoch) == [1, 2, 3, 1, 2]
    assert list(wds.with_epoch([], 3)) == []
    assert pickle.loads(pickle.dumps(epoch)).source is None
    length = wds.with_length([1, 2], 7)
    assert len(length) == 7 and list(length) == [1, 2] and list(length.invoke([3])) == [3]
    again = extradatasets.repeatedly([1, 2], nepochs=2)
    assert list(again) == [1, 2, 1, 2]


def test_multi_shard_sample(monkeypatch, tmp_path):
    spec = {"datasets": [{"shards": "a-{0..3}.tar", "choose": 2},
                         {"shards": "b-{0..1}.tar", "resample": 3, "buckets": "bk"}]}
    monkeypatch.delenv("ALLOW_OBSOLETE", raising=False)
    with pytest.raises(utils.ObsoleteException, match="Reason: this is going to be replaced"):
        wds.MultiShardSample(spec)
    monkeypatch.setenv("ALLOW_OBSOLETE", "1")
    drawn = wds.MultiShardSample(spec)
    drawn.set_epoch(1)  # the reference draws exactly these for seed 1
    assert list(drawn) == [{"url": u} for u in
                           ["bk/b-0.tar", "bk/b-0.tar", "a-3.tar", "a-0.tar", "bk/b-0.tar"]]
    yaml_spec = tmp_path / "spec.yaml"
    yaml_spec.write_text("prefix: /d/\ndatasets:\n  - shards: a-{0..1}.tar\n")
    assert sorted(u["url"] for u in wds.MultiShardSample(str(yaml_spec))) == ["/d/a-0.tar",
                                                                              "/d/a-1.tar"]
    with pytest.raises(ValueError, match="perepoch 5 must be no greater than the number of shards"):
        wds.MultiShardSample({"datasets": [{"shards": "a-{0..1}.tar", "choose": 5}]})


# install_as_webdataset


def run_python(code):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=dict(os.environ), timeout=120)


def test_install_as_webdataset_serves_unmodified_reference_code(two_shards):
    result = run_python(f"""
        import webdataset_cpp
        webdataset_cpp.install_as_webdataset()
        webdataset_cpp.install_as_webdataset()  # again: nothing happens
        import webdataset as wds
        from webdataset.filters import _shuffle  # OpenCLIP's imports
        from webdataset.tariterators import (base_plus_ext, url_opener, tar_file_expander,
                                             valid_sample)
        from webdataset.filters import LMDBCached
        from webdataset.shardlists import split_by_worker
        import webdataset.autodecode, webdataset.handlers
        assert wds is webdataset_cpp and webdataset.autodecode is webdataset_cpp.autodecode
        streams = url_opener([dict(url=u) for u in {list(two_shards)!r}])
        members = tar_file_expander(streams, eof_value=None)
        print(sum(1 for m in members if base_plus_ext(m["fname"])[0] == "a"))
        from webdataset.multi import MultiLoader
        assert MultiLoader is webdataset_cpp.multi.MultiLoader
        try:
            import webdataset.typecheck
        except ModuleNotFoundError as e:
            print(e)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["4", "No module named 'webdataset.typecheck'"]


def test_install_as_webdataset_at_module_level_reaches_spawned_workers(two_shards, tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "client.py").write_text(textwrap.dedent("""
        import webdataset as wds

        def keys(src):
            for sample in src:
                yield sample["__key__"]

        def dataset(urls):
            return wds.DataPipeline(wds.SimpleShardList(urls), wds.tarfile_to_samples(), keys)
    """))
    (tmp_path / "main.py").write_text(textwrap.dedent(f"""
        import webdataset_cpp
        webdataset_cpp.install_as_webdataset()
        import torch.utils.data
        import client

        if __name__ == "__main__":
            loader = torch.utils.data.DataLoader(client.dataset({list(two_shards)!r}),
                                                 batch_size=None, num_workers=1,
                                                 multiprocessing_context="spawn")
            print(list(loader))
    """))
    result = subprocess.run([sys.executable, "main.py"], capture_output=True, text=True,
                            cwd=tmp_path, env=dict(os.environ), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["['a', 'b', 'a']"]


def test_install_as_webdataset_refuses_an_imported_webdataset():
    result = run_python("""
        import sys, types
        sys.modules["webdataset"] = types.ModuleType("webdataset")
        import webdataset_cpp
        try:
            webdataset_cpp.install_as_webdataset()
        except ImportError as e:
            print(e)
        print(sys.modules["webdataset"].__name__, "webdataset.filters" in sys.modules)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "install_as_webdataset: webdataset is already imported (from None); call "
        "install_as_webdataset() before anything imports webdataset", "webdataset False"]


def test_the_reference_top_level_names_exist():
    for name in ["with_epoch", "with_length", "MultiShardSample", "LMDBCached", "tenbin",
                 "install_as_webdataset", "ShardReadError", "CommandError", "PipeShardError"]:
        assert hasattr(wds, name), name


class _FakeLmdb:
    """An in-memory lmdb module: what LMDBCached uses of it (open, begin,
    get, put, cursor)."""

    def __init__(self):
        self.opened = []

    def open(self, fname, readonly, map_size):
        self.opened.append((fname, readonly, map_size))
        data = {}

        class Txn:
            def __init__(self, write):
                self.get, self.cursor = data.get, lambda: sorted(data.items())
                self.put = data.__setitem__ if write else None

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        return types.SimpleNamespace(begin=lambda write: Txn(write))


def test_fluid_lmdb_cached_composes_lmdb_cached(monkeypatch, tmp_path):
    fake = _FakeLmdb()
    monkeypatch.setitem(sys.modules, "lmdb", fake)
    samples = [{"__key__": f"k{i}", "v": i} for i in range(3)]
    ds = wds.FluidWrapper(samples).lmdb_cached(str(tmp_path / "db"), map_size=1e7, chunksize=2)
    assert fake.opened == [(str(tmp_path / "db"), False, 10**7)]
    assert list(ds) == samples
    samples.clear()  # a completed pass is replayed from the database
    assert list(ds) == [{"__key__": f"k{i}", "v": i} for i in range(3)]
    monkeypatch.setitem(sys.modules, "lmdb", None)
    with pytest.raises(ModuleNotFoundError):
        wds.FluidWrapper([]).lmdb_cached(str(tmp_path / "other"))


def test_names_the_reference_modules_import_are_there_too():
    # Clients import names from the module they saw them in, imports included.
    from webdataset_cpp import compat, filters, pipeline, shardlists
    assert compat.group_by_keys is tariterators.group_by_keys
    assert compat.tar_file_expander is tariterators.tar_file_expander
    assert compat.pipelinefilter is filters.pipelinefilter is shardlists.pipelinefilter
    assert pipeline.PipelineStage is filters.PipelineStage is utils.PipelineStage


def test_add_length_method_gives_len_of_size():
    from webdataset_cpp.pipeline import add_length_method

    class Source:
        size = 7

        def __iter__(self):
            return iter(range(3))

    source = add_length_method(Source())
    assert len(source) == 7 and list(source) == [0, 1, 2]
    assert type(source).__name__ == "Source_Length" and isinstance(source, Source)
    dataset = wds.DataPipeline([1, 2]).with_length(4, silent=True)
    assert add_length_method(dataset) is dataset and len(dataset) == 4
    assert len(pickle.loads(pickle.dumps(dataset))) == 4
