// The CPU interpreter backend: runs a PallasCall over its grid.
#pragma once
#include <mutex>
#include <string>
#include <vector>

#include "src/backends/interpret/value.h"
#include "src/core/pallas_call.h"

namespace pallas::interp {

// State shared by all programs of one call.
struct CallRuntime {
  std::mutex print_mutex;
  std::mutex check_mutex;
  bool collect_checks = false;  // set by checkify
  bool failed = false;
  int64_t failed_program = -1;  // linear program index of the first failure
  std::vector<int64_t> failed_program_id;
  std::string message;
  void record_failure(int64_t linear_pid, const std::vector<int64_t>& pid, const std::string& msg);
};

struct RunResult {
  std::vector<Array> outputs;
  bool failed = false;
  std::string message;
  std::vector<int64_t> failed_program_id;
};

// args: dynamic grid bounds, then the inputs (scalar prefetch first), all host arrays.
RunResult run_call(const core::PallasCall& call, const std::vector<Array>& args, bool collect_checks = false);

}  // namespace pallas::interp
