#!/bin/bash
# bare_loop_vs_loader.sh DATA_DIR [ROUNDS] [WORKERS] [-- wds-bench options]: the loader against
# a bare libarchive + TurboJPEG loop (bench/bare_loop.cc, built here with g++), alternated
# ROUNDS times (default 3) with WORKERS threads each (default 2), both over
# DATA_DIR/imagenet-{000000..000007}.tar (bench/make_imagenet_like.sh DATA_DIR 8), EPOCHS epochs
# (default 2).
# wds-bench runs --batch 64 --decode rgb8 --fields jpg,cls plus the options after "--"
# (e.g. --shuffle 1000, or --resize 224x224 --crop center, which the bare loop then does too).
# Prints per round images/s, the ratio, minor page faults and user/sys CPU seconds, then the
# median ratio.
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
g++ -O2 -std=c++17 -o "$work/bare_loop" "$here/bench/bare_loop.cc" -larchive -lturbojpeg -lpthread
bare_args=()
for ((i = 0; i < ${#extra[@]}; ++i)); do
  case "${extra[i]}" in
    --resize|--crop) bare_args+=("${extra[i]}" "${extra[i+1]}"); ((++i)) ;;
  esac
done
field() { sed "s/.*\"$1\": \([0-9.]*\).*/\1/"; }
ratios=()
cd "$data"
for round in $(seq "$rounds"); do
  bare=$("$work/bare_loop" --threads "$workers" --epochs "$epochs" "${bare_args[@]}" imagenet-00000{0..7}.tar)
  ours=$("$bench" --workers "$workers" --batch 64 --decode rgb8 --fields 'jpg,cls' --epochs "$epochs" \
           --json "${extra[@]}" 'imagenet-{000000..000007}.tar')
  b=$(field images_per_s <<<"$bare"); o=$(field samples_per_s <<<"$ours")
  ratio=$(awk -v o="$o" -v b="$b" 'BEGIN {printf "%.3f", o / b}')
  ratios+=("$ratio")
  printf 'round %d: bare %s img/s (faults %s, user %s s, sys %s s) | wds-bench %s img/s (faults %s, user %s s, sys %s s) | ratio %s\n' \
    "$round" "$b" "$(field minor_faults <<<"$bare")" "$(field user_s <<<"$bare")" "$(field sys_s <<<"$bare")" \
    "$o" "$(field minor_faults <<<"$ours")" "$(field user_s <<<"$ours")" "$(field sys_s <<<"$ours")" "$ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{r[NR] = $1} END {print "median ratio " r[int((NR + 1) / 2)]}'
