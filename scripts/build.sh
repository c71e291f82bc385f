#!/usr/bin/env bash
# Configures and builds into ${WDS_BUILD_DIR:-build} (Release, Ninja, -j2).
# Extra arguments go to cmake's configure step. ccache is used when installed.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${WDS_BUILD_DIR:-build}
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" >/dev/null
cmake --build "$build_dir" -j2
