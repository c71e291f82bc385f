#!/usr/bin/env bash
# The README's main job: on a fresh Debian machine, installs what it needs,
# builds, packs the real Fashion-MNIST into WebDataset shards and trains a
# small CNN with 2 data-parallel ranks on the CPU (Gloo), printing each epoch
# (loss, train/test accuracy, samples/s, data-wait fraction) and the final test
# accuracy. About 10 minutes on a 2-core machine.
#
# Environment: WDS_BUILD_DIR (default build), WDS_DEMO_EPOCHS (default 4),
# WDS_DEMO_RANKS (default 2), WDS_DEMO_LAUNCH=torchrun|env (default: torchrun
# when python3 -m torch.distributed.run works, else the ranks are started here
# with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
build_dir=${WDS_BUILD_DIR:-build}
data=$build_dir/fashion-mnist
epochs=${WDS_DEMO_EPOCHS:-4}
ranks=${WDS_DEMO_RANKS:-2}
train=$build_dir/tools/wds-train
if [[ ! -x $train ]]; then
  echo "demo: $train was not built (LibTorch not found: scripts/deps.sh installs libtorch-dev)" >&2
  exit 1
fi
if [[ ! -r $data/test-000000.tar ]]; then
  WDS_BUILD_DIR=$build_dir scripts/make_fashion_mnist.sh "$data"
fi

args=(--train "$data/train-{000000..000005}.tar" --test "$data/test-000000.tar"
      --epochs "$epochs" --batch-size 64 --lr 0.002 --optimizer adam --image-size 28
      --channels 1 --image-field png --label-field cls --num-classes 10 --workers 1
      --shuffle 2000 --seed 1 --threads 1 --equalize drop --log-every 100)
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

launch=${WDS_DEMO_LAUNCH:-}
if [[ -z $launch ]]; then
  launch=env
  if /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null; then launch=torchrun; fi
fi
start=$(date +%s)
if [[ $launch == torchrun ]]; then
  # Debian's torchrun under Python 3.11 crashes on its default output settings
  # unless given --redirects 1 --tee 1 (stdout goes to a file and to the console).
  /usr/bin/python3 -m torch.distributed.run --redirects 1 --tee 1 --log_dir "$results/logs" \
    --nproc_per_node "$ranks" --master_addr 127.0.0.1 --master_port 29517 \
    --no_python "$train" "${args[@]}" | tee "$results/stdout"
else
  pids=()
  for ((rank = 0; rank < ranks; rank++)); do
    RANK=$rank WORLD_SIZE=$ranks LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 \
      "$train" "${args[@]}" > "$results/rank$rank" &
    pids+=($!)
  done
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  cat "$results"/rank*
  cat "$results"/rank* > "$results/stdout"
  [[ $status -eq 0 ]] || exit "$status"
fi
elapsed=$(($(date +%s) - start))
accuracy=$(grep -o '"test_accuracy": [0-9.]*' "$results/stdout" | head -n 1 | awk '{print $2}')
echo "demo: $ranks ranks, $epochs epochs in ${elapsed}s: final test accuracy $accuracy"
