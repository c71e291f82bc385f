#!/usr/bin/env bash
# scripts/fuzz_campaign.sh RUNS [TARGET...]: a fuzzing campaign. Each target
# (default: all of fuzz/, in the order below, quickest first) runs RUNS
# executions with its dictionary (or for at most $WDS_FUZZ_SECONDS seconds,
# when set), at most ${WDS_FUZZ_JOBS:-2} targets at a time, at nice 19 so that
# it yields to anything else on the machine. Needs the targets built
# (scripts/fuzz.sh 0 builds them into ${WDS_FUZZ_BUILD_DIR:-build-fuzz}). A
# second campaign in the same directory goes on from the corpus the first left.
#
# New corpus entries go to $out/corpus/<target> (default out:
# <build dir>/campaign; never committed: copy a few small, interesting inputs
# into fuzz/corpus/ by hand), crashing inputs to $out/artifacts/, each
# target's log to $out/<target>.log (appended to), and one line per finished
# target to $out/summary.tsv: target, executions, exit status, seconds. The
# PIDs of the running fuzzers are kept, one per line, in $WDS_FUZZ_PIDS when
# it is set.
# Run it in the background as a session of its own:
#   setsid nohup scripts/fuzz_campaign.sh 10000000 >campaign.log 2>&1 &
# Exits non-zero when any target found a crash, leak or timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:?usage: scripts/fuzz_campaign.sh RUNS [TARGET...]}
shift
dir=${WDS_FUZZ_BUILD_DIR:-build-fuzz}
out=${WDS_FUZZ_CAMPAIGN_DIR:-$dir/campaign}
jobs=${WDS_FUZZ_JOBS:-2}
pid_file=${WDS_FUZZ_PIDS:-}
# libFuzzer's timeout is wall-clock time, and a campaign at nice 19 on a busy
# machine waits for the processor: 120 s per input by default (fuzz.sh: 20 s).
timeout=${WDS_FUZZ_TIMEOUT:-120}
# The longest input tried ($WDS_FUZZ_MAX_LEN, default 64 KiB). A target whose
# cost grows with its input (urls_fuzz) runs several times faster with less.
max_len=${WDS_FUZZ_MAX_LEN:-65536}
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(npy_fuzz http_fuzz index_fuzz gpu_job_fuzz state_fuzz image_fuzz tar_fuzz fields_fuzz
           urls_fuzz)
fi
declare -A dicts=([tar_fuzz]=tar [npy_fuzz]=npy [image_fuzz]=image [fields_fuzz]=fields
                  [urls_fuzz]=urls [index_fuzz]=index [http_fuzz]=http [state_fuzz]=state
                  [gpu_job_fuzz]=gpu_job)
for t in "${targets[@]}"; do
  [[ -n ${dicts[$t]:-} ]] || { echo "fuzz_campaign: no target $t (see fuzz/)" >&2; exit 2; }
done
# Where the kernel schedules by session (autogroup), nice ranks processes only
# within their session: a campaign started as a session of its own (setsid)
# lowers its whole session, so that it yields to the rest of the machine.
if [[ $(ps -o sid= -p $$ | tr -d ' ') == "$$" && -w /proc/self/autogroup ]]; then
  echo 19 >/proc/self/autogroup
fi
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
mkdir -p "$out/artifacts"

declare -A running=()  # pid -> target
declare -A started=()  # pid -> start time (s)
failed=0

write_pids() {
  [[ -n $pid_file ]] || return 0
  if ((${#running[@]} > 0)); then printf '%s\n' "${!running[@]}" >"$pid_file"; else : >"$pid_file"; fi
}

start() {
  local t=$1
  mkdir -p "$out/corpus/$t"
  nice -n 19 "$dir/fuzz/$t" -runs="$runs" ${WDS_FUZZ_SECONDS:+-max_total_time=$WDS_FUZZ_SECONDS} \
    -rss_limit_mb=2560 -timeout="$timeout" -max_len="$max_len" \
    -dict="fuzz/dicts/${dicts[$t]}.dict" -artifact_prefix="$out/artifacts/$t-" \
    -print_final_stats=1 "$out/corpus/$t" "fuzz/corpus/$t" >>"$out/$t.log" 2>&1 &
  running[$!]=$t
  started[$!]=$SECONDS
  write_pids
}

# finish_one waits for any running fuzzer and records its result.
finish_one() {
  local pid status=0
  wait -n -p pid "${!running[@]}" || status=$?
  local t=${running[$pid]}
  unset "running[$pid]"
  write_pids
  local executed
  executed=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log" | tail -1)
  printf '%s\t%s\t%s\t%s\n' "$t" "${executed:-?}" "$status" "$((SECONDS - started[$pid]))" \
    >>"$out/summary.tsv"
  echo "== $t: ${executed:-?} executions, exit $status, $((SECONDS - started[$pid])) s"
  if ((status != 0)); then
    failed=1
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$out/$t.log" | head -20 >&2 || true
  fi
}

for t in "${targets[@]}"; do
  [[ -x $dir/fuzz/$t ]] || { echo "$dir/fuzz/$t is not built (scripts/fuzz.sh 0)" >&2; exit 1; }
done
for t in "${targets[@]}"; do
  while ((${#running[@]} >= jobs)); do finish_one; done
  start "$t"
done
while ((${#running[@]} > 0)); do finish_one; done
exit "$failed"
