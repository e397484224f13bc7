// Timing kernels the way Triton's do_bench does: warm-up runs, then timed runs, the median
// and spread reported. On a GPU each run is timed with CUDA events on the stream calls launch
// on, with the L2 cache flushed (untimed) before each one, so inputs come from memory as they
// would in a real program; without one, with the host clock (interpreter calls are synchronous).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace pallas {

struct BenchOptions {
  int warmup = 5;        // untimed runs first (compiles, caches, clocks)
  int reps = 30;         // timed runs
  bool flush_l2 = true;  // GPU: overwrite a buffer larger than the L2 before each timed run
};

struct BenchResult {
  double median_ms = 0, min_ms = 0, mean_ms = 0, max_ms = 0;
  std::vector<double> times_ms;  // every timed run, in order
  std::string timer;             // "cuda events" or "host clock"
};

// Times `fn` (one or more calls). Throws pl::Error for reps < 1 or warmup < 0.
BenchResult do_bench(const std::function<void()>& fn, const BenchOptions& options = {});

// Waits until all work queued on the GPU has finished (nothing to do without one).
void synchronize();

}  // namespace pallas
