"""Reading shards: samples, their order and content, against Python's
tarfile and the C++ reader (wds-shard ls)."""

import hashlib
import json
import os
import re
import subprocess
import tarfile
import zlib

import pytest

import webdataset_cpp as wds
from conftest import tool, write_tar


def tarfile_samples(path):
    """The samples of a shard as Python's tarfile sees it (grouped by key)."""
    samples = []
    with tarfile.open(path) as tar:
        for member in tar:
            base = os.path.basename(member.name)
            key = os.path.join(os.path.dirname(member.name), base.split(".", 1)[0])
            field = base.split(".", 1)[1].lower()
            if not samples or samples[-1]["__key__"] != key:
                samples.append({"__key__": key, "__url__": path})
            samples[-1][field] = tar.extractfile(member).read()
    return samples


def test_samples_match_python_tarfile(shards, pattern):
    expected = [s for path in shards for s in tarfile_samples(path)]
    got = list(wds.WebDataset(pattern, shardshuffle=False))
    assert got == expected
    assert [list(s) for s in got[:1]] == [["__key__", "__url__", "jpg", "cls", "txt", "json"]]
    assert all(type(v) is bytes for s in got for k, v in s.items() if not k.startswith("__"))


def test_samples_match_the_cpp_reader(shards, pattern):
    listing = subprocess.run([tool("wds-shard"), "ls", "--json"] + shards, check=True,
                             capture_output=True, text=True).stdout.splitlines()
    expected = [json.loads(line) for line in listing]
    got = list(wds.WebDataset(pattern, shardshuffle=False))
    assert len(got) == len(expected) == 40
    for sample, reference in zip(got, expected):
        assert sample["__key__"] == reference["__key__"]
        assert sample["__url__"] == reference["__url__"]
        fields = {k: {"size": len(v), "crc32": zlib.crc32(v)} for k, v in sample.items()
                  if not k.startswith("__")}
        assert fields == {k: v for k, v in reference.items() if not k.startswith("__")}


def test_data_pipeline_with_explicit_stages_is_the_same(shards, pattern):
    pipeline = wds.DataPipeline(wds.SimpleShardList(pattern), wds.split_by_worker,
                                wds.tarfile_to_samples())
    assert list(pipeline) == list(wds.WebDataset(shards, shardshuffle=False))


def test_python_stages_between_shard_list_and_reader(shards):
    picked = []

    def every_other(src):
        for i, item in enumerate(src):
            if i % 2 == 0:
                picked.append(item["url"])
                yield item

    pipeline = wds.DataPipeline(wds.SimpleShardList(shards), every_other,
                                wds.tarfile_to_samples(), wds.to_tuple("__url__", "cls"))
    urls = [url for url, _ in pipeline]
    assert picked == [shards[0], shards[2]]
    assert urls == [shards[0]] * 10 + [shards[2]] * 10


def test_grouping_rules(tmp_path):
    path = write_tar(tmp_path / "g.tar", [
        ("dir.x/a.seg.PNG", b"1"), ("dir.x/a.cls", b"2"),    # key keeps the directory
        ("noext", b"x"), ("__meta__/info.txt", b"m"),        # no field; metadata
        ("b.cls", b"3"), ("c.txt", b"4"), ("b.txt", b"5"),   # b is not contiguous
    ])
    got = [{k: v for k, v in s.items() if k != "__url__"} for s in wds.WebDataset(
        path, shardshuffle=False)]
    assert got == [{"__key__": "dir.x/a", "seg.png": b"1", "cls": b"2"},
                   {"__key__": "b", "cls": b"3"}, {"__key__": "c", "txt": b"4"},
                   {"__key__": "b", "txt": b"5"}]


def test_compressed_shards_and_pipe_urls(tmp_path, shards):
    gz = str(tmp_path / "a.tar.gz")
    with open(shards[0], "rb") as src, __import__("gzip").open(gz, "wb") as dst:
        dst.write(src.read())
    plain = list(wds.WebDataset(shards[0], shardshuffle=False))
    for url in (gz, f"pipe:cat {shards[0]}", f"file:{shards[0]}"):
        got = list(wds.WebDataset(url, shardshuffle=False))
        assert [{k: v for k, v in s.items() if k != "__url__"} for s in got] == \
            [{k: v for k, v in s.items() if k != "__url__"} for s in plain]
        assert got[0]["__url__"] == url


def test_select_and_rename_files(shards):
    pipeline = wds.DataPipeline(
        wds.SimpleShardList(shards[:1]),
        wds.tarfile_to_samples(select_files=lambda name: not name.endswith(".jpg"),
                               rename_files=lambda name: name.replace(".txt", ".text")))
    got = list(pipeline)
    assert len(got) == 10
    assert list(got[0]) == ["__key__", "__url__", "cls", "text", "json"]
    assert got[3]["text"] == b"text 3"


def members_read(path, **kw):
    """The samples tarfile_to_samples(**kw) reads from `path`, without __url__."""
    pipeline = wds.DataPipeline(wds.SimpleShardList([path]), wds.tarfile_to_samples(**kw))
    return [{k: v for k, v in s.items() if k != "__url__"} for s in pipeline]


# The expectations below are the reference's (webdataset 1.0.2) observed output.

def test_rename_files_into_another_key_or_field(tmp_path):
    path = write_tar(tmp_path / "a.tar", [("a.txt", b"1"), ("b.cls", b"2"), ("c.txt", b"3")])
    assert members_read(path, rename_files=lambda n: "a.cls" if n == "b.cls" else n) == [
        {"__key__": "a", "txt": b"1", "cls": b"2"}, {"__key__": "c", "txt": b"3"}]
    assert members_read(path, rename_files=str.upper) == [
        {"__key__": "A", "txt": b"1"}, {"__key__": "B", "cls": b"2"}, {"__key__": "C", "txt": b"3"}]
    dup = write_tar(tmp_path / "d.tar", [("a.txt", b"1"), ("a.cls", b"2")])
    with pytest.raises(ValueError, match=r"duplicate field 'txt' in sample a \(member a.cls"):
        members_read(dup, rename_files=lambda n: "a.txt")


def test_select_files_sees_the_renamed_name_and_drops_members(tmp_path):
    path = write_tar(tmp_path / "a.tar", [("a.txt", b"1"), ("b.cls", b"2"), ("c.txt", b"3")])
    assert members_read(path, select_files=lambda n: not n.endswith(".cls")) == [
        {"__key__": "a", "txt": b"1"}, {"__key__": "c", "txt": b"3"}]
    assert members_read(path, rename_files=lambda n: n.replace(".txt", ".text"),
                        select_files=lambda n: n.endswith(".text")) == [
        {"__key__": "a", "text": b"1"}, {"__key__": "c", "text": b"3"}]
    # Any truth value selects, as in the reference.
    assert len(members_read(path, select_files=lambda n: 0 if n == "b.cls" else "yes")) == 2


def _bytes_read():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def test_members_select_files_drops_are_skipped_unread(tmp_path):
    # Three samples with an 8 MiB field: keeping only .txt reads a fraction
    # of the shard (the big members are seeked past), and gives the same
    # samples as reading everything and dropping afterwards.
    members = []
    for key in "abc":
        members += [(f"{key}.bin", os.urandom(8 << 20)), (f"{key}.txt", key.encode())]
    path = write_tar(tmp_path / "big.tar", members)
    before = _bytes_read()
    kept = members_read(path, select_files=lambda n: n.endswith(".txt"))
    read = _bytes_read() - before
    assert kept == [{"__key__": k, "txt": k.encode()} for k in "abc"]
    assert read < 8 << 20, read  # less than one of the big members
    before = _bytes_read()
    assert len(members_read(path)) == 3
    assert _bytes_read() - before > 24 << 20


def test_member_callables_never_see_metadata_names(tmp_path):
    path = write_tar(tmp_path / "m.tar", [
        ("__meta__", b"m"), ("__x__/y.txt", b"q"), ("dir/sub/.cfg.json", b"{}"), ("noext", b"n"),
        ("a.txt", b"1"), ("a/__k__/b.txt", b"z")])
    seen = []
    got = members_read(path, rename_files=lambda n: seen.append(n) or n)
    assert seen == ["dir/sub/.cfg.json", "noext", "a.txt", "a/__k__/b.txt"]
    assert got == [{"__key__": "dir/sub/", "cfg.json": b"{}"}, {"__key__": "a", "txt": b"1"},
                   {"__key__": "a/__k__/b", "txt": b"z"}]
    # A name renamed into a metadata-like one is grouped: only the tar's names are checked.
    renamed = members_read(path, rename_files=lambda n: "__y__.txt" if n == "noext" else n)
    assert renamed[1] == {"__key__": "__y__", "txt": b"n"}
    assert [s["__key__"] for s in wds.tarfile_samples([path], select_files=lambda n: True)] == [
        "dir/sub/", "a", "a/__k__/b"]


def test_member_callables_see_undecodable_bytes_as_surrogates(tmp_path):
    path = write_tar(tmp_path / "u.tar", [("a\udcff.txt", b"1"), ("b.txt", b"2")])
    seen = []
    got = members_read(path, rename_files=lambda n: seen.append(n) or n.replace("b", "c\udcfe"))
    assert seen == ["a\udcff.txt", "b.txt"]
    assert [s["__key__"] for s in got] == ["a\udcff", "c\udcfe"]


def test_member_callable_errors_are_the_very_exception_or_go_to_the_handler(tmp_path):
    path = write_tar(tmp_path / "a.tar", [("a.txt", b"1"), ("b.cls", b"2"), ("c.txt", b"3")])
    error = KeyError("boom")

    def bad(name):
        if name == "b.cls":
            raise error
        return name

    with pytest.raises(KeyError) as raised:
        members_read(path, rename_files=bad)
    assert raised.value is error
    with pytest.raises(KeyError) as raised:
        list(wds.tarfile_samples([path], select_files=bad))
    assert raised.value is error
    # A continuing handler skips that member only; a stopping one ends after
    # the sample in progress.
    assert members_read(path, rename_files=bad, handler=wds.ignore_and_continue) == [
        {"__key__": "a", "txt": b"1"}, {"__key__": "c", "txt": b"3"}]
    assert members_read(path, rename_files=bad, handler=wds.ignore_and_stop) == [
        {"__key__": "a", "txt": b"1"}]
    # ... and ends that shard only.
    twice = wds.DataPipeline(wds.SimpleShardList([path, path]),
                             wds.tarfile_to_samples(rename_files=bad, handler=wds.ignore_and_stop))
    assert [s["__key__"] for s in twice] == ["a", "a"]
    with pytest.raises(TypeError, match="rename_files must return a str, got 3 for member a.txt"):
        members_read(path, rename_files=lambda n: 3)


def test_a_python_handler_decides_member_by_member_on_callable_errors(tmp_path):
    first = write_tar(tmp_path / "a.tar", [("a.txt", b"1"), ("b.cls", b"2"), ("c.txt", b"3")])
    second = write_tar(tmp_path / "b.tar", [("d.txt", b"4")])
    error = KeyError("boom")

    def bad(name):
        if name == "b.cls":
            raise error
        return name

    def keys(handler):
        pipeline = wds.DataPipeline(wds.SimpleShardList([first, second]),
                                    wds.tarfile_to_samples(rename_files=bad, handler=handler))
        return [s["__key__"] for s in pipeline]

    seen = []
    # True skips that member; False ends that shard after the sample in progress.
    assert keys(lambda e: seen.append(e) or True) == ["a", "c", "d"]
    assert keys(lambda e: seen.append(e) or False) == ["a", "d"]
    assert seen == [error, error]

    class Stop(Exception):
        pass

    def raising(exn):
        seen.append(exn)
        raise Stop("handled") from exn

    with pytest.raises(Stop):
        keys(raising)
    assert seen == [error] * 3  # asked once


def test_member_callables_run_in_the_native_reader_not_in_python(tmp_path, monkeypatch):
    from webdataset_cpp import tariterators

    def fail(*args, **kwargs):
        raise AssertionError("the Python grouping ran")

    for name in ("group_by_keys", "tar_file_expander", "url_opener", "base_plus_ext"):
        monkeypatch.setattr(tariterators, name, fail)
    path = write_tar(tmp_path / "a.tar", [("a.txt", b"1"), ("b.cls", b"2")])
    assert members_read(path, select_files=lambda n: n.endswith(".txt")) == [
        {"__key__": "a", "txt": b"1"}]
    assert [s["__key__"] for s in wds.tarfile_samples([path], rename_files=str.upper)] == ["A", "B"]


def test_shardshuffle_is_a_new_permutation_each_epoch_and_the_same_on_every_rank(tmp_path):
    from conftest import write_shards

    paths = write_shards(tmp_path, 12, 1, jpeg=False)

    def urls(epoch, rank, world_size, workers=1):
        out = []
        for worker in range(workers):
            ds = wds.WebDataset(paths, shardshuffle=100, nodesplitter=wds.split_by_node, seed=5)
            ds.set_epoch(epoch)
            ctx = ds.context()
            ctx = type(ctx)(rank, world_size, worker, workers, epoch, 0, ds.seed)
            out += [s["__url__"] for s in wds._plan.run_stages(ds.pipeline, ctx)]
        return out

    epoch0 = urls(0, 0, 1)
    assert sorted(epoch0) == sorted(paths) and epoch0 != paths
    assert urls(1, 0, 1) != epoch0
    assert urls(0, 0, 1) == epoch0  # reproducible
    ranks = [urls(0, r, 3, workers=2) for r in range(3)]
    assert sorted(sum(ranks, [])) == sorted(paths)  # disjoint, complete
    assert [u for u in epoch0 if u in ranks[1]] == sorted(ranks[1], key=epoch0.index)


def test_shardshuffle_warnings():
    with pytest.warns(UserWarning, match=r"shardshuffle=\.\.\.\) is None; set explicitly"):
        wds.WebDataset("a.tar")
    with pytest.warns(UserWarning, match="to a positive integer or 0 or False"):
        wds.WebDataset("a.tar", shardshuffle=True)
    with pytest.warns(UserWarning, match="is ignored for resampled datasets"):
        wds.WebDataset("a.tar", shardshuffle=10, resampled=True)


def test_resampled_draws_shards_with_replacement(shards):
    ds = wds.WebDataset(shards, resampled=True, shardshuffle=False, seed=3).slice(60)
    urls = [s["__url__"] for s in ds]
    assert len(urls) == 60 and set(urls) <= set(shards) and len(set(urls)) > 1
    assert urls == [s["__url__"] for s in wds.WebDataset(
        shards, resampled=True, shardshuffle=False, seed=3).slice(60)]


def test_resampled_shards_draw_in_proportion_to_their_weights(shards):
    """Weights 0, 1, 0 and 3 (shards[0] and shards[2] never drawn): the native draws, and
    Python's (a worker_seed, or a Python handler, runs them in Python), both in proportion."""
    weights = [0, 1, 0, 3]

    def urls(*stages, n=4000, **kw):
        ds = wds.DataPipeline(wds.ResampledShards(shards, nshards=n // 10, seed=3,
                                                  weights=weights, **kw), *stages)
        return [s["__url__"] for s in ds]

    for drawn in (urls(wds.tarfile_to_samples()),
                  urls(wds.tarfile_to_samples(), worker_seed=lambda: 1),
                  urls(wds.tarfile_to_samples(handler=lambda e: True))):
        assert len(drawn) == 4000  # shards of 10 samples
        assert set(drawn) == {shards[1], shards[3]}
        assert abs(drawn.count(shards[3]) / 4000 - 0.75) < 0.06
    assert urls(wds.tarfile_to_samples()) == urls(wds.tarfile_to_samples())  # seeded
    # WebDataset takes them as shard_weights, with resampled=True only.
    drawn = [s["__url__"] for s in wds.WebDataset(shards, resampled=True, shardshuffle=False,
                                                  seed=3, shard_weights=weights).slice(400)]
    assert set(drawn) == {shards[1], shards[3]}
    with pytest.raises(ValueError, match="^WebDataset: shard_weights weigh resampled draws; "
                                         "pass resampled=True$"):
        wds.WebDataset(shards, shardshuffle=False, shard_weights=weights)
    for bad, message in [([1, 2], "shard weights: 2 weights for 4 shards"),
                         ([1, -1, 0, 0], r"shard weights: weight 1 is -1 \(finite, >= 0 needed\)"),
                         ([0, 0, 0, 0], r"shard weights: their sum is 0 \(some weight must be"),
                         ([float("nan"), 1, 1, 1], r"shard weights: weight 0 is nan")]:
        with pytest.raises(ValueError, match=f"^{message}"):
            wds.ResampledShards(shards, weights=bad)
    for handler in ("reraise", lambda e: True):  # the core checks them too, whatever reads
        with pytest.raises(ValueError, match="shard weights: 1 weights for 4 shards"):
            wds._core.shard_source(shards, resampled=True, weights=[1], handler=handler)
        with pytest.raises(ValueError, match="weigh resampled draws"):
            wds._core.shard_source(shards, weights=[1, 1, 1, 1], handler=handler)


def test_resampled_shards_under_a_python_handler_draw_as_under_a_native_one(shards, monkeypatch):
    """The same draws (nshards of them, the same shards, weights and epochs alike) whatever the
    handler; no splitter applies to them. A Python handler once read each shard instead."""
    monkeypatch.setenv("WORKER", "0")
    monkeypatch.setenv("NUM_WORKERS", "2")
    for weights in (None, [1, 0, 2, 1]):
        def urls(handler, epoch):
            ds = wds.WebDataset(shards, resampled=True, shardshuffle=False, seed=3,
                                handler=handler).compose()
            ds.pipeline[0].nshards = 7
            ds.pipeline[0].weights = weights
            ds.set_epoch(epoch)
            return [s["__url__"] for s in ds]

        native = [urls(wds.reraise_exception, epoch) for epoch in (0, 1)]
        assert [len(u) for u in native] == [70, 70] and native[0] != native[1]
        assert [urls(lambda e: True, epoch) for epoch in (0, 1)] == native


def test_single_node_only_refuses_several_ranks(shards, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    ds = wds.WebDataset(shards, shardshuffle=False)
    with pytest.raises(ValueError, match=re.escape(
            "you need to add an explicit nodesplitter to your input pipeline for multi-node "
            "training (rank 1 of 2): nodesplitter=wds.split_by_node shares the shards out among "
            "the ranks; nodesplitter=None has every rank read every shard (with resampled=True, "
            "or a shard list of its own)")):
        next(iter(ds))
    split = wds.WebDataset(shards, shardshuffle=False, nodesplitter=wds.split_by_node)
    assert {s["__url__"] for s in split} == {shards[1], shards[3]}


def test_rank_environment_needs_both_variables(shards, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        wds.pytorch_worker_info()


def test_empty_check_names_shards_and_workers(shards, monkeypatch):
    monkeypatch.setenv("WORKER", "5")
    monkeypatch.setenv("NUM_WORKERS", "8")
    ds = wds.WebDataset(shards, shardshuffle=False)
    with pytest.raises(ValueError) as e:
        next(iter(ds))
    assert str(e.value) == ("4 shards cannot feed 8 workers: worker 5 has none.\nTurn off "
                            "using empty_check=False in the WebDataset constructor.")
    assert list(wds.WebDataset(shards, shardshuffle=False, empty_check=False)) == []


def test_empty_shards_fail_the_empty_check(tmp_path):
    path = write_tar(tmp_path / "empty.tar", [])
    with pytest.raises(ValueError, match=r"^No samples found in dataset: rank 0 of 1, worker 0 "
                                         r"of 1 read its shards of 1 and got no samples\."):
        list(wds.WebDataset(path, shardshuffle=False))
    assert list(wds.WebDataset(path, shardshuffle=False, empty_check=False)) == []


def test_urls_of_unsupported_kinds():
    with pytest.raises(ValueError, match="cannot handle urls of type <class 'int'>"):
        wds.WebDataset(3, shardshuffle=False)
    with pytest.raises(ValueError, match="the shard list is empty"):
        wds.WebDataset([], shardshuffle=False)
    with pytest.raises(ValueError, match="YAML"):
        wds.WebDataset("spec.yaml", shardshuffle=False)
    with pytest.raises(ValueError, match=r"unbalanced|brace"):
        wds.WebDataset("a-{000..003.tar", shardshuffle=False)


def test_environment_variables_in_urls(monkeypatch):
    monkeypatch.setenv("WDS_ROOT", "/data")
    assert wds.shardlists.expand_urls("${ROOT}/a-{0..1}.tar") == ["/data/a-0.tar",
                                                                  "/data/a-1.tar"]
    monkeypatch.delenv("WDS_ROOT")
    with pytest.raises(ValueError, match="WDS_ROOT is not set"):
        wds.shardlists.expand_urls("${ROOT}/a.tar")


def test_cache_dir_caches_pipes_and_reads_local_files_in_place(shards, tmp_path, monkeypatch):
    """As the reference, WebDataset(cache_dir=...) caches pipe: shards: a command's output, once
    read to its end with exit status 0, is read from the cache after (the command does not run
    again). A local file needs no copy. Remote shards: test_remote.py."""
    monkeypatch.delenv("WDS_CACHE_PIPES", raising=False)
    cache = tmp_path / "cache"
    cache.mkdir()
    log = tmp_path / "runs"
    pipe = f"pipe:echo run >> {log} && cat {shards[1]}"
    urls = [shards[0], pipe]
    for _ in range(2):
        ds = wds.WebDataset(urls, shardshuffle=False, cache_dir=str(cache))
        assert [s["__url__"] for s in ds] == [urls[0]] * 10 + [urls[1]] * 10
    assert log.read_text().split() == ["run"]
    name = hashlib.sha256(pipe.encode()).hexdigest()
    assert (cache / name).read_bytes() == open(shards[1], "rb").read()
    assert sorted(n for n in os.listdir(cache) if n != ".size") == [name, name + ".meta"]
    # Not cached, and the constructor says so: opted out, or a cache from the environment alone
    # (the reference caches only with cache_dir given).
    other = tmp_path / "other"
    other.mkdir()
    uncached = r"pipe: shards run their command at every read \(cache them too"
    with pytest.warns(UserWarning, match=uncached):
        ds = wds.WebDataset(urls, shardshuffle=False, cache_dir=str(other),
                            remote=wds.RemoteOptions(cache_pipes=False))
    assert len(list(ds)) == len(list(ds)) == 20
    monkeypatch.setenv("WDS_CACHE", str(other))
    with pytest.warns(UserWarning, match=uncached):
        ds = wds.WebDataset(urls, shardshuffle=False)
    assert len(list(ds)) == 20
    assert log.read_text().split() == ["run"] * 4
    assert [n for n in os.listdir(other) if n != ".size"] == []
    ds = wds.WebDataset(urls, shardshuffle=False, cache_dir="")  # "": the environment's cache
    assert len(list(ds)) == 20
    monkeypatch.setenv("WDS_CACHE_PIPES", "0")  # opts out of cache_dir's too
    with pytest.warns(UserWarning, match=uncached):
        ds = wds.WebDataset(urls, shardshuffle=False, cache_dir=str(other))
    assert len(list(ds)) == 20
    assert log.read_text().split() == ["run"] * 6
    assert [n for n in os.listdir(other) if n != ".size"] == []
    # Opted in through the environment: cached.
    monkeypatch.setenv("WDS_CACHE_PIPES", "1")
    assert len(list(wds.WebDataset(urls, shardshuffle=False))) == 20
    assert len(list(wds.WebDataset(urls, shardshuffle=False))) == 20
    assert log.read_text().split() == ["run"] * 7
    assert (other / name).read_bytes() == open(shards[1], "rb").read()
    # A command that fails, and one read in part, leave nothing.
    failing = f"pipe:cat {shards[1]} && exit 3"
    with pytest.raises(wds.CommandError, match="exit status 3"):
        list(wds.WebDataset(failing, shardshuffle=False, cache_dir=str(cache)))
    it = iter(wds.WebDataset(f"pipe:cat {shards[2]}", shardshuffle=False, cache_dir=str(cache)))
    next(it)
    it.close()
    assert sorted(n for n in os.listdir(cache) if n != ".size") == [name, name + ".meta"]
    with pytest.raises(ValueError, match="^cache directory .*/nowhere does not exist$"):
        wds.WebDataset(urls, shardshuffle=False, cache_dir=str(tmp_path / "nowhere"))
