#!/usr/bin/env bash
# Configures and builds into ${WDS_BUILD_DIR:-build} (Release, Ninja, -j2).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${WDS_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build_dir" -j2
