"""Exceptions of webdataset_cpp.

Native errors arrive as conventional Python exceptions whose message names the
shard URL and, where there is one, the member and its byte offset. Where the
reference package raises an exception of its own kind, ours is an instance of
that kind too, so that code written for the reference catches it:

* ``FileNotFoundError`` / ``PermissionError`` / ``OSError``: a shard that
  cannot be opened (``filename`` is its path);
* :class:`ShardReadError` (a :class:`DataError` and a ``tarfile.ReadError``):
  a truncated or corrupt tar, gzip or zstd shard, or one that is not a tar;
* :class:`CommandError` (a :class:`DataError` and an ``OSError``): a ``pipe:``
  command that exited non-zero; :class:`PipeShardError` (both of the above): a
  ``pipe:`` shard whose output is not a readable tar;
* :class:`DecodingError` (a :class:`DataError`): a field that does not decode;
  when a Python decoder raised, the original exception is its ``__cause__``;
* :class:`ObjectChangedError` (a :class:`DataError`): a remote shard that
  another version replaced while it was read, or since a reader pinned to
  its first version (wids' ranged reads) opened it;
* :class:`DataError` (a ``ValueError``): other bad data (a repeated field, a
  sample without a field a stage needs, collation);
* ``ValueError``: bad arguments, and setups that cannot work (more loader
  workers than shards).

>>> import tarfile
>>> import webdataset_cpp as wds
>>> issubclass(wds.ShardReadError, tarfile.ReadError), issubclass(wds.ShardReadError, ValueError)
(True, True)
>>> issubclass(wds.CommandError, OSError), issubclass(wds.DecodingError, ValueError)
(True, True)
"""

import tarfile


class DataError(ValueError):
    """A shard, member or field is corrupt, truncated or not what a stage needs."""


class ShardReadError(DataError, tarfile.ReadError):
    """A shard is truncated, corrupt or not a tar archive.

    The reference reads shards with ``tarfile`` and raises ``tarfile.ReadError``
    there; this is both that and a :class:`DataError`, so either ``except``
    clause catches it. Unlike ``tarfile``, a shard cut at a member boundary and
    a gzip stream without its trailer are errors too.
    """


class CommandError(DataError, OSError):
    """A ``pipe:`` command exited non-zero (its output may be incomplete).

    The reference raises ``OSError`` there (when it notices); this is both an
    ``OSError`` and a :class:`DataError`.
    """


class PipeShardError(ShardReadError, CommandError):
    """A ``pipe:`` shard that is not a readable tar: both a :class:`ShardReadError`
    and a :class:`CommandError`.

    The reference raises ``OSError`` when the command failed and
    ``tarfile.ReadError`` when it exited 0 with bad output; the tar reader
    sees the output before the exit status, so this is both. A command that
    writes nothing (``pipe:curl -f`` of a missing object exits 22) raises
    :class:`CommandError` with its exit status: the reader waits for it there.
    """


class ObjectChangedError(DataError):
    """A remote object changed while it was read, or since a reader pinned to
    its first version opened it: another version answered (its ETag,
    Last-Modified or size differ, or the server refused the request with
    HTTP 412). The message names the URL and what changed; ``url`` is the
    URL."""

    url = None


class DecodingError(DataError):
    """A decoder failed on field ``k`` of the sample ``key`` from shard ``url``.

    The reference package's signature, plus ``message``; unlike the
    reference's (a plain ``Exception`` whose ``str()`` is empty), it is a
    :class:`DataError` and ``str(e)`` says what failed. Raised by native
    decoders too (``__cause__`` None), with ``sample`` None.

    >>> str(DecodingError(url="a.tar", key="s1", k="jpg"))
    'a.tar: key s1: field jpg: decoding failed'
    """

    def __init__(self, url=None, key=None, k=None, sample=None, message=None):
        self.url = url
        self.key = key
        self.k = k
        self.sample = sample
        if message is None:
            message = f"{url}: key {key}: field {k}: decoding failed"
        super().__init__(message)

    @property
    def message(self):
        """What failed: str(self). (torch's DataLoader re-raises a worker's
        exception with message= when its class has this attribute, so the
        text stays the message instead of becoming the URL.)"""
        return str(self)

    def __reduce__(self):
        # Pickled (to leave a DataLoader worker) with its fields, not as
        # DecodingError(message), which would take the message for the URL.
        return (type(self), (self.url, self.key, self.k, None, str(self)))
