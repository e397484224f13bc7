#!/usr/bin/env bash
# The host cost of a cached Pallas call, measured without a GPU: builds the stub driver
# (bench/stub_driver, a libcuda.so.1 whose cuLaunchKernel does nothing) and bench/launch_overhead,
# then runs it with the stub on LD_LIBRARY_PATH. Kernels are compiled by the real NVRTC; only
# the driver is pretend, so the numbers are the CPU time of everything around cuLaunchKernel.
# Usage: scripts/launch_overhead.sh [build-dir] [profile]
#   profile: also run callgrind over the timed loops (fewer calls) and print the top functions.
set -eu
BUILD=${1:-build}
cd "$(dirname "$0")/.."
cmake -S . -B "$BUILD" -DPALLAS_BUILD_STUB_DRIVER=ON > /dev/null
cmake --build "$BUILD" -j1 --target pallas_stub_cuda launch_overhead > /dev/null
export LD_LIBRARY_PATH="$PWD/$BUILD/stub_driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PALLAS_CACHE_DIR=${PALLAS_CACHE_DIR:-$PWD/$BUILD/pallas-cache}
"$BUILD/bench/launch_overhead"
if [[ "${2:-}" == profile ]]; then
  out=$(mktemp -d)
  LAUNCH_OVERHEAD_CALLS=${LAUNCH_OVERHEAD_CALLS:-20000} valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
    --toggle-collect='*calls_*' "$BUILD/bench/launch_overhead" > /dev/null 2>&1
  callgrind_annotate --inclusive=no "$out/cg.out" 2>/dev/null | head -45
  echo "callgrind output: $out/cg.out (callgrind_annotate --inclusive=yes $out/cg.out)"
fi
