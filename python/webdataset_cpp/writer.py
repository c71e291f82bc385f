"""Writing shards: TarWriter and ShardWriter over the native writers.

Values are encoded by the field's extension, as the reference does: bytes as
they are, str as UTF-8, and by extension: cls/cls2/class/count/index/inx/id ->
ASCII number, txt/text/transcript/html/htm -> UTF-8, json/jsn -> json.dumps,
pyd/pickle -> pickle, pth -> torch.save, npy -> .npy, npz -> savez_compressed,
ten/tenbin/tb -> tenbin (an array or a list of arrays; webdataset_cpp.tenbin),
mp/msgpack/msg -> msgpack, cbor -> cbor, jpg/jpeg/img/image, png, pbm/pgm/ppm,
tiff/tif -> PIL (ndarrays in uint8 or float in [0, 1]). A ``.gz`` suffix
gzips the encoded value.

Outputs are local paths, "-" (standard output), binary file objects, and the
URLs gopen writes (``pipe:CMD``, s3:// natively, gs:// natively with GCS credentials in the
environment or else with gsutil, http(s) with curl): a
``pipe:`` command receives the archive as it is written, and an exit status
other than 0 (or 141, SIGPIPE) raises OSError naming the command at the
latest when the writer closes. ShardWriter takes ``pattern % n`` URLs alike
(``ShardWriter("pipe:aws s3 cp - s3://b/shard-%06d.tar")``) and ``opener``.
While ``webdataset_cpp.utils.enforce_security`` is set, writing to pipe:
URLs and local paths is refused, as the reference's gopen refuses them.

>>> import webdataset_cpp as wds
>>> with wds.TarWriter("example.tar") as sink:
...     sink.write({"__key__": "s0", "txt": "hello", "cls": 3})
6

Differences from the reference: the output is reproducible (members carry
mtime 0 unless mtime= is given, owner bigdata, mode 0444, fields sorted);
compression is gzip ("gz", or a path ending in gz) or zstd ("zst"), not bz2/xz;
a file object receives the archive when the writer closes. ShardWriter writes
each local shard to a temporary name and renames it when complete, never
creates an empty shard, rolls over before a sample that would take a shard
beyond maxsize bytes of tar (the reference counts payload only and can exceed
it), and checks keys (a dot in a key's basename would not read back as the
same key). A ``.gz`` field is gzipped reproducibly (the reference stamps the
gzip header with the time).
"""

import errno
import gzip
import io
import json
import os
import pickle
import re
import shutil
import subprocess
import tempfile

from . import _core
from .gopen import (_refuse_if_secure, gcs_writes_natively, gopen, gopen_remote, gopen_schemes,
                    local_path, rewrite_url)
from .remote import native_options

# imageencoder's format names that PIL spells differently.
_PIL_FORMATS = {"JPG": "JPEG", "IMG": "PPM", "IMAGE": "PPM", "PBM": "PPM", "PGM": "PPM",
                "TIF": "TIFF"}


def imageencoder(image, format="PNG"):
    """An image (PIL, or an (H, W) / (H, W, 1|3|4) ndarray of uint8 or of floats
    in [0, 1]) compressed by PIL in `format` (PNG, JPEG/JPG, PPM, TIFF, ...;
    JPEG at quality 100). Unlike the reference, pbm and pgm write PPM (its
    PIL has no such writers) and a bad image is a ValueError, not an assertion."""
    fmt = format.upper()
    return _image_bytes(image, _PIL_FORMATS.get(fmt, fmt))


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


def bytestr(data):
    """bytes as they are, anything else as the ASCII of str()."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("ascii")
    return str(data).encode("ascii")


def tenbin_dumps(x):
    """An array, or a list of arrays, in the tenbin format (a memoryview)."""
    from . import tenbin

    return memoryview(tenbin.encode_buffer(x if isinstance(x, list) else [x]))


def mp_dumps(x):
    """msgpack.packb (needs msgpack)."""
    import msgpack

    return msgpack.packb(x)


def cbor_dumps(x):
    """cbor.dumps (needs cbor)."""
    import cbor

    return cbor.dumps(x)


def add_handlers(d, keys, value):
    """Maps each of `keys` (a list or a space-separated string) to `value` in d."""
    for k in keys.split() if isinstance(keys, str) else keys:
        d[k] = value


def _text(data):
    if not isinstance(data, str):
        raise ValueError(f"text fields hold str, got {type(data).__name__}")
    return data.encode("utf-8")


def make_handlers():
    """The default extension -> encoder table."""
    handlers = {}
    add_handlers(handlers, "cls cls2 class count index inx id", lambda x: str(x).encode("ascii"))
    add_handlers(handlers, "txt text transcript html htm", _text)
    add_handlers(handlers, "json jsn", lambda x: json.dumps(x).encode("utf-8"))
    add_handlers(handlers, "pyd pickle", pickle.dumps)
    add_handlers(handlers, "pth", torch_dumps)
    add_handlers(handlers, "npy", numpy_dumps)
    add_handlers(handlers, "npz", numpy_npz_dumps)
    add_handlers(handlers, "ten tenbin tb", tenbin_dumps)
    add_handlers(handlers, "mp msgpack msg", mp_dumps)
    add_handlers(handlers, "cbor", cbor_dumps)
    for keys, fmt in (("jpg jpeg img image", "JPEG"), ("png", "PNG"), ("pbm pgm ppm", "PPM"),
                      ("tiff tif", "TIFF")):
        add_handlers(handlers, keys, lambda x, fmt=fmt: _image_bytes(x, fmt))
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


def _fileno(stream):
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


class _Output:
    """Where a TarWriter's archive goes: `path`, which the native writer
    creates, and what happens once it is closed.

    A local path (or "-") is written in place. A URL is opened with gopen;
    when the stream has a descriptor (a pipe: command's stdin), the native
    writer writes into it through /dev/fd, so the command receives the
    archive as it is written; otherwise, as for a file object, the archive
    goes to a temporary file that is copied into the stream at close.
    """

    def __init__(self, fileobj):
        self.stream = None  # receives the temporary file at close
        self.owns_stream = False
        self.done = False  # finish() or abandon() ran
        self.pipe = None  # a gopen stream the native writer writes through its descriptor
        self.temporary = False
        if isinstance(fileobj, os.PathLike):
            fileobj = os.fspath(fileobj)
        if not isinstance(fileobj, str):
            self.stream = fileobj
        elif fileobj == "-":
            self.path = "-"
            return
        elif local_path(fileobj) is not None:
            _refuse_if_secure(fileobj, "writing local files is")
            self.path = local_path(fileobj)
            _check_directory(self.path)
            return
        else:
            stream = gopen(fileobj, "wb")
            fd = _fileno(stream)
            if fd is not None and os.path.isdir("/dev/fd"):
                self.pipe, self.path = stream, f"/dev/fd/{fd}"
                return
            self.stream, self.owns_stream = stream, True
        handle, self.path = tempfile.mkstemp(suffix=".tar")
        os.close(handle)
        self.temporary = True

    def check_failure(self, exn):
        """For a native write or close that failed (`exn`) on a pipe: raises
        OSError naming the command, with its bad exit status, or saying that
        it stopped reading (it exited, or closed its input, before the end)."""
        if self.pipe is None:
            return
        proc = getattr(self.pipe, "proc", None)
        if proc is not None:
            try:
                proc.wait(timeout=1.0)  # a write fails as the command exits: let it finish
            except subprocess.TimeoutExpired:
                pass
        try:
            getattr(self.pipe, "check_status", lambda: None)()
        except OSError as failure:
            raise failure from exn
        command = getattr(self.pipe, "cmd", self.pipe)
        raise BrokenPipeError(errno.EPIPE, f"{command}: the command stopped reading the "
                                           f"archive ({exn})") from exn

    def finish(self, close_writer):
        """Runs close_writer(), then delivers the archive (closes the pipe,
        whose command's status is checked, or copies into the stream). A
        stream of ours that can be given up (an s3:// or gs:// upload) is, when this
        fails before it is closed."""
        try:
            try:
                close_writer()
            except Exception as exn:
                self.check_failure(exn)
                raise
            if self.pipe is not None:
                self.pipe.close()
            elif self.stream is not None:
                with open(self.path, "rb") as f:
                    shutil.copyfileobj(f, self.stream, 1 << 20)
                if self.owns_stream:
                    self.stream.close()
        except BaseException:
            self._give_up()
            raise
        finally:
            self.done = True
            if self.temporary:
                os.unlink(self.path)

    def _give_up(self):
        if self.owns_stream and hasattr(self.stream, "abort") and not self.stream.closed:
            self.stream.abort()

    def abandon(self):
        """Undoes what __init__ did, for a native writer that failed to start."""
        try:
            self._give_up()
            if self.pipe is not None:
                self.pipe.close()
        except OSError:
            pass  # the writer's own error is the one to report
        finally:
            self.done = True
            if self.temporary:
                os.unlink(self.path)

    def __del__(self):
        # A TarWriter dropped unclosed: its archive is never delivered (an
        # s3:// or gs:// upload is given up), and the temporary file goes.
        if getattr(self, "done", True):
            return
        self.done = True
        try:
            self._give_up()
        finally:
            if self.temporary and os.path.exists(self.path):
                os.unlink(self.path)


def _native_upload(pattern):
    """Whether shards of `pattern` go to s3:// or gs:// through the native
    writer: the gopen handler of its scheme is the built-in one (for gs://,
    with GCS credentials in the environment: gcs_writes_natively), and
    GOPEN_REWRITE leaves the pattern as it is."""
    scheme = pattern.split("://", 1)[0] if "://" in pattern else ""
    return (scheme in ("s3", "gs") and gopen_schemes.get(scheme) is gopen_remote
            and (scheme == "s3" or gcs_writes_natively())
            and rewrite_url(pattern) == pattern)


def _threads(compress_threads):
    """compress_threads checked: an int from 1 to 256."""
    if isinstance(compress_threads, bool) or not isinstance(compress_threads, int):
        raise TypeError(f"compress_threads takes an int, not {type(compress_threads).__name__}")
    if not 1 <= compress_threads <= 256:
        raise ValueError(f"compress_threads must be from 1 to 256, got {compress_threads}")
    return compress_threads


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

    fileobj: a path, "-" (standard output), a URL gopen writes (pipe:CMD, ...),
    or a binary file object (it receives the archive when the writer closes
    and is not closed). user, group and mode must stay at the reference's
    defaults; `format` is ignored (as in the reference). compress_threads
    (not in the reference): threads compressing a .gz or .zst archive, 1 to
    256 (the gzip bytes are the same for any number; zstd's for any from 2).
    """

    def __init__(self, fileobj, user="bigdata", group="bigdata", mode=0o444, compress=None,
                 encoder=True, keep_meta=False, mtime=None, format=None, level=-1,
                 compress_threads=1):
        if (user, group, mode) != ("bigdata", "bigdata", 0o444):
            raise ValueError("TarWriter writes owner bigdata, group bigdata, mode 0o444 only")
        self.encoder = make_encoder(encoder)
        self.keep_meta = keep_meta
        self.user, self.group, self.mode = user, group, mode
        self.compress, self.mtime = compress, mtime
        self._output = _Output(fileobj)
        name = os.fspath(fileobj) if isinstance(fileobj, (str, os.PathLike)) else None
        try:
            self._writer = _core.TarWriter(self._output.path, _compression(compress, name), level,
                                           0 if mtime is None else int(mtime),
                                           _threads(compress_threads))
        except BaseException:
            self._output.abandon()
            raise

    def write(self, obj):
        """Writes one sample; returns the bytes of data written (no headers)."""
        return self._write_members(_members(self._encode(obj), self.keep_meta))

    def _write_members(self, members):
        try:
            return self._writer.write_members(members)
        except Exception as exn:
            self._output.check_failure(exn)
            raise

    def close(self):
        """Finishes the archive and delivers it (see the module doc)."""
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        self._output.finish(writer.close)


class _StreamShards:
    """The shards of a ShardWriter whose outputs are URLs (pattern % n, e.g.
    pipe:) or opener(pattern % n) streams, each written by a TarWriter as it
    goes (no temporary name). They roll over by the core's rule, as local
    shards do."""

    def __init__(self, pattern, maxcount, maxsize, compress, mtime, first_shard, opener,
                 on_close, compress_threads):
        self._roller = _core.ShardRoller(int(maxcount), int(maxsize))
        self._pattern, self._opener, self._on_close = pattern, opener, on_close
        self._compress, self._mtime = compress, mtime
        self._compress_threads = compress_threads
        self._next = first_shard
        self._tar = None
        self.shards_written = 0

    def write(self, key, fields):
        members = [(f"{key}.{field}", data) for field, data in fields]
        if self._roller.add([(name, len(data)) for name, data in members]):
            self._finish()
            self._start()
        self._bytes += self._tar._write_members(members)
        self._count += 1

    def _start(self):
        self._name = self._pattern % self._next
        self._next += 1
        target = self._name if self._opener is None else self._opener(self._name)
        self._tar = TarWriter(target, encoder=False, compress=self._compress, mtime=self._mtime,
                              compress_threads=self._compress_threads)
        self._count = self._bytes = 0

    def _finish(self):
        if self._tar is None:
            return
        tar, self._tar = self._tar, None
        tar.close()
        self.shards_written += 1
        self._on_close(self._name, self._count, self._bytes, 0)

    def close(self):
        self._finish()


class ShardWriter(_NativeWriter):
    """Writes samples into shards pattern % 0, pattern % 1, ... (see the module
    doc), each at most maxcount samples and maxsize bytes of tar.

    post(fname) runs after each shard is complete; verbose prints one line per
    shard. index=True writes a .idx sidecar beside each local, s3:// or gs://
    shard (equalization reads sample counts from it). opener(fname) returns the
    stream a shard is written to. An s3:// or gs:// pattern is written by the native
    writer: each shard staged in $TMPDIR and uploaded when complete (it
    appears whole or not at all), with remote=RemoteOptions(...) for the
    upload (upload_part_size, retries); the upload runs while the next shard
    fills (post runs, and an upload's error is raised, by the write that
    finishes the next shard, or close), unless upload_in_background=False.
    compress_threads (not in the reference): threads compressing each .gz or
    .zst shard, as TarWriter's.
    Of TarWriter's arguments, which the
    reference passes on, user, group and mode must keep their defaults, format
    is ignored and keep_meta is not supported.
    """

    def __init__(self, pattern, maxcount=100000, maxsize=3e9, post=None, start_shard=0,
                 verbose=1, opener=None, encoder=True, compress=None, mtime=None, index=False,
                 remote=None, upload_in_background=True, compress_threads=1, **kw):
        if kw.pop("keep_meta", False):
            raise ValueError("ShardWriter(keep_meta=True) is not supported")
        # The reference passes these on to TarWriter; they are checked (or, for
        # format, ignored) as TarWriter does.
        if (kw.pop("user", "bigdata"), kw.pop("group", "bigdata"),
                kw.pop("mode", 0o444)) != ("bigdata", "bigdata", 0o444):
            raise ValueError("ShardWriter writes owner bigdata, group bigdata, mode 0o444 only")
        kw.pop("format", None)
        if kw:
            raise TypeError(f"ShardWriter: unexpected arguments {sorted(kw)}")
        try:
            pattern % 0
        except TypeError:
            raise ValueError(f"ShardWriter: {pattern!r} is not a %-format pattern") from None
        self.encoder = make_encoder(encoder)
        self.post = post
        self.verbose = verbose
        self.total = 0
        self.pattern, self.maxcount, self.maxsize, self.opener = pattern, maxcount, maxsize, opener
        path = local_path(pattern) if opener is None else None
        if opener is None and _native_upload(pattern):
            self._writer = _core.ShardWriter(
                pattern, maxcount=int(maxcount), maxsize=int(maxsize),
                compression=_compression(compress, pattern),
                mtime=0 if mtime is None else int(mtime), threads=_threads(compress_threads),
                first_shard=start_shard, index=index, on_close=self._closed_shard,
                remote=native_options(remote), upload_in_background=bool(upload_in_background))
            return
        if path is None:
            if index:
                raise ValueError(f"ShardWriter(index=True) writes local, s3:// and gs:// (with "
                                 f"GCS credentials in the environment) shards only, "
                                 f"not {pattern!r}")
            self._writer = _StreamShards(pattern, maxcount, maxsize, compress, mtime,
                                         start_shard, opener, self._closed_shard,
                                         _threads(compress_threads))
            return
        _refuse_if_secure(pattern, "writing local files is")
        _check_directory(path)
        self._writer = _core.ShardWriter(
            path, maxcount=int(maxcount), maxsize=int(maxsize),
            compression=_compression(compress, path), mtime=0 if mtime is None else int(mtime),
            threads=_threads(compress_threads), first_shard=start_shard, index=index,
            on_close=self._closed_shard)

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
