"""Reading shards: tar members grouped into samples.

``tarfile_to_samples()`` turns shard URLs into samples ``{"__key__", "__url__",
<field>: bytes, ...}``. It runs natively (``select_files`` / ``rename_files``
make it read the members natively and group them in Python, since those are
Python callables on member names). Grouping follows the format's rules: key =
directory + basename up to the first dot, field = the rest, lower-cased;
consecutive members with one key form a sample; names without a dot in the
basename and metadata names (``__x__``) belong to no sample; a sample never
spans shards; a repeated field is an error. Remote URLs (http(s)://, s3://,
gs://) are read by the native remote reader, with ``remote=RemoteOptions(...)``
when given (an extension of the reference's signatures).

>>> from webdataset_cpp.tariterators import base_plus_ext
>>> base_plus_ext("dir.x/a.seg.png")
('dir.x/a', 'seg.png')
"""

from . import _core
from . import handlers as _handlers
from ._plan import Stage
from .errors import DataError
from .handlers import reraise_exception
from .remote import native_options


def base_plus_ext(path):
    """(key, field) of a member name, or (None, None) when it has no field."""
    slash = path.rfind("/")
    dot = path.find(".", slash + 1)
    if dot <= slash + 1:
        return None, None
    return path[:dot], path[dot + 1:]


def is_metadata_name(name):
    """True for a top-level "__x__" and for "__x__/..." (skipped, as in the
    reference)."""
    if not name.startswith("__"):
        return False
    slash = name.find("/")
    if slash < 0:
        return name.endswith("__")
    return slash >= 4 and name[slash - 2:slash] == "__"


def valid_sample(sample):
    return bool(sample) and not sample.get("__bad__", False)


def _url_of(item):
    return item["url"] if isinstance(item, dict) else item


def tar_file_expander(data, handler=reraise_exception, select_files=None, rename_files=None, *,
                      remote=None):
    """Yields {"fname", "data", "__url__"} for every member of every shard,
    and an empty dict after each shard (so that grouping never spans shards)."""
    from .shardlists import check_secure

    options = native_options(remote)
    for source in data:
        url = _url_of(source)
        check_secure([url])
        members = None
        try:
            members = _core.TarMembers(url, options)
            for name, payload in members:
                if rename_files is not None:
                    name = rename_files(name)
                if select_files is not None and not select_files(name):
                    continue
                yield {"fname": name, "data": payload, "__url__": url}
        except Exception as exn:
            if not handler(exn):
                return
        finally:
            if members is not None:
                members.close()
        yield {}


def group_by_keys(data, keys=base_plus_ext, lcase=True, suffixes=None, handler=reraise_exception):
    """Groups consecutive members with one key into samples."""
    current = None
    for member in data:
        if not member:
            if current is not None and valid_sample(current):
                yield current
            current = None
            continue
        name = member["fname"]
        if is_metadata_name(name):
            continue
        key, field = keys(name)
        if key is None:
            continue
        if lcase:
            field = field.lower()
        if current is None or key != current["__key__"]:
            if current is not None and valid_sample(current):
                yield current
            current = {"__key__": key, "__url__": member["__url__"]}
        if suffixes is not None and field not in suffixes:
            continue
        if field in current:
            exn = DataError(f"{member['__url__']}: duplicate field '{field}' in sample {key} "
                            f"(member {name})")
            if handler(exn):
                continue
            return
        current[field] = member["data"]
    if current is not None and valid_sample(current):
        yield current


def tarfile_samples(src, handler=reraise_exception, select_files=None, rename_files=None, *,
                    remote=None):
    """Samples of the shards `src` names, grouped in Python."""
    members = tar_file_expander(src, handler=handler, select_files=select_files,
                                rename_files=rename_files, remote=remote)
    return group_by_keys(members, handler=handler)


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
        return self.select_files is None and self.rename_files is None

    def fusable(self):
        return self.is_native(None)

    def core_handler(self):
        return _handlers.for_native(self.handler)

    def core_remote(self):
        return native_options(self.remote)

    def python(self, src, ctx):
        return tarfile_samples(src, handler=self.handler, select_files=self.select_files,
                               rename_files=self.rename_files, remote=self.remote)


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


def url_opener(data, handler=reraise_exception, **kw):
    """Adds an open stream (gopen) to each {"url": ...}."""
    from .gopen import gopen

    for sample in data:
        url = _url_of(sample)
        try:
            stream = gopen(url, **kw)
            sample = dict(sample) if isinstance(sample, dict) else {"url": url}
            sample.update(stream=stream)
            yield sample
        except Exception as exn:
            exn.args = exn.args + (url,)
            if not handler(exn):
                break
