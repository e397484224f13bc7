// The backends as core sees them: core (pallas_call, checkify) reaches the interpreter and the
// GPU only through these runners. The GPU backend is optional: it installs a runner here when
// it is built.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "src/core/pallas_call.h"

namespace pallas::core {

// A run that reports the first failing pl::check instead of throwing (checkify).
struct CheckedRun {
  std::vector<Array> outputs;
  bool failed = false;
  std::string message;
  std::vector<int64_t> failed_program_id;
};

struct BackendRunner {
  virtual ~BackendRunner() = default;
  virtual bool available() const = 0;
  virtual std::string why_unavailable() const = 0;
  // Whether this backend has a lowering for the call (Backend::Auto falls back to the
  // interpreter when it has not).
  virtual bool can_run(const PallasCall& call) const { return true; }
  // `outs` (nullptr: allocate): arrays to write the outputs into, checked by core (Call::into);
  // the returned outputs are then those arrays, or nothing (the CUDA runner: no copy per call).
  virtual std::vector<Array> run(const PallasCall& call, const std::vector<Array>& args, const std::vector<Array>* outs) const = 0;
  // Lowers and compiles the call without running it (CI without a GPU: PALLAS_CUDA_COMPILE_CHECK=1).
  // lower_only: plans and prints it, without the compiler (PALLAS_CUDA_COMPILE_CHECK=lower).
  virtual void compile_check(const PallasCall& call, bool lower_only = false) const {}
  // Device timing for do_bench: each of `reps` runs of fn (after `warmup` untimed ones) in
  // milliseconds, timed on the device; the interpreter has none (the host clock times it).
  virtual std::vector<double> time_runs(const std::function<void()>& fn, int warmup, int reps, bool flush_l2) const {
    throw Error("this backend has no device timer");
  }
  virtual void synchronize() const {}
  // Compiles the call ahead of its first run (thread-safe; autotune compiles candidates in
  // parallel) and names the device (the autotuner's cache key).
  virtual void precompile(const PallasCall& call) const {}
  virtual std::string device_name() const { return "host"; }
  virtual int device_count() const { return 0; }
  // Runs with every pl::check collected (checkify); only the interpreter implements it so far.
  virtual CheckedRun run_checked(const PallasCall& call, const std::vector<Array>& args) const {
    throw Error(call.what + ": this backend cannot collect checks (run it with the interpreter)");
  }
};

// Always present.
const BackendRunner* interpret_runner();

// nullptr when the library was built without the CUDA backend.
const BackendRunner* cuda_runner();

}  // namespace pallas::core
