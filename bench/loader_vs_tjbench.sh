#!/bin/bash
# loader_vs_tjbench.sh DATA_DIR [ROUNDS]: the end-to-end loader against the
# machine's own JPEG decoding rate, measured side by side. Each round runs
# two tjbench processes at once (one per core, each on a JPEG taken from the
# first shard) and then wds-bench with 2 workers, read + shuffle(1000) +
# decode rgb8 + batch 64, over DATA_DIR/imagenet-{000000..000003}.tar
# (bench/make_imagenet_like.sh writes them). Prints one line per round and
# the median ratio.
set -euo pipefail
data=${1:?usage: loader_vs_tjbench.sh DATA_DIR [ROUNDS]}
rounds=${2:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${WDS_BUILD_DIR:-$here/build}/tools/wds-bench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
first=$(tar tf "$data/imagenet-000000.tar" | awk '/\.jpg$/ && n++ < 2')
tar xf "$data/imagenet-000000.tar" -C "$work" $first
set -- $first
fps() { tjbench "$work/$1" -rgb -nowrite -benchtime 3 | awk '/Decompress/ {print $(NF-1)}'; }
ratios=()
for round in $(seq "$rounds"); do
  fps "$1" > "$work/a" & fps "$2" > "$work/b"; wait
  tj=$(awk '{s += $1} END {printf "%.0f", s}' "$work/a" "$work/b")
  loader=$(cd "$data" && "$bench" --workers 2 --batch 64 --shuffle 1000 --decode rgb8 --epochs 2 \
             --json 'imagenet-{000000..000003}.tar' | sed 's/.*"samples_per_s": \([0-9.]*\).*/\1/')
  ratio=$(awk -v l="$loader" -v t="$tj" 'BEGIN {printf "%.3f", l / t}')
  ratios+=("$ratio")
  echo "round $round: 2x tjbench $tj images/s, loader $loader images/s, ratio $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{r[NR] = $1} END {print "median ratio " r[int((NR + 1) / 2)]}'
