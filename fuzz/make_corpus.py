#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/.

Small, valid inputs of every kind each parser reads, so that fuzzing starts
from the interesting paths. Run with Debian's python3 (numpy, PIL); the output
is committed, so CI does not run this. Usage: fuzz/make_corpus.py [DIR]
"""

import bz2
import gzip
import io
import json
import lzma
import os
import subprocess
import sys
import tarfile

import numpy as np
from PIL import Image

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")


def put(target, name, data):
    directory = os.path.join(root, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def zstd(data):
    return subprocess.run(["zstd", "-q", "-c"], input=data, stdout=subprocess.PIPE,
                          check=True).stdout


def tar_bytes(members, fmt):
    """A tar of `members` without tarfile's padding to 10 KiB records: the two
    zero blocks that end the archive are kept, so the fuzzer's mutations land
    in headers and data rather than in padding."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
        for name, data in members:
            if data is None:
                info = tarfile.TarInfo(name)
                info.type = tarfile.DIRTYPE
                t.addfile(info)
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            t.addfile(info, io.BytesIO(data))
    data = out.getvalue()
    end = len(data.rstrip(b"\0"))
    return data[:(end + 511) // 512 * 512 + 1024]


# Tar shards: samples of two or three members, a directory, a long name, a
# metadata member, in ustar / GNU / pax, plain and compressed.
samples = [("a.jpg", b"\xff\xd8jpeg"), ("a.cls", b"3"), ("dir", None),
           ("b.txt", b"hello"), ("b.json", b'{"x": 1}'), ("__meta__", b"m"),
           ("c/" + "x" * 120 + ".seg.png", b"png"), ("c/" + "x" * 120 + ".cls", b"7")]
for fmt, fname in ((tarfile.USTAR_FORMAT, "ustar"), (tarfile.GNU_FORMAT, "gnu"),
                   (tarfile.PAX_FORMAT, "pax")):
    members = samples if fmt != tarfile.USTAR_FORMAT else samples[:6]
    plain = tar_bytes(members, fmt)
    put("tar_fuzz", f"{fname}.tar", plain)
    if fmt == tarfile.PAX_FORMAT:
        put("tar_fuzz", "pax.tar.gz", gzip.compress(plain, mtime=0))
        put("tar_fuzz", "pax.tar.bz2", bz2.compress(plain))
        put("tar_fuzz", "pax.tar.xz", lzma.compress(plain))
        put("tar_fuzz", "pax.tar.lzma", lzma.compress(plain, format=lzma.FORMAT_ALONE))
        put("tar_fuzz", "pax.tar.zst", zstd(plain))
        # Two gzip members (cat a.gz b.gz) and two concatenated tars.
        put("tar_fuzz", "two-members.tar.gz",
            gzip.compress(plain[:1024], mtime=0) + gzip.compress(plain[1024:], mtime=0))
        put("tar_fuzz", "concatenated.tar", plain + tar_bytes([("d.txt", b"d")], fmt))

# .npy: dtypes, orders, header versions, 0-d and empty arrays.
for name, array in (("f4", np.arange(6, dtype="<f4").reshape(2, 3)),
                    ("u1", np.arange(24, dtype=np.uint8).reshape(2, 3, 4)),
                    ("i8be", np.arange(4, dtype=">i8")),
                    ("fortran", np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3))),
                    ("scalar", np.array(3.5)), ("empty", np.zeros((0, 3), np.float64)),
                    ("bool", np.array([True, False]))):
    out = io.BytesIO()
    np.save(out, array)
    put("npy_fuzz", name + ".npy", out.getvalue())
out = io.BytesIO()
np.lib.format.write_array(out, np.arange(3, dtype=np.int32), version=(2, 0))
put("npy_fuzz", "v2.npy", out.getvalue())

# Images: two option bytes, then a small JPEG / PNG / WebP of several kinds.
rgb = Image.fromarray((np.arange(16 * 12 * 3) % 251).astype(np.uint8).reshape(12, 16, 3))
images = {}
for name, image, fmt, kw in (("baseline.jpg", rgb, "JPEG", {"quality": 90}),
                             ("progressive.jpg", rgb, "JPEG", {"progressive": True}),
                             ("gray.jpg", rgb.convert("L"), "JPEG", {}),
                             ("rgb.png", rgb, "PNG", {}),
                             ("palette.png", rgb.convert("P"), "PNG", {}),
                             ("gray-alpha.png", rgb.convert("LA"), "PNG", {}),
                             ("interlaced.png", rgb, "PNG", {"interlace": 1}),
                             ("lossy.webp", rgb, "WEBP", {"quality": 80}),
                             ("lossless.webp", rgb, "WEBP", {"lossless": True})):
    out = io.BytesIO()
    image.save(out, format=fmt, **kw)
    images[name] = out.getvalue()
wide = io.BytesIO()
Image.fromarray((np.arange(8 * 8) % 256).astype(np.uint16).reshape(8, 8) * 257, "I;16").save(
    wide, format="PNG")
images["gray16.png"] = wide.getvalue()
for i, (name, data) in enumerate(sorted(images.items())):
    put("image_fuzz", name, bytes([i * 7 % 256, i * 37 % 256]) + data)

# Fields: the first byte picks the name (see fields_fuzz.cc).
npy = io.BytesIO()
np.save(npy, np.arange(4, dtype=np.float32))
for name, data in (("cls", b"\x00 42\n"), ("txt", b"\x01h\xc3\xa9llo"),
                   ("json", b'\x02{"a": [1, 2.5, null, "x"]}'), ("npy", b"\x03" + npy.getvalue()),
                   ("cls.gz", b"\x04" + gzip.compress(b"7", mtime=0)),
                   ("txt.gz", b"\x05" + gzip.compress(b"text " * 50, mtime=0)),
                   ("npy.zst", b"\x06" + zstd(npy.getvalue())),
                   ("json.zst", b"\x07" + zstd(b'{"k": "v"}')),
                   ("gz.gz", b"\x08" + gzip.compress(gzip.compress(b"1", mtime=0), mtime=0))):
    put("fields_fuzz", name, data)

# URL patterns and remote URLs.
for i, text in enumerate(("train-{000000..000099}.tar", "a/{0..10..5}.tar::b/{x,y,z}.tar",
                          "{a..e}{1,2}-\\{lit\\}.tar", "pipe:curl -s http://h/{0..3}.tar",
                          "s3://bucket/dir/shard-{00..03}.tar", "gs://bucket/key%20x.tar",
                          "https://user@host:8443/p/a.tar?x=1#f", "http://[::1]:9000/b/k.tar")):
    put("urls_fuzz", f"url{i}", text.encode())

# Indexes: DALI text (v1.1, v1.2) and the wids JSON.
put("index_fuzz", "v12.idx", b"v1.2 2\njpg 512 4 a.jpg cls 1536 1 a.cls\njpg 2560 4 b.jpg\n")
put("index_fuzz", "v11.idx", b"v1.1 1\njpg 512 4\n")
put("index_fuzz", "wids.json", json.dumps({
    "__kind__": "wids-shard-index-v1", "wids_version": 1,
    "shardlist": [{"url": "a.tar", "nsamples": 10, "filesize": 10240},
                  {"url": "/abs/b.tar", "nsamples": 0}]}).encode())

# HTTP response headers, and requests to sign / credentials files.
put("http_fuzz", "partial", b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 100-199/1000\r\n"
    b"Content-Length: 100\r\nETag: \"abc\"\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n")
put("http_fuzz", "redirect", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 302 Found\r\nLocation: x\r\n"
    b"\r\nHTTP/2 503 \r\nRetry-After: 5\r\nContent-Range: bytes */1000\r\n\r\n")
put("http_fuzz", "request", b"/bucket/key with space\nlist-type=2\nx-amz-meta-a=  b  c \nprefix=a/b")
put("http_fuzz", "credentials", b"[default]\naws_access_key_id = AKID\n"
    b"aws_secret_access_key=SECRET ; comment\n# c\n[other]\naws_session_token=T\n")

# GPU jobs (src/gpu/gpu_job.h): 72-byte little-endian headers, their
# payloads and their sites, a JPEG one and a pixels one, alone and as a
# column of two.
def gpu_job(kind, width, height, crop, out, payload, dtype=1, flags=0, site=b""):
    import struct
    header = b"WDSGPUJ1" + bytes([kind, flags, dtype, 0])
    header += struct.pack("<8i", width, height, *crop, *out)
    header += struct.pack("<6f", 0.5, 0.5, 0.5, 0.25, 0.25, 0.25)
    header += struct.pack("<I", len(site))
    return header + payload + site


small = io.BytesIO()
Image.fromarray(np.arange(12 * 16 * 3, dtype=np.uint8).reshape(12, 16, 3)).save(
    small, format="JPEG", quality=90)
jpeg_job = gpu_job(1, 16, 12, (2, 1, 12, 10), (8, 6), small.getvalue(), dtype=10, flags=1 | 2 | 4,
                   site=b"shard-000000.tar: key a: field jpg")
pixels_job = gpu_job(2, 4, 3, (0, 0, 4, 3), (8, 6), bytes(range(36)), dtype=10, flags=4)
put("gpu_job_fuzz", "jpeg", jpeg_job)
put("gpu_job_fuzz", "pixels", pixels_job)
put("gpu_job_fuzz", "column", jpeg_job + pixels_job)
