"""Caching remote shards on local disk (WebDataset(cache_dir=...)).

Remote shards (http(s), gs, pipe:) are downloaded once into cache_dir (under
a temporary name renamed when complete) and read from there; local files are
read in place. LRUCleanup bounds the cache's size.
"""

import os
import time
from urllib.parse import quote, urlparse

from ._plan import Stage


def url_to_cache_name(url):
    """The file name a URL is cached under."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file", "http", "https", "ftp", "ftps", "gs", "s3", "ais"):
        return os.path.basename(parsed.path)
    return quote(url, safe="_+{}*,-")[-128:]


def _is_local(url):
    return urlparse(url).scheme in ("", "file")


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


class cached_urls(Stage):
    """Replaces remote URLs by local copies in cache_dir."""

    def __init__(self, cache_dir, cache_size=-1):
        self.cache_dir = os.path.expanduser(cache_dir)
        if not os.path.isdir(self.cache_dir):
            raise ValueError(f"cache directory {self.cache_dir} does not exist")
        self.cache_size = cache_size

    def python(self, src, ctx):
        from .gopen import gopen

        cleanup = LRUCleanup(self.cache_dir, self.cache_size) if self.cache_size > 0 else None
        for item in src:
            url = item["url"] if isinstance(item, dict) else item
            if _is_local(url):
                yield {"url": url}
                continue
            dest = os.path.join(self.cache_dir, url_to_cache_name(url))
            if not os.path.exists(dest):
                temp = f"{dest}.temp{os.getpid()}"
                with gopen(url) as stream, open(temp, "wb") as out:
                    while True:
                        data = stream.read(1 << 20)
                        if not data:
                            break
                        out.write(data)
                os.rename(temp, dest)
                if cleanup is not None:
                    cleanup.cleanup()
            yield {"url": dest, "__source_url__": url}
