"""Exceptions of webdataset_cpp.

Native errors arrive as conventional Python exceptions whose message names the
shard URL and, where there is one, the member and its byte offset:

* ``FileNotFoundError`` / ``PermissionError`` / ``OSError``: a shard that
  cannot be opened (``filename`` is its path);
* :class:`DataError` (a ``ValueError``): corrupt or truncated shards, fields
  that do not decode, samples without a field a stage needs;
* ``ValueError``: bad arguments, and setups that cannot work (more loader
  workers than shards);
* :class:`DecodingError` (a :class:`DataError`): a Python decoder raised; the
  original exception is its ``__cause__``.

>>> import webdataset_cpp as wds
>>> issubclass(wds.DecodingError, ValueError)
True
"""


class DataError(ValueError):
    """A shard, member or field is corrupt, truncated or not what a stage needs."""


class DecodingError(DataError):
    """A decoder failed on field ``k`` of the sample ``key`` from shard ``url``.

    The reference package's signature, plus ``message``; unlike the
    reference's, ``str(e)`` says what failed.

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
