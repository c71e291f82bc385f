"""Writing shards: TarWriter and ShardWriter over the native writers.

Values are encoded by the field's extension, as the reference does: bytes as
they are, str as UTF-8, and by extension: cls/cls2/class/count/index/inx/id ->
ASCII number, txt/text/transcript/html/htm -> UTF-8, json/jsn -> json.dumps,
pyd/pickle -> pickle, pth -> torch.save, npy -> .npy, npz -> savez_compressed,
jpg/jpeg/img/image, png, pbm/pgm/ppm, tiff/tif -> PIL (ndarrays in uint8 or
float in [0, 1]). A ``.gz`` suffix gzips the encoded value.

>>> import webdataset_cpp as wds
>>> with wds.TarWriter("example.tar") as sink:
...     sink.write({"__key__": "s0", "txt": "hello", "cls": 3})
6

Differences from the reference: the output is reproducible (members carry
mtime 0 unless mtime= is given, owner bigdata, mode 0444, fields sorted);
compression is gzip ("gz", or a path ending in gz) or zstd ("zst"), not bz2/xz;
a file object receives the archive when the writer closes. ShardWriter writes
each shard to a temporary name and renames it when complete, never creates an
empty shard, rolls over before a sample that would take a shard beyond maxsize
bytes of tar (the reference counts payload only and can exceed it), and checks
keys (a dot in a key's basename would not read back as the same key).
"""

import errno
import gzip
import io
import json
import os
import pickle
import re
import shutil
import tempfile

from . import _core


def _image_bytes(data, fmt):
    import numpy as np
    import PIL.Image

    if isinstance(data, np.ndarray):
        if data.dtype in (np.float32, np.float64):
            if data.min() < -0.001 or data.max() > 1.001:
                raise ValueError(f"image values out of range [0, 1]: {data.min()}..{data.max()}")
            data = (np.clip(data, 0.0, 1.0) * 255.0).astype(np.uint8)
        if data.ndim not in (2, 3) or (data.ndim == 3 and data.shape[2] not in (1, 3, 4)):
            raise ValueError(f"images are (H, W) or (H, W, 1|3|4) arrays, got {data.shape}")
        if data.ndim == 3 and data.shape[2] == 1:
            data = data[:, :, 0]
        data = PIL.Image.fromarray(data)
    if not isinstance(data, PIL.Image.Image):
        raise ValueError(f"cannot encode {type(data).__name__} as an image")
    stream = io.BytesIO()
    if fmt == "JPEG":
        data.save(stream, format=fmt, quality=100)
    else:
        data.save(stream, format=fmt)
    return stream.getvalue()


def numpy_dumps(data):
    """An ndarray as .npy bytes."""
    import numpy as np

    if not isinstance(data, np.ndarray):
        raise ValueError(f"npy fields hold ndarrays, got {type(data).__name__}")
    stream = io.BytesIO()
    np.lib.format.write_array(stream, data, allow_pickle=False)
    return stream.getvalue()


def numpy_npz_dumps(data):
    """A dict of ndarrays as .npz bytes."""
    import numpy as np

    stream = io.BytesIO()
    np.savez_compressed(stream, **data)
    return stream.getvalue()


def torch_dumps(data):
    """torch.save to bytes."""
    import torch

    stream = io.BytesIO()
    torch.save(data, stream)
    return stream.getvalue()


def _text(data):
    if not isinstance(data, str):
        raise ValueError(f"text fields hold str, got {type(data).__name__}")
    return data.encode("utf-8")


def make_handlers():
    """The default extension -> encoder table."""
    handlers = {}
    for e in "cls cls2 class count index inx id".split():
        handlers[e] = lambda x: str(x).encode("ascii")
    for e in "txt text transcript html htm".split():
        handlers[e] = _text
    for e in "json jsn".split():
        handlers[e] = lambda x: json.dumps(x).encode("utf-8")
    for e in "pyd pickle".split():
        handlers[e] = pickle.dumps
    handlers["pth"] = torch_dumps
    handlers["npy"] = numpy_dumps
    handlers["npz"] = numpy_npz_dumps
    for e, fmt in (("jpg", "JPEG"), ("jpeg", "JPEG"), ("img", "JPEG"), ("image", "JPEG"),
                   ("png", "PNG"), ("pbm", "PPM"), ("pgm", "PPM"), ("ppm", "PPM"),
                   ("tiff", "TIFF"), ("tif", "TIFF")):
        handlers[e] = lambda x, fmt=fmt: _image_bytes(x, fmt)
    return handlers


default_handlers = make_handlers()


def encode_based_on_extension1(data, tname, handlers):
    """Encodes one value for field `tname`."""
    if tname[0] == "_":
        if not isinstance(data, str):
            raise ValueError("the values of metadata must be of string type")
        return data
    compress = tname.endswith(".gz")
    if compress:
        tname = tname[:-3]
    if isinstance(data, bytes):
        encoded = data
    elif isinstance(data, str):
        encoded = data.encode("utf-8")
    else:
        extension = re.sub(r".*\.", "", tname).lower()
        handler = handlers.get(extension)
        if handler is None:
            raise ValueError(f"no handler found for {extension}")
        encoded = handler(data)
    if compress:
        encoded = gzip.compress(encoded, mtime=0)
    return encoded


def encode_based_on_extension(sample, handlers):
    return {k: encode_based_on_extension1(v, k, handlers) for k, v in sample.items()}


def make_encoder(spec):
    """encoder= of TarWriter: True (the table), False/None (bytes only), a
    dict of extension handlers, or a callable on the whole sample."""
    if spec is False or spec is None:
        return lambda x: x
    if spec is True:
        return lambda x: encode_based_on_extension(x, default_handlers)
    if isinstance(spec, dict):
        return lambda x: encode_based_on_extension(x, spec)
    if callable(spec):
        return spec
    raise ValueError(f"{spec}: unknown decoder spec")


def _compression(compress, path):
    if compress in (None, False):
        if compress is None and isinstance(path, str):
            if path.endswith(("gz", ".tgz")):
                return "gz"
            if path.endswith(".zst"):
                return "zst"
        return "none"
    if compress is True or compress == "gz":
        return "gz"
    if compress in ("zst", "zstd"):
        return "zst"
    raise ValueError(f"compress must be None, False, True, 'gz' or 'zst', got {compress!r}")


def _check_directory(path):
    """A FileNotFoundError for an output path in a missing directory (the
    native writer reports every failure to create a file alike)."""
    if path == "-":
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


def _members(obj, keep_meta):
    """The (member name, bytes) of an encoded sample, sorted by field."""
    if "__key__" not in obj:
        raise ValueError("object must contain a __key__")
    key = obj["__key__"]
    if not _core.is_writable_key(key):
        raise ValueError(f"key {key!r} cannot be written: its basename is empty or holds a dot, "
                         f"so a reader would split its member names differently")
    members = []
    for k in sorted(obj):
        if k == "__key__" or (k.startswith("_") and not keep_meta):
            continue
        v = obj[k]
        if isinstance(v, str):
            v = v.encode("utf-8")
        elif isinstance(v, (bytearray, memoryview)):
            v = bytes(v)
        if not isinstance(v, bytes):
            raise ValueError(f"{k} doesn't map to a bytes after encoding ({type(v)})")
        members.append((f"{key}.{k}", v))
    return members


class _NativeWriter:
    """What TarWriter and ShardWriter share: a context manager over one
    native writer (`_writer`, None once closed) and the sample encoder."""

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()

    def _encode(self, obj):
        """The encoded sample; a ValueError once the writer is closed."""
        if self._writer is None:
            raise ValueError(f"write to a closed {type(self).__name__}")
        return self.encoder(obj)


class TarWriter(_NativeWriter):
    """Writes samples as "key.field" tar members (see the module doc).

    fileobj: a path (or "-" for standard output), or a binary file object
    (it receives the archive when the writer closes and is not closed).
    user, group and mode must stay at the reference's defaults; `format` is
    ignored (as in the reference).
    """

    def __init__(self, fileobj, user="bigdata", group="bigdata", mode=0o444, compress=None,
                 encoder=True, keep_meta=False, mtime=None, format=None, level=-1):
        if (user, group, mode) != ("bigdata", "bigdata", 0o444):
            raise ValueError("TarWriter writes owner bigdata, group bigdata, mode 0o444 only")
        self.encoder = make_encoder(encoder)
        self.keep_meta = keep_meta
        self.stream = None
        if isinstance(fileobj, (str, os.PathLike)):
            path = os.fspath(fileobj)
            _check_directory(path)
        else:
            self.stream = fileobj
            handle, path = tempfile.mkstemp(suffix=".tar")
            os.close(handle)
        self.path = path
        self._writer = _core.TarWriter(path, _compression(compress, path), level,
                                       0 if mtime is None else int(mtime))

    def write(self, obj):
        """Writes one sample; returns the bytes of data written (no headers)."""
        members = _members(self._encode(obj), self.keep_meta)
        return self._writer.write_members(members)

    def close(self):
        """Finishes the archive (and copies it into a file object)."""
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        try:
            writer.close()
            if self.stream is not None:
                with open(self.path, "rb") as f:
                    shutil.copyfileobj(f, self.stream)
        finally:
            if self.stream is not None:
                os.unlink(self.path)


class ShardWriter(_NativeWriter):
    """Writes samples into shards pattern % 0, pattern % 1, ... (see the module
    doc), each at most maxcount samples and maxsize bytes of tar.

    post(fname) runs after each shard is complete; verbose prints one line per
    shard. index=True writes a .idx sidecar beside each shard (equalization
    reads sample counts from it). keep_meta and opener are not supported.
    """

    def __init__(self, pattern, maxcount=100000, maxsize=3e9, post=None, start_shard=0,
                 verbose=1, opener=None, encoder=True, compress=None, mtime=None, index=False,
                 **kw):
        if opener is not None:
            raise ValueError("ShardWriter(opener=...) is not supported: shards are files")
        if kw.pop("keep_meta", False):
            raise ValueError("ShardWriter(keep_meta=True) is not supported")
        if kw:
            raise TypeError(f"ShardWriter: unexpected arguments {sorted(kw)}")
        try:
            pattern % 0
        except TypeError:
            raise ValueError(f"ShardWriter: {pattern!r} is not a %-format pattern") from None
        _check_directory(pattern)
        self.encoder = make_encoder(encoder)
        self.post = post
        self.verbose = verbose
        self.total = 0
        self._writer = _core.ShardWriter(
            pattern, maxcount=int(maxcount), maxsize=int(maxsize),
            compression=_compression(compress, pattern), mtime=0 if mtime is None else int(mtime),
            first_shard=start_shard, index=index, on_close=self._closed_shard)

    def _closed_shard(self, path, samples, data_bytes, file_bytes):
        if self.verbose:
            print(f"# writing {path} {samples} {data_bytes / 1e9:.1f} GB {self.total}")
        if self.post is not None:
            self.post(path)

    def write(self, obj):
        """Writes one sample."""
        obj = self._encode(obj)
        members = _members(obj, keep_meta=False)
        prefix = len(obj["__key__"]) + 1
        self._writer.write(obj["__key__"], [(name[prefix:], data) for name, data in members])
        self.total += 1

    @property
    def shard(self):
        return self._writer.shards_written if self._writer else self._shards

    def close(self):
        """Finishes the last shard."""
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        writer.close()
        self._shards = writer.shards_written
