"""gopen: open a URL as a binary stream (the reference's, for local files,
"-", pipe:CMD, http(s)://, s3:// and gs://).

Reading http(s)://, s3:// and gs:// goes through the native remote reader,
as shards do (resumed byte-exactly after faults, retried, S3 signed, cached
when a cache directory is set; ``remote=RemoteOptions(...)`` sets it up),
where the reference runs curl or gsutil. Writing ("wb") http(s) and gs
still pipes to curl and gsutil. A pipe: command that exits non-zero raises
OSError when its stream is read to the end or closed (the reference can miss
it).

>>> with gopen("pipe:printf abc") as stream:
...     stream.read()
b'abc'
"""

import io
import os
import shlex
import subprocess
import sys
from urllib.parse import urlparse

from . import _core
from .remote import native_options


class Pipe:
    """The stdout (or stdin) of a shell command, its exit status checked."""

    def __init__(self, cmd, mode="rb", ignore_status=()):
        self.cmd = cmd
        self.ignore_status = (0,) + tuple(ignore_status)
        if mode == "rb":
            self.proc = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE)
            self.stream = self.proc.stdout
        else:
            self.proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.PIPE)
            self.stream = self.proc.stdin
        self.closed = False

    def _check(self):
        status = self.proc.wait()
        if status not in self.ignore_status:
            raise OSError(f"{self.cmd}: exit {status}")

    def read(self, *args):
        data = self.stream.read(*args)
        if not data and (not args or args[0] != 0):
            self._check()
        return data

    def readinto(self, buffer):
        n = self.stream.readinto(buffer)
        if n == 0:
            self._check()
        return n

    def write(self, data):
        return self.stream.write(data)

    def readable(self):
        return self.stream.readable()

    def writable(self):
        return self.stream.writable()

    def close(self):
        if self.closed:
            return
        self.closed = True
        self.stream.close()
        self._check()

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()


def gopen_pipe(url, mode="rb", bufsize=8192, **kw):
    return Pipe(url[5:] if url.startswith("pipe:") else url, mode=mode, ignore_status=(141,))


class NativeReader(io.RawIOBase):
    """A URL's bytes from the native reader (_core.UrlReader), as a raw stream."""

    def __init__(self, url, remote=None):
        super().__init__()
        self.name = url
        self._reader = _core.UrlReader(url, native_options(remote))

    def readable(self):
        return True

    def readinto(self, buffer):
        return self._reader.readinto(buffer)

    def close(self):
        if not self.closed:
            self._reader.close()
        super().close()


def gopen_curl(url, mode="rb", bufsize=8192, **kw):
    if mode == "rb":
        return Pipe(f"curl --connect-timeout 30 --retry 30 --retry-delay 2 -f -s -L "
                    f"{shlex.quote(url)}", mode, ignore_status=(141, 23))
    return Pipe(f"curl -f -s -X PUT -L -T - {shlex.quote(url)}", mode, ignore_status=(141, 26))


def gopen_gsutil(url, mode="rb", bufsize=8192, **kw):
    if mode == "rb":
        return Pipe(f"gsutil cat {shlex.quote(url)}", mode, ignore_status=(141, 23))
    return Pipe(f"gsutil cp - {shlex.quote(url)}", mode, ignore_status=(141, 26))


def gopen_remote(url, mode="rb", bufsize=8192, remote=None, **kw):
    """Reads http(s)://, s3:// and gs:// with the native remote reader
    (buffered); writes http(s) with curl and gs with gsutil."""
    if mode == "rb":
        raw = NativeReader(url, remote)
        return io.BufferedReader(raw, buffer_size=max(bufsize, 1 << 16))
    if url.startswith("gs://"):
        return gopen_gsutil(url, mode, bufsize, **kw)
    if url.startswith("s3://"):
        raise ValueError(f"{url}: gopen cannot write s3:// URLs (pipe:aws s3 cp - {url} can)")
    return gopen_curl(url, mode, bufsize, **kw)


def gopen_error(url, *args, **kw):
    raise ValueError(f"{url}: no gopen handler defined")


gopen_schemes = dict(__default__=gopen_error, pipe=gopen_pipe, http=gopen_remote,
                     https=gopen_remote, s3=gopen_remote, gs=gopen_remote, sftp=gopen_curl,
                     ftps=gopen_curl, scp=gopen_curl)


def gopen(url, mode="rb", bufsize=8192, **kw):
    """Opens `url` for reading ("rb") or writing ("wb"); remote=RemoteOptions(...)
    sets up the reading of http(s)://, s3:// and gs:// URLs."""
    if mode not in ("rb", "wb"):
        raise ValueError(f"gopen: mode must be 'rb' or 'wb', got {mode!r}")
    if url == "-":
        return sys.stdin.buffer if mode == "rb" else sys.stdout.buffer
    parsed = urlparse(url)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = parsed.path if parsed.scheme == "file" else url
        return open(path, mode, buffering=bufsize)
    handler = gopen_schemes.get(parsed.scheme, gopen_schemes["__default__"])
    return handler(url, mode, bufsize, **kw)
