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
  virtual bool can_run(const PallasCall& call) const = 0;
  virtual std::vector<Array> run(const PallasCall& call, const std::vector<Array>& args) const = 0;
};

// nullptr when the library was built without the CUDA backend.
const BackendRunner* cuda_runner();

}  // namespace pallas::core
