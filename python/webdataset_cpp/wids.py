"""Indexed datasets over shards: the reference project's ``wids`` API
(``ShardListDataset``, ``ChunkedSampler``, ``DistributedChunkedSampler``,
``ShardListSampler``) on the native random-access reader.

>>> from webdataset_cpp import wids
>>> callable(wids.ShardListDataset)
True

A ``ShardListDataset`` is a map-style ``torch.utils.data.Dataset``: sample
``i`` of a list of shards, each given with its sample count (a list of
``{"url": ..., "nsamples": ...}`` or a wids JSON descriptor, such as
``wds-shard index --json`` writes)::

    dataset = wids.ShardListDataset("s3://bucket/train/index.json")
    sampler = wids.DistributedChunkedSampler(dataset, chunksize=1000)
    loader = torch.utils.data.DataLoader(dataset, batch_size=64, sampler=sampler,
                                         num_workers=8, collate_fn=my_collate)

A sample is ``{".jpg": io.BytesIO, ..., "__key__", "__dataset__", "__index__",
"__shard__", "__shardindex__"}`` before its transformations (by default the
reference's decoding to PIL images, ints, text, JSON, ...).

Local shards are read where they lie; remote ones (http(s)://, s3://, gs://
with the native reader, ``pipe:`` commands, whatever ``gopen`` reads) are
first fetched whole into a cache directory, once per machine, or, with
``remote_reads="ranges"``, read sample by sample with ranged requests
(http(s)://, s3://, gs://; nothing stored). Each sample is read with
positioned reads of the shard's members, found from its ``.idx`` sidecar or
a scan of its headers, and each member's tar header is checked. Shards must
be uncompressed tars. A batch of indices (``dataset.__getitems__``, which
PyTorch's DataLoader calls from 2.0 on) is read in one native call, remote
samples several at a time. docs/PYTHON.md ("Indexed datasets: wids") lists
what differs from the reference.
"""

import bisect
import fcntl
import gzip
import io
import json
import math
import operator
import os
import random
import shutil
import subprocess
import time
import warnings
from collections import OrderedDict
from urllib.parse import quote, urlparse, urlunparse

from . import _core
from .autodecode import IMAGE_SPECS, Decoder, ImageHandler
from .cache import cache_options
from .errors import CommandError, DataError, ObjectChangedError
from .gopen import gopen, local_path
from .remote import native_options
from .utils import _torch_distributed, node_info

try:
    from torch.utils.data import Dataset, Sampler
except ImportError:  # torch is optional for the indexed reader itself
    Dataset = Sampler = object

__all__ = ["ChunkedSampler", "DistributedChunkedSampler", "IndexedTarSamples",
           "ShardListDataset", "ShardListSampler", "ShardedSampler", "default_decoder",
           "load_dsdesc_and_resolve"]

_REMOTE_SCHEMES = ("http", "https", "s3", "gs")
# cache_size at or above this (the default, 1e12) bounds nothing.
_NO_LIMIT = int(1e12)

# --- descriptors


def urldir(url):
    """The directory part of a URL or path ("s3://b/train/index.json" -> "s3://b/train")."""
    parsed = urlparse(url)
    return parsed._replace(path=os.path.dirname(parsed.path)).geturl()


def urlmerge(base, url):
    """`url` resolved against the directory `base`, as the reference's wids
    merges them: scheme and host from `url` when it has them, else from
    `base`; an absolute path in `url` is kept, a relative one joined and
    normalized."""
    b, u = urlparse(base), urlparse(url)
    path = u.path if u.path.startswith("/") else os.path.normpath(os.path.join(b.path, u.path))
    return urlunparse((u.scheme or b.scheme, u.netloc or b.netloc, path, u.params, u.query,
                       u.fragment))


def _read_json(source, remote):
    if isinstance(source, io.IOBase):
        text = source.read()
        name = getattr(source, "name", "a stream")
    else:
        name = source
        with _open_url(source, remote) as stream:
            text = stream.read()
    try:
        return json.loads(text)
    except ValueError as e:
        raise ValueError(f"{name}: not a JSON dataset description ({e})") from None


def _check_shards(shards, source):
    if not isinstance(shards, list):
        raise ValueError(f"{source}: 'shardlist' must be a list of shards")
    for i, shard in enumerate(shards):
        if not isinstance(shard, dict) or "url" not in shard or "nsamples" not in shard:
            raise ValueError(f"{source}: shard {i} needs a 'url' and 'nsamples': {shard!r}")
        n = shard["nsamples"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{source}: shard {shard['url']}: 'nsamples' must be a count, "
                             f"not {n!r}")
    return shards


def _rebase(shards, base):
    # A pipe: command is no URL to resolve (the reference's merge mangles it).
    if base is not None:
        for shard in shards:
            if not shard["url"].startswith("pipe:"):
                shard["url"] = urlmerge(base, shard["url"])
    return shards


def _set_missing(shards, key, value):
    if value is not None:
        for shard in shards:
            shard.setdefault(key, value)


def load_dsdesc_and_resolve(source, *, options=None, base=None, remote=None):
    """The description at `source` (a path, URL or open file) with every shard
    URL resolved: the top level's relative URLs against `base` when it is
    given (ShardListDataset gives the directory of `source`), a component's
    against its ``"base"`` or its ``"source_url"``'s directory; components of
    ``"datasets"`` loaded from their ``"source_url"``, and their ``weight``,
    ``source_url`` and ``name`` (as ``"dataset"``) set on their shards, as the
    reference's wids resolves them. ``pipe:`` URLs stay as written. Errors are
    ValueErrors naming the description."""
    description = _read_json(source, remote)
    name = source if isinstance(source, str) else getattr(source, "name", "a stream")
    if not isinstance(description, dict):
        raise ValueError(f"{name}: a dataset description is a JSON object")
    description = dict(description, **(options or {}))
    if description.get("wids_version") != 1:
        raise ValueError(f"{name}: 'wids_version' must be 1, found "
                         f"{description.get('wids_version')!r}")
    shards = _rebase(_check_shards(description.get("shardlist", []), name), base)
    _set_missing(shards, "weight", description.get("weight"))
    _set_missing(shards, "name", description.get("name"))
    for component in description.get("datasets", []):
        weight = component.get("weight")
        source_url = component.get("source_url")
        if source_url is not None:
            component = _read_json(source_url, remote)
            if "source_url" in component:
                raise ValueError(f"{source_url}: a component may not refer to another "
                                 "(source_url in a source_url)")
        where = source_url or name
        if "shardlist" not in component:
            raise ValueError(f"{where}: a component of {name} has no 'shardlist'")
        sub = _rebase(_check_shards(component["shardlist"], where),
                      component.get("base", urldir(source_url) if source_url else None))
        _set_missing(sub, "weight", weight)
        _set_missing(sub, "source_url", source_url)
        _set_missing(sub, "dataset", component.get("name"))
        shards.extend(sub)
    if not shards:
        raise ValueError(f"{name}: the description lists no shards")
    description["shardlist"] = shards
    return description


# --- fetching remote shards


def _open_url(url, remote):
    if _is_remote(url):
        return gopen(url, "rb", remote=remote)
    return gopen(url, "rb")


class DefaultLocalname:
    """Cache file names for remote shards: the URL quoted, in `dldir`."""

    def __init__(self, dldir="/tmp/_wids_cache"):
        self._dldir = dldir

    def __call__(self, shard):
        return os.path.join(self._dldir, quote(shard, safe="+-"))


class CacheLocalname:
    """Cache file names for remote shards: the URL's file name, in `cachedir`."""

    def __init__(self, cachedir):
        self._cachedir = cachedir

    def __call__(self, shard):
        return os.path.join(self._cachedir, os.path.basename(urlparse(shard).path))


def _fetch(url, local, remote):
    """Puts the whole of `url` at `local` unless it is there: one process per
    machine fetches (an flock on local.lock), into a temporary file renamed
    into place, so that a fetch cut short never looks complete. A ``pipe:``
    command holding ``{local}`` writes the file itself, as in the
    reference; any other URL is read with gopen."""
    directory = os.path.dirname(local) or "."
    os.makedirs(directory, exist_ok=True)
    if os.path.exists(local):
        return False
    lock_path = local + ".lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(local):
            return False
        temp = f"{local}.{os.getpid()}.tmp"
        try:
            _fetch_to(url, temp, remote)
            os.replace(temp, local)
        except BaseException:
            if os.path.exists(temp):
                os.unlink(temp)
            raise
        finally:
            # A process that waited on this lock finds the file (or fetches
            # again under a lock of its own): no fetch is left half done.
            try:
                os.unlink(lock_path)
            except FileNotFoundError:
                pass
    return True


def _fetch_to(url, temp, remote):
    """Writes the whole of `url` to the file `temp`."""
    if url.startswith("pipe:") and "{local}" in url:
        command = url[len("pipe:"):].replace("{local}", temp)
        status = subprocess.run(command, shell=True).returncode
        if status != 0:
            raise CommandError(f"{url}: the command exited with status {status}")
        if not os.path.isfile(temp):
            raise FileNotFoundError(2, "the command wrote no file at {local}", url)
    else:
        with _open_url(url, remote) as source, open(temp, "wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)


# A temporary or lock file this old belongs to a process that died.
_STALE_SECONDS = 3600


def _remove_unless_in_use(path):
    """Removes `path` unless a reader holds it (a shared flock, see
    _hold); True when it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        if os.fstat(fd).st_nlink > 0:
            os.unlink(path)
        return True
    except FileNotFoundError:
        return True
    finally:
        os.close(fd)


def _evict(directory, names, limit, keep):
    """Keeps the complete files of `directory` named in `names` (this
    dataset's remote shards: nothing else there is touched) within `limit`
    bytes: the least recently used first (by modification time, which each
    use renews), never `keep` or a file a reader holds. Removes their
    temporary and lock files left by processes that died."""
    files, now = [], time.time()
    for entry in os.scandir(directory):
        try:
            st = entry.stat()
        except FileNotFoundError:
            continue
        if entry.name in names:
            files.append((st.st_mtime, st.st_size, entry.path))
            continue
        if now - st.st_mtime > _STALE_SECONDS and _left_by_the_dead(entry.name, names,
                                                                      directory):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= limit:
            break
        if path != keep and _remove_unless_in_use(path):
            total -= size


def _left_by_the_dead(name, names, directory):
    """Whether `name` is the lock or temporary file of a fetch of one of
    `names` whose process is gone: a lock nobody holds, a temporary file of
    a process that no longer runs."""
    if name.endswith(".lock") and name[:-len(".lock")] in names:
        try:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
    parts = name.rsplit(".", 2)
    if name.endswith(".tmp") and len(parts) == 3 and parts[0] in names and parts[1].isdigit():
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
    return False


def _hold(path):
    """A descriptor of `path` holding a shared flock, so that no eviction
    removes it while it is read; None when it was removed meanwhile."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_SH)
    if os.fstat(fd).st_nlink == 0:
        os.close(fd)
        return None
    return fd


# --- one shard


class IndexedTarSamples:
    """The samples of one local, uncompressed shard by index: ``len()``, and
    ``[i]`` gives ``{".ext": io.BytesIO, ..., "__key__": key}``, as the
    reference's. Samples are
    grouped as a WebDataset pipeline groups them. `expected_size`, when
    given, must be the shard's count (a DataError otherwise); `md5sum`, when
    given, is checked first."""

    _shard = None
    _held = None  # a descriptor holding a cached copy (_hold), owned once opened

    def __init__(self, *, path, md5sum=None, expected_size=None, remote=None, _held=None,
                 _native=None):
        self.path = path
        if md5sum is not None:
            if _is_remote(path):
                raise ValueError(f"{path}: md5sum= checks local files; a remote shard read by "
                                 "ranges is checked member by member")
            got = compute_file_md5sum(path)
            if got != md5sum:
                raise DataError(f"{path}: MD5 sum {got}, expected {md5sum}")
        shard = _native if _native is not None else _core.IndexedShard(
            path, native_options(remote) if _is_remote(path) else None)
        if expected_size is not None and len(shard) != expected_size:
            raise DataError(f"{path}: {len(shard)} samples, but its description says "
                            f"{expected_size}")
        self._shard, self._held = shard, _held

    def __len__(self):
        return len(self._shard)

    def __getitem__(self, i):
        i = operator.index(i)
        if i < 0:
            i += len(self._shard)
        key, fields = self._shard.read(i)
        return _sample(self.path, key, fields)

    def close(self):
        self._shard = None
        if self._held is not None:
            os.close(self._held)
            self._held = None

    def __del__(self):
        self.close()

    def __repr__(self):
        return f"<IndexedTarSamples {self.path}>"


def _sample(path, key, fields):
    # The reference's sample of one read: a BytesIO per field, and the key.
    sample = {}
    for field, data in fields:
        name = "." + field
        if name in sample:
            raise DataError(f"{path}: sample {key} has two {name} members")
        sample[name] = io.BytesIO(data)  # shares `data`: no copy
    sample["__key__"] = key
    return sample


def _is_remote(url):
    return urlparse(url).scheme in _REMOTE_SCHEMES


def compute_file_md5sum(path, chunksize=1 << 20):
    import hashlib

    md5 = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(chunksize), b""):
            md5.update(chunk)
    return md5.hexdigest()


# --- decoding (the reference's default transformations)


def _check_keys(sample):
    for key in sample:
        if not key.startswith((".", "__")):
            raise ValueError(f"{key}: a sample's fields start with '.' (or '__')")


def decode_all_gz(sample, format=True, update_key=True):
    """Decompresses every ``.X.gz`` field to a BytesIO (renamed ``.X`` with
    update_key); a plain ``.gz`` field is left as it is, with a warning."""
    _check_keys(sample)
    for key, value in list(sample.items()):
        parts = key.split(".")
        if len(parts) < 2 or parts[-1].lower() != "gz":
            continue
        if len(parts) == 2:
            warnings.warn(f"{key}: a plain .gz field is not decompressed")
            continue
        data = value.read() if hasattr(value, "read") else value
        stream = io.BytesIO(gzip.decompress(data))
        if update_key:
            del sample[key]
            sample[".".join(parts[:-1])] = stream
        else:
            sample[key] = stream
    return sample


def _read(value):
    return value.read() if hasattr(value, "read") else value


def decode_basic(sample, format=True):
    """Decodes by extension (the last one, or the one before ``.gz``): txt and
    text to str, cls and cls2 to int, json, npy, mp (msgpack), pt and pth
    (torch.load), pickle and pkl, safetensors; other fields stay."""
    _check_keys(sample)
    for key, value in sample.items():
        if key.startswith("__"):
            continue
        parts = key.lower().split(".")
        if len(parts) < 2:
            continue
        extension = parts[-2] if parts[-1] == "gz" and len(parts) > 2 else parts[-1]
        if extension in ("txt", "text"):
            sample[key] = _read(value).decode("utf-8")
        elif extension in ("cls", "cls2"):
            sample[key] = int(_read(value).decode("utf-8"))
        elif extension == "json":
            sample[key] = json.loads(_read(value))
        elif extension == "npy":
            import numpy as np

            sample[key] = np.load(io.BytesIO(_read(value)))
        elif extension == "mp":
            import msgpack

            sample[key] = msgpack.unpackb(_read(value), raw=False)
        elif extension in ("pt", "pth"):
            import torch

            sample[key] = torch.load(io.BytesIO(_read(value)))
        elif extension in ("pickle", "pkl"):
            import pickle

            sample[key] = pickle.loads(_read(value))
        elif extension == "safetensors":
            import safetensors.torch

            sample[key] = safetensors.torch.load(_read(value))
    return sample


_IMAGE_EXTENSIONS = ("jpg", "png", "ppm", "pgm", "pbm", "pnm")


def _decode_images(sample, to_array):
    import PIL.Image

    _check_keys(sample)
    for key, value in sample.items():
        if key.startswith("__") or key.lower().rsplit(".", 1)[-1] not in _IMAGE_EXTENSIONS:
            continue
        image = PIL.Image.open(value if hasattr(value, "read") else io.BytesIO(value))
        if to_array:
            import numpy as np

            image = np.asarray(image)
        sample[key] = image
    return sample


def decode_images_to_pil(sample, format=True):
    """jpg, png, ppm, pgm, pbm and pnm fields to PIL images."""
    return _decode_images(sample, False)


def decode_images_to_numpy(sample, format=True):
    """jpg, png, ppm, pgm, pbm and pnm fields to arrays (``np.asarray`` of the PIL image)."""
    return _decode_images(sample, True)


def default_decoder(sample, format=True, gz_update_key=False):
    """A decoded copy of `sample`: ``.gz`` fields decompressed, then
    decode_basic, then images to PIL (format "PIL") or arrays ("numpy")."""
    result = decode_basic(decode_all_gz(dict(sample), update_key=gz_update_key))
    fmt = format.lower() if isinstance(format, str) else None
    if fmt == "pil":
        return decode_images_to_pil(result)
    if fmt == "numpy":
        return decode_images_to_numpy(result)
    raise ValueError(f"{format!r}: the image format is 'PIL' or 'numpy'")


def _transformations(transformations):
    if not isinstance(transformations, list):
        transformations = [transformations]
    result = []
    for t in transformations:
        if isinstance(t, str) and t.lower() in ("pil", "numpy"):
            t = _Decoder(t)
        elif isinstance(t, str) and t in IMAGE_SPECS:
            t = _StreamDecoder(Decoder([ImageHandler(t)]))
        elif isinstance(t, Decoder):
            t = _StreamDecoder(t)
        elif not callable(t):
            raise ValueError(f"{t!r}: a transformation is 'PIL', 'numpy', an image spec "
                             f"({', '.join(IMAGE_SPECS)}), a webdataset_cpp.Decoder or a "
                             "callable")
        result.append(t)
    return result


class _StreamDecoder:
    """A webdataset_cpp.Decoder (the streaming API's ``.decode(...)``: images
    decoded natively, without the GIL) applied to a wids sample, whose fields
    are ``".ext": io.BytesIO``; the decoded fields keep their ``".ext"`` names."""

    def __init__(self, decoder):
        self.decoder = decoder

    def __call__(self, sample):
        _check_keys(sample)
        # __url__ names the shard in a DecodingError, as in the streaming API.
        fields = {"__url__": sample.get("__shard__")}
        for key, value in sample.items():
            if key.startswith("__"):
                fields[key] = value
            else:
                fields[key[1:]] = value.getvalue() if isinstance(value, io.BytesIO) else value
        decoded = self.decoder(fields)
        del decoded["__url__"]
        return {key if key.startswith("__") else "." + key: value
                for key, value in decoded.items()}


class _Decoder:
    # A picklable default_decoder with its format (spawned DataLoader workers).
    def __init__(self, format):
        self.format = format

    def __call__(self, sample):
        return default_decoder(sample, format=self.format)


# --- the dataset


class ShardListDataset(Dataset):
    """Sample ``i`` of a list of shards, as the reference's wids
    ShardListDataset.

    `shards`: a list of ``{"url", "nsamples"}`` dicts (other keys kept:
    ``"dataset"`` becomes ``__dataset__``), or a descriptor (path, URL or open
    file; see load_dsdesc_and_resolve). `transformations`: "PIL" (default),
    "numpy", a callable or a list of them, applied in order; also (not in
    the reference) an image spec of the streaming API ("rgb8", "torchrgb8",
    ...) or a webdataset_cpp.Decoder, which decode as ``.decode(...)`` does:
    JPEG, PNG and WebP natively, without the GIL. `lru_size`
    shards stay open per process. Remote shards are fetched whole into
    `cache_dir` (file names: the URL's last component), else where
    `localname(url)` says, else into ``$WIDS_CACHE`` (default
    ``/tmp/_wids_cache``) under their quoted URL; `cache_size` bounds the
    bytes kept there, least recently used removed first. With
    ``remote_reads="ranges"``, http(s), s3 and gs shards are not fetched:
    each sample is one ranged request (its members, read where they lie),
    each shard's index its server-side ``.idx`` (one request when the shard
    is opened) or else one scan of the whole shard, kept in the native cache
    (``remote.cache_dir`` or ``WDS_CACHE``) when there is one for the next
    opening on the machine, and every read asks for the version first read.
    `remote` are the RemoteOptions for http(s), s3 and gs. Local shards are
    read in place.

    ``dataset.__getitems__(indices)`` (called by PyTorch's DataLoader from
    2.0 on) reads a batch in one native call without the GIL, up to
    `read_threads` ranged requests at a time.

    A shard whose sample count differs from its description's is a DataError
    naming both, when it is opened.
    """

    def __init__(self, shards, *, cache_size=int(1e12), cache_dir=None, lru_size=10,
                 dataset_name=None, localname=None, transformations="PIL", keep=False,
                 base=None, options=None, remote=None, remote_reads="download",
                 read_threads=16):
        super().__init__()
        if remote_reads not in ("download", "ranges"):
            raise ValueError(f"ShardListDataset: remote_reads={remote_reads!r}; it is "
                             "'download' (whole shards into the cache) or 'ranges'")
        native_options(remote)  # a TypeError for anything but a RemoteOptions
        self.remote_reads = remote_reads
        self.read_threads = max(1, int(read_threads))
        self._ranges_remote = remote
        # Fetched whole into the wids cache: not into the shard cache too.
        self._remote = cache_options(cache_size=0, remote=remote)
        if isinstance(shards, (str, os.PathLike, io.IOBase)):
            if isinstance(shards, os.PathLike):
                shards = os.fspath(shards)
            if base is None and isinstance(shards, str):
                base = urldir(shards)
            self.base = base
            self.spec = load_dsdesc_and_resolve(shards, options=options, base=base,
                                                remote=self._remote)
            self.shards = self.spec["shardlist"]
            self.dataset_name = self.spec.get("name") or dataset_name or str(shards)
        else:
            self.base = None
            self.spec = dict(options or {})
            self.shards = _check_shards([dict(s) for s in shards], "shards")
            if not self.shards:
                raise ValueError("ShardListDataset: the list of shards is empty")
            self.dataset_name = dataset_name or f"{len(self.shards)} shards"
        self.lengths = [shard["nsamples"] for shard in self.shards]
        self.cum_lengths = []
        total = 0
        for n in self.lengths:
            total += n
            self.cum_lengths.append(total)
        self.total_length = total
        if cache_dir is not None:
            self.cache_dir = cache_dir
            self.localname = CacheLocalname(cache_dir)
        elif localname is not None:
            self.cache_dir = None
            self.localname = localname
        else:
            self.cache_dir = os.environ.get("WIDS_CACHE", "/tmp/_wids_cache")
            self.localname = DefaultLocalname(self.cache_dir)
        # The cache files of the remote shards: eviction touches nothing else.
        self._cache_names = set()
        owners = {}
        for shard in self.shards:
            url = shard["url"]
            if self._ranged(url):
                continue
            if local_path(url) is None:
                local = self.localname(url)
                if owners.setdefault(local, url) != url:
                    raise ValueError(f"ShardListDataset: {owners[local]} and {url} would share "
                                     f"the cache file {local}; give a localname= that tells "
                                     "them apart")
                self._cache_names.add(os.path.basename(local))
        if cache_size is not None and 0 < cache_size < (1 << 20):
            warnings.warn(f"ShardListDataset: cache_size is in bytes: {cache_size} keeps no "
                          "more than the shard being read")
        self.cache_size = cache_size
        self.keep = keep
        if lru_size > 200:
            warnings.warn("ShardListDataset: lru_size above 200 keeps that many shards open; "
                          "consider fewer")
        self.lru_size = max(1, int(lru_size))
        self.transformations = _transformations(transformations)
        self._open = OrderedDict()
        self._prefetched = {}  # {url: native shard} during __getitems__
        self.accesses = 0
        self.misses = 0
        self._warned_misses = False

    def add_transform(self, transform):
        """Appends a transformation; returns the dataset."""
        self.transformations.extend(_transformations(transform))
        return self

    def __len__(self):
        return self.total_length

    def get_stats(self):
        """(shard accesses, misses of the open-shard cache)."""
        return self.accesses, self.misses

    def check_cache_misses(self):
        """Warns once when more than 30% of over 100 accesses opened a shard:
        the access order has little locality (see ChunkedSampler)."""
        if not self._warned_misses and self.accesses > 100 and self.misses > 0.3 * self.accesses:
            self._warned_misses = True
            warnings.warn(f"ShardListDataset: {self.misses} of {self.accesses} accesses opened a "
                          "shard; use a ChunkedSampler or a larger lru_size")

    def _ranged(self, url):
        return self.remote_reads == "ranges" and _is_remote(url)

    def _open_shard(self, url):
        if self._ranged(url):
            return IndexedTarSamples(path=url, remote=self._ranges_remote,
                                     _native=self._prefetched.get(url))
        path = local_path(url)
        if path is not None:
            return IndexedTarSamples(path=path)
        local = self.localname(url)
        for _ in range(3):  # another process may evict it between the fetch and the hold
            fetched = _fetch(url, local, self._remote)
            try:
                held = _hold(local)
            except FileNotFoundError:
                continue
            if held is None:
                continue
            try:
                if not fetched:
                    os.utime(held)  # used: the last to go
                shard = IndexedTarSamples(path=local, _held=held)
            except BaseException:
                os.close(held)
                raise
            if fetched and self.cache_size is not None and 0 < self.cache_size < _NO_LIMIT:
                _evict(os.path.dirname(local) or ".", self._cache_names, self.cache_size, local)
            return shard
        raise DataError(f"{url}: its cached copy {local} was removed three times before it "
                        "could be read; raise cache_size")

    def _shard(self, shard_index):
        desc = self.shards[shard_index]
        url = desc["url"]
        self.accesses += 1
        shard = self._open.get(url)
        if shard is not None:
            self._open.move_to_end(url)
            return shard
        self.misses += 1
        while len(self._open) >= self.lru_size:  # first: an eviction may then remove it
            self._open.popitem(last=False)[1].close()
        shard = self._open_shard(url)
        if len(shard) != desc["nsamples"]:
            count = len(shard)
            shard.close()
            raise DataError(f"{url}: {count} samples, but the description says "
                            f"{desc['nsamples']}")
        self._open[url] = shard
        return shard

    def get_shard(self, index):
        """(shard, index within it, the shard's description) of sample `index`."""
        shard_index = self._shard_of(index)
        inner = index - (self.cum_lengths[shard_index - 1] if shard_index > 0 else 0)
        return self._shard(shard_index), inner, self.shards[shard_index]

    def _shard_of(self, index):
        return bisect.bisect_right(self.cum_lengths, index)

    def _open_concurrently(self, indices):
        """{url: native shard} of the shards of `indices` read by ranges that
        are not open, opened read_threads at a time (each open waits on round
        trips); empty when fewer than two."""
        urls = dict.fromkeys(self.shards[self._shard_of(i)]["url"] for i in indices)
        urls = [url for url in urls if self._ranged(url) and url not in self._open]
        if len(urls) < 2:
            return {}
        natives = _core.open_shards(urls, native_options(self._ranges_remote), self.read_threads)
        return dict(zip(urls, natives))

    def _index(self, index):
        given = index = operator.index(index)
        if index < 0:
            index += self.total_length
        if not 0 <= index < self.total_length:
            raise IndexError(f"ShardListDataset: index {given} of {self.total_length} samples")
        return index

    def _finish(self, sample, index, inner, desc):
        sample["__dataset__"] = desc.get("dataset")
        sample["__index__"] = index
        sample["__shard__"] = desc["url"]
        sample["__shardindex__"] = inner
        for transform in self.transformations:
            sample = transform(sample)
        return sample

    def _forget_changed(self, url):
        """Closes `url`'s shard when it is read by ranges (another version
        replaced it since it was opened), so that the next read opens it
        again: its new index and version (its count checked again); False
        for any other shard. The caller retries once: a shard that changes
        again at once fails."""
        if url is None or not self._ranged(url):
            return False
        shard = self._open.pop(url, None)
        if shard is not None:
            shard.close()
        warnings.warn(f"ShardListDataset: {url} changed since it was opened; reading its new "
                      "version")
        return True

    def __getitem__(self, index):
        index = self._index(index)
        for retry in (False, True):
            shard, inner, desc = self.get_shard(index)
            try:
                sample = shard[inner]
                break
            except ObjectChangedError as changed:
                if retry or not self._forget_changed(changed.url):
                    raise
        self.check_cache_misses()
        return self._finish(sample, index, inner, desc)

    def __getitems__(self, indices):
        """[self[i] for i in indices], read in one native call without the
        GIL (remote samples read by ranges `read_threads` at a time). A
        subclass that overrides ``__getitem__`` gets it called per index."""
        if type(self).__getitem__ is not ShardListDataset.__getitem__:
            return [self[i] for i in indices]
        indices = [self._index(i) for i in indices]
        for retry in (False, True):
            places, items = [], []
            # The batch's shards that are not open, opened at once; get_shard
            # (which a subclass may override) takes them from here.
            self._prefetched = self._open_concurrently(indices)
            try:
                for index in indices:
                    shard, inner, desc = self.get_shard(index)
                    # The native shard itself: a shard the LRU closes meanwhile stays readable.
                    places.append((shard.path, inner, desc))
                    items.append((shard._shard, inner))
            finally:
                self._prefetched = {}
            try:
                reads = _core.read_samples(items, self.read_threads)
                break
            except ObjectChangedError as changed:
                if retry or not self._forget_changed(changed.url):
                    raise
        self.check_cache_misses()
        return [self._finish(_sample(path, key, fields), index, inner, desc)
                for (key, fields), index, (path, inner, desc) in zip(reads, indices, places)]

    def close(self):
        """Closes the open shards."""
        self._open.clear()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_open"] = OrderedDict()  # a spawned worker opens its own
        state["_prefetched"] = {}
        return state


# --- samplers


def lengths_to_ranges(lengths):
    """[(start, end)] of consecutive blocks of the given lengths."""
    ranges, start = [], 0
    for n in lengths:
        ranges.append((start, start + n))
        start += n
    return ranges


def iterate_ranges(ranges, rng, indexshuffle=True, shardshuffle=True):
    """The indexes of `ranges`: the ranges in a shuffled order (shardshuffle),
    each range's indexes shuffled (indexshuffle), with `rng` (random.Random):
    the reference's order for the same seed."""
    order = list(range(len(ranges)))
    if shardshuffle:
        rng.shuffle(order)
    for i in order:
        lo, hi = ranges[i]
        indexes = list(range(lo, hi))
        if indexshuffle:
            rng.shuffle(indexes)
        yield from indexes


def _epoch_rng(seed, epoch):
    return random.Random(seed + 1289738273 * epoch)


class _RangeSampler(Sampler):
    """The indexes of `ranges`, an epoch at a time: with shuffle, the ranges
    in a random order (from the second epoch, or from the first with
    shufflefirst) and the indexes of each range shuffled. Each complete
    iteration moves to the next epoch; set_epoch(e) sets it."""

    def __init__(self, ranges, *, seed, shuffle, shufflefirst):
        self.ranges = ranges
        self.seed = seed
        self.shuffle = shuffle
        self.shufflefirst = shufflefirst
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        rng = _epoch_rng(self.seed, self.epoch)
        yield from iterate_ranges(
            self.ranges, rng, indexshuffle=self.shuffle,
            shardshuffle=self.shuffle and (self.shufflefirst or self.epoch > 0))
        self.epoch += 1

    def __len__(self):
        return sum(hi - lo for lo, hi in self.ranges)


class ShardListSampler(_RangeSampler):
    """Every index of a ShardListDataset, shard by shard (`lengths`: the
    shards' counts, by default the dataset's), in the order _RangeSampler
    describes, always shuffled."""

    def __init__(self, dataset, *, lengths=None, seed=0, shufflefirst=False):
        if lengths is None:
            lengths = list(dataset.lengths)
        super().__init__(lengths_to_ranges(lengths), seed=seed, shuffle=True,
                         shufflefirst=shufflefirst)


ShardedSampler = ShardListSampler


class ChunkedSampler(_RangeSampler):
    """The indexes of [lo, hi) (`num_samples`: a count, a (lo, hi) pair, or
    None for the whole dataset) in chunks of `chunksize`, in the order
    _RangeSampler describes, so that reads stay within a few shards at a
    time. ``len()`` is `dslength_per_replica` when positive, else the count."""

    def __init__(self, dataset, *, dslength_per_replica=-1, num_samples=None, chunksize=2000,
                 seed=0, shuffle=True, shufflefirst=False, _extra=()):
        if isinstance(num_samples, int):
            lo, hi = 0, num_samples
        elif num_samples is None:
            lo, hi = 0, len(dataset)
        else:
            lo, hi = num_samples
        if chunksize < 1:
            raise ValueError(f"ChunkedSampler: chunksize must be at least 1, not {chunksize}")
        ranges = []
        for start, end in [(lo, hi), *_extra]:  # _extra: DistributedChunkedSampler's top-up
            ranges += [(i, min(i + chunksize, end)) for i in range(start, end, chunksize)]
        super().__init__(ranges, seed=seed, shuffle=shuffle, shufflefirst=shufflefirst)
        self.dslength_per_replica = dslength_per_replica

    def __len__(self):
        return self.dslength_per_replica if self.dslength_per_replica > 0 else super().__len__()


def DistributedChunkedSampler(dataset, *, num_replicas=None, num_samples=None, rank=None,
                              shuffle=True, shufflefirst=False, seed=0, drop_last=None,
                              chunksize=1000000):
    """This rank's ChunkedSampler: rank r of R reads the r-th of R contiguous
    parts of the dataset (so each rank fetches only its own shards), and
    every rank yields the same number of indexes, so that DDP ranks run the
    same number of steps: ceil(N / R), the short last parts topped up from
    the start of the dataset as torch's DistributedSampler does, or with
    drop_last, floor(N / R), the rest left out. `num_replicas` and `rank`
    default to torch.distributed's, else RANK / WORLD_SIZE (or SLURM's)."""
    if num_replicas is None or rank is None:
        where_rank, where_world = node_info()
        if _torch_distributed() is None and where_world == 1:
            warnings.warn("DistributedChunkedSampler: torch.distributed is not initialized "
                          "and no RANK / WORLD_SIZE is set; assuming a single process")
        num_replicas = where_world if num_replicas is None else num_replicas
        rank = where_rank if rank is None else rank
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise ValueError(f"DistributedChunkedSampler: rank {rank} of {num_replicas} replicas")
    total = num_samples if num_samples is not None else len(dataset)
    if drop_last:
        per_rank = total // num_replicas
        start = rank * per_rank
        return ChunkedSampler(dataset, dslength_per_replica=max(per_rank, 0) or -1,
                              num_samples=(start, start + per_rank), chunksize=chunksize,
                              seed=seed, shuffle=shuffle, shufflefirst=shufflefirst)
    per_rank = math.ceil(total / num_replicas)
    start = min(rank * per_rank, total)
    end = min(start + per_rank, total)
    short = per_rank - (end - start)
    padding = [(0, short)] if short > 0 else []
    return ChunkedSampler(dataset, dslength_per_replica=per_rank or -1,
                          num_samples=(start, end), chunksize=chunksize, seed=seed,
                          shuffle=shuffle, shufflefirst=shufflefirst, _extra=padding)
