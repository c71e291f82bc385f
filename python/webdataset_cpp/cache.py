"""Caching remote shards on local disk (WebDataset(cache_dir=...)).

The cache is the native remote reader's (``wds/remote.h``): a remote shard
(http://, https://, s3://, gs://) is written to ``<cache_dir>/<SHA-256 of the
URL>`` while it streams to its first reader (``.part`` until it arrived whole),
read from there afterwards, shared by DataLoader workers, ranks and jobs on
the machine (flock), and bounded by ``cache_size`` with least-recently-used
eviction. Local files are read in place; ``pipe:`` URLs run their command
every time (the reference caches their output).

``LRUCleanup``, ``url_to_cache_name`` and ``pipe_cleaner`` are the reference's
helpers, kept for programs that call them; WebDataset does not use them.
"""

import dataclasses
import os
import time
import warnings
from urllib.parse import quote, urlparse

from .remote import RemoteOptions, native_options


def url_to_cache_name(url):
    """The reference's cache file name for a URL (its basename). WebDataset's
    cache names files by the SHA-256 of the URL instead, so that two URLs
    with one basename never share a file."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file", "http", "https", "ftp", "ftps", "gs", "s3", "ais"):
        return os.path.basename(parsed.path)
    return quote(url, safe="_+{}*,-")[-128:]


class LRUCleanup:
    """Deletes the oldest files of cache_dir until it holds at most
    cache_size bytes; runs at most once per `interval` seconds."""

    def __init__(self, cache_dir=None, cache_size=int(1e12), keyfn=os.path.getctime,
                 verbose=False, interval=30):
        self.cache_dir = cache_dir
        self.cache_size = cache_size
        self.keyfn = keyfn
        self.verbose = verbose
        self.interval = interval
        self.last_run = 0

    def cleanup(self):
        if self.cache_dir is None or time.time() - self.last_run < self.interval:
            return
        self.last_run = time.time()
        files = []
        for root, _, names in os.walk(self.cache_dir):
            files.extend(os.path.join(root, n) for n in names)
        files.sort(key=self.keyfn)
        total = sum(os.path.getsize(f) for f in files)
        for f in files:
            if total <= self.cache_size:
                break
            total -= os.path.getsize(f)
            os.remove(f)


def pipe_cleaner(spec):
    """The reference's obsolete url_to_name default; returns spec unchanged."""
    return spec


def cache_options(cache_dir=None, cache_size=-1, remote=None):
    """The RemoteOptions of WebDataset(cache_dir=, cache_size=, remote=).

    cache_dir None means remote.cache_dir, else $WDS_CACHE; the directory must
    exist (as in the reference). cache_size: 0 turns caching off (as in the
    reference); a positive number of bytes bounds the cache; a negative one
    (the default, -1) means remote.cache_size, else $WDS_CACHE_SIZE, else no
    limit.
    """
    native_options(remote)  # a TypeError for anything but a RemoteOptions
    remote = remote if remote is not None else RemoteOptions()
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
    which it does not hold."""
    if remote.cache_dir and any(url.startswith("pipe:") for url in urls):
        warnings.warn(f"cache_dir={remote.cache_dir!r} holds http(s)://, s3:// and gs:// "
                      "shards; pipe: shards run their command at every read", stacklevel=3)
