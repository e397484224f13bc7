// The shared-memory pass: the kernel's top-level regions (scratch, resident outputs, the grid
// pipeline's stages, placed by their passes bottom up) and where the body's shared memory
// starts: its loops' regions (placed by the loop-shared-memory pass, after the loop plans) and
// its ops' exchanges (sized by the printer as it prints them, each above the loops that hold it).
#include "src/backends/cuda/plan/passes.h"

namespace pallas::cuda {

void plan_shared_memory(const core::PallasCall&, KernelPlan& P) {
  // After the grid pipeline's mbarriers exactly (the body's regions align themselves).
  P.smem.body = P.grid.pipeline ? P.grid.pipeline->end : P.smem.top();
  std::string text;
  for (const SharedPlan::Region& r : P.smem.regions)
    text += "[" + std::to_string(r.offset) + ", " + std::to_string(r.offset + r.bytes) + ") " + r.what + "\n";
  text += "the body's shared memory from " + std::to_string(P.smem.body) + "\n";
  P.sections.push_back({"shared-memory", text});
}

}  // namespace pallas::cuda
