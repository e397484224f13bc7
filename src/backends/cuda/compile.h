// NVRTC compile of a lowered kernel to a cubin, with an in-memory and on-disk cache
// (PALLAS_CACHE_DIR, default ~/.cache/pallas-cpp) keyed by source hash, arch and NVRTC
// version. debug or PALLAS_DUMP_DIR writes the source and PTX.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "src/backends/cuda/lower.h"
#include "src/backends/cuda/sm90/attention_plan.h"
#include "src/backends/cuda/sm90/matmul_plan.h"

namespace pallas::cuda {

struct Compiled {
  Lowered lowered;
  std::string arch;
  std::string cubin;
  double compile_ms = 0;  // 0 when it came from a cache
  bool from_disk = false;
  // Set when an sm_90a fast path took the call (its kernel then has its own parameters).
  std::optional<sm90::MatmulPlan> matmul;
  std::optional<sm90::AttentionPlan> attention;
};

// The lowered, compiled kernel of a call (cached in memory by call hash + arch). tensor_maps:
// as lower()'s (false for AOT kernels).
std::shared_ptr<const Compiled> compile_call(const core::PallasCall& call, const std::string& arch, bool tensor_maps = true);
std::string nvrtc_version();

}  // namespace pallas::cuda
