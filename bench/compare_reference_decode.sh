#!/bin/bash
# compare_reference_decode.sh DATA_DIR [ROUNDS]: images/s of the loader
# against the reference Python webdataset package, side by side, on
# DATA_DIR/imagenet-{000000..000003}.tar (bench/make_imagenet_like.sh). Both
# run read + shuffle(1000) + decode rgb8 + to_tuple(jpg, cls) + batch 64 with
# 2 workers for one epoch, start-up included: ours through wds-bench, the
# reference through torch's DataLoader(num_workers=2) under Debian's python3.
#
#   REFERENCE_SRC=/path/to/webdataset/src bench/compare_reference_decode.sh DATA_DIR
#
# REFERENCE_SRC is a checkout of the reference package's source (it needs
# Debian's python3-braceexpand, python3-numpy, python3-yaml, python3-pil and
# python3-torch). Not part of the test suite.
set -euo pipefail
data=${1:?usage: compare_reference_decode.sh DATA_DIR [ROUNDS]}
rounds=${2:-3}
: "${REFERENCE_SRC:?set REFERENCE_SRC to the reference package source directory}"
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${WDS_BUILD_DIR:-$here/build}/tools/wds-bench
pattern='imagenet-{000000..000003}.tar'
cd "$data"
cat imagenet-00000[0-3].tar >/dev/null
for round in $(seq "$rounds"); do
  ours=$("$bench" --workers 2 --batch 64 --shuffle 1000 --decode rgb8 --fields jpg,cls --json \
           "$pattern" | sed 's/.*"samples_per_s": \([0-9.]*\).*/\1/')
  reference=$(PYTHONPATH=$REFERENCE_SRC /usr/bin/python3 - "$pattern" <<'PY'
import sys, time, warnings
warnings.simplefilter("ignore")
import torch
import webdataset as wds
start = time.time()
ds = (wds.WebDataset(sys.argv[1], shardshuffle=False).shuffle(1000).decode("rgb8")
      .to_tuple("jpg", "cls").batched(64))
n = 0
for images, labels in torch.utils.data.DataLoader(ds, num_workers=2, batch_size=None):
    n += len(images)
print(f"{n / (time.time() - start):.1f}")
PY
)
  echo "round $round: ours $ours images/s, reference $reference images/s," \
       "ratio $(awk -v a="$ours" -v b="$reference" 'BEGIN {printf "%.2f", a / b}')"
done
