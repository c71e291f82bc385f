#!/bin/bash
# make_imagenet_like.sh OUT_DIR [SHARDS]: writes SHARDS (default 4) shards of
# 1000 ImageNet-like samples each to OUT_DIR/imagenet-%06d.tar, the data the
# wds-bench figures in docs/BENCHMARKS.md are measured on. A sample is a 500x375
# JPEG at quality 90 (smooth shapes, texture and noise, ~75 KB: as hard for a
# JPEG codec as a photograph), a `cls` and a small `json`. Deterministic.
set -euo pipefail
out=${1:?usage: make_imagenet_like.sh OUT_DIR [SHARDS]}
shards=${2:-4}
here=$(cd "$(dirname "$0")/.." && pwd)
build=${WDS_BUILD_DIR:-$here/build}
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
/usr/bin/python3 - "$tree" "$((shards * 1000))" <<'PY'
import io, json, os, sys
import numpy as np
from PIL import Image

tree, count = sys.argv[1], int(sys.argv[2])
h, w = 375, 500
y, x = np.mgrid[0:h, 0:w].astype(np.float64)
rng = np.random.default_rng(1)
for i in range(count):
    phase = rng.uniform(0, 6.28)
    channels = []
    for c in range(3):
        v = (120 + 70 * np.sin(x / 41.0 + c + phase) * np.cos(y / 29.0 - c)
             + 25 * np.sin((x + 2 * y) / 6.0 + c * 1.7 + phase)
             + 34 * (rng.random((h, w)) - 0.5))
        channels.append(v)
    pixels = np.clip(np.rint(np.stack(channels, axis=-1)), 0, 255).astype(np.uint8)
    key = os.path.join(tree, f"{i:08d}")
    Image.fromarray(pixels, "RGB").save(key + ".jpg", quality=90)
    label = int(rng.integers(1000))
    with open(key + ".cls", "w") as f:
        f.write(str(label))
    with open(key + ".json", "w") as f:
        json.dump({"label": label, "width": w, "height": h, "source": f"synthetic-{i}"}, f)
PY
mkdir -p "$out"
"$build/tools/wds-shard" create --maxcount 1000 --output "$out/imagenet-%06d.tar" "$tree"
ls -l "$out"
