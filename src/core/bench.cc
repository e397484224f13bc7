// do_bench (include/pallas/bench.h): the GPU's event timer through the backend registry, or
// the host clock.
#include "pallas/bench.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "pallas/error.h"
#include "pallas/pallas_call.h"
#include "src/core/backend_registry.h"

namespace pallas {

BenchResult do_bench(const std::function<void()>& fn, const BenchOptions& o) {
  if (o.reps < 1 || o.warmup < 0)
    throw Error("do_bench: reps must be at least 1 and warmup at least 0 (got reps " + std::to_string(o.reps) + ", warmup " +
                std::to_string(o.warmup) + ")");
  BenchResult r;
  if (cuda_available()) {
    r.times_ms = core::cuda_runner()->time_runs(fn, o.warmup, o.reps, o.flush_l2);
    r.timer = "cuda events";
  } else {
    for (int i = 0; i < o.warmup; ++i) fn();
    for (int i = 0; i < o.reps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      r.times_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    r.timer = "host clock";
  }
  std::vector<double> s = r.times_ms;
  std::sort(s.begin(), s.end());
  r.min_ms = s.front();
  r.max_ms = s.back();
  r.median_ms = s.size() % 2 ? s[s.size() / 2] : (s[s.size() / 2 - 1] + s[s.size() / 2]) / 2;
  r.mean_ms = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(s.size());
  return r;
}

void synchronize() {
  if (cuda_available()) core::cuda_runner()->synchronize();
}

}  // namespace pallas
