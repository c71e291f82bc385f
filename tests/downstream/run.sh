#!/usr/bin/env bash
# Installs the built tree into a temporary prefix, then configures, builds and
# runs tests/downstream against it with nothing but CMAKE_PREFIX_PATH.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/wds-shard"
cmake -S "$source_dir/tests/downstream" -B "$work/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
mkdir "$work/data"
"$work/build/app" "$work/data"
