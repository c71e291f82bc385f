#!/usr/bin/env bash
# Every GPU check of webdataset-cpp in one command, for the lent GPU machines
# (Ubuntu 24.04, g++ 13, CMake 4, CUDA 13 with nvcc and nvJPEG, python3 with
# PyTorch, pybind11 and Lightning; offline). It builds the project there from
# the Debian packages of scripts/gpu_bundle.sh (core, tools, tests, wds::torch
# against that python3's PyTorch, the Python extension for that python3), runs
# the tests that need a GPU, and prints one summary. A failing step is recorded
# and the next one runs; the exit status is the number of failed steps.
#
#   scripts/gpu_check.sh [--bundle FILE] [--build-dir DIR] [--jobs N] [--out DIR]
#                        [--budget-s SECONDS] [--skip-build] [--dry-run]
#
#   --bundle    the tarball (default build-bundle/wds-gpu-bundle.tar.xz)
#   --build-dir where to build (default build-gpu; reused when present)
#   --jobs      parallel compile jobs (default: nproc)
#   --out       a directory to copy the summary and the logs into (default $OUT
#               when set: the device runner brings $OUT back)
#   --budget-s  steps that would start after this many seconds are skipped
#               (default 540: the device runner allows 600 per command)
#   --skip-build  test what an earlier run built (a rerun after a timeout)
#   --dry-run   unpack and configure for real, print the build and test
#               commands instead of running them
#
# WDS_GPU_CHECK_ALLOW_NO_GPU=1 runs everything on a machine without a GPU
# (the GPU cases then skip, and a skip is not a failure); without it a
# missing GPU fails the first step. WDS_GPU_PYTHON names the python3,
# WDS_GPU_TORCH_PREFIX the CMake prefix of LibTorch (default: that python3's
# torch.utils.cmake_prefix_path).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

bundle=build-bundle/wds-gpu-bundle.tar.xz
build=build-gpu
jobs=$(nproc)
out=${OUT:-}
budget=540
dry_run=0
skip_build=0
usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }
while (($#)); do
  case $1 in
    --bundle) bundle=${2:?--bundle needs a file}; shift 2 ;;
    --build-dir) build=${2:?--build-dir needs a directory}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --budget-s) budget=${2:?--budget-s needs a number}; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --skip-build) skip_build=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $jobs =~ ^[0-9]+$ && $jobs -ge 1 ]] || { echo "gpu_check: --jobs $jobs is not a positive number" >&2; exit 2; }
[[ $budget =~ ^[0-9]+$ ]] || { echo "gpu_check: --budget-s $budget is not a number" >&2; exit 2; }
allow_no_gpu=${WDS_GPU_CHECK_ALLOW_NO_GPU:-0}
py=${WDS_GPU_PYTHON:-python3}
mkdir -p "$build"
build=$(cd "$build" && pwd)
logs=$build/gpu-check-logs
rm -rf "$logs"
mkdir -p "$logs"
sysroot=$build/bundle
multiarch=x86_64-linux-gnu
libdir=$sysroot/usr/lib/$multiarch
start=$SECONDS

# ---------------------------------------------------------------- bookkeeping
results=()
failures=0
have_gpu=0

# record STEP RESULT SECONDS DETAIL
record() {
  results+=("$(printf '%-44s %-5s %5ss  %s' "$1" "$2" "$3" "$4")")
  [[ $2 == FAIL ]] && failures=$((failures + 1))
  printf 'gpu_check: %-44s %s %ss %s\n' "$1" "$2" "$3" "$4" >&2
}

# step NAME TIMEOUT_S COMMAND...: runs COMMAND (bash -c) with its output in
# $logs/NAME.log; PASS on status 0, FAIL otherwise (124: timed out). In a dry
# run, prints the command instead.
step() {
  local name=$1 limit=$2
  shift 2
  local elapsed=$((SECONDS - start))
  if ((elapsed + 5 > budget)); then
    record "$name" SKIP 0 "out of time (${elapsed}s of ${budget}s spent)"
    return 1
  fi
  if ((dry_run && !${REAL:-0})); then
    echo "+ $*" >"$logs/$name.log"
    record "$name" DRY 0 "$*"
    return 0
  fi
  local t0=$SECONDS rc=0
  # pipefail in the child too (options are not inherited): a step piped into
  # tee fails when its program does.
  timeout --kill-after=10 "$limit" bash -o pipefail -c "$*" >"$logs/$name.log" 2>&1 || rc=$?
  local detail
  detail=$(summarize "$logs/$name.log")
  if ((rc == 0)); then
    record "$name" PASS $((SECONDS - t0)) "$detail"
  else
    ((rc == 124 || rc == 137)) && detail="timed out after ${limit}s; $detail"
    record "$name" FAIL $((SECONDS - t0)) "exit $rc; $detail"
  fi
  return $rc
}

# summarize LOG: gtest's and pytest's counts, else the last line.
summarize() {
  local log=$1 line
  line=$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$log" | tr -s ' ' | paste -sd ' ' -)
  [[ -z $line ]] && line=$(grep -E '[0-9]+ (passed|failed|skipped)' "$log" | tail -1)
  [[ -z $line ]] && line=$(grep -m1 -A1 -E '^CMake Error|error:|FAILED:' "$log" | tr -s ' \n' ' ')
  [[ -z $line ]] && line=$(grep -v '^\s*$' "$log" | tail -1)
  echo "${line:0:150}"
}

# gtest_step NAME TIMEOUT BINARY [FILTER]: a test binary of the build; with a
# GPU present, a skipped case of a GPU-only binary (STRICT=1) is a failure.
gtest_step() {
  local name=$1 limit=$2 binary=$build/tests/$3 filter=${4:-*} strict=${STRICT:-0}
  if ((!dry_run)) && [[ ! -x $binary ]]; then
    if ((have_gpu)); then
      record "$name" FAIL 0 "$binary was not built (see build.log)"
    else  # e.g. gpu_nvjpeg_test without nvjpeg.h, on a machine without a GPU
      record "$name" SKIP 0 "$binary was not built (no GPU machine; see configure.log)"
    fi
    return
  fi
  step "$name" "$limit" "'$binary' --gtest_filter='$filter' --gtest_color=no" || true
  if ((!dry_run && strict && have_gpu)) && grep -q '^\[  SKIPPED \]' "$logs/$name.log"; then
    record "$name (skips)" FAIL 0 "cases skipped although a GPU is present"
  fi
}

# ---------------------------------------------------------------- environment
environment() {
  echo "date: $(date -u)"
  echo "host: $(uname -a)"
  (. /etc/os-release && echo "os: $PRETTY_NAME")
  echo "cpus: $(nproc)"
  echo "g++: $(g++ --version | head -1)"
  echo "cmake: $(cmake --version | head -1)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo missing)"
  echo "nvjpeg.h: $(ls /usr/local/cuda/include/nvjpeg.h /usr/local/cuda/targets/*/include/nvjpeg.h 2>/dev/null | head -1)"
  echo "python: $($py -c 'import sys; print(sys.version)')"
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "devices", torch.cuda.device_count())'
  $py -c 'import pybind11; print("pybind11", pybind11.__version__)'
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
  nvidia-smi -q | grep -i -E 'jpg|jpeg|ofa' | head -8
}

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then have_gpu=1; fi
t0=$SECONDS
environment >"$logs/environment.log" 2>&1
if ((have_gpu)); then
  record environment PASS $((SECONDS - t0)) "$(nvidia-smi -L | head -1 | cut -c1-100)"
elif [[ $allow_no_gpu == 1 ]]; then
  record environment PASS $((SECONDS - t0)) "no GPU (WDS_GPU_CHECK_ALLOW_NO_GPU=1)"
else
  record environment FAIL $((SECONDS - t0)) "no GPU: nvidia-smi -L fails (WDS_GPU_CHECK_ALLOW_NO_GPU=1 to go on)"
fi

# ---------------------------------------------------------------- the bundle
# The bundle is unpacked as a sysroot. Its libraries are linked by path; at
# run time only those whose soname the system lacks are put on
# LD_LIBRARY_PATH ($build/bundle-runtime), so that python3, torch and the
# system's tools keep their own zlib, OpenSSL, curl.
unpack() {
  rm -rf "$sysroot" "$build/bundle-runtime"
  mkdir -p "$sysroot" "$build/bundle-runtime"
  if command -v xz >/dev/null 2>&1; then
    tar -C "$sysroot" -xJf "$bundle"
  else
    $py -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle" "$sysroot"
  fi
  cat "$sysroot/MANIFEST"
  local known
  known=$( (/sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null) | awk '{print $1}' | sort -u)
  for lib in "$libdir"/*.so*; do
    [[ -f $lib && ! -L $lib ]] || continue
    local soname
    soname=$(objdump -p "$lib" 2>/dev/null | awk '/SONAME/ {print $2}')
    [[ -n $soname ]] || continue
    grep -qxF "$soname" <<<"$known" || ln -sf "$lib" "$build/bundle-runtime/$soname"
  done
  echo "runtime libraries from the bundle: $(ls "$build/bundle-runtime" | wc -l)"
  ls "$build/bundle-runtime"
}
if [[ ! -f $bundle ]]; then
  record unpack FAIL 0 "no bundle at $bundle: make it with scripts/gpu_bundle.sh on a dev machine"
else
  t0=$SECONDS
  if unpack >"$logs/unpack.log" 2>&1; then
    record unpack PASS $((SECONDS - t0)) "$(head -1 "$sysroot/MANIFEST" | cut -c1-90)"
  else
    record unpack FAIL $((SECONDS - t0)) "$(tail -1 "$logs/unpack.log")"
  fi
fi
export PATH=$PATH:$sysroot/bin
export LD_LIBRARY_PATH=$build/bundle-runtime${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_LIBDIR=$libdir/pkgconfig:$sysroot/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$sysroot
export CMAKE_POLICY_VERSION_MINIMUM=3.5
ninja=$(command -v ninja || echo "$sysroot/bin/ninja")

# ---------------------------------------------------------------- configure
torch_prefix=${WDS_GPU_TORCH_PREFIX:-$($py -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)}
pybind11_dir=$($py -m pybind11 --cmakedir 2>/dev/null || true)
nccl_root=$($py -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
[[ -n $nccl_root ]] && export NCCL_ROOT=$nccl_root
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
# The toolkit nvcc belongs to, for FindCUDAToolkit (ours and LibTorch's).
export CUDAToolkit_ROOT=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
rpath_link="-Wl,-rpath-link,$libdir"
configure_args=(
  -S "$repo" -B "$build" -G Ninja -DCMAKE_MAKE_PROGRAM="$ninja" -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_PREFIX_PATH="$sysroot/usr;$torch_prefix;$pybind11_dir"
  -DPKG_CONFIG_EXECUTABLE="$sysroot/bin/pkg-config"
  # Debian's Abseil 20220623 leaves <cstdint> to its includers; GCC 13's
  # headers no longer include it for them. The bundle's multiarch headers
  # (jconfig.h, OpenSSL's and curl's configuration) go before the system's:
  # without this, Debian's jpeglib.h (libjpeg 6.2) took Ubuntu's jconfig.h
  # (libjpeg 8) and every libjpeg call failed its version check.
  -DCMAKE_CXX_FLAGS="-include cstdint -isystem $sysroot/usr/include/$multiarch"
  -DCMAKE_C_FLAGS="-isystem $sysroot/usr/include/$multiarch"
  -DCMAKE_EXE_LINKER_FLAGS="$rpath_link" -DCMAKE_SHARED_LINKER_FLAGS="$rpath_link"
  -DCMAKE_MODULE_LINKER_FLAGS="$rpath_link"
  -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="80;90" -DCUDAToolkit_ROOT="$CUDAToolkit_ROOT"
  -DWDS_PYTHON_EXECUTABLE="$(command -v "$py")" -DWDS_BUILD_BENCHMARKS=ON
)
with_torch=1
# Configured for real in a dry run too: the bundle's prefix is what it checks.
if ! REAL=1 step configure 180 "cmake ${configure_args[*]@Q}"; then
  # find_package(Torch) runs whatever WDS_WITH_TORCH says: without PyTorch's
  # prefix, and with a fresh cache, it finds nothing.
  with_torch=0
  no_torch_args=("${configure_args[@]/#-DCMAKE_PREFIX_PATH=*/-DCMAKE_PREFIX_PATH=$sysroot/usr;$pybind11_dir}")
  REAL=1 step configure-without-torch 120 "rm -f '$build/CMakeCache.txt' && \
    cmake ${no_torch_args[*]@Q} -DWDS_WITH_TORCH=OFF" || true
fi
if [[ -f $build/CMakeCache.txt ]]; then
  for option in WDS_WITH_TORCH WDS_WITH_CUDA WDS_WITH_CUDA_KERNELS WDS_WITH_NVJPEG WDS_BUILD_PYTHON; do
    value=$(grep -E "^$option:" "$build/CMakeCache.txt" | cut -d= -f2)
    if [[ $value == ON || $value == 1 || $value == TRUE ]]; then
      record "detected $option" PASS 0 "$value"
    elif ((have_gpu)); then
      record "detected $option" FAIL 0 "${value:-unset}: expected ON on a GPU machine"
    else
      record "detected $option" SKIP 0 "${value:-unset} (no GPU machine)"
    fi
  done
  grep -qE '^WDS_WITH_TORCH:BOOL=(ON|1|TRUE)$' "$build/CMakeCache.txt" || with_torch=0
fi

# ---------------------------------------------------------------- build
# The core, the tools, wds::torch, the Python extension and the tests run
# below (not every test of the project: time is short). -k 0: build every
# target that can be, so one broken file costs only what depends on it.
wanted=(wds-shard wds-demo wds-fashion-mnist wds-bench wds-train wds_python_core
        wds_python_package gpu_kernel_test gpu_nvjpeg_test gpu_decode_test gpu_jobs_test
        gpu_jobs_device_test
        memory_test nvjpeg_bench torch_tensor_test torch_distributed_test torch_ddp_test)
targets=()
if [[ -f $build/build.ninja ]]; then
  known=$("$ninja" -C "$build" -t targets all 2>/dev/null | cut -d: -f1)
  for t in "${wanted[@]}"; do grep -qxF "$t" <<<"$known" && targets+=("$t"); done
fi
if ((skip_build)); then
  record build SKIP 0 "--skip-build"
elif ((${#targets[@]} == 0)); then
  record build FAIL 0 "nothing to build: the project did not configure"
else
  step build 360 "cmake --build '$build' -j $jobs --target ${targets[*]} -- -k 0" || true
fi

# ---------------------------------------------------------------- tests
# The issue's SIGSEGV first, in this build made entirely here.
if ((with_torch)); then
  gtest_step prefetcher-state-restore 120 torch_tensor_test \
    'DevicePrefetcherTest.StateExcludesTheBatchDrawnAheadAndRestoresExactly'
fi
STRICT=1 gtest_step gpu-kernels 60 gpu_kernel_test
STRICT=1 gtest_step gpu-nvjpeg-decoder 60 gpu_nvjpeg_test
gtest_step gpu-decode-host 60 gpu_decode_test
gtest_step gpu-jobs-host 60 gpu_jobs_test
STRICT=1 gtest_step gpu-batch-decoder 120 gpu_jobs_device_test

# ---------------------------------------------------------------- benchmark
# docs/BENCHMARKS.md's GPU figures, in one run: an ImageNet-like set (500x375
# JPEGs, quality 90, in 16 shards); nvJPEG's raw batched decode and our
# decoder alone on the same bytes; torchvision's decode_jpeg on cuda; the
# loader to device memory (at most 4 CPU threads: 3 workers and the consumer)
# at full size and at a 224x224 centre crop; the CPU path at 16 workers.
bench_dir=$build/bench-data
bench_shards="$bench_dir/shards/bench-{000000..000015}.tar"
wds_bench=$build/tools/wds-bench
bench() {  # bench NAME ARGS...: wds-bench --json, the JSON kept as NAME.json
  local name=$1
  shift
  step "$name" 60 "'$wds_bench' --json $* '$bench_shards' | tee '$logs/$name.json'" || true
}
if ((have_gpu || dry_run)); then
  step bench-data 120 "$py '$repo/scripts/gpu_baselines.py' make --images 8192 --shards 16 \
    --out '$bench_dir'" || true
  step bench-nvjpeg-raw-and-decoder 90 "'$build/bench/nvjpeg_bench' '$bench_dir/jpeg' --images 4096 \
    --batch 64 --batch 256 --rounds 3 | tee '$logs/bench-nvjpeg.json'" || true
  step bench-torchvision 90 "$py '$repo/scripts/gpu_baselines.py' torchvision \
    --jpeg-dir '$bench_dir/jpeg' --images 4096 --batch 64 --batch 256 \
    | tee '$logs/bench-torchvision.json'" || true
  bench bench-cuda-full-b64 --device cuda --workers 3 --batch 64 --shuffle 1000 --epochs 3
  bench bench-cuda-full-b256 --device cuda --workers 3 --batch 256 --shuffle 1000 --epochs 3
  # Pinned batches: the workers make the jobs in page-locked memory and the
  # decoder reads them in place (no gather on the consumer's thread).
  bench bench-cuda-full-b64-pinned --device cuda --pin-memory --workers 3 --batch 64 \
    --shuffle 1000 --epochs 3
  bench bench-cuda-full-b256-pinned --device cuda --pin-memory --workers 3 --batch 256 \
    --shuffle 1000 --epochs 3
  bench bench-cuda-crop224-b64 --device cuda --workers 3 --batch 64 --shuffle 1000 --epochs 3 \
    --decode torchrgb --resize 224x224 --crop center
  # The workers decode on the GPU (nvJPEG's host work on 3 threads, each with
  # its own stream); the consumer only launches each batch's kernel.
  bench bench-cuda-full-b64-workers --device cuda --decode-in-workers --workers 3 --batch 64 \
    --shuffle 1000 --epochs 3
  bench bench-cuda-full-b256-workers --device cuda --decode-in-workers --workers 3 --batch 256 \
    --shuffle 1000 --epochs 3
  bench bench-cuda-crop224-b64-workers --device cuda --decode-in-workers --workers 3 --batch 64 \
    --shuffle 1000 --epochs 3 --decode torchrgb --resize 224x224 --crop center
  step bench-python-cuda-full-b64-workers 90 "PYTHONPATH='$build/python' $py \
    '$repo/scripts/gpu_baselines.py' loader --shards '$bench_shards' --workers 3 --batch 64 \
    --epochs 3 --decode-in-workers | tee '$logs/bench-python-cuda-full-b64-workers.json'" || true
  step bench-python-cuda-full-b64 90 "PYTHONPATH='$build/python' $py '$repo/scripts/gpu_baselines.py' \
    loader --shards '$bench_shards' --workers 3 --batch 64 --epochs 3 \
    | tee '$logs/bench-python-cuda-full-b64.json'" || true
  step bench-python-cuda-full-b64-pinned 90 "PYTHONPATH='$build/python' $py \
    '$repo/scripts/gpu_baselines.py' loader --shards '$bench_shards' --workers 3 --batch 64 \
    --epochs 3 --pin-memory | tee '$logs/bench-python-cuda-full-b64-pinned.json'" || true
  bench bench-cpu-16w-b64 --workers 16 --batch 64 --shuffle 1000 --epochs 2
  bench bench-cpu-16w-crop224-b64 --workers 16 --batch 64 --shuffle 1000 --epochs 2 \
    --decode torchrgb --resize 224x224 --crop center
  # The figures side by side with the issue's targets, also at the summary's end.
  step bench-figures 20 "$py '$repo/scripts/gpu_figures.py' '$logs' | tee '$logs/figures.txt'" || true
else
  record benchmark SKIP 0 "no GPU"
fi
gtest_step pinned-memory 120 memory_test
if ((with_torch)); then
  # Where a LibTorch test dies of a signal, the backtrace (cuda-gdb debugs
  # host code too; the machines have no gdb) and the libraries it loaded.
  if ((!dry_run)) && grep -q "exit 139" <<<"${results[*]}" && command -v cuda-gdb >/dev/null; then
    step torch-crash-backtrace 90 "ldd '$build/tests/torch_tensor_test' | grep -E 'torch|c10|absl|gtest'; \
      cuda-gdb -batch -ex run -ex bt -ex 'info sharedlibrary' --args '$build/tests/torch_tensor_test' \
      --gtest_filter='DevicePrefetcherTest.StateExcludesTheBatchDrawnAheadAndRestoresExactly' 2>&1 \
      | grep -v '^\[New Thread\|^\[Thread' | head -150; exit 0" || true
  fi
  gtest_step torch-tensor 180 torch_tensor_test
  gtest_step torch-distributed 180 torch_distributed_test
  gtest_step wds-train-decode-on-gpu 120 torch_ddp_test 'JpegDdpTest.*'
  gtest_step ddp-shared-gpu-two-ranks 180 torch_ddp_test \
    'DdpTest.SharedGpuRanksPinTheirBatchesForTheTrainingDevice'
else
  record torch-tests SKIP 0 "wds::torch was not configured (see configure.log)"
fi

python_smoke='
import sys, torch, numpy as np
import webdataset_cpp as wds
from webdataset_cpp import _core
print("webdataset_cpp", wds.__file__, "extension", _core.__file__)
if torch.cuda.is_available():
    a = torch.arange(12, dtype=torch.uint8).reshape(3, 4)
    print("cuda copy", a.cuda().sum().item())
'
step python-extension 60 "PYTHONPATH='$build/python' $py -c ${python_smoke@Q}" || true
if $py -c 'import pytest' 2>/dev/null; then
  # test_threads.py: forks and exits beside native threads, under this python3 (3.12: thread
  # states are made without the fork lock that 3.11 needs).
  step python-loader-tests 180 "cd '$repo/python/tests' && PYTHONPATH='$build/python' WDS_BUILD_DIR='$build' \
    PYTHONDONTWRITEBYTECODE=1 $py -m pytest -q -p no:cacheprovider test_loader.py test_gpu_decode.py \
    test_threads.py" || true
else
  record python-loader-tests SKIP 0 "pytest is not installed for $py"
fi

# The documented Lightning DataModule: DDP on 2 CPU processes, then on the
# GPU, each trained and resumed once through fit(ckpt_path=...).
if $py -c 'import lightning' 2>/dev/null; then
  lightning_dir=$build/lightning
  rm -rf "$lightning_dir"
  for target in "cpu 2" "gpu 1"; do
    set -- $target
    if [[ $1 == gpu ]] && ((!have_gpu)); then
      record "lightning-ddp-gpu" SKIP 0 "no GPU"
      continue
    fi
    for phase in first resume; do
      step "lightning-ddp-$1-$phase" 120 "PYTHONPATH='$build/python' $py '$repo/scripts/gpu_check_lightning.py' \
        '$lightning_dir' $phase $1 $2" || true
    done
  done
else
  record lightning SKIP 0 "lightning is not installed for $py"
fi

# ---------------------------------------------------------------- summary
{
  echo "gpu_check summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $((SECONDS - start)) s, build $build)"
  printf '%s\n' "${results[@]}"
  echo "failed steps: $failures (logs: $logs)"
  [[ -s $logs/figures.txt ]] && cat "$logs/figures.txt"
} | tee "$logs/summary.txt"
if [[ -n $out ]]; then
  mkdir -p "$out/gpu-check" && cp -r "$logs"/. "$out/gpu-check/" 2>/dev/null || true
fi
exit $((failures > 125 ? 125 : failures))
