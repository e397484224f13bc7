#!/bin/bash
# One device call: GPU test suite (GPU vs interpreter), compute-sanitizer on the lowering
# tests, our benchmarks and the torch anchors, all in the same run. Logs go to $OUT.
# Usage (from the repository root on the device machine): scripts/gpu_run.sh BIN_DIR
set -u
BIN=${1:-devbin}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export PALLAS_CACHE_DIR=/tmp/pallas-cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
chmod +x "$BIN"/* 2>/dev/null
echo "== tests on the GPU"
PALLAS_CUDA_POISON=1 timeout 240 "$BIN/pallas_tests" --gtest_output=xml:"$OUT/tests.xml" > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[       OK|^\[  FAILED" "$OUT/tests.log" | head -40
echo "== bench (cold compile)"
PALLAS_NO_DISK_CACHE=1 timeout 200 "$BIN/cuda_bench" matmul > "$OUT/bench.csv" 2>&1; echo "bench rc=$?"
cat "$OUT/bench.csv"
echo "== first call with the disk cache warm"
timeout 60 "$BIN/cuda_bench" > /dev/null 2>&1; timeout 100 "$BIN/cuda_bench" 2>&1 | head -2 | tee -a "$OUT/bench.csv"
echo "== torch anchors"
timeout 120 python3 scripts/anchors.py > "$OUT/anchors.csv" 2>&1; cat "$OUT/anchors.csv"
echo "== compute-sanitizer"
if command -v compute-sanitizer >/dev/null; then
  timeout 90 compute-sanitizer --tool memcheck "$BIN/pallas_tests" --gtest_filter='CudaLowering.VectorAdd*:CudaLowering.Masked*:CudaLowering.Softmax*' > "$OUT/sanitizer.log" 2>&1
  echo "memcheck rc=$?"; tail -3 "$OUT/sanitizer.log"
  timeout 60 compute-sanitizer --tool racecheck "$BIN/pallas_tests" --gtest_filter='CudaLowering.Softmax*:CudaLowering.FullReduction*' >> "$OUT/sanitizer.log" 2>&1
  echo "racecheck rc=$?"; tail -3 "$OUT/sanitizer.log"
fi
