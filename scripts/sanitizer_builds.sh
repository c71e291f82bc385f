# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: the two instrumented
# builds, both with Debian's clang-14, ccache when installed, and without
# LibTorch, the Python extension and the benchmarks (neither LibTorch nor
# CPython is built with the sanitizers, so their tests could not run clean).
#
#   ${WDS_FUZZ_BUILD_DIR:-build-fuzz}  ASan + UBSan + libFuzzer coverage: the
#       fuzz targets of fuzz/ and the tests and tools, on one copy of the library
#   ${WDS_TSAN_BUILD_DIR:-build-tsan}  ThreadSanitizer: the library and the
#       tests that run threads
# Both build at -O2 (the sanitizers catch the same errors as at -O0, and the
# tests and fuzzers run several times faster) with assertions on (no NDEBUG:
# broken invariants assert) and line tables only for debug information
# (reports name files and lines; full -g costs CI minutes of compiling).
fuzz_build_dir=${WDS_FUZZ_BUILD_DIR:-build-fuzz}
tsan_build_dir=${WDS_TSAN_BUILD_DIR:-build-tsan}

sanitizer_cmake() {
  local launcher=()
  if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  CC=clang-14 CXX=clang++-14 cmake -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only" \
    -DWDS_BUILD_BENCHMARKS=OFF -DWDS_BUILD_PYTHON=OFF -DWDS_WITH_TORCH=OFF -DWDS_WITH_CUDA=OFF \
    "${launcher[@]}" "$@" >/dev/null
}

configure_fuzz_build() {
  sanitizer_cmake -S . -B "$fuzz_build_dir" -DWDS_BUILD_FUZZERS=ON -DWDS_BUILD_TESTS=ON \
    -DWDS_BUILD_TOOLS=ON
}

configure_tsan_build() {
  sanitizer_cmake -S . -B "$tsan_build_dir" -DWDS_SANITIZE=thread -DWDS_BUILD_FUZZERS=OFF \
    -DWDS_BUILD_TESTS=ON -DWDS_BUILD_TOOLS=OFF
}

# What the sanitizers report is an error: halt at the first one, with a stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
