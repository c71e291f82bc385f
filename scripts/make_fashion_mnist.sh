#!/usr/bin/env bash
# Packs Debian's dataset-fashion-mnist (60,000 training and 10,000 test 28x28
# grayscale images) into WebDataset shards of PNG images and class labels:
#
#   $OUT/train-000000.tar .. train-000005.tar   (10,000 samples each)
#   $OUT/test-000000.tar                        (10,000 samples)
#   $OUT/{train,test}-shardindex.json, a SHARD.idx beside each shard
#   $OUT/classes.txt                            (class names, line N = index N)
#
# Each sample: "<index>.png" (8-bit gray PNG) and "<index>.cls" (0..9).
# Usage: scripts/make_fashion_mnist.sh [OUT]   (default: $WDS_BUILD_DIR/fashion-mnist)
# Needs the tools built (scripts/build.sh) and the package (scripts/deps.sh).
# The shards are reproducible: every run writes the same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${WDS_BUILD_DIR:-build}
out=${1:-$build_dir/fashion-mnist}
data=${WDS_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
tools=$build_dir/tools
maxcount=${WDS_FASHION_MNIST_MAXCOUNT:-10000}

for tool in wds-shard wds-fashion-mnist; do
  if [[ ! -x $tools/$tool ]]; then
    echo "make_fashion_mnist: $tools/$tool is missing: run scripts/build.sh first" >&2
    exit 1
  fi
done
if [[ ! -r $data/train-images-idx3-ubyte.gz ]]; then
  echo "make_fashion_mnist: $data has no Fashion-MNIST: install dataset-fashion-mnist" \
       "(scripts/deps.sh)" >&2
  exit 1
fi

mkdir -p "$out"
# Shards of an earlier run with another --maxcount would linger beside the new ones.
rm -f "$out"/train-*.tar "$out"/test-*.tar "$out"/train-*.tar.idx "$out"/test-*.tar.idx
for split in train:train t10k:test; do
  idx=${split%%:*}
  name=${split##*:}
  "$tools/wds-fashion-mnist" "$data/$idx-images-idx3-ubyte.gz" "$data/$idx-labels-idx1-ubyte.gz" |
    "$tools/wds-shard" create --maxcount "$maxcount" --index --output "$out/$name-%06d.tar" -
done
printf '%s\n' "T-shirt/top" Trouser Pullover Dress Coat Sandal Shirt Sneaker Bag "Ankle boot" \
  > "$out/classes.txt"
echo "make_fashion_mnist: shards in $out" >&2
