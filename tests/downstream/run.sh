#!/usr/bin/env bash
# Installs the built tree into a temporary prefix, then configures, builds and
# runs tests/downstream against it with nothing but CMAKE_PREFIX_PATH.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
for tool in wds-shard wds-bench wds-demo wds-fashion-mnist; do
  test -x "$work/prefix/bin/$tool" || { echo "not installed: $tool" >&2; exit 1; }
done
if [[ -f "$build_dir/tools/wds-train" ]]; then
  test -x "$work/prefix/bin/wds-train" || { echo "not installed: wds-train" >&2; exit 1; }
  "$work/prefix/bin/wds-train" --help >/dev/null
fi
cmake -S "$source_dir/tests/downstream" -B "$work/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
mkdir "$work/data"
"$work/build/app" "$work/data"
# The installed tools work on what the installed library wrote.
"$work/prefix/bin/wds-shard" index "$work/data/shard-000000.tar" >/dev/null
"$work/prefix/bin/wds-shard" verify "$work/data/shard-000000.tar"
grep -q "^v1.2 10$" "$work/data/shard-000000.tar.idx"
# The installed Python package (when built) imports from the prefix and reads
# the same shard.
if [[ -d "$build_dir/python/webdataset_cpp" ]]; then
  site=$(find "$work/prefix/lib" -maxdepth 2 -type d -name dist-packages | head -n 1)
  test -n "$site" || { echo "webdataset_cpp was not installed" >&2; exit 1; }
  PYTHONPATH="$site" /usr/bin/python3 - "$site" "$work/data/shard-000000.tar" <<'PY'
import sys
import webdataset_cpp as wds
assert wds.__file__.startswith(sys.argv[1]), wds.__file__
n = sum(1 for _ in wds.WebDataset(sys.argv[2], shardshuffle=False))
assert n == 10, n
PY
fi
