"""Shards opened through gopen_schemes and GOPEN_REWRITE, as the reference's
gopen opens every shard: a registered scheme's handler, a replaced handler
of a natively read scheme, the "__default__" handler, URL rewriting, and the
errors of each step, on every path that opens shards (a dataset's own
iteration, DataLoader workers, webdataset_cpp.Loader's threads, the
decomposed pipeline and counts)."""

import importlib
import io
import re
import threading

import pytest
import torch

import webdataset_cpp as wds
from webdataset_cpp import utils

gopen = importlib.import_module("webdataset_cpp.gopen")


@pytest.fixture
def schemes(monkeypatch):
    """gopen_schemes as it was before the test, whatever the test changes."""
    saved = dict(gopen.gopen_schemes)
    yield gopen.gopen_schemes
    gopen.gopen_schemes.clear()
    gopen.gopen_schemes.update(saved)


@pytest.fixture
def local(shards):
    """{url: local path} of the shards under a scheme of their own."""
    return {f"myproto://{path}": path for path in shards}


class Opened:
    """A handler that opens myproto:// URLs as local files, noting each."""

    def __init__(self, prefix="myproto://"):
        self.prefix = prefix
        self.urls = []

    def __call__(self, url, mode="rb", bufsize=8192):
        assert mode == "rb" and bufsize == 8192
        self.urls.append(url)
        return open(url[len(self.prefix):], "rb")


def samples(dataset):
    return [(s["__key__"], s["__url__"], s["txt"]) for s in dataset]


def test_a_registered_scheme_reads_shards_through_its_handler(schemes, local, shards):
    handler = schemes["myproto"] = Opened()
    urls = list(local)
    got = samples(wds.WebDataset(urls, shardshuffle=False))
    want = samples(wds.WebDataset(shards, shardshuffle=False))
    assert [(k, t) for k, _, t in got] == [(k, t) for k, _, t in want] and len(got) == 40
    assert sorted({u for _, u, _ in got}) == sorted(urls)  # the URLs as listed
    assert handler.urls == urls
    # DataLoader workers (forked, the table inherited), the native Loader's
    # threads, the decomposed pipeline: the same samples.
    dataset = wds.WebDataset(urls, shardshuffle=False).to_tuple("__key__", "txt")
    loader = torch.utils.data.DataLoader(dataset, num_workers=2, batch_size=None)
    assert sorted(tuple(item) for item in loader) == sorted((k, t) for k, _, t in want)
    assert sorted(tuple(item) for item in wds.Loader(dataset, workers=2)) == sorted(
        (k, t) for k, _, t in want)
    pipeline = wds.DataPipeline(wds.SimpleShardList(urls), wds.tarfile_to_samples())
    assert [(s["__key__"], s["txt"]) for s in pipeline] == [(k, t) for k, _, t in want]
    assert wds.count_samples(urls[1]) == 10


def test_a_handler_given_to_a_natively_read_scheme_replaces_the_native_reader(schemes, shards):
    handler = schemes["http"] = Opened(prefix="http://example.invalid")
    url = f"http://example.invalid{shards[0]}"
    assert [k for k, _, _ in samples(wds.WebDataset(url, shardshuffle=False))] == [
        f"s0_{i:03d}" for i in range(10)]
    assert handler.urls == [url]
    # Given back to the native reader: no handler call (and no server there).
    schemes["http"] = gopen.gopen_remote
    refused = wds.RemoteOptions(max_attempts=1, connect_timeout=2)
    with pytest.raises(ConnectionError, match=re.escape("http://127.0.0.1:9/x.tar")):
        next(iter(wds.WebDataset("http://127.0.0.1:9/x.tar", shardshuffle=False,
                                 remote=refused)))
    assert handler.urls == [url]


def test_the_default_handler_takes_every_scheme_not_read_natively(schemes, local):
    with pytest.raises(ValueError, match=re.escape(
            'myproto:///x.tar: no handler for the URL scheme "myproto" (local paths, file:, '
            "pipe:, -, http:, https:, s3: and gs: are read natively; register a reader of "
            "others in webdataset_cpp.gopen_schemes)")):
        next(iter(wds.WebDataset("myproto:///x.tar", shardshuffle=False)))
    handler = schemes["__default__"] = Opened()
    url = next(iter(local))
    assert len(samples(wds.WebDataset(url, shardshuffle=False))) == 10
    assert handler.urls == [url]
    # Local paths and file: URLs never go to it, as in the reference.
    path = local[url]
    assert len(samples(wds.WebDataset([path, f"file:{path}"], shardshuffle=False))) == 20
    assert handler.urls == [url]
    del schemes["__default__"]  # then, the native error again
    with pytest.raises(ValueError, match="no handler for the URL scheme"):
        next(iter(wds.WebDataset(url, shardshuffle=False)))


def test_schemes_are_matched_in_lower_case_and_every_change_of_the_table_counts(schemes, local):
    url = next(iter(local))
    schemes.update(myproto=Opened())
    assert len(samples(wds.WebDataset("MyProto" + url[7:], shardshuffle=False))) == 10
    schemes.pop("myproto")
    with pytest.raises(ValueError, match="no handler"):
        next(iter(wds.WebDataset(url, shardshuffle=False)))
    schemes.setdefault("myproto", Opened())
    assert len(samples(wds.WebDataset(url, shardshuffle=False))) == 10
    schemes |= {"myproto": gopen.gopen_error}
    with pytest.raises(ValueError, match=re.escape(f"{url}: no gopen handler defined")):
        next(iter(wds.WebDataset(url, shardshuffle=False)))


class Broken(io.RawIOBase):
    """A stream of `data` whose read raises after `fail_after` bytes, and
    whose close raises when `close_error` is set (a command's exit status)."""

    def __init__(self, data, fail_after=None, close_error=None):
        super().__init__()
        self.data, self.at, self.fail_after, self.close_error = data, 0, fail_after, close_error

    def readable(self):
        return True

    def read(self, size=-1):
        if self.fail_after is not None and self.at >= self.fail_after:
            raise OSError(5, "the store went away")
        end = len(self.data) if size < 0 else min(len(self.data), self.at + size)
        if self.fail_after is not None:
            end = min(end, self.fail_after)
        chunk = bytearray(self.data[self.at:end])  # any bytes-like object
        self.at = end
        return chunk

    def close(self):
        if self.close_error is not None and not self.closed:
            super().close()
            raise self.close_error
        super().close()


def test_errors_of_opening_reading_and_closing_name_the_url_and_go_to_the_handler(
        schemes, local):
    urls = list(local)
    data = {u: open(p, "rb").read() for u, p in local.items()}

    def failing_open(url, mode="rb", bufsize=8192):
        raise PermissionError(13, "denied")

    schemes["myproto"] = failing_open
    with pytest.raises(PermissionError) as caught:  # as the native openers name it
        next(iter(wds.WebDataset(urls[0], shardshuffle=False)))
    assert caught.value.filename == urls[0]

    def other_open(url, mode="rb", bufsize=8192):
        raise ConnectionError("the store is down")

    schemes["myproto"] = other_open
    with pytest.raises(ConnectionError, match="the store is down") as caught:
        next(iter(wds.WebDataset(urls[0], shardshuffle=False)))
    assert caught.value.args[-1] == urls[0]  # as the reference's url_opener adds it
    schemes["myproto"] = failing_open
    with pytest.warns(UserWarning):
        assert list(wds.WebDataset(urls[:2], shardshuffle=False, empty_check=False,
                                   handler=wds.warn_and_continue)) == []

    # A read that fails midway: the exception itself, the URL added; with
    # warn_and_continue, the samples before it and then the next shard.
    schemes["myproto"] = lambda url, *a: Broken(data[url], fail_after=3 * 1024 if url == urls[0]
                                                else None)
    with pytest.raises(OSError, match="the store went away") as caught:
        list(wds.WebDataset(urls[0], shardshuffle=False))
    assert caught.value.args[-1] == urls[0]
    with pytest.warns(UserWarning, match="the store went away"):
        keys = [s["__key__"] for s in wds.WebDataset(urls[:2], shardshuffle=False,
                                                     handler=wds.warn_and_continue)]
    assert keys[-10:] == [f"s1_{i:03d}" for i in range(10)] and len(keys) < 20

    # A close that fails (a command's exit status) fails the shard at its end,
    # before its last sample, which ends there: as a pipe: command that fails.
    schemes["myproto"] = lambda url, *a: Broken(data[url], close_error=OSError("exit 3"))
    seen = []
    with pytest.raises(OSError, match="exit 3") as caught:
        for s in wds.WebDataset(urls[0], shardshuffle=False):
            seen.append(s["__key__"])
    assert caught.value.args[-1] == urls[0]
    assert seen == [f"s0_{i:03d}" for i in range(9)]


def test_counts_go_through_a_replaced_handler_and_its_missing_sidecars(schemes, shards,
                                                                       tmp_path):
    handler = schemes["http"] = Opened(prefix="http://example.invalid")
    url = f"http://example.invalid{shards[0]}"
    # No sidecar: open() says FileNotFoundError, so the shard is scanned.
    assert wds.count_samples(url) == 10
    assert handler.urls == [url + ".idx", url]
    # A sidecar: read through the handler, the shard not opened.
    copy = tmp_path / "indexed.tar"
    copy.write_bytes(open(shards[0], "rb").read())
    wds.write_index(str(copy))
    indexed = f"http://example.invalid{copy}"
    assert wds.count_samples(indexed) == 10
    assert handler.urls[2:] == [indexed + ".idx"]
    # Another error of the handler is the count's error.
    schemes["http"] = lambda u, *a: (_ for _ in ()).throw(ConnectionError("down"))
    with pytest.raises(ConnectionError, match="down"):
        wds.count_samples(url)


def test_a_readinto_that_misbehaves_is_an_error_naming_the_url(schemes, local):
    class Odd(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, buffer):
            return 1.5

    schemes["myproto"] = lambda url, *a: Odd()
    url = next(iter(local))
    with pytest.raises(TypeError) as caught:
        next(iter(wds.WebDataset(url, shardshuffle=False)))
    assert caught.value.args[-1] == url

    class TooMuch(Odd):
        def readinto(self, buffer):
            return len(buffer) + 1

    schemes["myproto"] = lambda url, *a: TooMuch()
    with pytest.raises(ValueError, match=re.escape(
            f"{url}: its file object's readinto() returned 1048577 for 1048576 bytes")):
        next(iter(wds.WebDataset(url, shardshuffle=False)))


def test_only_the_modules_table_opens_shards(schemes, local):
    import copy

    url = next(iter(local))
    mine = copy.copy(schemes)
    mine["myproto"] = Opened()  # a copy: the native reader is not told
    with pytest.raises(ValueError, match="no handler for the URL scheme"):
        next(iter(wds.WebDataset(url, shardshuffle=False)))


def test_a_handler_returning_none_from_read_is_named(schemes, local):
    class NonBlocking(io.RawIOBase):
        def readable(self):
            return True

        def read(self, size=-1):
            return None

    schemes["myproto"] = lambda url, *a: NonBlocking()
    url = next(iter(local))
    with pytest.raises(ValueError, match=re.escape(
            f"{url}: its file object's read() returned None (a non-blocking stream with no "
            "data; gopen handlers return blocking ones)")):
        next(iter(wds.WebDataset(url, shardshuffle=False)))


def test_gopen_rewrite_applies_to_shards_which_keep_their_listed_url(schemes, local, shards,
                                                                   monkeypatch):
    monkeypatch.setenv("GOPEN_REWRITE", "mirror://=myproto://;other://=file://")
    handler = schemes["myproto"] = Opened()
    listed = [f"mirror://{shards[0]}", f"other://{shards[1]}"]
    got = samples(wds.WebDataset(listed, shardshuffle=False))
    assert len(got) == 20 and sorted({u for _, u, _ in got}) == sorted(listed)
    assert handler.urls == [f"myproto://{shards[0]}"]  # the other rewritten to a local file
    monkeypatch.setattr(utils, "enforce_security", True)
    with pytest.raises(ValueError, match=re.escape(
            f"{listed[0]}: rewriting URLs with GOPEN_REWRITE is refused while "
            "webdataset_cpp.utils.enforce_security is set")):
        next(iter(wds.WebDataset(listed[0], shardshuffle=False)))


def test_built_in_handlers_of_schemes_without_a_native_reader_are_used(schemes):
    # ais:// runs the AIStore CLI, as the reference's handler does (not
    # installed here: its error, no longer "no handler").
    with pytest.raises(FileNotFoundError, match=re.escape(
            "[Errno 2] No such file or directory: 'ais': 'ais://bucket/x.tar'")) as caught:
        next(iter(wds.WebDataset("ais://bucket/x.tar", shardshuffle=False)))
    assert caught.value.filename == "ais://bucket/x.tar"  # the shard, its handler's words kept


def test_hf_urls_are_read_natively_with_the_token_in_a_header(schemes, shards, tmp_path,
                                                              monkeypatch):
    import shutil
    import sys
    import types

    from test_remote import Server

    root = tmp_path / "www"
    root.mkdir()
    shutil.copy(shards[0], root / "train-0.tar")
    server = Server(str(root), str(tmp_path))
    try:
        # What huggingface_hub answers (it is not installed here): the file's
        # https URL on the Hub, and the user's token.
        hub = types.ModuleType("huggingface_hub")

        class HfFileSystem:
            def resolve_path(self, url):
                assert url.startswith("hf://datasets/org/name/")
                return types.SimpleNamespace(repo_id="org/name", repo_type="dataset",
                                             revision="main",
                                             path_in_repo=url.split("/", 5)[5])

        hub.HfFileSystem = HfFileSystem
        hub.get_token = lambda: "hf_secret"
        hub.hf_hub_url = lambda repo_id, filename, repo_type, revision: server.url(filename)
        monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
        keys = [s["__key__"] for s in wds.WebDataset("hf://datasets/org/name/train-0.tar",
                                                     shardshuffle=False)]
        assert keys == [f"s0_{i:03d}" for i in range(10)]
        assert [e["headers"]["authorization"] for e in server.log()] == ["Bearer hf_secret"]
        # No command line holds it, and an error does not name it.
        with pytest.raises(FileNotFoundError) as caught:
            next(iter(wds.WebDataset("hf://datasets/org/name/missing.tar", shardshuffle=False)))
        assert "hf_secret" not in str(caught.value) and "missing.tar" in str(caught.value)
    finally:
        server.stop()


def test_a_python_handler_of_a_remote_scheme_opens_each_shard_in_turn_on_the_readers_thread(
        schemes, shards, monkeypatch):
    # Shards are opened ahead (open_ahead) on threads of their own; not those
    # a Python handler opens, which would wait there for the GIL.
    monkeypatch.setenv("WDS_OPEN_AHEAD", "2")
    threads = []

    class OnThread(Opened):
        def __call__(self, url, mode="rb", bufsize=8192):
            threads.append(threading.get_ident())
            return super().__call__(url, mode, bufsize)

    handler = schemes["http"] = OnThread(prefix="http://example.invalid")
    urls = [f"http://example.invalid{path}" for path in shards]
    dataset = wds.WebDataset(urls, shardshuffle=False, remote=wds.RemoteOptions(open_ahead=3))
    assert [k for k, _, _ in samples(dataset)] == [
        f"s{i}_{j:03d}" for i in range(len(shards)) for j in range(10)]
    assert handler.urls == urls
    assert threads == [threading.get_ident()] * len(urls)
