#!/usr/bin/env bash
# The one H200 run script: one device call builds with the CUDA backend, runs the test suite's
# GPU half (every kernel on the GPU, poisoned outputs), the CUDA-lowering tests, the
# differential fuzzer's campaign, compute-sanitizer, and (with STEPS including bench) the
# benchmarks beside the anchors. Logs go to $OUT.
# Run as: bash bench/run_h200.sh [steps]   (steps: comma list of build,tests,examples,cache,fuzz,sanitize,bench,interop,ncu,compile,ab;
# `tests` includes `examples` (the examples and the package checks); `gpuhalf` runs only the GPU half and the lowering tests;
# default build,tests,fuzz,sanitize; `kernels` runs only cuda_bench and the anchors (CUDA_BENCH_ONLY=attention,... picks
# cuda_bench sections, ANCHORS=0 skips the anchors, ANCHORS=attention runs only theirs; `compile` runs bench/compile_bench; `ab` the attention rows with PALLAS_PINGPONG and PALLAS_NO_ROTATION); `regress` runs only the fuzzer's regression tests and the
# CUDA-lowering tests on the GPU, a minute's check; `interop` builds the torch op and the JAX FFI library of
# interop/ against build-gpu's libpallas.a and runs their tests on the GPU). FUZZ_COUNT and FUZZ_SECONDS size the
# campaign (defaults 10000 kernels, 400 s). Carry .deps (GoogleTest sources: the image has no libgtest).
# The logs are written under $LOGS and packed into $OUT/logs.tgz at exit (the device tool returns
# at most 8 files); the summary lines go to stdout.
set -u
OUT=${OUT:-/tmp/out}
STEPS=${1:-build,tests,fuzz,sanitize}
FUZZ_COUNT=${FUZZ_COUNT:-10000}
FUZZ_SECONDS=${FUZZ_SECONDS:-400}
mkdir -p "$OUT"
REAL_OUT=$OUT
OUT=${LOGS:-/tmp/h200-logs}
mkdir -p "$OUT"
trap 'tar czf "$REAL_OUT/logs.tgz" -C "$OUT" . 2>/dev/null' EXIT
has() { [[ ",$STEPS," == *",$1,"* ]]; }
export PALLAS_CACHE_DIR=/tmp/pallas-cache
# pure-Python anchors carried as wheels in .deps/wheels (liger-kernel): installed beside the image's torch and Triton
if ls .deps/wheels/*.whl >/dev/null 2>&1; then
  pip install --quiet --no-deps --target /tmp/pywheels .deps/wheels/*.whl > /dev/null 2>&1 && export PYTHONPATH=/tmp/pywheels${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
git log --oneline -1 2>/dev/null | tee -a "$OUT/gpu.txt"
if has build; then
  t0=$(date +%s)
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPALLAS_GTEST_SOURCE_DIR=$PWD/.deps/googletest -DPALLAS_GPU_TESTS=ON \
    > "$OUT/build.log" 2>&1 && cmake --build build-gpu -j16 >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"; grep -E "CUDA backend|GPU half" "$OUT/build.log"
fi
if has tests || has gpuhalf; then
  t0=$(date +%s)
  rm -f "$OUT/counts.txt"
  PALLAS_TEST_COUNTS_FILE="$OUT/counts.txt" ctest --test-dir build-gpu -j16 --timeout 240 -L gpu --output-on-failure \
    > "$OUT/ctest-gpu.log" 2>&1
  echo "ctest gpu half rc=$? in $(( $(date +%s) - t0 )) s"
  grep -E "tests passed|tests failed|Not Run|Skipped\)" "$OUT/ctest-gpu.log" | tail -3
  grep -E "^\s+[0-9]+ - " "$OUT/ctest-gpu.log" | head -80
  awk '{i+=$2; c+=$4} END {print "kernels run in the gpu half: " c " on the GPU, " i " on the interpreter"}' "$OUT/counts.txt"
  t0=$(date +%s)
  ctest --test-dir build-gpu -j16 --timeout 240 -L interpret -R "CudaLowering|CudaLayout" --output-on-failure > "$OUT/ctest-lowering.log" 2>&1
  echo "ctest CUDA-lowering tests rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "tests passed|tests failed" "$OUT/ctest-lowering.log"
fi
if has tests || has examples; then
  # the examples on the GPU: the demo, and the AOT programs (runtime only; JIT vs AOT bit for bit)
  ctest --test-dir build-gpu -j4 --timeout 240 -R "^examples\." --output-on-failure > "$OUT/ctest-examples.log" 2>&1
  echo "ctest examples rc=$?"; grep -E "tests passed|tests failed|Skipped|agree|DIFFER" "$OUT/ctest-examples.log" | head -12
  # the package as a consumer sees it (installed, moved, AOT through find_package) and Pallas as a subproject
  ctest --test-dir build-gpu --timeout 300 -L build --output-on-failure > "$OUT/ctest-build.log" 2>&1
  echo "ctest build checks rc=$?"; grep -E "tests passed|tests failed" "$OUT/ctest-build.log"
fi
if has cache; then
  # A damaged disk cache: every entry cut to half its length, then a GPU program runs again (it
  # used to segfault); then once more from the repaired cache.
  C=/tmp/pallas-cache-check; rm -rf "$C"
  PALLAS_CACHE_DIR=$C build-gpu/examples/pallas_demo > "$OUT/cache-cold.log" 2>&1; echo "demo, cold cache rc=$?"
  n=0; for f in $(find "$C" -name '*.pcubin'); do truncate -s $(( $(stat -c %s "$f") / 2 )) "$f"; n=$((n + 1)); done
  echo "cut $n cache entries to half"
  PALLAS_CACHE_DIR=$C build-gpu/examples/pallas_demo > "$OUT/cache-cut.log" 2>&1; echo "demo, every entry cut rc=$?"
  grep -ci "recompil\|damaged\|replac" "$OUT/cache-cut.log" | sed 's/^/  notes about damaged entries: /'
  PALLAS_CACHE_DIR=$C build-gpu/examples/pallas_demo > "$OUT/cache-warm.log" 2>&1; echo "demo, repaired cache rc=$?"
fi
if has regress; then
  PALLAS_TEST_BACKEND=cuda build-gpu/tests/pallas_tests --gtest_filter='FuzzRegression.*:Atomics.*' > "$OUT/regress.log" 2>&1
  echo "regressions on the GPU rc=$?"; grep -E "PASSED|FAILED" "$OUT/regress.log" | tail -8
  ctest --test-dir build-gpu -j16 --timeout 240 -L interpret -R "CudaLowering|CudaLayout" --output-on-failure > "$OUT/ctest-lowering.log" 2>&1
  echo "ctest CUDA-lowering tests rc=$?"; grep -E "tests passed|tests failed" "$OUT/ctest-lowering.log"
fi
if has fuzz && [ -x build-gpu/fuzz/pallas_fuzz ]; then
  t0=$(date +%s)
  timeout $((FUZZ_SECONDS + 30)) build-gpu/fuzz/pallas_fuzz --seed 20261203 --count "$FUZZ_COUNT" --threads 16 --max-seconds "$FUZZ_SECONDS" \
    --shrink-seconds 20 > "$OUT/fuzz.log" 2>&1
  echo "fuzz rc=$? in $(( $(date +%s) - t0 )) s"; tail -15 "$OUT/fuzz.log"
fi
if has sanitize && command -v compute-sanitizer >/dev/null; then
  export PALLAS_TEST_BACKEND=cuda
  F='GridSemantics.*:CallFeatures.*:MemoryOps.*:FuzzRegression.*:Atomics.*:Dot.*:Reduce.*:MaskedSwap.*:NoOutputs.*'
  for tool in memcheck racecheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 build-gpu/tests/pallas_tests --gtest_filter="$F" > "$OUT/sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitizer-$tool.log" | tail -4
  done
  unset PALLAS_TEST_BACKEND
fi
if has interop; then  # the framework clients (interop/): each built against build-gpu/libpallas.a, then its checks
  for client in torch jax; do
    if [ $client = torch ]; then builder=interop/torch/pallas_torch.py; script=interop/torch/test_torch_op.py
    else builder=interop/jax/pallas_jax.py; script=interop/jax/test_jax_ffi.py; fi
    t0=$(date +%s)
    MAX_JOBS=16 timeout 300 python3 $builder build-gpu > "$OUT/interop-$client-build.log" 2>&1
    rc=$?; echo "interop $client build rc=$rc in $(( $(date +%s) - t0 )) s"
    [ $rc = 0 ] || { tail -30 "$OUT/interop-$client-build.log"; continue; }
    t0=$(date +%s)
    timeout 400 python3 -X faulthandler $script build-gpu > "$OUT/interop-$client.log" 2>&1
    rc=$?
    dbg=$(command -v gdb || command -v cuda-gdb)  # the image has cuda-gdb only
    if [ $rc -ge 128 ] && [ -n "$dbg" ]; then  # a crash: its native stack
      timeout 300 $dbg -batch -ex run -ex "thread apply all bt 30" --args python3 $script build-gpu > "$OUT/interop-$client-gdb.log" 2>&1
      tail -25 "$OUT/interop-$client.log"; grep -A40 "received signal" "$OUT/interop-$client-gdb.log" | head -60
    fi
    echo "interop $client tests rc=$rc in $(( $(date +%s) - t0 )) s: $(grep -c '^ok ' "$OUT/interop-$client.log") ok, $(grep -c '^FAIL ' "$OUT/interop-$client.log") failed"
    grep -E "^FAIL|SKIPPED|Error|passed|failed$" "$OUT/interop-$client.log" | head -20
  done
  # a user's own kernel as a JAX FFI target and as a torch op (interop/*/example, pallas_*_user.h)
  for script in interop/jax/test_jax_user_kernel.py interop/torch/test_torch_user_op.py; do
    log="$OUT/interop-user-$(basename $script .py).log"
    timeout 300 python3 -X faulthandler $script build-gpu > "$log" 2>&1
    echo "$script rc=$?: $(grep -c '^ok ' "$log") ok, $(grep -c '^FAIL ' "$log") failed"
    grep -E "^FAIL|SKIPPED|Error|passed|failed$" "$log" | head -10
  done
fi
if has kernels; then  # the user-written kernels of cuda_bench and their anchors
  timeout 300 build-gpu/bench/cuda_bench 2>&1 | tee "$OUT/cuda_bench.txt" | tail -20
  # ANCHORS=0 skips the anchors; ANCHORS=attention (or torch, triton, jax, a space-separated list) runs those only
  [ "${ANCHORS:-1}" = 0 ] || timeout 200 python3 bench/anchors.py $([ "${ANCHORS:-1}" = 1 ] || echo "$ANCHORS") 2>&1 | tee "$OUT/anchors.txt" | tail -40
fi
if has ab; then  # the attention rows with each scheduling switch flipped in turn
  for mode in default PALLAS_PINGPONG PALLAS_NO_ROTATION; do
    case $mode in
      default) env CUDA_BENCH_ONLY=attention timeout 200 build-gpu/bench/cuda_bench ;;
      *) env $mode=1 CUDA_BENCH_ONLY=attention timeout 200 build-gpu/bench/cuda_bench ;;
    esac > "$OUT/ab-$mode.txt" 2>&1
    echo "== attention, $mode (rc=$?)"; grep -E "attention" "$OUT/ab-$mode.txt" | cut -d, -f1,4,5,6
  done
fi
if has compile; then  # first-call compile times of cuda_bench's kernels (NVRTC on this machine's CPU)
  timeout 300 build-gpu/bench/compile_bench 2>&1 | tee "$OUT/compile_bench.txt" | tail -40
fi
if has ncu && command -v ncu >/dev/null; then
  # Nsight Compute on one launch of each kernel NCU names: "section:kernel-regex:launches-to-skip;..."
  # (the cuda_bench section that runs it; attention's 4th row, D128, is
  # after 3 rows of 14 launches each)
  IFS=';' read -ra specs <<< "${NCU:-attention:flash_attention:42;memory:row_argmax:0}"
  for spec in "${specs[@]}"; do
    IFS=: read -r sec rx skip <<< "$spec"
    CUDA_BENCH_ONLY=$sec timeout 300 ncu -k "regex:$rx" --launch-skip "$skip" --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --metrics "$(for r in long_scoreboard barrier wait math_pipe_throttle mio_throttle short_scoreboard membar sleeping dispatch_stall not_selected selected lg_throttle no_instruction branch_resolving; do
                   printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' $r; done)smsp__inst_executed.sum" \
      build-gpu/bench/cuda_bench > "$OUT/ncu-$rx.txt" 2>&1
    echo "ncu $rx rc=$?"
    grep -E "pallas_|Duration|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issued Warp|No Eligible|stalled|L2 Hit|DRAM Throughput|Executed Ipc" "$OUT/ncu-$rx.txt" | head -40
  done
fi
if has bench; then
  build-gpu/examples/pallas_demo 2>&1 | tee "$OUT/demo.log"
  export PALLAS_CACHE_DIR=/tmp/pallas-cache-bench-$$
  echo "cold:"; build-gpu/bench/gpu_bench first-call | tee "$OUT/bench.jsonl"
  echo "warm (disk cache):"; build-gpu/bench/gpu_bench first-call | tee -a "$OUT/bench.jsonl"
  build-gpu/bench/gpu_bench | tee -a "$OUT/bench.jsonl"
  timeout 300 build-gpu/bench/cuda_bench 2>&1 | tee "$OUT/cuda_bench.txt" | tail -20
  timeout 200 python3 bench/anchors.py 2>&1 | tee "$OUT/anchors.txt" | tail -20
fi
