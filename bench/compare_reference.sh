#!/usr/bin/env bash
# Side-by-side raw sample iteration (read + group, no decode) of this library
# and the reference Python webdataset package on the same ImageNet-like shards
# (8 shards x 1000 samples of 80 KB), from the page cache, one worker.
#
#   REFERENCE_SRC=/path/to/webdataset/src bench/compare_reference.sh [BUILD_DIR]
#
# REFERENCE_SRC is a checkout of the reference package's source (it needs
# Debian's python3-braceexpand, python3-numpy and python3-yaml). Not part of
# the test suite.
set -euo pipefail
build=${1:-build}
: "${REFERENCE_SRC:?set REFERENCE_SRC to the reference package source directory}"
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
"$build/tools/wds-demo" --make-shards "$data" --shards 8 --samples-per-shard 1000 --bytes 80000
cat "$data"/*.tar >/dev/null
pattern="$data/demo-{000000..000007}.tar"
"$build/tools/wds-demo" --raw --workers 1 --epochs 3 "$pattern"
PYTHONPATH=$REFERENCE_SRC /usr/bin/python3 - "$pattern" <<'PY'
import sys, time, warnings
warnings.simplefilter("ignore")
import webdataset as wds
for epoch in range(3):
    start, n, size = time.time(), 0, 0
    for sample in wds.WebDataset(sys.argv[1], shardshuffle=False):
        n += 1
        size += len(sample["bin"])
    secs = time.time() - start
    print(f"reference epoch {epoch}: {n} samples, {size / 1e6:.1f} MB in {secs:.3f} s = "
          f"{n / secs:.0f} samples/s, {size / 1e6 / secs:.0f} MB/s")
PY
