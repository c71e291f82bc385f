#!/usr/bin/env bash
# scripts/sanitize.sh [asan|tsan|all]: the test suite under the sanitizers (CI runs `all`).
#
#  asan: every test binary of tests/ (tests/<layer>/*_test.cc) that needs neither LibTorch nor
#        the Python extension (neither is built with the sanitizers), with the tools they run,
#        under AddressSanitizer (leaks included) + UndefinedBehaviorSanitizer, in the build that
#        scripts/fuzz.sh fuzzes (${WDS_FUZZ_BUILD_DIR:-build-fuzz}), so the library is compiled
#        once for both. Left out:
#        limits_test, whose bounds are on peak RSS and address space, which ASan's shadow memory
#        and quarantine make meaningless (it runs in the Release build of scripts/test.sh).
#  tsan: the tests that run threads (the Loader with its stress test, resume, sample split,
#        memory and queue tests, fanned-out remote counts, shard index scans, threads reading
#        one indexed shard, parallel image decoding, remote shards against in-process servers
#        and shards opened ahead, gzip and zstd shards compressed on threads,
#        GPU jobs decoded on the host by the Loader's workers) under ThreadSanitizer, in
#        ${WDS_TSAN_BUILD_DIR:-build-tsan}.
#
# Each test binary runs as one process (much faster than ctest's process per test case), two at
# a time (the longest as two gtest shards), for at most ${WDS_SANITIZE_TIMEOUT:-900} seconds (a
# deadlock fails the run instead of hanging CI); a failing one's output is printed whole. Ends with
# "sanitize: N passed, M failed" (processes) and exits non-zero when any failed or a sanitizer
# reported anything.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
source scripts/sanitizer_builds.sh
scripts/deps.sh

# Tests that take no sanitizer build: LibTorch's, and limits_test (see above).
asan_tests=()
for f in tests/*_test.cc tests/*/*_test.cc; do
  name=$(basename "$f" .cc)
  [[ $name == torch_* || $name == limits_test ]] && continue
  # The CUDA kernels and nvJPEG are not built with the sanitizers (nvcc takes no
  # -fsanitize); gpu_decode_test and gpu_jobs_test, the host side, run.
  [[ $name == gpu_kernel_test || $name == gpu_nvjpeg_test || $name == gpu_jobs_device_test ]] &&
    continue
  asan_tests+=("$name")
done
# corruption_sweep_test runs under ASan only: its Loaders have one worker, and
# under TSan it would add 3.5 minutes to CI for races the stress test covers.
tsan_tests=(loader_test resume_test elastic_test padded_epoch_test remote_upload_test tar_test file_sinks_test sample_split_test memory_test bounded_queue_test concurrently_test shard_counts_test
            shard_index_test indexed_shard_test image_formats_test remote_test gpu_jobs_test)
# The sweep is by far the longest binary (~3.5 min under ASan): it runs as two
# gtest shards, so that both cores work until the end.
declare -A shards=([corruption_sweep_test]=2)

time_limit=${WDS_SANITIZE_TIMEOUT:-900}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
passed=0
failed=()

# run_tests DIR LABEL TEST...: runs each test binary of DIR/tests (or each of
# its gtest shards), two processes at a time.
run_tests() {
  local dir=$1 label=$2
  shift 2
  local -A pids=() started=()
  local t n i
  for t in "$@"; do
    n=${shards[$t]:-1}
    for ((i = 0; i < n; i++)); do
      while ((${#pids[@]} >= 2)); do wait_one; done
      (cd "$dir/tests" && GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i \
        exec timeout -k 10 "$time_limit" "./$t" --gtest_brief=1) \
        >"$logs/$label-$t-$i.log" 2>&1 &
      pids[$!]=$t-$i
      started[$!]=$SECONDS
    done
  done
  while ((${#pids[@]} > 0)); do wait_one; done
}

wait_one() {
  local pid status=0
  wait -n -p pid "${!pids[@]}" || status=$?
  local run=${pids[$pid]}
  unset "pids[$pid]"
  local log=$logs/$label-$run.log
  local base=${run%-*} index=${run##*-}
  local t=$base
  ((${shards[$base]:-1} == 1)) || t="$base (shard $((index + 1)) of ${shards[$base]})"
  # A sanitizer report in a child process (a tool a test runs) fails the
  # binary even when the test itself did not look at it.
  local report="^(==[0-9]+==ERROR|SUMMARY: [A-Za-z]+Sanitizer|WARNING: ThreadSanitizer)|runtime error:"
  if ((status == 0)) && ! grep -qE "$report" "$log"; then
    passed=$((passed + 1))
    echo "$label: $t passed ($(grep -Eo 'PASSED.*' "$log" | tail -1 | sed 's/^PASSED *\] *//')" \
      "$((SECONDS - started[$pid])) s)"
  else
    failed+=("$label/$t")
    local why="exit $status"
    ((status != 124)) || why="stopped at the $time_limit s limit"
    echo "$label: $t FAILED ($why):" >&2
    cat "$log" >&2
  fi
}

if [[ $mode == asan || $mode == all ]]; then
  configure_fuzz_build
  cmake --build "$fuzz_build_dir" -j2 --target "${asan_tests[@]}"
  run_tests "$fuzz_build_dir" asan "${asan_tests[@]}"
fi
if [[ $mode == tsan || $mode == all ]]; then
  configure_tsan_build
  cmake --build "$tsan_build_dir" -j2 --target "${tsan_tests[@]}"
  run_tests "$tsan_build_dir" tsan "${tsan_tests[@]}"
fi
echo "sanitize: $passed passed, ${#failed[@]} failed"
if ((${#failed[@]} > 0)); then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
