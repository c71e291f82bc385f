#!/usr/bin/env bash
# Runs the test suite under AddressSanitizer + UndefinedBehaviorSanitizer, then
# under ThreadSanitizer (build-asan/, build-tsan/). Slower than scripts/test.sh;
# run it before calling threaded or parsing code done.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
for mode in address,undefined thread; do
  dir=build-${mode%%,*}
  [[ $mode == thread ]] && dir=build-tsan
  [[ $mode == address,undefined ]] && dir=build-asan
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWDS_SANITIZE="$mode" \
    -DWDS_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build "$dir" -j2
  ctest --test-dir "$dir" --output-on-failure -j2 --timeout 600 -E InstallAndFindPackage
done
