"""An independent oracle for `wds-shard ls --json`.

Reads tars with Python's tarfile and groups members by the rules of the
reference webdataset package (its base_plus_ext regex, metadata skipping,
lower-cased fields, samples ending at shard boundaries), printing the same JSON
lines as `wds-shard ls --json`. Used by the tests with Debian's python3; it
depends on the standard library only.
"""
import json
import re
import sys
import tarfile
import zlib

KEY_FIELD = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
META = re.compile(r"__[^/]*__($|/)")


def samples(url):
    current = None
    with tarfile.open(url, mode="r|*") as stream:
        for info in stream:
            name = info.name
            if not info.isreg():
                continue
            if "/" not in name and name.startswith("__") and name.endswith("__"):
                continue
            if META.match(name):
                continue
            data = stream.extractfile(info).read()
            match = KEY_FIELD.match(name)
            if not match:
                continue
            key, field = match.group(1), match.group(2).lower()
            if current is None or current["__key__"] != key:
                if current is not None:
                    yield current
                current = {"__key__": key, "__url__": url}
            if field in current:
                raise ValueError(f"{name}: duplicate field {field}")
            current[field] = {"size": len(data), "crc32": zlib.crc32(data)}
    if current is not None:
        yield current


for url in sys.argv[1:]:
    for sample in samples(url):
        print(json.dumps(sample))
