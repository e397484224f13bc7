#!/usr/bin/env bash
# The generated-code corpus: every kernel the interpret half of the test suite, the tutorials,
# the benchmarks and a fixed fuzz batch trace, planned and printed for sm_90a (no NVRTC, no GPU), one line per
# kernel: its name (the symbol without its hash) and the hash of its CUDA source with the
# symbol and the #line numbers taken out (so that an edit of a test file that moves its
# kernels' lines changes nothing here). A change to the backend that should not
# change code (moving a planner into a pass) must leave this file identical:
#   scripts/source_corpus.sh build before.txt; (change, rebuild); scripts/source_corpus.sh build after.txt
#   diff <(cut -d' ' -f1,2 before.txt) <(cut -d' ' -f1,2 after.txt)   (the third column: the symbol)
# (CudaLayout.PtxasReportOnRequest needs NVRTC, which this mode skips.)
# A kernel some test lowers for two archs has one symbol (the arch is not in its hash): the
# corpus keeps the source printed last, the same in two runs of the same tests.
# The sources are kept in $CORPUS_DIR (default: a temporary directory) to diff one kernel.
set -euo pipefail
build=${1:?usage: source_corpus.sh BUILD_DIR OUT_FILE}
out=${2:?usage: source_corpus.sh BUILD_DIR OUT_FILE}
dir=${CORPUS_DIR:-$(mktemp -d)}
rm -rf "$dir" && mkdir -p "$dir"
export PALLAS_CUDA_COMPILE_CHECK=lower PALLAS_DUMP_PASSES="$dir" PALLAS_NO_CUDA=1 PALLAS_CACHE_DIR="$build/pallas-cache"
PALLAS_TEST_BACKEND=interpret "$build/tests/pallas_tests" --gtest_brief=1 --gtest_filter=-CudaLayout.PtxasReportOnRequest >"$dir/tests.log" 2>&1 || { echo "tests failed (see $dir/tests.log)"; exit 1; }
for t in "$build"/tutorials/tutorial_*; do
  [ -x "$t" ] && PALLAS_BACKEND=interpret "$t" >/dev/null 2>&1 || true
done
# the benchmarks' kernels (bench/user_kernels.h: each compiled once, NVRTC)
[ -x "$build/bench/compile_bench" ] && COMPILE_BENCH_REPS=1 "$build/bench/compile_bench" >/dev/null 2>&1 || true
# the fuzzer compiles through compile_for (sm_90a, NVRTC; cached on disk after the first run)
"$build/fuzz/pallas_fuzz" --seed 7 --count 150 --threads 2 --backend-b compile >/dev/null 2>&1 || true
cd "$dir"
for f in *-print.cu; do
  sym=${f%%.*}
  printf '%s %s %s\n' "${sym%_*}" "$(sed -e "s/$sym/KERNEL/g" -e 's/^\( *#line\) [0-9]*/\1/' "$f" | sha256sum | cut -c1-16)" "$sym"
done | sort >"$out"
echo "$(wc -l <"$out") kernels -> $out (sources in $dir)"
