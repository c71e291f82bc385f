"""Reading shards: tar members grouped into samples.

``tarfile_to_samples()`` turns shard URLs into samples ``{"__key__", "__url__",
<field>: bytes, ...}`` in the native core (GIL released). Its ``select_files``
and ``rename_files`` are called by the core's grouping, with the GIL, in the
reference's order (``rename_files(name)``, then ``select_files`` on the new
name; never on metadata names), their exceptions handed to the handler member
by member as the reference does. Remote URLs are read natively, with
``remote=RemoteOptions(...)`` when given (an extension of the reference's
signatures).

The reference's three steps, with its keyword arguments, are for code that
composes them itself:

* ``url_opener(urls)`` adds a ``"stream"`` to each ``{"url": ...}``;
* ``tar_file_expander(streams)`` yields ``{"fname", "data", "__url__"}`` per
  member and, after each shard, the end-of-shard marker ``eof_value`` (by
  default ``{}``, as in 1.0.2; ``eof_value=None`` yields none);
* ``group_by_keys(members)`` groups consecutive members with one key into a
  sample; an empty dict (the marker) ends the current sample.

A stream that ``url_opener`` opened, or a local file, is read by the native tar
reader, which is stricter than the reference's ``tarfile``: a shard truncated
at a member boundary, or a gzip stream without its trailer, raises
:class:`~webdataset_cpp.errors.ShardReadError` (a ``tarfile.ReadError``). Any
other file object is read with ``tarfile``, as the reference does. Errors name
the shard; unlike the reference, their ``args`` are not extended with the
stream and URL.

>>> from webdataset_cpp.tariterators import base_plus_ext
>>> base_plus_ext("dir.x/a.seg.png"), base_plus_ext("dir/sub/.cfg.json")
(('dir.x/a', 'seg.png'), ('dir/sub/', 'cfg.json'))
"""

import os
import re
import tarfile

from . import _core
from . import handlers as _handlers
from ._plan import Stage
from .errors import DataError, ShardReadError
from .gopen import gopen
from .handlers import reraise_exception
from .remote import native_options
from .shardlists import check_secure

trace = False
meta_prefix = "__"
meta_suffix = "__"
# Metadata names (__x__ and __x__/...), which belong to no sample.
_SKIP_META = r"__[^/]*__($|/)"


def base_plus_ext(path):
    """(key, field) of a member name, or (None, None) when it has no field.

    The key is the directory and the basename up to its first dot; a basename
    that starts with a dot ("dir/.cfg.json") has the directory for its key
    when the directory's last part has no dot.
    """
    slash = path.rfind("/")
    dot = path.find(".", slash + 1)
    if dot > slash + 1:
        return path[:dot], path[dot + 1:]
    if dot == slash + 1 and slash >= 0 and "." not in path[path.rfind("/", 0, slash) + 1:slash]:
        return path[:slash + 1], path[dot + 1:]
    return None, None


def valid_sample(sample):
    """True for a non-empty dict that is not marked ``__bad__``."""
    return isinstance(sample, dict) and len(sample) > 0 and not sample.get("__bad__", False)


def shardlist(urls, *, shuffle=False):
    """Yields ``{"url": url}`` for a brace pattern or a list (shuffled with the
    global ``random`` when `shuffle`); the reference's unused helper."""
    import random

    urls = _core.expand_urls(urls) if isinstance(urls, str) else list(urls)
    if shuffle:
        random.shuffle(urls)
    for url in urls:
        yield dict(url=url)


class ShardStream:
    """The stream ``url_opener`` gives a ``pipe:`` or remote URL: opened with
    gopen at its first read, or read natively by ``tar_file_iterator`` when it
    was never read (so the command runs once, in the native reader, and its
    exit status is checked)."""

    def __init__(self, url, **kw):
        self.url = url
        self.name = url
        self.kw = kw
        self._stream = None

    @property
    def untouched(self):
        return self._stream is None

    def _opened(self):
        if self._stream is None:
            self._stream = gopen(self.url, **self.kw)
        return self._stream

    def read(self, *args):
        return self._opened().read(*args)

    def readinto(self, buffer):
        return self._opened().readinto(buffer)

    def close(self):
        if self._stream is not None:
            self._stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()

    def __repr__(self):
        return f"<ShardStream {self.url!r}>"


def _is_local(url):
    return "://" not in url and not url.startswith("pipe:") and url != "-"


def url_opener(data, handler=reraise_exception, **kw):
    """Adds ``"stream"`` to each ``{"url": ...}`` (a plain URL string is
    accepted too) and yields it; `kw` goes to gopen (``remote=`` included).

    Local files are opened here, so a missing one reaches `handler` from this
    step, with the URL appended to its ``args`` (as in the reference);
    ``pipe:`` and remote URLs are opened at their first read (a ShardStream).
    """
    for sample in data:
        url = sample["url"] if isinstance(sample, dict) else sample
        try:
            if _is_local(url) or url.startswith("file:"):
                stream = gopen(url, **kw)
            else:
                check_secure([url])
                native_options(kw.get("remote"))
                stream = ShardStream(url, **kw)
            sample = sample if isinstance(sample, dict) else {"url": url}
            sample.update(stream=stream)
            yield sample
        except Exception as exn:
            exn.args = exn.args + (url,)
            if not handler(exn):
                break


def _native_url(fileobj):
    """The URL to read `fileobj` natively from, or None (read it with tarfile).

    A ShardStream nothing has read yet, or a local file still at its start
    whose name is the open file (same device and inode)."""
    if isinstance(fileobj, ShardStream):
        return fileobj.url if fileobj.untouched else None
    name = getattr(fileobj, "name", None)
    if not isinstance(name, str) or not hasattr(fileobj, "fileno"):
        return None
    try:
        if fileobj.tell() != 0:
            return None
        opened, named = os.fstat(fileobj.fileno()), os.stat(name)
    except (OSError, ValueError):
        return None
    same = (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino)
    return name if same and os.path.isfile(name) else None


def _native_members(url, remote):
    members = _core.TarMembers(url, native_options(remote))
    try:
        yield from members
    finally:
        members.close()


def _tarfile_members(fileobj, url):
    try:
        with tarfile.open(fileobj=fileobj, mode="r|*") as archive:
            for info in archive:
                if info.isreg():
                    yield info.name, archive.extractfile(info).read()
                    archive.members = []
    except tarfile.ReadError as exn:
        raise ShardReadError(f"{url}: {exn}") from exn


def _members(fileobj, url):
    """(name, bytes) of the regular members of `fileobj`; errors name `url`
    (else the stream's name)."""
    native = _native_url(fileobj)
    if native is None:
        return _tarfile_members(fileobj, url or getattr(fileobj, "name", None) or repr(fileobj))
    remote = fileobj.kw.get("remote") if isinstance(fileobj, ShardStream) else None
    return _native_members(native, remote)


def _skipped(name, skip_meta):
    if "/" not in name and name.startswith(meta_prefix) and name.endswith(meta_suffix):
        return True
    return skip_meta is not None and re.match(skip_meta, name) is not None


def tar_file_iterator(fileobj, skip_meta=_SKIP_META, handler=reraise_exception,
                      select_files=None, rename_files=None):
    """Yields ``{"fname", "data"}`` for each regular member of the tar stream
    `fileobj`, except metadata names (top-level ``__x__``, and names that
    `skip_meta` matches).

    Errors of `rename_files` or `select_files` go to `handler` (True: next
    member, False: end the shard quietly); an unreadable shard raises.
    """
    return _member_dicts(fileobj, None, skip_meta, handler, select_files, rename_files)


def _member_dicts(fileobj, url, skip_meta, handler, select_files, rename_files):
    for name, data in _members(fileobj, url):
        try:
            if _skipped(name, skip_meta):
                continue
            if rename_files:
                name = rename_files(name)
            if select_files is not None and not select_files(name):
                continue
        except Exception as exn:
            if handler(exn):
                continue
            break
        yield dict(fname=name, data=data)


def tar_file_expander(data, handler=reraise_exception, select_files=None, rename_files=None,
                      eof_value={}):  # noqa: B006 (the reference's default, one shared marker)
    """Yields the members of each ``{"url", "stream"}`` as ``{"fname", "data",
    "__url__"}`` (and ``"__local_path__"`` when the source has a
    ``"local_path"``), then `eof_value` unless it is None.

    A shard that fails goes to `handler` (True: next shard, False: stop); it
    gets no end-of-shard marker, as in the reference.
    """
    for source in data:
        try:
            url = source["url"]
            local_path = source.get("local_path")
            for member in _member_dicts(source["stream"], url, _SKIP_META, handler,
                                        select_files, rename_files):
                member["__url__"] = url
                if local_path is not None:
                    member["__local_path__"] = local_path
                yield member
            if eof_value is not None:
                yield eof_value
        except Exception as exn:
            if not handler(exn):
                break


def _add_member(sample, member, field, suffixes):
    if field in sample:
        raise DataError(f"{member.get('__url__')}: duplicate field '{field}' in sample "
                        f"{sample['__key__']} (member {member['fname']})")
    if suffixes is None or field in suffixes:
        sample[field] = member["data"]
    if member.get("__local_path__") is not None:
        sample["__local_path__"] = member["__local_path__"]


def group_by_keys(data, keys=base_plus_ext, lcase=True, suffixes=None, handler=reraise_exception):
    """Groups consecutive members ``{"fname", "data", "__url__"}`` with one key
    (``keys(fname)``; None: not a sample's member) into samples; an empty dict
    ends the current sample (the end-of-shard marker).

    A repeated field raises DataError (a ValueError, as in the reference); a
    `handler` returning True drops that member, False ends the stream (the
    sample being grouped is still yielded, as in the reference).
    """
    current = None
    for member in data:
        try:
            if member == {}:
                if valid_sample(current):
                    yield current
                current = None
                continue
            key, field = keys(member["fname"])
            if key is None:
                continue
            if lcase:
                field = field.lower()
            if current is None or key != current["__key__"]:
                if valid_sample(current):
                    yield current
                current = dict(__key__=key, __url__=member["__url__"])
            _add_member(current, member, field, suffixes)
        except Exception as exn:
            if not handler(exn):
                break
    if valid_sample(current):
        yield current


def tarfile_samples(src, handler=reraise_exception, select_files=None, rename_files=None, *,
                    remote=None):
    """Samples of the shards `src` names (URLs or ``{"url": ...}``), read and
    grouped by the native core as tarfile_to_samples() does."""
    return TarfileToSamples(handler=handler, select_files=select_files,
                            rename_files=rename_files, remote=remote)(src)


class TarfileToSamples(Stage):
    """The stage tarfile_to_samples() makes (see the module doc)."""

    reads_urls = True

    def __init__(self, handler=reraise_exception, select_files=None, rename_files=None,
                 remote=None):
        native_options(remote)  # a TypeError now rather than at the first read
        self.handler = handler
        self.select_files = select_files
        self.rename_files = rename_files
        self.remote = remote

    def is_native(self, ctx):
        return True

    def fusable(self):
        # Member callables run in the URL source, fed by the Python shard list.
        return self.select_files is None and self.rename_files is None

    def core_handler(self):
        return _handlers.for_native(self.handler)

    def core_remote(self):
        return native_options(self.remote)


def tarfile_to_samples(handler=reraise_exception, select_files=None, rename_files=None, *,
                       remote=None):
    """Reads the shards of an iterator of URLs (or {"url": ...} dicts);
    remote URLs with `remote` (a RemoteOptions) when given.

    >>> import webdataset_cpp as wds
    >>> pipeline = wds.DataPipeline(wds.SimpleShardList("data-{000..009}.tar"),
    ...                             wds.split_by_worker, wds.tarfile_to_samples())
    """
    return TarfileToSamples(handler=handler, select_files=select_files,
                            rename_files=rename_files, remote=remote)
