#!/bin/bash
# compare_builds.sh DATA_DIR ROUNDS WDS_BENCH_A WDS_BENCH_B [wds-bench options]: A/B of two
# builds of wds-bench on the same machine, alternating them ROUNDS times so that drifting load
# hits both alike. Each run is --workers 2 --batch 64 --shuffle 1000 --decode rgb8 --epochs 2
# over DATA_DIR/imagenet-{000000..000003}.tar (bench/make_imagenet_like.sh), plus the extra
# options (e.g. --resize 224x224 --crop center). Prints samples/s and the decode share per run.
set -euo pipefail
data=${1:?usage: compare_builds.sh DATA_DIR ROUNDS WDS_BENCH_A WDS_BENCH_B [options]}
rounds=${2:?}
a=$(readlink -f "${3:?}")
b=$(readlink -f "${4:?}")
shift 4
cd "$data"
for round in $(seq "$rounds"); do
  for bin in "$a" "$b"; do
    "$bin" --workers 2 --batch 64 --shuffle 1000 --decode rgb8 --epochs 2 --json "$@" \
      'imagenet-{000000..000003}.tar' |
      sed 's/.*"samples_per_s": \([0-9.]*\).*"decode": \([0-9.]*\).*/\1 \2/' |
      awk -v r="$round" -v bin="$bin" '{printf "round %d %s: %s samples/s, decode share %s\n", r, bin, $1, $2}'
  done
done
