#!/bin/bash
# bare_loop_vs_loader.sh DATA_DIR [ROUNDS] [WORKERS] [-- wds-bench options]: the loader against
# a bare libarchive + TurboJPEG loop (bench/bare_loop.cc, built here with g++ -O3 as the
# library's Release build is), alternated ROUNDS times (default 3) with WORKERS threads each
# (default 2), all over DATA_DIR/imagenet-{000000..000007}.tar (bench/make_imagenet_like.sh
# DATA_DIR 8), EPOCHS epochs (default 2). Each round runs the bare loop twice: decoding into
# one reused buffer ("bare"), and into a ring of two batch blocks of 64 per thread ("batched":
# the least memory traffic a loader that hands out batches has), then wds-bench.
# wds-bench runs --batch 64 --decode rgb8 --fields jpg,cls plus the options after "--"
# (e.g. --shuffle 1000, or --resize 224x224 --crop center, which the bare loop then does too).
# Prints per round images/s, minor page faults and user/sys CPU seconds of each, and
# wds-bench's ratio to both bare loops; then the median ratios.
set -euo pipefail
data=${1:?usage: bare_loop_vs_loader.sh DATA_DIR [ROUNDS] [WORKERS] [-- wds-bench options]}
rounds=${2:-3}
epochs=${EPOCHS:-2}
workers=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
[[ "${1:-}" == "--" ]] && shift
extra=("$@")
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${WDS_BUILD_DIR:-$here/build}/tools/wds-bench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -O3 -std=c++17 -o "$work/bare_loop" "$here/bench/bare_loop.cc" -larchive -lturbojpeg -lpthread
bare_args=()
for ((i = 0; i < ${#extra[@]}; ++i)); do
  case "${extra[i]}" in
    --resize|--crop) bare_args+=("${extra[i]}" "${extra[i+1]}"); ((++i)) ;;
  esac
done
field() { sed "s/.*\"$1\": \([0-9.]*\).*/\1/"; }
describe() {  # NAME JSON RATE_FIELD
  printf '%s %s img/s (faults %s, user %s s, sys %s s)' "$1" "$(field "$3" <<<"$2")" \
    "$(field minor_faults <<<"$2")" "$(field user_s <<<"$2")" "$(field sys_s <<<"$2")"
}
median() { sort -n | awk '{r[NR] = $1} END {print r[int((NR + 1) / 2)]}'; }
ratios=()
batched_ratios=()
cd "$data"
for round in $(seq "$rounds"); do
  bare=$("$work/bare_loop" --threads "$workers" --epochs "$epochs" "${bare_args[@]}" imagenet-00000{0..7}.tar)
  batched=$("$work/bare_loop" --threads "$workers" --epochs "$epochs" --batch 64 "${bare_args[@]}" \
              imagenet-00000{0..7}.tar)
  ours=$("$bench" --workers "$workers" --batch 64 --decode rgb8 --fields 'jpg,cls' --epochs "$epochs" \
           --json "${extra[@]}" 'imagenet-{000000..000007}.tar')
  b=$(field images_per_s <<<"$bare"); bb=$(field images_per_s <<<"$batched")
  o=$(field samples_per_s <<<"$ours")
  ratio=$(awk -v o="$o" -v b="$b" 'BEGIN {printf "%.3f", o / b}')
  batched_ratio=$(awk -v o="$o" -v b="$bb" 'BEGIN {printf "%.3f", o / b}')
  ratios+=("$ratio")
  batched_ratios+=("$batched_ratio")
  printf 'round %d: %s | %s | %s | ratio %s, to batched %s\n' "$round" \
    "$(describe bare "$bare" images_per_s)" "$(describe batched "$batched" images_per_s)" \
    "$(describe wds-bench "$ours" samples_per_s)" "$ratio" "$batched_ratio"
done
echo "median ratio $(printf '%s\n' "${ratios[@]}" | median), to batched $(printf '%s\n' "${batched_ratios[@]}" | median)"
