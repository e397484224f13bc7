// Autotuning, as Triton users rely on it: a kernel factory over a space of configurations
// (block shapes, num_warps, num_stages, any parameter of the factory). On the first call for a
// given device and input shapes, every candidate is traced and compiled (in parallel on the
// host), timed with do_bench on the real arguments, and the fastest is kept, in memory and on
// disk (PALLAS_CACHE_DIR/autotune), keyed by the device, the shapes and dtypes, and the traced
// candidates themselves, so a changed kernel is tuned again. Later calls run the choice.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pallas/bench.h"
#include "pallas/pallas_call.h"

namespace pallas {

// One point of the space: named integer parameters the factory reads.
struct Config {
  std::map<std::string, int64_t> params;
  int64_t get(const std::string& name) const;  // pl::Error naming the parameter when absent
  std::string str() const;                     // "bm=128 bn=64 num_warps=8"
  bool operator==(const Config&) const = default;
};

struct AutotuneOptions {
  std::string name;                                          // shown in errors and reports
  BenchOptions bench = {.warmup = 2, .reps = 10, .flush_l2 = true};
  bool disk_cache = true;                                    // PALLAS_CACHE_DIR/autotune (no: memory only)
  int compile_threads = 0;                                   // 0: the machine's cores
};

// What tuning found (or the cache recalled) for one device and set of input shapes.
struct TuningReport {
  Config best;
  bool from_cache = false;
  std::vector<std::pair<Config, double>> timings_ms;  // candidates timed (median), in space order
  std::vector<std::pair<Config, std::string>> rejected;  // candidates that failed to trace, compile or run
};

class Autotuned {
 public:
  Autotuned() = default;
  std::vector<Array> operator()(const std::vector<Array>& args) const;
  template <class... A, std::enable_if_t<(std::is_convertible_v<const A&, const Array&> && ...), int> = 0>
  Array operator()(const A&... args) const {
    std::vector<Array> r = (*this)(std::vector<Array>{args...});
    if (r.size() != 1) throw Error("autotuned kernel: " + std::to_string(r.size()) + " outputs; use the vector form");
    return r[0];
  }
  // Tunes (or recalls) for these arguments without keeping the outputs; the report says what.
  TuningReport tune(const std::vector<Array>& args) const;
  // The Call of the chosen configuration for these arguments (tuning first if needed).
  Call best_call(const std::vector<Array>& args) const;

  struct State;
  explicit Autotuned(std::shared_ptr<State> s) : state_(std::move(s)) {}

 private:
  std::shared_ptr<State> state_;
};

// The factory builds the call of one configuration for the shapes of the call's arguments
// (dynamic grid bounds included, if the grid has any), as a Triton kernel is specialised per
// launch.
using KernelFactory = std::function<Call(const Config& config, const std::vector<ShapeDtype>& inputs)>;
Autotuned autotune(KernelFactory factory, std::vector<Config> space, AutotuneOptions options = {});

}  // namespace pallas
