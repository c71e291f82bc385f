"""Caching remote shards on local disk (WebDataset(cache_dir=...)), and the
reference's cache helpers.

WebDataset's cache is the native remote reader's (``wds/io/remote.h``): a remote
shard (http://, https://, s3://, gs://) is written to ``<cache_dir>/<SHA-256 of
the URL>`` while it streams to its first reader (``.part`` until it arrived
whole), read from there afterwards, shared by DataLoader workers, ranks and
jobs on the machine (flock), and bounded by ``cache_size`` with
least-recently-used eviction. Local files are read in place. ``pipe:``
shards are cached too when ``WebDataset(cache_dir=...)`` is given (as the
reference's are) or with ``RemoteOptions(cache_pipes=True)``: a command's
output is kept once it was read to its end and the command exited 0, and read
instead of running the command again; otherwise they run their command every
time.

The reference's helpers are kept for programs that use them directly (the
WebDataset class uses none of them): ``FileCache`` and ``StreamingOpen`` (URL
openers for a pipeline before ``tar_file_expander``), ``LRUCleanup``,
``download``, ``url_to_cache_name``, ``check_tar_format``, ``pipe_cleaner``;
``LMDBCached`` caches a pipeline's samples in an LMDB database (it needs the
``lmdb`` module, as in the reference).

>>> url_to_cache_name("https://host/data/train-000.tar", ndir=1)
'data/train-000.tar'
"""

import dataclasses
import os
import pickle
import re
import sys
import time
import warnings
from urllib.parse import quote, urlparse

from .gopen import gopen
from .handlers import reraise_exception
from .remote import RemoteOptions, native_options
from .utils import PipelineStage


def _float_from_environment(name, default):
    try:
        return float(os.environ.get(name, default))
    except ValueError:  # "50G" (which WebDataset accepts) is no float
        return float(default)


default_cache_dir = os.environ.get("WDS_CACHE", "./_cache")
default_cache_size = _float_from_environment("WDS_CACHE_SIZE", "1e18")
# The reference reads WDS_VERBOSE_CACHE here; FileCache(verbose=True) says the same.
verbose_cache = 0


def islocal(url):
    """True for a path or a file: URL."""
    return urlparse(url).scheme in ("", "file")


def magic_filetype(fname):
    """"<fname>: gzip compressed data", "<fname>: POSIX tar archive" or
    "<fname>: data", from the file's first bytes."""
    with open(fname, "rb") as f:
        header = f.read(512)
    if header[:2] == b"\x1f\x8b":
        return f"{fname}: gzip compressed data"
    if len(header) > 261 and header[257:262] == b"ustar":
        return f"{fname}: POSIX tar archive"
    return f"{fname}: data"


def get_filetype(fname):
    """What the ``file`` command says of `fname`."""
    import subprocess

    if not os.path.exists(fname):
        raise FileNotFoundError(2, "No such file or directory", fname)
    return subprocess.run(["file", fname], stdout=subprocess.PIPE, text=True, check=True).stdout


def check_tar_format(fname):
    """True when `fname` starts like a tar archive or gzip data."""
    kind = magic_filetype(fname).lower()
    return "tar archive" in kind or "gzip compressed" in kind


def pipe_cleaner(spec):
    """The URL inside a ``pipe:`` command (its first http(s), hdfs, gs, ais or
    s3 word), else `spec`. The reference's is obsolete: it raises
    ObsoleteException unless ALLOW_OBSOLETE=1; this one always answers."""
    if not spec.startswith("pipe:"):
        return spec
    for word in spec[5:].split(" "):
        if re.match(r"(https?|hdfs|gs|ais|s3):", word):
            return word
    return spec


def url_to_cache_name(url, ndir=0):
    """The reference's cache file name of a URL: the last ndir + 1 parts of
    its path (the quoted URL's last 128 characters for other schemes).
    WebDataset's native cache names files by the SHA-256 of the URL instead,
    so that two URLs with one basename never share a file."""
    if not isinstance(url, str):
        raise TypeError(f"url_to_cache_name: url must be a str, got {url!r}")
    parsed = urlparse(url)
    if parsed.scheme in ("", "file", "http", "https", "ftp", "ftps", "gs", "s3", "ais"):
        parts = parsed.path.lstrip("/").split("/")
        return "/".join(parts[-1 - ndir:])
    return quote(url, safe="_+{}*,-")[-128:]


class LRUCleanup:
    """Deletes the files of cache_dir with the smallest `keyfn` (oldest first)
    until it holds at most cache_size bytes; after a deletion pass, waits
    `interval` seconds (None: no wait) before the next."""

    def __init__(self, cache_dir=None, cache_size=int(1e12), keyfn=os.path.getctime,
                 verbose=False, interval=30):
        self.cache_dir = cache_dir
        self.cache_size = cache_size
        self.keyfn = keyfn
        self.verbose = verbose
        self.interval = interval
        self.last_run = 0

    def set_cache_dir(self, cache_dir):
        self.cache_dir = cache_dir

    def cleanup(self):
        if not os.path.exists(self.cache_dir):
            return
        if self.interval is not None and time.time() - self.last_run < self.interval:
            return
        try:
            files = [os.path.join(root, name)
                     for root, _, names in os.walk(self.cache_dir) for name in names]
            total = sum(os.path.getsize(f) for f in files)
            if total <= self.cache_size:
                return
            for f in sorted(files, key=self.keyfn):
                if total <= self.cache_size:
                    break
                total -= os.path.getsize(f)
                if self.verbose:
                    print(f"# deleting {f}", file=sys.stderr)
                os.remove(f)
        except OSError:  # another process removed a file meanwhile
            pass
        self.last_run = time.time()


def download(url, dest, chunk_size=1024**2, verbose=False):
    """Copies `url` (through gopen) to the file `dest`, which appears only
    when complete."""
    temp = f"{dest}.temp{os.getpid()}"
    with gopen(url) as stream, open(temp, "wb") as f:
        while chunk := stream.read(chunk_size):
            f.write(chunk)
    os.rename(temp, dest)


class StreamingOpen:
    """Opens URLs (or ``{"url": ...}``) as ``{"url", "stream"}`` (plus
    ``"local_path"`` for local files); errors go to `handler` (True: next URL,
    False: stop)."""

    def __init__(self, verbose=False, handler=reraise_exception):
        self.verbose = verbose
        self.handler = handler

    def __call__(self, urls):
        for url in urls:
            url = url["url"] if isinstance(url, dict) else url
            try:
                if islocal(url):
                    path = urlparse(url).path
                    yield dict(url=url, stream=open(path, "rb"), local_path=path)
                else:
                    yield dict(url=url, stream=gopen(url))
            except Exception as exn:
                if not self.handler(exn):
                    break


class FileCache:
    """Downloads remote URLs into `cache_dir` (named by `url_to_name`, checked
    by `validator`) and yields ``{"url", "stream", "local_path"}`` of the local
    copy; local URLs are opened in place.

    As in the reference: a failure goes to `handler`; True retries the URL
    (up to 10 attempts, waiting 1 s, then 1.5 times longer each time), False
    skips it. A file the validator refuses is removed and is a ValueError
    (which says what the file holds, from its first bytes rather than from the
    ``file`` command). ``cache_size`` > 0 bounds the directory (LRUCleanup).
    """

    def __init__(self, cache_dir=None, *, url_to_name=url_to_cache_name, verbose=False,
                 validator=check_tar_format, handler=reraise_exception, cache_size=-1,
                 cache_cleanup_interval=30):
        self.url_to_name = url_to_name
        self.validator = validator
        self.handler = handler
        self.cache_dir = default_cache_dir if cache_dir is None else cache_dir
        self.verbose = verbose
        self.cleaner = None
        if cache_size > 0:
            self.cleaner = LRUCleanup(self.cache_dir, cache_size, verbose=verbose,
                                      interval=cache_cleanup_interval)

    def get_file(self, url):
        """The local path of `url`, downloaded first when not cached."""
        if islocal(url):
            return urlparse(url).path
        name = self.url_to_name(url)
        if "/" in name:
            raise ValueError(f"bad cache name {name} for {url}")
        dest = os.path.join(self.cache_dir, name)
        os.makedirs(self.cache_dir, exist_ok=True)
        if not os.path.exists(dest):
            if self.verbose:
                print(f"# downloading {url} to {dest}", file=sys.stderr)
            if self.cleaner is not None:
                self.cleaner.cleanup()
            download(url, dest, verbose=self.verbose)
            self._validate(url, dest)
        return dest

    def _validate(self, url, dest):
        if not self.validator or self.validator(dest):
            return
        kind = magic_filetype(dest)
        with open(dest, "rb") as f:
            head = f.read(200)
        os.remove(dest)
        raise ValueError(f"{dest} ({url}) is not a tar archive, but a {kind}, contains {head!r}")

    def __call__(self, urls):
        for url in urls:
            url = url["url"] if isinstance(url, dict) else url
            delay = 1.0
            for _ in range(10):
                try:
                    dest = self.get_file(url)
                    stream = open(dest, "rb")
                except Exception as exn:
                    if not self.handler(exn):
                        break
                    time.sleep(delay)
                    delay *= 1.5
                    continue
                yield dict(url=url, stream=stream, local_path=dest)
                break


class LMDBCached(PipelineStage):
    """Caches the samples that pass through in the LMDB database `fname`
    (pickled by `pickler`, `chunksize` per transaction, keyed by ``__key__``
    or their position); once a pass completed, later passes read the database
    instead of the source. Needs the ``lmdb`` module (ModuleNotFoundError
    without it, as in the reference)."""

    def __init__(self, fname, map_size=1e12, pickler=pickle, chunksize=500):
        import lmdb

        self.db = lmdb.open(fname, readonly=False, map_size=int(map_size))
        self.pickler = pickler
        self.chunksize = chunksize

    def is_complete(self):
        with self.db.begin(write=False) as txn:
            return txn.get(b"_") is not None

    def add_samples(self, samples):
        with self.db.begin(write=True) as txn:
            for key, sample in samples:
                txn.put(key.encode(), self.pickler.dumps(sample))

    def run(self, source):
        if self.is_complete():
            with self.db.begin(write=False) as txn:
                for key, value in txn.cursor():
                    if key != b"_":
                        yield self.pickler.loads(value)
            return
        pending = []
        for i, sample in enumerate(source):
            pending.append(((isinstance(sample, dict) and sample.get("__key__")) or str(i), sample))
            if len(pending) >= self.chunksize:
                self.add_samples(pending)
                pending = []
            yield sample
        self.add_samples(pending)
        with self.db.begin(write=True) as txn:
            txn.put(b"_", b"1")


def cache_options(cache_dir=None, cache_size=-1, remote=None):
    """The RemoteOptions of WebDataset(cache_dir=, cache_size=, remote=).

    cache_dir None means remote.cache_dir, else $WDS_CACHE; the directory must
    exist (as in the reference). A cache_dir given caches pipe: shards too,
    as the reference's does, unless remote.cache_pipes or $WDS_CACHE_PIPES
    says otherwise.
    cache_size: 0 turns caching off (as in the reference); a positive number
    of bytes bounds the cache; a negative one (the default, -1) means
    remote.cache_size, else $WDS_CACHE_SIZE, else no limit.
    """
    native_options(remote)  # a TypeError for anything but a RemoteOptions
    remote = remote if remote is not None else RemoteOptions()
    if cache_dir and remote.cache_pipes is None and "WDS_CACHE_PIPES" not in os.environ:
        remote = dataclasses.replace(remote, cache_pipes=True)
    if cache_dir is None:
        cache_dir = remote.cache_dir if remote.cache_dir is not None else os.environ.get(
            "WDS_CACHE")
    if cache_size == 0:
        return dataclasses.replace(remote, cache_dir="")
    if not cache_dir:
        return remote
    cache_dir = os.path.expanduser(cache_dir)
    if not os.path.isdir(cache_dir):
        raise ValueError(f"cache directory {cache_dir} does not exist")
    size = int(cache_size) if cache_size > 0 else remote.cache_size
    return dataclasses.replace(remote, cache_dir=cache_dir, cache_size=size)


def warn_uncached_pipes(urls, remote):
    """Warns once when a cache is set but some shards are pipe: commands,
    which it does not hold (cache_pipes off)."""
    cache_pipes = remote.cache_pipes
    if cache_pipes is None:
        cache_pipes = os.environ.get("WDS_CACHE_PIPES", "").lower() in ("1", "true", "yes", "on")
    if remote.cache_dir and not cache_pipes and any(url.startswith("pipe:") for url in urls):
        warnings.warn(f"cache_dir={remote.cache_dir!r} holds http(s)://, s3:// and gs:// "
                      "shards; pipe: shards run their command at every read (cache them too "
                      "with RemoteOptions(cache_pipes=True) or WDS_CACHE_PIPES=1)", stacklevel=3)
