#!/usr/bin/env bash
# Builds the library and the test suite with AddressSanitizer + UndefinedBehaviorSanitizer and
# runs the interpreter half of the suite (plus the sm_90a compile check of every kernel where
# the CUDA toolkit is present). Run before each landing of work: bash scripts/sanitize.sh
# (about 10 minutes on 2 cores). Any report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-asan}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined -Wl,--as-needed" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null
cmake --build "$BUILD" -j"$(nproc)" --target pallas_tests
# detect_leaks stays on; the CUDA driver is not loaded on a machine without a GPU.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$BUILD" -L interpret -j"$(nproc)" --output-on-failure "$@"
