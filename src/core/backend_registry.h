// The GPU backend is optional: it installs a runner here when it is built.
#pragma once
#include <string>
#include <vector>

#include "src/core/pallas_call.h"

namespace pallas::core {

struct BackendRunner {
  virtual ~BackendRunner() = default;
  virtual bool available() const = 0;
  virtual std::string why_unavailable() const = 0;
  // Whether this backend has a lowering for the call (Backend::Auto falls back to the
  // interpreter when it has not).
  virtual bool can_run(const PallasCall& call) const { return true; }
  virtual std::vector<Array> run(const PallasCall& call, const std::vector<Array>& args) const = 0;
  // Lowers and compiles the call without running it (CI without a GPU: PALLAS_CUDA_COMPILE_CHECK=1).
  virtual void compile_check(const PallasCall& call) const {}
};

// nullptr when the library was built without the CUDA backend.
const BackendRunner* cuda_runner();

}  // namespace pallas::core
