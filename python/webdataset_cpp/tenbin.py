"""tenbin: the reference's binary format for lists of NumPy arrays (``.ten`` fields).

A buffer is a run of chunks. A chunk is the 8 ASCII bytes ``~TenBin~``, its
payload length as an int64, then the payload, zero-padded to a multiple of 64
bytes (so that every payload starts 8-byte aligned and can be used in place).
An array is two chunks: a header of int64 words (the dtype's short code such
as ``f4`` and an info string, each as up to 8 ASCII bytes padded with NULs;
ndim; the dimensions) and the array's elements in C order. Numbers are in the
machine's byte order, as the reference writes them (little-endian on x86 and
ARM), so the bytes written here and by the reference are the same.

>>> import numpy as np
>>> buf = encode_buffer([np.arange(3, dtype=np.int16)])
>>> len(buf), bytes(buf[:8])
(160, b'~TenBin~')
>>> decode_buffer(buf)
[array([0, 1, 2], dtype=int16)]

Differences from the reference 1.0.2 (whose copies are defects there):
``uint32`` arrays are encoded (``u4``; its table misspells the name, so it
refuses them and cannot decode ``u4``); 0-d arrays decode (it raises
TypeError); arrays in the other byte order are converted (it writes their
bytes unconverted, so they decode as different numbers); ``check_infos`` and
``decode_buffer(infos=[...])`` raise only when an info differs (it raises for
any non-empty list); ``check_acceptable_input_type`` refuses 64-bit types
unless ``allow64`` (its test is inverted); bad input is always a ValueError
naming the offset, array or info (it raises struct.error, UnicodeEncodeError
or AttributeError in places); ``read`` reports a truncated stream.
"""

import struct
import sys

import numpy as np

long_to_short = {
    "float16": "f2", "float32": "f4", "float64": "f8",
    "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8",
    "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8",
}
short_to_long = {short: name for name, short in long_to_short.items()}

_INT64 = struct.Struct("@q")
_MAX_NDIM = 9  # the reference's limit: a header holds at most 12 words


def bytelen(a):
    """The number of bytes of an array or a bytes-like object."""
    if hasattr(a, "nbytes"):
        return a.nbytes
    if isinstance(a, (bytes, bytearray)):
        return len(a)
    raise ValueError(f"tenbin: cannot tell the byte length of a {type(a).__name__}")


def _native(a):
    """`a` in C order and in the machine's byte order (a copy only if needed)."""
    return a.astype(a.dtype.newbyteorder("="), order="C", copy=False)


def bytedata(a):
    """The raw bytes of an array (C order, machine byte order) or of a bytes-like object."""
    if isinstance(a, (bytes, bytearray, memoryview)):
        return a
    if isinstance(a, np.ndarray):
        return memoryview(_native(a).reshape(-1).view(np.uint8))
    raise ValueError(f"tenbin: cannot take the bytes of a {type(a).__name__}")


def check_acceptable_input_type(data, allow64):
    """Raises ValueError for an array whose dtype tenbin cannot hold, or of a
    64-bit type unless `allow64`."""
    for i, a in enumerate(data):
        name = a.dtype.name
        if name not in long_to_short:
            raise ValueError(f"tenbin: array {i}: unsupported dtype {name}")
        if not allow64 and a.dtype.itemsize == 8:
            raise ValueError(f"tenbin: array {i}: 64-bit dtype {name} needs allow64=True")


def str64(s):
    """An ASCII string of at most 8 characters as the int64 of its NUL-padded bytes."""
    try:
        raw = s.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError(f"tenbin: {s!r} is not ASCII") from None
    if len(raw) > 8:
        raise ValueError(f"tenbin: {s!r} is longer than 8 characters")
    return _INT64.unpack(raw.ljust(8, b"\0"))[0]


def unstr64(i):
    """The string str64 made into `i`."""
    return _INT64.pack(int(i)).decode("ascii").strip("\0")


def check_infos(data, infos, required_infos=None):
    """Returns `data`, or (data, infos) when required_infos is True; a list or
    tuple of required infos must match `infos` where both have an entry."""
    if required_infos is None or required_infos is False:
        return data
    if required_infos is True:
        return data, infos
    if not isinstance(required_infos, (tuple, list)):
        raise ValueError(f"tenbin: required_infos must be a tuple or list, "
                         f"got {type(required_infos).__name__}")
    for i, (required, actual) in enumerate(zip(required_infos, infos)):
        if required != actual:
            raise ValueError(f"tenbin: array {i}: info {actual!r} does not match the "
                             f"required info {required!r}")
    return data


def encode_header(a, info=""):
    """The header chunk's payload for array `a` (bytes)."""
    if not isinstance(a, np.ndarray):
        raise ValueError(f"tenbin: encodes numpy arrays, got {type(a).__name__}")
    if a.ndim > _MAX_NDIM:
        raise ValueError(f"tenbin: at most {_MAX_NDIM} dimensions, got {a.ndim}")
    if a.dtype.name not in long_to_short:
        raise ValueError(f"tenbin: unsupported dtype {a.dtype.name}")
    words = [str64(long_to_short[a.dtype.name]), str64(info), a.ndim, *a.shape]
    return struct.pack(f"@{len(words)}q", *words)


def decode_header(h):
    """(shape, dtype, info) from a header chunk's payload."""
    h = memoryview(h).cast("B")
    if len(h) < 24 or len(h) % 8:
        raise ValueError(f"tenbin: a header holds 3 or more int64 words, got {len(h)} bytes")
    words = struct.unpack(f"@{len(h) // 8}q", h)
    code = _INT64.pack(words[0]).rstrip(b"\0").decode("ascii", "replace")
    if code not in short_to_long:
        raise ValueError(f"tenbin: unsupported dtype code {code!r}")
    ndim = words[2]
    if not 0 <= ndim <= len(words) - 3:
        raise ValueError(f"tenbin: a header of {len(words) - 3} dimensions says ndim {ndim}")
    return tuple(words[3:3 + ndim]), np.dtype(short_to_long[code]), unstr64(words[1])


def encode_list(l, infos=None):
    """The chunk payloads [header, data, header, data, ...] of the arrays in `l`;
    `infos` (one per array) default to ""."""
    if infos is None:
        infos = [""] * len(l)
    elif len(l) != len(infos):
        raise ValueError(f"tenbin: {len(l)} arrays but {len(infos)} infos")
    chunks = []
    for a, info in zip(l, infos):
        chunks += [encode_header(a, info), bytedata(a)]
    return chunks


def decode_list(l, infos=False):
    """The arrays of chunk payloads [header, data, ...] (see check_infos for `infos`).
    Arrays view the payloads' memory (read-only for bytes)."""
    arrays, found = [], []
    for i in range(0, len(l) - 1, 2):
        shape, dtype, info = decode_header(l[i])
        data = memoryview(l[i + 1]).cast("B")
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if len(data) != expected:
            raise ValueError(f"tenbin: array {i // 2}: {dtype.name} {shape} needs {expected} "
                             f"bytes, its chunk holds {len(data)}")
        arrays.append(np.frombuffer(data, dtype=dtype).reshape(shape))
        found.append(info)
    return check_infos(arrays, found, infos)


magic_str = "~TenBin~"
magic = str64(magic_str)
magic_bytes = magic_str.encode("ascii")


def roundup(n, k=64):
    """n rounded up to a multiple of k."""
    return k * ((n + k - 1) // k)


def encode_chunks(l):
    """One bytearray holding the chunks of payloads `l` (magic, length, padding)."""
    payloads = [bytedata(b) for b in l]
    result = bytearray(sum(16 + roundup(bytelen(b)) for b in payloads))
    offset = 0
    for b in payloads:
        n = bytelen(b)
        result[offset:offset + 8] = magic_bytes
        result[offset + 8:offset + 16] = _INT64.pack(n)
        result[offset + 16:offset + 16 + n] = b
        offset += 16 + roundup(n)
    return result


def decode_chunks(buf):
    """The chunk payloads of `buf`, as memoryviews into it."""
    view = memoryview(buf).cast("B")
    chunks, offset = [], 0
    while offset < len(view):
        if view[offset:offset + 8] != magic_bytes:
            raise ValueError(f"tenbin: no chunk magic {magic_str!r} at offset {offset}")
        if offset + 16 > len(view):
            raise ValueError(f"tenbin: chunk at offset {offset} is cut short")
        n = _INT64.unpack(view[offset + 8:offset + 16])[0]
        if n < 0 or offset + 16 + n > len(view):
            raise ValueError(f"tenbin: chunk at offset {offset} announces {n} bytes, "
                             f"{len(view) - offset - 16} follow")
        chunks.append(view[offset + 16:offset + 16 + n])
        offset += 16 + roundup(n)
    return chunks


def encode_buffer(l, infos=None):
    """The tenbin bytes (a bytearray) of a list of arrays."""
    if not isinstance(l, list):
        raise ValueError(f"tenbin: encode_buffer requires a list of arrays, got {type(l).__name__}")
    return encode_chunks(encode_list(l, infos=infos))


def decode_buffer(buf, infos=False):
    """The list of arrays in tenbin bytes `buf` (see check_infos for `infos`)."""
    return decode_list(decode_chunks(buf), infos=infos)


def write_chunk(stream, buf):
    """Writes one chunk holding `buf` to a binary stream."""
    data = bytedata(buf)
    n = bytelen(data)
    stream.write(magic_bytes + _INT64.pack(n))
    stream.write(data)
    stream.write(b"\0" * (roundup(n) - n))


def _read_exactly(stream, n, what):
    data = stream.read(n)
    if len(data) != n:
        raise ValueError(f"tenbin: premature end of stream in {what}: "
                         f"{len(data)} of {n} bytes")
    return data


def read_chunk(stream):
    """The payload (bytes) of the next chunk of a binary stream, None at its end."""
    head = stream.read(8)
    if head == b"":
        return None
    if head != magic_bytes:
        raise ValueError(f"tenbin: no chunk magic {magic_str!r} in the stream, got {head!r}")
    n = _INT64.unpack(_read_exactly(stream, 8, "a chunk length"))[0]
    if n < 0:
        raise ValueError(f"tenbin: negative chunk length {n}")
    data = _read_exactly(stream, n, "a chunk")
    _read_exactly(stream, roundup(n) - n, "a chunk's padding")
    return data


def write(stream, l, infos=None):
    """Writes the arrays of `l` to a binary stream."""
    for chunk in encode_list(l, infos=infos):
        write_chunk(stream, chunk)


def read(stream, n=sys.maxsize, infos=False):
    """Reads up to n arrays from a binary stream (see check_infos for `infos`)."""
    chunks = []
    for _ in range(n):
        header = read_chunk(stream)
        if header is None:
            break
        data = read_chunk(stream)
        if data is None:
            raise ValueError("tenbin: premature end of stream: a header without its data")
        chunks += [header, data]
    return decode_list(chunks, infos=infos)


def _check_name(fname, nocheck):
    if not nocheck and not str(fname).endswith(".ten"):
        raise ValueError(f"tenbin: {fname}: file name should end in .ten (or pass nocheck=True)")


def save(fname, *args, infos=None, nocheck=False):
    """Writes the arrays `args` to file `fname` (ending in .ten unless nocheck)."""
    _check_name(fname, nocheck)
    with open(fname, "wb") as stream:
        write(stream, args, infos=infos)


def load(fname, infos=False, nocheck=False):
    """Reads the arrays of file `fname` (ending in .ten unless nocheck)."""
    _check_name(fname, nocheck)
    with open(fname, "rb") as stream:
        return read(stream, infos=infos)
