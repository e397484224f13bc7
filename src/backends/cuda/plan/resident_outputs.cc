// The resident-outputs pass. An output revisited along the sequential axes whose block stays
// put there (its index map reads only parallel axes: the usual accumulator) lives in shared
// memory for the whole sequential loop — copied in once, read and written there by every
// program of the loop, copied out once — instead of a round trip through global memory per
// program. Not when its accumulation must be atomic (programs on parallel axes share its
// blocks), nor past the budget for resident blocks (KernelPlan::budgets) with what is below it.
#include "src/backends/cuda/plan/passes.h"

namespace pallas::cuda {

bool shared_by_parallel_programs(const core::GridMapping& gm, const core::BlockMapping& bm) {
  size_t rank = gm.grid.size();
  if (bm.index_map_reads(std::vector<bool>(rank, false), /*prefetch=*/true)) return true;
  std::vector<bool> revisits = core::revisit_axes(gm, bm);  // a declared-parallel axis along which its blocks repeat
  for (size_t g = 0; g < rank; ++g)
    if (!gm.sequential(g) && gm.grid[g] != 1 && revisits[g]) return true;
  return false;
}

void plan_resident_outputs(const core::PallasCall& call, KernelPlan& P) {
  const core::GridMapping& gm = call.grid;
  P.grid.resident.assign(gm.outputs.size(), false);
  P.smem.resident.assign(gm.outputs.size(), 0);
  std::string text;
  if (!gm.any_sequential()) {
    P.sections.push_back({"resident-outputs", "none (no sequential grid axis)\n"});
    return;
  }
  std::vector<bool> seq(gm.grid.size(), false);
  for (size_t d = 0; d < gm.grid.size(); ++d) seq[d] = gm.sequential(d);
  for (size_t o = 0; o < gm.outputs.size(); ++o) {
    const core::BlockMapping& bm = gm.outputs[o];
    std::string head = "output " + std::to_string(o) + " block " + shape_str(bm.block_shape, bm.array.dtype) + ": ";
    size_t bytes = static_cast<size_t>(shape_size(bm.block_shape)) * itemsize(bm.array.dtype);
    if (bm.index_map_reads(seq, /*prefetch=*/true)) {
      text += head + "in global memory (its block changes along the sequential axes)\n";
    } else if (P.smem.top() + bytes > P.budgets.resident_outputs) {
      text += head + "in global memory (" + std::to_string(bytes) + " bytes above " + std::to_string(P.smem.top()) + " pass the " +
              std::to_string(P.budgets.resident_outputs / 1024) + " KiB for resident blocks)\n";
    } else if (shared_by_parallel_programs(gm, bm)) {
      text += head + "in global memory (programs on parallel axes share its blocks: atomic accumulation)\n";
    } else {
      P.grid.resident[o] = true;
      P.smem.resident[o] = P.smem.allocate("resident output " + std::to_string(o), bytes);
      text += head + "resident in shared memory [" + std::to_string(P.smem.resident[o]) + ", " +
              std::to_string(P.smem.resident[o] + bytes) + ") over the sequential loop\n";
    }
  }
  P.sections.push_back({"resident-outputs", text.empty() ? "none\n" : text});
}

}  // namespace pallas::cuda
