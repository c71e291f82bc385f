"""Remote shards read by the native remote reader, against servers this file
starts on 127.0.0.1: remote_server.py (an HTTP/1.1 object server with Range,
If-Match and planned faults, in a process of its own, plain or TLS) and, when
scripts/deps.sh installed it, s3rver (tests/s3), which checks SigV4
signatures. Every read must give the samples of the local files, byte for
byte; every failure the documented exception naming the URL."""

import errno
import gc
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import warnings

import pytest
import torch

import webdataset_cpp as wds
from conftest import write_shards

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SHARDS = 4
PER_SHARD = 10
PATTERN = "shard-{000000..000003}.tar"
NAMES = [f"shard-{i:06d}.tar" for i in range(SHARDS)]
# Every test ends within this many seconds or fails (SIGALRM raises in the
# test's thread, also inside native waits, which run Python's signal handlers).
TEST_SECONDS = 60


@pytest.fixture(autouse=True)
def bounded_time():
    def expired(*args):
        raise TimeoutError(f"the test ran longer than {TEST_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, TEST_SECONDS)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """No setting of the machine running the tests leaks in."""
    for name in ("WDS_CACHE", "WDS_CACHE_SIZE", "WDS_TLS_VERIFY", "CURL_CA_BUNDLE",
                 "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "STORAGE_EMULATOR_HOST", "GOOGLE_OAUTH_ACCESS_TOKEN", "http_proxy",
                 "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")


class Server:
    """remote_server.py serving `root`, in its own process."""

    def __init__(self, root, work, tls=None):
        port_file = os.path.join(work, "port")
        args = [sys.executable, os.path.join(HERE, "remote_server.py"), root, port_file]
        if tls is not None:
            args += ["--tls", *tls]
        self.process = subprocess.Popen(args)
        deadline = time.monotonic() + 20
        while not os.path.exists(port_file):
            assert self.process.poll() is None, "remote_server.py exited"
            assert time.monotonic() < deadline, "remote_server.py did not start"
            time.sleep(0.02)
        with open(port_file) as f:
            self.port = int(f.read())
        scheme = "https" if tls else "http"
        self.base = f"{scheme}://127.0.0.1:{self.port}"
        # Control requests go over plain HTTP only when the server speaks it.
        self.control = None if tls else urllib.request.build_opener(
            urllib.request.ProxyHandler({}))

    def url(self, path):
        return f"{self.base}/{path}"

    def fault(self, path, **plan):
        request = urllib.request.Request(f"{self.base}/__fault__", method="POST",
                                         data=json.dumps({"path": "/" + path, **plan}).encode())
        assert self.control.open(request, timeout=10).read() == b"ok"

    def log(self):
        return json.loads(self.control.open(f"{self.base}/__log__", timeout=10).read())

    def gets(self):
        return [entry["path"] for entry in self.log() if entry["method"] == "GET"]

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    """A document root: the shards at the top and in bucket/, their local paths."""
    root = tmp_path_factory.mktemp("www")
    paths = write_shards(str(root), SHARDS, PER_SHARD)
    os.makedirs(root / "bucket")
    for path in paths:
        shutil.copy(path, root / "bucket")
    return str(root), paths


@pytest.fixture(scope="module")
def local_samples(www):
    return samples_of(wds.WebDataset(www[1], shardshuffle=False))


@pytest.fixture
def server(www, tmp_path):
    s = Server(www[0], str(tmp_path))
    yield s
    s.stop()


def samples_of(dataset):
    """The samples as comparable dicts: every field but __url__, in order."""
    return [{k: v for k, v in sample.items() if k != "__url__"} for sample in dataset]


def remote(server, pattern=PATTERN, **kw):
    return wds.WebDataset(server.url(pattern), shardshuffle=False, **kw)


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


# --- reading


def test_http_shards_are_the_local_files_sample_for_sample(server, local_samples):
    dataset = remote(server)
    got = list(dataset)
    assert [s["__url__"] for s in got] == [server.url(n) for n in NAMES for _ in range(PER_SHARD)]
    assert samples_of(got) == local_samples
    assert len(local_samples) == SHARDS * PER_SHARD
    # One request per shard, none through a subprocess.
    assert server.gets() == ["/" + n for n in NAMES]


def test_a_connection_cut_mid_object_is_resumed_byte_exactly(server, local_samples, www):
    server.fault(NAMES[1], cut_after=10_000)
    assert samples_of(remote(server)) == local_samples
    log = [e for e in server.log() if e["path"] == "/" + NAMES[1]]
    assert len(log) == 2
    assert "range" not in log[0]["headers"]
    assert log[1]["headers"]["range"] == "bytes=10000-"
    with open(www[1][1], "rb") as f:
        etag = '"' + hashlib.sha256(f.read()).hexdigest()[:16] + '"'
    assert log[1]["headers"]["if-match"] == etag


def test_python_stages_between_list_and_reader_read_remote_urls_too(server, local_samples):
    # A Python stage before tarfile_to_samples makes the reader take URLs
    # from Python (url_source); select_files makes it group in Python.
    urls = [server.url(n) for n in NAMES]
    options = wds.RemoteOptions(max_attempts=3)
    server.fault(NAMES[2], cut_after=5_000)
    piped = wds.DataPipeline(wds.SimpleShardList(urls), lambda src: (u for u in src),
                             wds.tarfile_to_samples(remote=options))
    assert samples_of(piped) == local_samples
    server.fault(NAMES[3], cut_after=7_000)
    grouped = wds.DataPipeline(wds.SimpleShardList(urls),
                               wds.tarfile_to_samples(select_files=lambda name: True,
                                                      remote=options))
    assert samples_of(grouped) == local_samples


def test_a_dataset_with_remote_options_pickles(server, local_samples):
    import pickle

    dataset = remote(server, remote=wds.RemoteOptions(max_attempts=4, stall_timeout=5))
    copy = pickle.loads(pickle.dumps(dataset))
    server.fault(NAMES[0], cut_after=2_000)
    assert samples_of(copy) == local_samples


def test_gopen_reads_remote_urls_natively(server, www):
    server.fault(NAMES[0], cut_after=3_000)
    with open(www[1][0], "rb") as f:
        want = f.read()
    with wds.gopen(server.url(NAMES[0])) as stream:
        assert stream.read() == want
    # The cut was resumed by the native reader, not by re-running a command.
    assert [e["headers"].get("range") for e in server.log()] == [None, "bytes=3000-"]
    with pytest.raises(FileNotFoundError) as caught:
        wds.gopen(server.url("missing.tar"))
    assert caught.value.filename == server.url("missing.tar")


def test_dataloader_with_two_forked_workers_reads_every_sample_once(server, local_samples):
    from torch.utils.data import DataLoader

    # The parent is reading through its own connection when the workers fork:
    # they must make their own, and the parent's read must go on intact.
    parent = iter(remote(server))
    first = next(parent)
    loader = DataLoader(remote(server), batch_size=None, num_workers=2,
                        multiprocessing_context="fork", timeout=50)
    got = samples_of(loader)
    assert sorted(s["__key__"] for s in got) == sorted(s["__key__"] for s in local_samples)
    by_key = {s["__key__"]: s for s in local_samples}
    for sample in got:
        assert sample == by_key[sample["__key__"]]
    assert samples_of([first, *parent]) == local_samples


def test_the_native_loader_reads_remote_shards(server, local_samples):
    server.fault(NAMES[3], cut_after=20_000)
    loader = wds.Loader(remote(server), workers=2)
    got = samples_of(loader)
    assert sorted(s["__key__"] for s in got) == sorted(s["__key__"] for s in local_samples)
    by_key = {s["__key__"]: s for s in local_samples}
    assert all(sample == by_key[sample["__key__"]] for sample in got)


def _read_in_child(chain, conn):
    conn.send([s["__key__"] for s in chain.open()])
    conn.close()


def test_one_connection_serves_every_read_with_the_same_options(server, local_samples, www,
                                                               monkeypatch):
    # Each epoch builds a new native chain, each gopen and each shard grouped
    # in Python a new reader: all share the process's session of their options.
    # (No shard opened ahead: that one would take a second connection.)
    monkeypatch.setenv("WDS_OPEN_AHEAD", "0")
    for options in (None, wds.RemoteOptions(max_attempts=7)):
        before = len(server.log())
        dataset = remote(server, remote=options)
        for _ in range(2):
            assert samples_of(dataset) == local_samples
        again = wds.RemoteOptions(max_attempts=7) if options else None
        assert samples_of(remote(server, remote=again)) == local_samples
        for name, path in zip(NAMES[:2], www[1]):
            with wds.gopen(server.url(name), remote=options) as stream, open(path, "rb") as f:
                assert stream.read() == f.read()
        grouped = wds.DataPipeline(wds.SimpleShardList([server.url(n) for n in NAMES]),
                                   wds.tarfile_to_samples(select_files=lambda name: True,
                                                          remote=options))
        assert samples_of(grouped) == local_samples
        log = server.log()[before:]
        assert len(log) == 4 * SHARDS + 2
        assert len({e["peer"] for e in log}) == 1, options
    # Other options: another session.
    assert samples_of(remote(server, remote=wds.RemoteOptions(max_attempts=6))) == local_samples
    assert len({e["peer"] for e in server.log()}) == 3


def test_the_next_shards_are_requested_while_one_is_read(server, local_samples):
    for ahead in (0, 1, 2):
        before = len(server.log())
        # Options of their own: a session (connections) of their own.
        options = wds.RemoteOptions(open_ahead=ahead, max_attempts=20 + ahead)
        samples = iter(remote(server, remote=options))
        first = next(samples)
        deadline = time.monotonic() + 60
        while len(server.log()[before:]) < 1 + ahead and time.monotonic() < deadline:
            time.sleep(0.005)
        # The shard read, and the next `ahead` ones (opened at once, in any
        # order); no other yet.
        assert sorted(e["path"] for e in server.log()[before:]) == [
            "/" + n for n in NAMES[:1 + ahead]]
        assert samples_of([first, *samples]) == local_samples
        log = server.log()[before:]
        paths = [e["path"] for e in log]
        assert sorted(paths) == ["/" + n for n in NAMES]  # each shard once
        if ahead <= 1:
            assert paths == ["/" + n for n in NAMES]
        peers = len({e["peer"] for e in log})
        assert peers == 1 if ahead == 0 else 2 <= peers <= 1 + ahead, (ahead, peers)


def _read_url_in_child(url, conn):
    started = time.time()
    conn.send((started, [s["__key__"] for s in wds.WebDataset(url, shardshuffle=False)]))
    conn.close()


def test_a_fork_waits_for_the_shard_being_opened_ahead(server, local_samples):
    import multiprocessing

    # Shard 1's answer is a second away when the process forks: the child
    # starts only once it came, so that no lock the opening thread held
    # (libcurl's, OpenSSL's) is copied held into the child.
    server.fault(NAMES[1], delay=1.0)
    samples = iter(remote(server, remote=wds.RemoteOptions(open_ahead=1, max_attempts=19)))
    first = next(samples)
    deadline = time.monotonic() + 60
    while "/" + NAMES[1] not in server.gets() and time.monotonic() < deadline:
        time.sleep(0.005)
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe()
    child = context.Process(target=_read_url_in_child, args=(server.url(PATTERN), send))
    child.start()
    assert receive.poll(50)
    started, keys = receive.recv()
    child.join(10)
    assert child.exitcode == 0
    assert keys == [s["__key__"] for s in local_samples]
    answered = [(e["path"], e["answered"]) for e in server.log() if "answered" in e]
    assert len(answered) == 1 and answered[0][0] == "/" + NAMES[1]
    assert started >= answered[0][1]
    # The parent reads on, shard 1 from the open made ahead.
    assert samples_of([first, *samples]) == local_samples
    assert sum(e["path"] == "/" + NAMES[1] for e in server.log()) == 2  # the child's and ours


def test_a_forked_child_makes_its_own_connections(server, local_samples, monkeypatch):
    import multiprocessing

    monkeypatch.setenv("WDS_OPEN_AHEAD", "0")  # one connection at a time
    # One chain, so one remote session: the parent's idle connection is in
    # its pool when the child forks. The child must not send a request over
    # it (the parent may use it at the same time): its requests come on new
    # connections, and the parent's pool keeps working.
    chain = wds._core.Chain(wds._core.shard_source([server.url(n) for n in NAMES],
                                                   split_workers=False), [], 0)
    keys = [s["__key__"] for s in local_samples]
    assert [s["__key__"] for s in chain.open()] == keys
    parent_ports = {e["peer"] for e in server.log()}
    assert len(parent_ports) == 1  # one connection, reused shard after shard
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe()
    child = context.Process(target=_read_in_child, args=(chain, send))
    child.start()
    assert receive.poll(50)
    assert receive.recv() == keys
    child.join(10)
    assert child.exitcode == 0
    child_ports = {e["peer"] for e in server.log()[SHARDS:]}
    assert child_ports and not child_ports & parent_ports
    assert [s["__key__"] for s in chain.open()] == keys
    assert {e["peer"] for e in server.log()[2 * SHARDS:]} == parent_ports


# --- errors


def test_a_missing_shard_is_file_not_found_naming_the_url(server):
    url = server.url("missing.tar")
    with pytest.raises(FileNotFoundError) as caught:
        list(wds.WebDataset(url, shardshuffle=False))
    e = caught.value
    assert (e.errno, e.filename) == (errno.ENOENT, url)
    assert e.strerror == "HTTP 404 Not Found: no such object: /missing.tar"


def test_a_forbidden_shard_is_permission_error_with_the_servers_message(server):
    server.fault(NAMES[0], status=403,
                 body="<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>")
    with pytest.raises(PermissionError) as caught:
        list(remote(server, NAMES[0]))
    e = caught.value
    assert (e.errno, e.filename) == (errno.EACCES, server.url(NAMES[0]))
    assert e.strerror == "HTTP 403 Forbidden: AccessDenied: Access Denied"


def test_handlers_skip_a_missing_remote_shard(server, local_samples):
    urls = [server.url(NAMES[0]), server.url("missing.tar"), server.url(NAMES[1])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = samples_of(wds.WebDataset(urls, shardshuffle=False,
                                        handler=wds.warn_and_continue))
    assert got == local_samples[:2 * PER_SHARD]
    assert [str(w.message) for w in caught if urls[1] in str(w.message)] != []


def test_an_object_replaced_while_read_is_a_data_error(server):
    server.fault(NAMES[0], cut_after=6_000)
    server.fault(NAMES[0], etag='"replaced"')
    with pytest.raises(wds.DataError, match=re.escape(
            f"{server.url(NAMES[0])}: the object changed while it was read (HTTP 412 to a "
            "request for offset 6000 with If-Match: ")):
        list(remote(server, NAMES[0]))


def test_retries_exhausted_at_open_are_connection_error(server):
    server.fault(NAMES[0], status=503, body="busy", times=10)
    with pytest.raises(ConnectionError,
                       match=re.escape(f"{server.url(NAMES[0])}: giving up at offset 0 after 2 "
                                       "failed attempt(s) in a row; last error: HTTP 503 "
                                       "Service Unavailable: busy")):
        list(remote(server, NAMES[0], remote=wds.RemoteOptions(max_attempts=2)))


def test_retries_exhausted_mid_object_are_connection_error(server):
    # Each attempt delivers 4000 bytes and is cut: no progress, one run.
    server.fault(NAMES[0], cut_after=4_000, times=10)
    with pytest.raises(ConnectionError,
                       match=re.escape(f"{server.url(NAMES[0])}: giving up at offset 8000 of ")):
        list(remote(server, NAMES[0], remote=wds.RemoteOptions(max_attempts=2)))


def test_nothing_listening_is_connection_error(tmp_path):
    url = "http://127.0.0.1:9/shard.tar"  # the discard port: nothing listens on loopback
    with pytest.raises(ConnectionError, match=re.escape(f"{url}: giving up at offset 0 after 1 ")):
        list(wds.WebDataset(url, shardshuffle=False, remote=wds.RemoteOptions(max_attempts=1)))


def test_remote_options_are_checked():
    with pytest.raises(ValueError, match="max_attempts must be at least 1, got 0"):
        wds.RemoteOptions(max_attempts=0)
    with pytest.raises(ValueError, match=r"^RemoteOptions: connect_timeout must be more than 0 "
                                         r"and at most 1000000000 seconds, got 0$"):
        wds.RemoteOptions(connect_timeout=0)
    with pytest.raises(ValueError, match=r"^RemoteOptions: low_speed_time must be at least 1 and "
                                         r"at most 1000000000 seconds, got 0.5$"):
        wds.RemoteOptions(low_speed_time=0.5)
    # Too long is named as such, not as too short.
    for name in ("stall_timeout", "max_retry_time", "low_speed_time"):
        for value in (2e9, float("inf")):
            with pytest.raises(ValueError, match=rf" {name} must be .* at most 1000000000 "
                                                 rf"seconds, got {value!r}$"):
                wds.RemoteOptions(**{name: value})
    with pytest.raises(ValueError, match=r"max_retry_time must be at least 0 and at most "
                                         r"1000000000 seconds, got nan$"):
        wds.RemoteOptions(max_retry_time=float("nan"))
    assert wds.RemoteOptions(stall_timeout=1e9, max_retry_time=0).stall_timeout == 1e9
    with pytest.raises(ValueError, match="cache_size must be at least 0"):
        wds.RemoteOptions(cache_size=-5)
    with pytest.raises(ValueError, match=r"^RemoteOptions: open_ahead must be at least 0, "
                                         r"got -1$"):
        wds.RemoteOptions(open_ahead=-1)
    with pytest.raises(ValueError, match=r"^RemoteOptions: open_ahead must be at most 16, "
                                         r"got 17$"):
        wds.RemoteOptions(open_ahead=17)
    assert wds.RemoteOptions(open_ahead=16).open_ahead == 16
    with pytest.raises(TypeError, match="takes a webdataset_cpp.RemoteOptions"):
        wds.WebDataset("a.tar", shardshuffle=False, remote={"max_attempts": 3})


def test_a_malformed_environment_setting_is_value_error_at_the_first_remote_read(
        server, monkeypatch, www):
    monkeypatch.setenv("WDS_CACHE_SIZE", "lots")
    assert len(list(wds.WebDataset(www[1][0], shardshuffle=False))) == PER_SHARD
    with pytest.raises(ValueError, match=re.escape(
            f"{server.url(NAMES[0])}: WDS_CACHE_SIZE='lots' is not a byte count")):
        list(remote(server, NAMES[0]))


def test_a_malformed_variable_is_ignored_when_the_options_set_its_field(
        server, monkeypatch, local_samples, tmp_path, www):
    monkeypatch.setenv("WDS_CACHE_SIZE", "lots")
    monkeypatch.setenv("WDS_TLS_VERIFY", "maybe")
    options = wds.RemoteOptions(cache_size=0, verify_tls=True)
    assert samples_of(remote(server, remote=options)) == local_samples
    with wds.gopen(server.url(NAMES[0]), remote=options) as stream, open(www[1][0], "rb") as f:
        assert stream.read() == f.read()
    # WebDataset's cache_size= sets the field too.
    cache = tmp_path / "cache"
    cache.mkdir()
    dataset = remote(server, cache_dir=str(cache), cache_size=10**9,
                     remote=wds.RemoteOptions(verify_tls=False))
    assert samples_of(dataset) == local_samples
    # A variable of a field left to the environment still fails the read.
    with pytest.raises(ValueError, match=re.escape(
            f"{server.url(NAMES[0])}: WDS_TLS_VERIFY='maybe' ")):
        list(remote(server, NAMES[0], remote=wds.RemoteOptions(cache_size=0)))


# --- Ctrl-C


def sigint_after(seconds):
    sent = []

    def fire():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(seconds, fire)
    timer.start()
    return timer, sent


@pytest.mark.parametrize("fault", [dict(stall=30, stall_after=1_000),
                                   dict(status=503, headers={"Retry-After": "30"})],
                         ids=["stalled server", "retry wait"])
def test_ctrl_c_ends_a_remote_wait_promptly(server, fault):
    server.fault(NAMES[0], **fault)
    timer, sent = sigint_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        list(remote(server, NAMES[0]))
    timer.join()
    # Liveness with room for a loaded machine: the fault lasts 30 s.
    assert time.monotonic() - sent[0] < 10.0


def test_ctrl_c_ends_the_wait_for_a_remote_dataset_index_promptly(server, bucket_index):
    server.fault(bucket_index, stall=30, stall_after=10)
    timer, sent = sigint_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        wds.WebDataset(server.url("bucket/" + NAMES[0]), shardshuffle=False,
                       dataset_index=server.url(bucket_index))
    timer.join()
    assert time.monotonic() - sent[0] < 10.0


# --- cache


def cache_listing(cache):
    """The cache's files, without its ledger (".size"; tests/io/shard_cache_test.cc
    checks it)."""
    return sorted(n for n in os.listdir(cache) if n != ".size")


def test_the_cache_serves_the_second_epoch(server, local_samples, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    urls = [server.url(n) for n in NAMES]
    dataset = remote(server, cache_dir=str(cache))
    assert samples_of(dataset) == local_samples
    hashes = sorted(sha256(u) for u in urls)
    assert cache_listing(cache) == sorted(hashes + [h + ".meta" for h in hashes])
    requests = len(server.log())
    assert requests == SHARDS
    # Another dataset, another epoch: no request reaches the server.
    again = remote(server, cache_dir=str(cache))
    got = list(again)
    assert samples_of(got) == local_samples
    assert [s["__url__"] for s in got][::PER_SHARD] == urls
    assert len(server.log()) == requests


def test_the_environment_names_the_cache_and_its_size(server, local_samples, tmp_path,
                                                      monkeypatch, www):
    cache = tmp_path / "env-cache"
    cache.mkdir()
    monkeypatch.setenv("WDS_CACHE", str(cache))
    shard_bytes = os.path.getsize(www[1][0])
    monkeypatch.setenv("WDS_CACHE_SIZE", str(shard_bytes + shard_bytes // 2))
    assert samples_of(remote(server)) == local_samples
    # Least recently used first: only the last shard fits.
    last = sha256(server.url(NAMES[-1]))
    assert cache_listing(cache) == [last, last + ".meta"]
    # cache_size=0 turns the cache off (as in the reference).
    os.remove(cache / last)
    os.remove(cache / (last + ".meta"))
    assert samples_of(remote(server, cache_size=0)) == local_samples
    assert cache_listing(cache) == []


def test_cache_size_bounds_the_cache(server, local_samples, tmp_path, www):
    cache = tmp_path / "cache"
    cache.mkdir()
    two = os.path.getsize(www[1][0]) + os.path.getsize(www[1][1])
    assert samples_of(remote(server, cache_dir=str(cache), cache_size=two)) == local_samples
    kept = [sha256(server.url(n)) for n in NAMES[2:]]
    assert cache_listing(cache) == sorted(kept + [h + ".meta" for h in kept])


def test_workers_share_the_cache(server, local_samples, tmp_path):
    from torch.utils.data import DataLoader

    cache = tmp_path / "cache"
    cache.mkdir()
    for _ in range(2):
        loader = DataLoader(remote(server, cache_dir=str(cache)), batch_size=None,
                            num_workers=2, multiprocessing_context="fork", timeout=50)
        assert sorted(s["__key__"] for s in loader) == sorted(
            s["__key__"] for s in local_samples)
    assert len(server.gets()) == SHARDS
    assert len(cache_listing(cache)) == 2 * SHARDS


def test_counting_for_a_sample_split_goes_through_the_cache(server, local_samples, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    urls = [server.url(n) for n in NAMES]
    dataset = wds.WebDataset(urls, shardshuffle=False, split="samples", cache_dir=str(cache))
    assert samples_of(dataset) == local_samples
    # Each shard: its sidecar asked for (the server has none), then one
    # download that the count and the read share.
    assert sorted(server.gets()) == sorted(["/" + n for n in NAMES] +
                                           ["/" + n + ".idx" for n in NAMES])
    assert len(cache_listing(cache)) == 2 * SHARDS
    # The plan of the next epoch, and a count, read the cache too.
    assert wds.plan_epoch(dataset.batched(3), num_workers=2).samples == SHARDS * PER_SHARD
    assert wds.count_samples(urls[0], remote=wds.RemoteOptions(cache_dir=str(cache))) == \
        PER_SHARD
    assert sorted(e for e in server.gets() if not e.endswith(".idx")) == \
        sorted("/" + n for n in NAMES)


def test_a_sample_split_counts_remote_shards_on_several_connections_at_once(server):
    # The first shard's answer stalls for 2 s: counted one after another, the
    # other shards would wait for it on the one connection.
    server.fault(NAMES[0], stall=2, stall_after=1_000)
    urls = [server.url(n) for n in NAMES]
    dataset = wds.WebDataset(urls, shardshuffle=False, split="samples").batched(3)
    assert wds.plan_epoch(dataset, num_workers=2).samples == SHARDS * PER_SHARD
    shard_gets = [e for e in server.log() if e["method"] == "GET" and e["path"].endswith(".tar")]
    assert sorted(e["path"] for e in shard_gets) == sorted("/" + n for n in NAMES)
    assert len({e["peer"] for e in shard_gets}) > 1


def test_ctrl_c_ends_the_count_of_remote_shards_promptly(server):
    for name in NAMES:
        server.fault(name, stall=30, stall_after=1_000)
    urls = [server.url(n) for n in NAMES]
    dataset = wds.WebDataset(urls, shardshuffle=False, split="samples").batched(3)
    timer, sent = sigint_after(0.5)
    with pytest.raises(KeyboardInterrupt):
        wds.plan_epoch(dataset, num_workers=2)
    timer.join()
    # Liveness with room for a loaded machine: every shard stalls for 30 s.
    assert time.monotonic() - sent[0] < 10.0


# --- a remote dataset index


def write_index(path, names, counts):
    """A dataset index (the wids JSON) listing `names` relative to its directory."""
    with open(path, "w") as f:
        json.dump({"__kind__": "wids-shard-index-v1", "wids_version": 1,
                   "shardlist": [{"url": n, "nsamples": c} for n, c in zip(names, counts)]}, f)


@pytest.fixture(scope="module")
def bucket_index(www):
    write_index(os.path.join(www[0], "bucket", "index.json"), NAMES, [PER_SHARD] * SHARDS)
    return "bucket/index.json"


def test_a_remote_dataset_index_gives_every_count_without_reading_a_shard(
        server, local_samples, bucket_index, tmp_path):
    from torch.utils.data import DataLoader

    cache = tmp_path / "cache"
    cache.mkdir()
    urls = [server.url("bucket/" + n) for n in NAMES]
    index = server.url(bucket_index)
    dataset = wds.WebDataset(urls, shardshuffle=False, nodesplitter=wds.split_by_node,
                             dataset_index=index, cache_dir=str(cache))
    # Fetched once, when the dataset is made; every count known: samples are shared out.
    assert server.gets() == ["/" + bucket_index]
    assert dataset.pipeline[0].counts_known is True
    for rank in range(2):
        plan = wds.plan_epoch(dataset.batched(5), num_workers=2, rank=rank, world_size=2)
        assert [w.samples for w in plan.workers] == [SHARDS * PER_SHARD // 4] * 2
    assert server.gets() == ["/" + bucket_index]  # no sidecar asked for, no shard read
    assert samples_of(dataset) == local_samples
    assert server.gets() == ["/" + bucket_index] + ["/bucket/" + n for n in NAMES]
    # The shards went into the cache; the index, which may be replaced, did not.
    assert len(cache_listing(cache)) == 2 * SHARDS
    assert sha256(index) not in cache_listing(cache)
    # Another dataset over the list, and forked DataLoader workers, fetch it no more.
    again = wds.WebDataset(urls, shardshuffle=False, nodesplitter=wds.split_by_node,
                           dataset_index=index)
    loader = DataLoader(again, batch_size=None, num_workers=2, multiprocessing_context="fork",
                        timeout=50)
    assert sorted(s["__key__"] for s in loader) == sorted(s["__key__"] for s in local_samples)
    assert server.gets().count("/" + bucket_index) == 1


def test_an_s3_dataset_index_lists_its_shards_relative_to_its_key(server, local_samples,
                                                                  bucket_index, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.base)
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDWDSTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    dataset = wds.WebDataset(f"s3://bucket/{PATTERN}", shardshuffle=False,
                             dataset_index="s3://bucket/index.json")
    assert dataset.pipeline[0].counts_known is True
    assert wds.plan_epoch(dataset.batched(8), num_workers=1).batches == 5
    assert samples_of(dataset) == local_samples
    log = server.log()
    assert [e["path"] for e in log] == ["/" + bucket_index] + [f"/bucket/{n}" for n in NAMES]
    assert all(SIGV4.fullmatch(e["headers"]["authorization"]) for e in log)


def test_a_remote_dataset_index_that_cannot_be_read_is_an_error_naming_it(server, www,
                                                                         bucket_index):
    urls = [server.url("bucket/" + n) for n in NAMES]
    missing = server.url("bucket/none.json")
    with pytest.raises(FileNotFoundError) as caught:
        wds.WebDataset(urls, shardshuffle=False, dataset_index=missing)
    assert caught.value.filename == missing
    assert str(caught.value.strerror).startswith(f"dataset_index {missing}: HTTP 404")
    not_json = server.url("bucket/" + NAMES[0])
    with pytest.raises(ValueError, match=f"^dataset_index {re.escape(not_json)}: not valid JSON$"):
        wds.WebDataset(urls, shardshuffle=False, dataset_index=not_json)
    # One that lists other URLs (another host name for the server) is used for none.
    other = [u.replace("127.0.0.1", "localhost") for u in urls]
    with pytest.warns(UserWarning, match=re.escape(
            f"dataset_index {server.url(bucket_index)} does not list 4 of the 4 shards (the "
            f"first: {other[0]})")):
        dataset = wds.WebDataset(other, shardshuffle=False, dataset_index=server.url(bucket_index))
    assert dataset.pipeline[0].counts_known is False
    index = server.url(bucket_index)
    server.stop()
    with pytest.raises(ConnectionError, match=re.escape(index)):
        wds.WebDataset(urls[:1], shardshuffle=False, dataset_index=index,
                       remote=wds.RemoteOptions(max_attempts=1))


# --- TLS


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (scripts/deps.sh)")
    work = tmp_path_factory.mktemp("tls")
    cert, key = str(work / "cert.pem"), str(work / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    return cert, key


@pytest.fixture
def tls_server(www, tmp_path, certificate):
    s = Server(www[0], str(tmp_path), tls=certificate)
    yield s
    s.stop()


def test_https_with_the_servers_ca_file(tls_server, local_samples, certificate, monkeypatch):
    options = wds.RemoteOptions(ca_file=certificate[0])
    assert samples_of(remote(tls_server, remote=options)) == local_samples
    monkeypatch.setenv("CURL_CA_BUNDLE", certificate[0])
    assert samples_of(remote(tls_server)) == local_samples


def test_https_with_an_unknown_certificate_is_connection_error(tls_server, local_samples):
    with pytest.raises(ConnectionError, match=re.escape(tls_server.url(NAMES[0])) + ".*certif"):
        list(remote(tls_server, NAMES[0], remote=wds.RemoteOptions(max_attempts=1)))
    insecure = wds.RemoteOptions(verify_tls=False)
    assert samples_of(remote(tls_server, remote=insecure)) == local_samples


def test_a_sample_split_counts_with_the_datasets_tls_options(tls_server, local_samples,
                                                              certificate):
    urls = [tls_server.url(n) for n in NAMES]
    for options in (wds.RemoteOptions(ca_file=certificate[0], max_attempts=1),
                    wds.RemoteOptions(verify_tls=False, max_attempts=1)):
        dataset = wds.WebDataset(urls, shardshuffle=False, split="samples", remote=options)
        assert samples_of(dataset) == local_samples
        plan = wds.plan_epoch(dataset.batched(4), num_workers=2)
        assert [w.samples for w in plan.workers] == [SHARDS * PER_SHARD // 2] * 2
        assert wds.agreed_steps(dataset.batched(4), num_workers=2) == 10
        assert wds.count_samples(urls[1], remote=options) == PER_SHARD
    # Without them the environment's settings count (and fail), as before.
    with pytest.raises(ConnectionError, match=re.escape(urls[0]) + ".*certif"):
        wds.count_samples(urls[0])


def test_a_remote_dataset_index_is_read_with_the_datasets_tls_options(tls_server, local_samples,
                                                                      bucket_index, certificate):
    urls = [tls_server.url("bucket/" + n) for n in NAMES]
    index = tls_server.url(bucket_index)
    with pytest.raises(ConnectionError, match=re.escape(index) + ".*certif"):
        wds.WebDataset(urls, shardshuffle=False, dataset_index=index,
                       remote=wds.RemoteOptions(max_attempts=1))
    options = wds.RemoteOptions(ca_file=certificate[0], max_attempts=1)
    # In a DataPipeline the shard list reads the index, with its own options
    # (in every process alike), not the reader's.
    with pytest.raises(ConnectionError, match=re.escape(index) + ".*certif"):
        wds.DataPipeline(wds.SimpleShardList(urls, dataset_index=index),
                         wds.tarfile_to_samples(remote=options))
    dataset = wds.WebDataset(urls, shardshuffle=False, dataset_index=index, remote=options)
    assert dataset.pipeline[0].counts_known is True
    assert samples_of(dataset) == local_samples
    pipeline = wds.DataPipeline(wds.SimpleShardList(urls, dataset_index=index, remote=options),
                                wds.tarfile_to_samples(remote=options))
    assert samples_of(pipeline) == local_samples
    batched = wds.DataPipeline(wds.SimpleShardList(urls, dataset_index=index, remote=options),
                               wds.tarfile_to_samples(remote=options), wds.batched(8))
    assert wds.plan_epoch(batched, num_workers=1).batches == 5
    # Another SimpleShardList(remote=...) than a RemoteOptions is a TypeError.
    with pytest.raises(TypeError, match="RemoteOptions"):
        wds.SimpleShardList(urls, dataset_index=index, remote={"ca_file": certificate[0]})


# --- s3:// and gs://

SIGV4 = re.compile(r"AWS4-HMAC-SHA256 Credential=AKIDWDSTEST/\d{8}/eu-west-3/s3/aws4_request, "
                   r"SignedHeaders=[a-z0-9;-]*\bhost\b[a-z0-9;-]*, Signature=[0-9a-f]{64}")


def test_s3_requests_are_signed_with_sigv4(server, local_samples, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.base)
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDWDSTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    got = list(wds.WebDataset(f"s3://bucket/{PATTERN}", shardshuffle=False))
    assert samples_of(got) == local_samples
    assert got[0]["__url__"] == "s3://bucket/shard-000000.tar"
    log = server.log()
    assert [e["path"] for e in log] == [f"/bucket/{n}" for n in NAMES]
    for entry in log:
        headers = entry["headers"]
        assert SIGV4.fullmatch(headers["authorization"]), headers["authorization"]
        assert re.fullmatch(r"\d{8}T\d{6}Z", headers["x-amz-date"])
        assert headers["x-amz-content-sha256"] == hashlib.sha256(b"").hexdigest()


def test_gs_requests_carry_the_bearer_token(server, local_samples, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.base)
    monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.token")
    assert samples_of(wds.WebDataset(f"gs://bucket/{PATTERN}", shardshuffle=False)) == \
        local_samples
    log = server.log()
    assert [e["path"] for e in log] == [f"/bucket/{n}" for n in NAMES]
    assert {e["headers"]["authorization"] for e in log} == {"Bearer ya29.token"}


def test_http_headers_go_with_every_request_and_stay_out_of_repr(server, local_samples):
    options = wds.RemoteOptions(http_headers={"Authorization": "Bearer hf_secret", "X-Tag": "t"},
                                max_attempts=3)
    assert options.http_headers == (("Authorization", "Bearer hf_secret"), ("X-Tag", "t"))
    assert "hf_secret" not in repr(options)
    server.fault(NAMES[1], cut_after=4_000)
    dataset = remote(server, remote=options)
    assert samples_of(dataset) == local_samples
    loader = torch.utils.data.DataLoader(dataset, num_workers=2, batch_size=None,
                                         multiprocessing_context="spawn")
    assert len(list(loader)) == len(local_samples)  # the options pickle with their headers
    log = server.log()
    assert len(log) == 2 * len(NAMES) + 1
    assert [(e["path"], e["headers"]["range"]) for e in log if "range" in e["headers"]] == [
        ("/" + NAMES[1], "bytes=4000-")]
    assert {(e["headers"]["authorization"], e["headers"]["x-tag"]) for e in log} == {
        ("Bearer hf_secret", "t")}
    # Pairs, in order, are taken as a dict is; bad ones are named without their value.
    assert wds.RemoteOptions(http_headers=[("A", "1"), ("A", "2")]).http_headers == (
        ("A", "1"), ("A", "2"))
    with pytest.raises(ValueError, match=re.escape(
            "RemoteOptions: the value of the HTTP header X-Token holds a line break or a NUL")):
        wds.RemoteOptions(http_headers={"X-Token": "secret\r\nHost: x"})
    with pytest.raises(ValueError, match="RemoteOptions: the HTTP header Range is set by the "
                                         "reader itself"):
        wds.RemoteOptions(http_headers={"Range": "bytes=0-"})
    with pytest.raises(TypeError, match="http_headers names and values are str"):
        wds.RemoteOptions(http_headers={"X-Count": 3})


@pytest.fixture(scope="module")
def s3rver(www, tmp_path_factory):
    """s3rver (tests/s3) serving bucket/ of the document root, signed keys only."""
    script = os.path.join(ROOT, "tests", "s3", "s3.js")
    if shutil.which("node") is None:
        pytest.skip("node is not installed (scripts/deps.sh)")
    if not os.path.isdir(os.path.join(ROOT, "tests", "s3", "node_modules", "@20minutes",
                                      "s3rver")):
        pytest.skip("tests/s3's npm packages are not installed (scripts/deps.sh)")
    work = tmp_path_factory.mktemp("s3")
    os.makedirs(work / "root")
    os.symlink(os.path.join(www[0], "bucket"), work / "root" / "shards")
    port_file = str(work / "port")
    log = open(work / "log", "wb")
    process = subprocess.Popen(["node", "--no-warnings", script, "serve", "--root",
                                str(work / "root"), "--port-file", port_file, "--access-key",
                                "S3TESTKEY", "--secret-key", "s3testsecret"],
                               stdout=log, stderr=log)
    deadline = time.monotonic() + 50
    while not os.path.exists(port_file):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"s3rver did not start: {open(work / 'log').read()}")
        time.sleep(0.05)
    with open(port_file) as f:
        yield f"http://127.0.0.1:{int(f.read())}"
    process.terminate()
    process.wait(timeout=10)
    log.close()


def test_s3_through_s3rver_checks_the_signatures(s3rver, local_samples, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3rver)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "S3TESTKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3testsecret")
    assert samples_of(wds.WebDataset(f"s3://shards/{PATTERN}", shardshuffle=False)) == \
        local_samples
    with pytest.raises(FileNotFoundError) as missing:
        list(wds.WebDataset("s3://shards/nope.tar", shardshuffle=False))
    assert missing.value.strerror == ("HTTP 404 Not Found: NoSuchKey: The specified key does not "
                                      "exist.")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrongsecret")
    with pytest.raises(PermissionError) as denied:
        list(wds.WebDataset("s3://shards/shard-000000.tar", shardshuffle=False))
    assert denied.value.filename == "s3://shards/shard-000000.tar"
    assert denied.value.strerror.startswith("HTTP 403 Forbidden: SignatureDoesNotMatch: ")


def s3_env(monkeypatch, endpoint, secret="s3testsecret"):
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "S3TESTKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)


def aws_get(endpoint, key, tmp_path):
    """bucket shards' `key` as AWS's own JavaScript client downloads it."""
    out = tmp_path / "got.bin"
    subprocess.run(["node", "--no-warnings", os.path.join(ROOT, "tests", "s3", "s3.js"), "get",
                    "--endpoint", endpoint, "--access-key", "S3TESTKEY", "--secret-key",
                    "s3testsecret", "--bucket", "shards", "--key", key, "--file", str(out)],
                   check=True, capture_output=True)
    return out.read_bytes()


def test_gopen_writes_s3_objects_in_parts_and_gives_up_on_an_exception(s3rver, monkeypatch,
                                                                          tmp_path):
    s3_env(monkeypatch, s3rver)
    data = os.urandom((5 << 20) * 2 + 3)
    options = wds.RemoteOptions(upload_part_size=5 << 20)
    with wds.gopen("s3://shards/up/a.bin", "wb", remote=options) as stream:
        assert stream.writable()
        assert stream.write(data[:1000]) == 1000
        stream.write(memoryview(data)[1000:])
    assert stream.closed and stream._upload.parts == 3
    assert aws_get(s3rver, "up/a.bin", tmp_path) == data
    with wds.gopen("s3://shards/up/a.bin") as stream:
        assert stream.read() == data

    # An exception inside the with-block: nothing appears.
    with pytest.raises(RuntimeError, match="stop"):
        with wds.gopen("s3://shards/up/b.bin", "wb", remote=options) as stream:
            stream.write(data)
            raise RuntimeError("stop")
    assert stream.closed
    with pytest.raises(FileNotFoundError):
        wds.gopen("s3://shards/up/b.bin").read()
    with pytest.raises(ValueError, match="s3://shards/up/b.bin: write to a closed upload"):
        stream._upload.write(b"x")
    with pytest.raises(ValueError, match="upload_part_size must be at least 5242880"):
        wds.RemoteOptions(upload_part_size=1 << 20)
    with pytest.raises(ValueError, match="upload_concurrency must be at least 1, got 0"):
        wds.RemoteOptions(upload_concurrency=0)


def test_an_s3_upload_refused_raises_naming_the_url_and_leaves_nothing(s3rver, monkeypatch):
    s3_env(monkeypatch, s3rver, secret="wrongsecret")
    stream = wds.gopen("s3://shards/up/refused.bin", "wb")
    stream.write(b"abc")  # gathered: nothing is sent before close
    with pytest.raises(PermissionError) as denied:
        stream.close()
    assert str(denied.value).startswith(
        "s3://shards/up/refused.bin: sending the object (3 bytes): HTTP 403 Forbidden: "
        "SignatureDoesNotMatch: ")
    assert stream.closed
    with pytest.raises(PermissionError):
        wds.TarWriter("s3://shards/up/refused.tar").close()
    s3_env(monkeypatch, s3rver)
    for key in ("up/refused.bin", "up/refused.tar"):
        with pytest.raises(FileNotFoundError):
            wds.gopen(f"s3://shards/{key}").read()


def test_shard_and_tar_writers_write_s3_as_they_write_files(s3rver, local_samples, monkeypatch,
                                                             tmp_path):
    s3_env(monkeypatch, s3rver)
    local = tmp_path / "local"
    local.mkdir()
    written = []
    for pattern in (str(local / "part-%02d.tar"), "s3://shards/out/part-%02d.tar"):
        with wds.ShardWriter(pattern, maxcount=15, index=True, verbose=0,
                             post=written.append) as sink:
            for sample in local_samples:
                sink.write(sample)
        assert sink.shard == 3
    assert written[3:] == [f"s3://shards/out/part-{n:02d}.tar" for n in range(3)]
    for n in range(3):
        for suffix in ("", ".idx"):
            name = f"part-{n:02d}.tar{suffix}"
            assert aws_get(s3rver, f"out/{name}", tmp_path) == (local / name).read_bytes()
    assert samples_of(wds.WebDataset("s3://shards/out/part-{00..02}.tar",
                                     shardshuffle=False)) == local_samples

    with wds.TarWriter("s3://shards/out/one.tar") as sink:
        for sample in local_samples[:5]:
            sink.write(sample)
    with wds.TarWriter(str(local / "one.tar")) as sink:
        for sample in local_samples[:5]:
            sink.write(sample)
    assert aws_get(s3rver, "out/one.tar", tmp_path) == (local / "one.tar").read_bytes()


def test_gs_is_written_natively_with_hmac_keys_through_the_s3_interface(s3rver, local_samples,
                                                                        monkeypatch, tmp_path):
    """GCS's XML API takes S3's uploads: gopen, TarWriter and ShardWriter write gs:// objects
    in-process (no gsutil), signed for region "auto", which the server checks."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", s3rver)
    monkeypatch.setenv("WDS_GCS_HMAC_ACCESS_ID", "S3TESTKEY")
    monkeypatch.setenv("WDS_GCS_HMAC_SECRET", "s3testsecret")
    data = os.urandom((5 << 20) + 3)
    with wds.gopen("gs://shards/gcs/a.bin", "wb",
                   remote=wds.RemoteOptions(upload_part_size=5 << 20)) as stream:
        stream.write(data)
    assert stream._upload.parts == 2
    assert aws_get(s3rver, "gcs/a.bin", tmp_path) == data
    for pattern in (str(tmp_path / "part-%02d.tar"), "gs://shards/gcs/part-%02d.tar"):
        with wds.ShardWriter(pattern, maxcount=15, index=True, verbose=0) as sink:
            for sample in local_samples:
                sink.write(sample)
        assert sink.shard == 3
    for name in ("part-02.tar", "part-02.tar.idx"):
        assert aws_get(s3rver, f"gcs/{name}", tmp_path) == (tmp_path / name).read_bytes()
    assert samples_of(wds.WebDataset("gs://shards/gcs/part-{00..02}.tar",
                                     shardshuffle=False)) == local_samples
    monkeypatch.setenv("WDS_GCS_HMAC_SECRET", "wrongsecret")
    with pytest.raises(PermissionError) as denied:
        with wds.TarWriter("gs://shards/gcs/refused.tar") as sink:
            sink.write(local_samples[0])
    assert str(denied.value).startswith("gs://shards/gcs/refused.tar: sending the object (")
    monkeypatch.setenv("WDS_GCS_HMAC_SECRET", "s3testsecret")
    with pytest.raises(FileNotFoundError):
        wds.gopen("gs://shards/gcs/refused.tar").read()


def test_gs_writes_without_gcs_credentials_go_to_gsutil_as_in_the_reference(monkeypatch):
    """The native writer cannot use gsutil's own login (gcloud, a service account)."""
    gopen_module = sys.modules["webdataset_cpp.gopen"]  # the package's gopen is the function
    writer_module = sys.modules["webdataset_cpp.writer"]
    for name in ("GOOGLE_OAUTH_ACCESS_TOKEN", "WDS_GCS_HMAC_ACCESS_ID", "WDS_GCS_HMAC_SECRET",
                 "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    called = []
    monkeypatch.setattr(gopen_module, "gopen_gsutil",
                        lambda url, mode="rb", bufsize=8192, **kw: called.append((url, mode)))
    wds.gopen("gs://bucket/k.tar", "wb")
    assert called == [("gs://bucket/k.tar", "wb")]
    assert not writer_module._native_upload("gs://bucket/part-%06d.tar")
    assert writer_module._native_upload("s3://bucket/part-%06d.tar")
    monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.token")
    assert writer_module._native_upload("gs://bucket/part-%06d.tar")
    native = wds.gopen("gs://bucket/k.tar", "wb")
    assert isinstance(native, gopen_module.NativeWriter)
    native.abort()  # nothing was sent, and nothing is
    assert called == [("gs://bucket/k.tar", "wb")]
    # Without credentials and without gsutil, the error says what to set.
    monkeypatch.undo()
    for name in ("GOOGLE_OAUTH_ACCESS_TOKEN", "WDS_GCS_HMAC_ACCESS_ID", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(FileNotFoundError) as missing:
        wds.gopen("gs://bucket/k.tar", "wb")
    assert str(missing.value) == (
        "[Errno 2] gsutil is not installed; to write gs:// in-process, set "
        "GOOGLE_OAUTH_ACCESS_TOKEN, or WDS_GCS_HMAC_ACCESS_ID and WDS_GCS_HMAC_SECRET: "
        "'gs://bucket/k.tar'")


def test_a_shard_uploads_while_the_next_fills_unless_asked_not_to(s3rver, local_samples,
                                                                  monkeypatch):
    """post (and the count) of a shard come with the write that finishes the next shard, once
    its upload ended; upload_in_background=False uploads in the write that finishes it."""
    s3_env(monkeypatch, s3rver)
    for in_background, after_16 in ((True, []), (False, ["s3://shards/bg/0/part-00.tar"])):
        pattern = f"s3://shards/bg/{int(in_background)}/part-%02d.tar"
        written = []
        with wds.ShardWriter(pattern, maxcount=15, verbose=0, post=written.append,
                             upload_in_background=in_background) as sink:
            for sample in local_samples[:16]:  # the 16th finishes shard 0
                sink.write(sample)
            assert written == [p.replace("/0/", f"/{int(in_background)}/") for p in after_16]
            assert sink.shard == len(after_16)
            for sample in local_samples[16:31]:  # the 31st finishes shard 1
                sink.write(sample)
            assert written[0] == pattern % 0 and sink.shard >= 1
            for sample in local_samples[31:]:
                sink.write(sample)
        assert written == [pattern % n for n in range(3)] and sink.shard == 3
        assert samples_of(wds.WebDataset(pattern.replace("%02d", "{00..02}"),
                                         shardshuffle=False)) == local_samples


def test_s3_writers_dropped_unclosed_publish_nothing(s3rver, monkeypatch, tmp_path):
    s3_env(monkeypatch, s3rver)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stream = wds.gopen("s3://shards/up/dropped.bin", "wb")
    stream.write(b"half of it")
    del stream  # without close(): IOBase's finalizer would have completed it
    gc.collect()
    sink = wds.TarWriter("s3://shards/up/dropped.tar")
    sink.write({"__key__": "a", "txt": "hello"})
    assert len(list(tmp_path.iterdir())) == 1  # the archive, staged
    del sink
    gc.collect()
    assert list(tmp_path.iterdir()) == []
    for key in ("up/dropped.bin", "up/dropped.tar"):
        with pytest.raises(FileNotFoundError):
            wds.gopen(f"s3://shards/{key}").read()


def test_ctrl_c_ends_a_shard_upload_waiting_on_a_silent_server(monkeypatch, tmp_path):
    # A server that accepts and reads, and never answers.
    listener = socket.create_server(("127.0.0.1", 0))
    held = []

    def accept():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)

    threading.Thread(target=accept, daemon=True).start()
    s3_env(monkeypatch, f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.setenv("TMPDIR", str(tmp_path))

    def interrupt(*args):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, interrupt)
    sink = wds.ShardWriter("s3://shards/out/silent-%02d.tar", verbose=0,
                           remote=wds.RemoteOptions(stall_timeout=20, max_attempts=1))
    sink.write({"__key__": "a", "txt": "hello"})
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sink.close()  # uploads the shard: waits on the server
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
        listener.close()
        for connection in held:
            connection.close()
    # Raised soon after the signal, though the server was silent for the
    # upload's 20 s stall timeout; the staged shard is gone.
    assert time.monotonic() - start < 5
    assert list(tmp_path.iterdir()) == []
