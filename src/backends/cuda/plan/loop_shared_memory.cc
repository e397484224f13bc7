// The loop-shared-memory pass: where each fori_loop's shared memory sits. A loop takes, from the
// exchange base of the scope that holds it, its resident operand tiles, then its pipeline's
// stage buffers (with their mbarriers and counters); its body's exchanges start above them, and
// so does any loop nested in it. A loop's regions are free again when it ends: the loops of one
// scope share their space, as a stack. The printer places the regions where this pass says and
// moves its exchange base with them. (The loop-plans pass sized each pipeline's stages with the
// same placement, loop_regions.)
#include <functional>
#include <sstream>

#include "src/backends/cuda/plan/loops.h"
#include "src/backends/cuda/plan/passes.h"

namespace pallas::cuda {
using ir::PrimId;

void plan_loop_shared_memory(const core::PallasCall& call, KernelPlan& P) {
  std::ostringstream text;
  int count = 0;
  std::function<void(const ir::Jaxpr&, size_t, int)> walk = [&](const ir::Jaxpr& j, size_t base, int depth) {
    for (const ir::Eqn& e : j.eqns) {
      size_t inner = base;
      if (e.prim->id == PrimId::fori_loop) {
        auto L = std::make_shared<LoopPlan>(P.loop(e));
        ++count;
        const LoopRegions r = loop_regions(L->resident, L->pipeline, base);
        L->resident.at = r.resident_at, L->resident.bytes = r.resident_bytes;
        L->pipeline.at = r.pipeline_at, L->pipeline.bytes = r.pipeline_bytes;
        inner = r.body_at;
        if (L->resident.bytes || L->pipeline.bytes) {
          text << "loop " << count << " (depth " << depth << "):";
          if (L->resident.bytes)
            text << " resident operand tiles [" << L->resident.at << ", " << L->resident.at + L->resident.bytes << ")";
          if (L->pipeline.bytes)
            text << (L->resident.bytes ? "," : "") << " stage buffers [" << L->pipeline.at << ", " << L->pipeline.at + L->pipeline.bytes << ")";
          text << "; its body's exchanges from " << inner << "\n";
          P.smem.loops_end = std::max({P.smem.loops_end, L->resident.at + L->resident.bytes, L->pipeline.at + L->pipeline.bytes});
        }
        P.loops[&e] = std::move(L);
      }
      for (const ir::Jaxpr* s : ir::sub_jaxprs(e)) walk(*s, inner, depth + (e.prim->id == PrimId::fori_loop));
    }
  };
  walk(*call.kernel, P.smem.body, 0);
  // (empty when no loop keeps anything in shared memory)
  P.sections.push_back({"loop-shared-memory", text.str()});
}

}  // namespace pallas::cuda
