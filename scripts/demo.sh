#!/usr/bin/env bash
# The README's main job on built-in data: installs dependencies, builds,
# generates a small shard set and streams it through the loader.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
build_dir=${WDS_BUILD_DIR:-build}
data_dir=${WDS_DEMO_DIR:-$build_dir/demo-shards}
"$build_dir/tools/wds-demo" --make-shards "$data_dir" --shards 8 --samples-per-shard 500
"$build_dir/tools/wds-shard" ls "$data_dir/demo-000000.tar" | head -n 3
"$build_dir/tools/wds-demo" --workers 2 --epochs 2 --shuffle 500 "$data_dir/demo-{000000..000007}.tar"
