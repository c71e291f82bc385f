"""gopen: open a URL as a binary stream (the reference's, for local files,
"-", pipe:CMD, http(s)://, s3://, gs://, ais://, htgs:// and hf://).

Reading http(s)://, s3:// and gs:// goes through the native remote reader,
as shards do (resumed byte-exactly after faults, retried, S3 signed, cached
when a cache directory is set; ``remote=RemoteOptions(...)`` sets it up),
where the reference runs curl or gsutil. Writing ("wb") s3:// is native
too (NativeWriter: the object appears whole at close, or not at all), and
gs:// when the environment gives GCS credentials (GOOGLE_OAUTH_ACCESS_TOKEN,
or WDS_GCS_HMAC_ACCESS_ID and WDS_GCS_HMAC_SECRET) or an emulator
(STORAGE_EMULATOR_HOST); else gs:// pipes to gsutil, whose own login
applies, as in the reference. Writing http(s) pipes to curl. A pipe: command
that exits non-zero raises OSError naming the command when its stream is
read to the end or closed (the reference checks only when a read or write
finds the command already exited, so it can miss a failure).

While ``webdataset_cpp.utils.enforce_security`` is true (set from
WDS_SECURE, or at run time), gopen refuses what the reference's refuses:
pipe: URLs, local files (plain paths and file: URLs) and GOPEN_REWRITE, with
a ValueError naming the URL.

>>> with gopen("pipe:printf abc") as stream:
...     stream.read()
b'abc'
"""

import dataclasses
import errno
import io
import os
import re
import shlex
import signal
import sys
from subprocess import PIPE, Popen
from urllib.parse import urlparse
from urllib.request import url2pathname

from . import _core, utils
from .remote import RemoteOptions, native_options

# Extra context the reference adds to its verbose output (kept for scripts that set it).
info = {}


def _refuse_if_secure(url, what):
    if utils.enforce_security:
        raise ValueError(f"{url}: {what} refused while webdataset_cpp.utils.enforce_security "
                         f"is set (WDS_SECURE=1)")


def _command_text(args):
    """The command of Popen arguments, as one line."""
    cmd = args[0] if args else ""
    return cmd if isinstance(cmd, str) else shlex.join(str(c) for c in cmd)


class Pipe:
    """The stdout ("r" modes) or stdin ("w" modes) of a command, as a stream
    whose exit status is checked.

    args and kw go to subprocess.Popen, as in the reference. An exit status
    other than 0 and those in `ignore_status` raises OSError naming the
    command, when a read reaches the end of the data, when a write finds the
    command gone, and at close (waiting at most `timeout` seconds);
    `ignore_errors` turns that off.
    """

    def __init__(self, *args, mode=None, timeout=7200.0, ignore_errors=False, ignore_status=[],
                 **kw):
        if not mode or mode[0] not in "rw":
            raise ValueError(f"{mode}: unknown mode")
        self.ignore_errors = ignore_errors
        self.ignore_status = [0] + list(ignore_status)
        self.timeout = timeout
        self.args = (args, kw)
        self.cmd = _command_text(args)
        self.handler = None
        self.status = None
        if mode[0] == "r":
            self.proc = Popen(*args, stdout=PIPE, **kw)
            self.stream = self.proc.stdout
        else:
            self.proc = Popen(*args, stdin=PIPE, **kw)
            self.stream = self.proc.stdin

    def __str__(self):
        return f"<Pipe {self.cmd}>"

    def wait_for_child(self, timeout=None):
        """Waits for the command; raises OSError for a bad exit status."""
        if self.status is None:
            self.status = self.proc.wait(timeout)
        if self.status not in self.ignore_status and not self.ignore_errors:
            raise OSError(f"{self.cmd}: exit {self.status}")

    def check_status(self):
        """Raises OSError if the command has already exited with a bad status."""
        if self.proc.poll() is not None:
            self.wait_for_child()

    def read(self, *args, **kw):
        data = self.stream.read(*args, **kw)
        if not data and (not args or args[0] != 0):
            self.wait_for_child()
        return data

    def readinto(self, buffer):
        n = self.stream.readinto(buffer)
        if n == 0:
            self.wait_for_child()
        return n

    def readLine(self, *args, **kw):
        line = self.stream.readline(*args, **kw)
        if not line:
            self.wait_for_child()
        return line

    readline = readLine

    def write(self, *args, **kw):
        try:
            return self.stream.write(*args, **kw)
        except BrokenPipeError:
            self.wait_for_child()
            raise

    def fileno(self):
        return self.stream.fileno()

    def readable(self):
        return self.stream.readable()

    def writable(self):
        return self.stream.writable()

    @property
    def closed(self):
        return self.stream.closed

    def close(self):
        """Closes the stream, waits for the command and checks its status."""
        if self.stream.closed:
            return
        try:
            self.stream.close()
        except BrokenPipeError:
            pass  # the command stopped reading: its status says whether that is an error
        self.wait_for_child(self.timeout)

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass  # nothing may raise during garbage collection


def set_options(obj, timeout=None, ignore_errors=None, ignore_status=None, handler=None):
    """Sets the options of a Pipe; returns False (and does nothing) for other streams."""
    if not isinstance(obj, Pipe):
        return False
    if timeout is not None:
        obj.timeout = timeout
    if ignore_errors is not None:
        obj.ignore_errors = ignore_errors
    if ignore_status is not None:
        obj.ignore_status = ignore_status
    if handler is not None:
        obj.handler = handler
    return True


def _check_mode(mode):
    if not mode or mode[0] not in "rw":
        raise ValueError(f"{mode}: unknown mode")


def gopen_file(url, mode="rb", bufsize=8192):
    """Opens a local path or file: URL."""
    if url.startswith("file:"):
        url = re.sub(r"^file://?", "", url)
    return open(url, mode)


def gopen_pipe(url, mode="rb", bufsize=8192, **kw):
    """Runs the command of a pipe:CMD URL in a shell; reads its stdout ("rb")
    or writes its stdin ("wb"). A command ended by SIGPIPE (status 141 from a
    shell, or the signal itself when the shell is the writer) is no error: its
    reader stopped early. The reference ignores 141 only."""
    _refuse_if_secure(url, "pipe: URLs are")
    _check_mode(mode)
    cmd = url[5:] if url.startswith("pipe:") else url
    return Pipe(cmd, mode=mode, shell=True, bufsize=bufsize,
                ignore_status=[141, -signal.SIGPIPE])


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


class NativeWriter(io.RawIOBase):
    """An s3:// or gs:// object written by the native uploader
    (_core.RemoteUpload): one PUT, or a multipart upload sent part by part
    (GCS's XML API takes S3's), each request
    retried. The object appears, whole, at close(); abort(), leaving a
    with-block by an exception, or dropping the writer unclosed gives it
    up, and nothing appears. One thread at a time."""

    def __init__(self, url, remote=None):
        super().__init__()
        self.name = url
        self._upload = _core.RemoteUpload(url, native_options(remote))

    def writable(self):
        return True

    def write(self, data):
        return self._upload.write(data)

    def abort(self):
        """Gives the upload up: nothing appears, and the parts sent are dropped."""
        self._upload.abort()
        super().close()

    def close(self):
        if self.closed:
            return
        try:
            self._upload.close()
        finally:
            super().close()

    def __exit__(self, exc_type, exc, trace):
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self):
        # Dropped unclosed: given up, never published half-written (IOBase's
        # finalizer would close, and so complete, it).
        if not self.closed and hasattr(self, "_upload"):
            self._upload.abort()
        io.RawIOBase.close(self)


def _command(args, mode, bufsize, read_status, write_status):
    return Pipe(args, mode=mode, bufsize=bufsize,
                ignore_status=read_status if mode[0] == "r" else write_status)


def gopen_curl(url, mode="rb", bufsize=8192, **kw):
    """Reads (GET) or writes (PUT) a URL with curl."""
    _check_mode(mode)
    if mode[0] == "r":
        args = ["curl", "--connect-timeout", "30", "--retry", "30", "--retry-delay", "2", "-f",
                "-s", "-L", url]
    else:
        args = ["curl", "-f", "-s", "-X", "PUT", "-L", "-T", "-", url]
    return _command(args, mode, bufsize, [141, 23], [141, 26])


def gopen_gsutil(url, mode="rb", bufsize=8192, **kw):
    """Reads or writes a gs:// URL with gsutil."""
    _check_mode(mode)
    args = ["gsutil", "cat", url] if mode[0] == "r" else ["gsutil", "cp", "-", url]
    return _command(args, mode, bufsize, [141, 23], [141, 26])


def gopen_ais(url, mode="rb", bufsize=8192, **kw):
    """Reads or writes an ais:// URL with the AIStore CLI."""
    _check_mode(mode)
    args = ["ais", "get", url, "-"] if mode[0] == "r" else ["ais", "put", "-", url]
    return _command(args, mode, bufsize, [141, 23], [141, 26])


def gopen_htgs(url, mode="rb", bufsize=8192, **kw):
    """Reads an htgs:// URL with curl, as the gs:// URL it names (as the
    reference does); it cannot be written."""
    _check_mode(mode)
    if mode[0] == "w":
        raise ValueError(f"{url}: {mode}: cannot write")
    args = ["curl", "-s", "-L", re.sub(r"(?i)^htgs://", "gs://", url)]
    return _command(args, mode, bufsize, [141, 23], [141, 26])


def gopen_hf(url, mode="rb", bufsize=8192, remote=None, **kw):
    """Reads an hf:// URL (Hugging Face Hub; needs huggingface_hub): the
    file's https URL, read natively with the token in an Authorization header
    (the reference runs curl with the token on its command line, where
    ps and its error messages show it)."""
    _check_mode(mode)
    if mode[0] == "w":
        raise ValueError(f"{url}: {mode}: cannot write")
    from huggingface_hub import HfFileSystem, get_token, hf_hub_url

    path = HfFileSystem().resolve_path(url)
    http_url = hf_hub_url(repo_id=path.repo_id, filename=path.path_in_repo,
                          repo_type=path.repo_type, revision=path.revision)
    options = remote if remote is not None else RemoteOptions()
    token = get_token()
    if token:
        headers = dict(options.http_headers or ())
        headers["Authorization"] = f"Bearer {token}"
        options = dataclasses.replace(options, http_headers=headers)
    return gopen_remote(http_url, "rb", bufsize, remote=options)


def gcs_writes_natively():
    """Whether gs:// objects are written in-process: the environment names
    GCS credentials the native writer can use, or an emulator. Without them
    a gs:// write goes to gsutil, whose own login (gcloud, a service
    account) the native writer cannot use."""
    return any(os.environ.get(name) for name in (
        "GOOGLE_OAUTH_ACCESS_TOKEN", "WDS_GCS_HMAC_ACCESS_ID", "STORAGE_EMULATOR_HOST"))


def gopen_remote(url, mode="rb", bufsize=8192, remote=None, **kw):
    """Reads http(s)://, s3:// and gs:// with the native remote reader
    (buffered); writes s3:// natively (NativeWriter), gs:// natively when
    gcs_writes_natively(), else with gsutil, and http(s) with curl."""
    if mode == "rb":
        raw = NativeReader(url, remote)
        return io.BufferedReader(raw, buffer_size=max(bufsize, 1 << 16))
    if url.startswith("s3://") or (url.startswith("gs://") and gcs_writes_natively()):
        return NativeWriter(url, remote)
    if url.startswith("gs://"):
        try:
            return gopen_gsutil(url, mode, bufsize, **kw)
        except FileNotFoundError as exn:
            if exn.filename != "gsutil":
                raise
            raise FileNotFoundError(
                errno.ENOENT, "gsutil is not installed; to write gs:// in-process, set "
                "GOOGLE_OAUTH_ACCESS_TOKEN, or WDS_GCS_HMAC_ACCESS_ID and WDS_GCS_HMAC_SECRET",
                url) from exn
    return gopen_curl(url, mode, bufsize, **kw)


def gopen_error(url, *args, **kw):
    raise ValueError(f"{url}: no gopen handler defined")


# The schemes shards are read natively with, and their handlers here.
_NATIVE_HANDLERS = dict(pipe=gopen_pipe, http=gopen_remote, https=gopen_remote, s3=gopen_remote,
                        gs=gopen_remote)


class _Schemes(dict):
    """gopen's table of handlers by URL scheme, as the reference's. Shards
    are opened by it too: each change tells the native reader which schemes
    to hand to their handler here (those it does not read itself, and those
    of its own given another handler; ``"__default__"``, when replaced,
    takes every scheme it does not read). Change this table in place: a
    copy, or another dict bound to the module's name, opens no shard."""

    def _changed(self):
        if self is not globals().get("gopen_schemes", self):
            return  # a copy: only the module's table opens shards
        python = [s for s, h in self.items()
                  if s != "__default__" and _NATIVE_HANDLERS.get(s) is not h]
        _core._set_python_schemes(python, self.get("__default__", gopen_error) is not gopen_error)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key):
        super().__delitem__(key)
        self._changed()

    def __ior__(self, other):
        super().__ior__(other)
        self._changed()
        return self

    def update(self, *args, **kw):
        super().update(*args, **kw)
        self._changed()

    def setdefault(self, key, default=None):
        value = super().setdefault(key, default)
        self._changed()
        return value

    def pop(self, *args):
        value = super().pop(*args)
        self._changed()
        return value

    def popitem(self):
        item = super().popitem()
        self._changed()
        return item

    def clear(self):
        super().clear()
        self._changed()


gopen_schemes = _Schemes(__default__=gopen_error, pipe=gopen_pipe, http=gopen_remote,
                         https=gopen_remote, s3=gopen_remote, gs=gopen_remote, sftp=gopen_curl,
                         ftps=gopen_curl, scp=gopen_curl, ais=gopen_ais, htgs=gopen_htgs,
                         hf=gopen_hf)
gopen_schemes._changed()

for _scheme in os.environ.get("USE_AIS_FOR", "").split(":"):
    if _scheme:
        gopen_schemes[_scheme] = gopen_ais


def rewrite_url(url):
    """`url` rewritten by the first matching rule of GOPEN_REWRITE
    ("prefix=replacement;..." with regular-expression prefixes), as the
    reference does; refused while enforce_security is set."""
    rules = os.environ.get("GOPEN_REWRITE")
    if rules is None:
        return url
    _refuse_if_secure(url, "rewriting URLs with GOPEN_REWRITE is")
    for rule in rules.split(";"):
        prefix, replacement = rule.split("=", 1)
        rewritten = re.sub("^" + prefix, replacement, url)
        if rewritten != url:
            if int(os.environ.get("GOPEN_VERBOSE", 0)):
                print(f"GOPEN REWRITE {url} -> {rewritten}", file=sys.stderr)
            return rewritten
    return url


def local_path(url):
    """The path of a local file URL (a plain path or file:), else None."""
    parsed = urlparse(url)
    if parsed.scheme == "":
        return url
    if parsed.scheme == "file":
        return url2pathname(parsed.path)
    if len(parsed.scheme) == 1 and os.name == "nt":
        return url
    return None


def gopen(url, mode="rb", bufsize=8192, **kw):
    """Opens `url` for reading ("rb") or writing ("wb"); remote=RemoteOptions(...)
    sets up the reading of http(s)://, s3:// and gs:// URLs."""
    if mode not in ("rb", "wb"):
        raise ValueError(f"gopen: mode must be 'rb' or 'wb', got {mode!r}")
    if int(os.environ.get("GOPEN_VERBOSE", 0)):
        print("GOPEN", url, info, file=sys.stderr)
    if url == "-":
        return sys.stdin.buffer if mode == "rb" else sys.stdout.buffer
    url = rewrite_url(url)
    path = local_path(url)
    if path is not None:
        _refuse_if_secure(url, "local files are")
        return open(path, mode, buffering=bufsize)
    handler = gopen_schemes.get(urlparse(url).scheme, gopen_schemes["__default__"])
    return handler(url, mode, bufsize, **kw)


def reader(url, **kw):
    """gopen(url, "rb", **kw)."""
    return gopen(url, "rb", **kw)
