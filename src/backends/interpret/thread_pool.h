// The interpreter's process-wide pool of threads, created once and shared by every call (and
// by calls made at once from several user threads). The calling thread always takes part, so
// a call never waits for a worker that another call keeps busy.
#pragma once
#include <cstdint>
#include <functional>

namespace pallas::interp {

// Threads a call may use, the caller included: set_interpret_num_threads, else
// PALLAS_NUM_THREADS, else the hardware threads.
int num_threads();

// Runs fn(i) for every i in [0, n), on up to num_threads() threads; items are taken in
// increasing order. When items throw, the exception of the lowest such item is rethrown
// (items not started by then are skipped).
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

}  // namespace pallas::interp
