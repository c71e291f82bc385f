"""How remote shards (http://, https://, s3://, gs://) are read.

Remote URLs are read in-process by the native remote reader (the C++
library's, ``wds/io/remote.h``): a connection cut or a transient HTTP status is
retried with backoff and resumed byte-exactly (``Range`` with ``If-Match``),
s3:// is signed with AWS Signature Version 4, and an optional cache directory
keeps complete copies, named by the SHA-256 of the URL and shared by processes.

``RemoteOptions`` holds the settings a program may want to choose; ``None``
leaves one to the environment variable in brackets, else to the default in
parentheses. Credentials, endpoints and regions come from the environment
only (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``,
``AWS_PROFILE`` and ``~/.aws/credentials``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``GOOGLE_OAUTH_ACCESS_TOKEN``, ``STORAGE_EMULATOR_HOST``; docs/PYTHON.md lists them).

>>> import webdataset_cpp as wds
>>> options = wds.RemoteOptions(max_attempts=20, ca_file="/etc/ssl/certs/ca-certificates.crt")
>>> dataset = wds.WebDataset("https://example.com/train-{000000..000099}.tar",
...                          shardshuffle=100, cache_dir="/tmp", remote=options)
"""

import dataclasses
import os
from typing import Optional

from . import _core


@dataclasses.dataclass(frozen=True)
class RemoteOptions:
    """Settings of the native remote reader; None: the environment, else the default.

    cache_dir: keep complete copies of remote shards here, named by the
        SHA-256 of the URL; "" for none [WDS_CACHE] (none).
    cache_size: bytes of complete copies kept, least recently used evicted
        first; 0 for no limit [WDS_CACHE_SIZE, e.g. "50G"] (0).
    cache_pipes: cache pipe: shards too: a command's output, named by the
        SHA-256 of its URL, is kept once a reader read it to its end and the
        command exited 0, and read instead of running the command again
        (for commands that fetch fixed objects, "pipe:aws s3 cp ... -");
        nothing tells a changed output from the copy [WDS_CACHE_PIPES=1]
        (False; WebDataset(cache_dir=...) given sets it, as the reference
        caches pipe: shards).
    open_ahead: how many of a shard source's next shards it opens while it
        reads one, when they are remote URLs (http(s)://, s3://, gs://), 0
        to 16: their requests (TLS handshake, redirects, the server's first
        byte) overlap the current shard's reading. pipe: commands are not
        opened ahead [WDS_OPEN_AHEAD] (1).
    ca_file: PEM bundle of the certificate authorities to trust
        [CURL_CA_BUNDLE] (the system's).
    verify_tls: check the server's certificate and host name; turn off only
        for tests [WDS_TLS_VERIFY=0] (True).
    connect_timeout: seconds for TCP connect and TLS handshake (10).
    stall_timeout: seconds without a byte before a request is abandoned and
        retried (30).
    low_speed_limit, low_speed_time: a request slower than low_speed_limit
        bytes/s for low_speed_time seconds is abandoned and retried (1024, 60).
    max_attempts: failed requests in a row before giving up; 1 for no retry
        (10).
    max_retry_time: seconds from the first of a run of failures to giving
        up (300).
    upload_part_size: bytes per part of an s3:// or gs:// multipart upload,
        5 MiB to 5 GiB (S3's and GCS's limits), doubled after every 1,000 parts; an object
        smaller than one part goes up in one PUT (16 MiB).
    upload_concurrency: parts of one s3:// or gs:// upload sent at once, each on a
        connection of its own, while the next fills; an upload holds up to
        upload_concurrency + 1 parts in memory (4).
    http_headers: headers sent with every request for an http(s):// URL
        (not s3:// or gs://), a dict or (name, value) pairs: a token, say,
        {"Authorization": "Bearer hf_..."}. After a redirect to another host
        or port an Authorization or Cookie header is dropped, the others are
        sent: put a secret in Authorization.
        Kept as a tuple of pairs; left out of repr() (values may be
        secrets) (none).
    """

    cache_dir: Optional[str] = None
    cache_size: Optional[int] = None
    cache_pipes: Optional[bool] = None
    open_ahead: Optional[int] = None
    ca_file: Optional[str] = None
    verify_tls: Optional[bool] = None
    connect_timeout: Optional[float] = None
    stall_timeout: Optional[float] = None
    low_speed_limit: Optional[int] = None
    low_speed_time: Optional[float] = None
    max_attempts: Optional[int] = None
    max_retry_time: Optional[float] = None
    upload_part_size: Optional[int] = None
    upload_concurrency: Optional[int] = None
    http_headers: Optional[tuple] = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        if self.http_headers is not None:
            pairs = self.http_headers.items() if isinstance(self.http_headers, dict) else \
                self.http_headers
            pairs = tuple((name, value) for name, value in pairs)
            if not all(isinstance(n, str) and isinstance(v, str) for n, v in pairs):
                raise TypeError("RemoteOptions: http_headers names and values are str")
            object.__setattr__(self, "http_headers", pairs)
        _core.check_remote_options(self._native())

    def _native(self):
        """The settings given, as the native calls take them."""
        given = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        for path in ("cache_dir", "ca_file"):
            if given.get(path):
                given[path] = os.path.expanduser(given[path])
        return given


def native_options(remote):
    """RemoteOptions (or None) as the native calls take them."""
    if remote is None:
        return None
    if not isinstance(remote, RemoteOptions):
        raise TypeError(f"remote= takes a webdataset_cpp.RemoteOptions, not {type(remote)}")
    return remote._native()

