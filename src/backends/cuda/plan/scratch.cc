// The scratch pass: scratch operands live in shared memory, at the bottom, one region each.
#include "src/backends/cuda/plan/passes.h"

namespace pallas::cuda {

void plan_scratch(const core::PallasCall& call, KernelPlan& P) {
  std::string text;
  for (size_t s = 0; s < call.grid.scratch.size(); ++s) {
    const ShapeDtype& sd = call.grid.scratch[s];
    size_t bytes = static_cast<size_t>(shape_size(sd.shape)) * itemsize(sd.dtype);
    size_t at = P.smem.allocate("scratch " + std::to_string(s) + " " + sd.str(), bytes);
    P.smem.scratch.push_back(at);
    text += "scratch " + std::to_string(s) + " " + sd.str() + ": shared memory [" + std::to_string(at) + ", " + std::to_string(at + bytes) +
            ")\n";
  }
  P.sections.push_back({"scratch", text.empty() ? "none\n" : text});
}

}  // namespace pallas::cuda
