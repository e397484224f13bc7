#!/usr/bin/env bash
# On the lent H200, one call: build with the CUDA backend, run the tests and the examples on
# the GPU, compute-sanitizer on the examples, and the GPU benchmarks. Logs go to $OUT.
# Run as: bash bench/run_h200.sh  (with .deps/googletest carried: the image has no libgtest)
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPALLAS_GTEST_SOURCE_DIR=$PWD/.deps/googletest \
  > "$OUT/build.log" 2>&1 && cmake --build build-gpu -j16 >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
grep "CUDA backend" "$OUT/build.log"
ctest --test-dir build-gpu -j8 --timeout 300 --output-on-failure > "$OUT/ctest.log" 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed\)|Timeout" "$OUT/ctest.log" | head -60
build-gpu/examples/pallas_demo 2>&1 | tee "$OUT/demo.log"
export PALLAS_CACHE_DIR=/tmp/pallas-cache-$$
echo "cold:"; build-gpu/bench/gpu_bench first-call | tee "$OUT/bench.jsonl"
echo "warm (disk cache):"; build-gpu/bench/gpu_bench first-call | tee -a "$OUT/bench.jsonl"
build-gpu/bench/gpu_bench | tee -a "$OUT/bench.jsonl"
timeout 200 build-gpu/bench/cuda_bench 2>&1 | tee "$OUT/cuda_bench.txt" | tail -20
for tool in memcheck racecheck; do
  timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 build-gpu/examples/pallas_demo > "$OUT/sanitizer-$tool.log" 2>&1
  echo "compute-sanitizer $tool rc=$?"; tail -3 "$OUT/sanitizer-$tool.log"
done
