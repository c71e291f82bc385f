#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS]: builds the libFuzzer targets of fuzz/ with clang-14, ASan and UBSan
# (into ${WDS_FUZZ_BUILD_DIR:-build-fuzz}, see scripts/sanitizer_builds.sh), replays the committed
# corpora (fuzz/corpus/<target>) and the minimized inputs of past findings
# (fuzz/regressions/<target>), then fuzzes each target for SECONDS (default 15; 0 only replays)
# with its dictionary. Exits non-zero on any crash, leak, undefined behaviour, timeout (20 s per
# input), out-of-memory (2.5 GB), or a fuzzer that does not run to its end; a crashing input is
# left in <build dir>/artifacts/. New corpus entries go to <build dir>/corpus/<target> (copy the
# useful ones into fuzz/corpus/ by hand). scripts/fuzz_campaign.sh runs long campaigns;
# scripts/sanitize.sh runs the tests on the same instrumented build.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-15}
source scripts/sanitizer_builds.sh
dir=$fuzz_build_dir
targets=(tar_fuzz npy_fuzz image_fuzz fields_fuzz urls_fuzz index_fuzz http_fuzz state_fuzz
         gpu_job_fuzz)
declare -A dicts=([tar_fuzz]=tar [npy_fuzz]=npy [image_fuzz]=image [fields_fuzz]=fields
                  [urls_fuzz]=urls [index_fuzz]=index [http_fuzz]=http [state_fuzz]=state
                  [gpu_job_fuzz]=gpu_job)
scripts/deps.sh
configure_fuzz_build
cmake --build "$dir" -j2 --target "${targets[@]}"
limits=(-rss_limit_mb=2560 -timeout=20)
mkdir -p "$dir/artifacts"
for t in "${targets[@]}"; do
  inputs=(fuzz/corpus/$t)
  [[ -d fuzz/regressions/$t ]] && inputs+=(fuzz/regressions/$t)
  echo "== $t: replaying $(find "${inputs[@]}" -type f | wc -l) inputs (${inputs[*]})"
  "$dir/fuzz/$t" -runs=0 "${limits[@]}" "${inputs[@]}"
  if ((seconds > 0)); then
    mkdir -p "$dir/corpus/$t"
    echo "== $t: fuzzing for $seconds s"
    log=$dir/artifacts/$t.log
    status=0
    "$dir/fuzz/$t" -max_total_time="$seconds" "${limits[@]}" -max_len=65536 \
      -dict="fuzz/dicts/${dicts[$t]}.dict" -artifact_prefix="$dir/artifacts/$t-" \
      -print_final_stats=1 "$dir/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1 || status=$?
    grep -E "^stat::(number_of_executed_units|average_exec_per_sec)" "$log" || true
    # A fuzzer that fails (or fails to start) exits non-zero or never prints
    # its closing "#N DONE" line: say why, and fail.
    if ((status != 0)) || ! grep -qE "^#[0-9]+[[:space:]]+DONE" "$log"; then
      tail -40 "$log" >&2
      echo "$t: exit status $status; inputs that failed are in $dir/artifacts/" >&2
      exit 1
    fi
  fi
done
