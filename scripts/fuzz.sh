#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS]: builds the libFuzzer targets of fuzz/ with clang-14, ASan and UBSan
# (into ${WDS_FUZZ_BUILD_DIR:-build-fuzz}), replays the committed corpora (fuzz/corpus/<target>),
# fuzzes each target for SECONDS (default 15; 0 only replays) with its dictionary, and runs the
# parser and loader tests built into the same instrumented library (WDS_FUZZ_TESTS, default
# below). Exits non-zero on any crash, leak, undefined behaviour, timeout or test failure; a
# crashing input is left in <build dir>/artifacts/. New corpus entries go to
# <build dir>/corpus/<target> (copy the useful ones into fuzz/corpus/ by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-15}
dir=${WDS_FUZZ_BUILD_DIR:-build-fuzz}
targets=(tar_fuzz npy_fuzz image_fuzz fields_fuzz urls_fuzz index_fuzz http_fuzz)
tests=(${WDS_FUZZ_TESTS-tar_test sample_split_test resume_test npy_test})
declare -A dicts=([tar_fuzz]=tar [npy_fuzz]=npy [image_fuzz]=image [fields_fuzz]=fields
                  [urls_fuzz]=urls [index_fuzz]=index [http_fuzz]=http)
scripts/deps.sh
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DWDS_BUILD_FUZZERS=ON -DWDS_BUILD_TESTS=ON -DWDS_BUILD_TOOLS=ON -DWDS_BUILD_BENCHMARKS=OFF \
  -DWDS_BUILD_PYTHON=OFF -DWDS_WITH_TORCH=OFF -DWDS_WITH_CUDA=OFF "${launcher[@]}" >/dev/null
cmake --build "$dir" -j2 --target "${targets[@]}" "${tests[@]}" wds-shard
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
mkdir -p "$dir/artifacts"
for t in "${targets[@]}"; do
  corpus=fuzz/corpus/$t
  echo "== $t: replaying $(ls "$corpus" | wc -l) corpus inputs"
  "$dir/fuzz/$t" -runs=0 -rss_limit_mb=2560 "$corpus"
  if (( seconds > 0 )); then
    mkdir -p "$dir/corpus/$t"
    echo "== $t: fuzzing for $seconds s"
    "$dir/fuzz/$t" -max_total_time="$seconds" -rss_limit_mb=2560 -timeout=20 -max_len=65536 \
      -dict="fuzz/dicts/${dicts[$t]}.dict" -artifact_prefix="$dir/artifacts/$t-" \
      -print_final_stats=1 "$dir/corpus/$t" "$corpus" 2>&1 | grep -E "^(stat::number_of_executed_units|#[0-9]+ +DONE)|ERROR|SUMMARY|runtime error" || true
    if ls "$dir/artifacts/$t-"* >/dev/null 2>&1; then
      echo "$t: a crashing input is in $dir/artifacts/" >&2
      exit 1
    fi
  fi
done
for t in "${tests[@]}"; do
  echo "== $t under ASan+UBSan"
  (cd "$dir/tests" && "./$t" --gtest_brief=1)
done
