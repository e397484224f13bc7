// The loop-plans pass (loops.h). Loops are planned outermost first, in the order the printer
// meets them; each plan depends only on its body, the refs it reads and the plans before it
// (a nested loop's stages are sized above its enclosing loops' regions).
#include "src/backends/cuda/plan/loops.h"

#include <functional>
#include <sstream>

#include "src/backends/cuda/plan/passes.h"

namespace pallas::cuda {
using ir::PrimId;

const LoopPlan& KernelPlan::loop(const ir::Eqn& fori) const {
  auto it = loops.find(&fori);
  if (it == loops.end()) throw Error("CUDA lowering: a fori_loop without a plan (the loop-plans pass did not see it)");
  return *it->second;
}

ValueLayout KernelPlan::layout_of(const ir::Atom& a) const {
  auto* v = std::get_if<ir::Var>(&a);
  if (!v || v->aval.size() == 1) return {};
  auto it = values.find(v->id);
  return it == values.end() ? ValueLayout{} : it->second;
}

LoopRegions loop_regions(const ResidentOperands& resident, const LoopPipeline& pipeline, size_t base) {
  LoopRegions r;
  r.resident_at = base;
  r.resident_bytes = resident_bytes(resident);
  r.pipeline_at = r.resident_bytes ? above(base, r.resident_bytes) : base;
  r.pipeline_bytes = pipeline_bytes(pipeline);
  r.body_at = r.pipeline_bytes ? above(r.pipeline_at, r.pipeline_bytes) : r.pipeline_at;
  return r;
}

void plan_loops(const core::PallasCall& call, KernelPlan& P) {
  std::ostringstream text;
  // base: the exchange base of the scope being walked (the enclosing loops' regions lie below it)
  std::function<void(const ir::Jaxpr&, size_t)> walk = [&](const ir::Jaxpr& j, size_t base) {
    for (const ir::Eqn& e : j.eqns) {
      size_t inner = base;
      if (e.prim->id == PrimId::fori_loop) {
        const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
        size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
        auto L = std::make_shared<LoopPlan>();
        std::vector<const ir::Eqn*> fragment_dots;
        L->carries.resize(nc);
        for (size_t c = 0; c < nc; ++c)  // (the value-layouts section lists them)
          if ((L->carries[c] = plan_fragment_carry(P, body, c))) fragment_dots.push_back(L->carries[c]->dot);
        L->resident = plan_resident_operands(P, body, nc);
        for (const ResidentOperand& o : L->resident.ops)
          text << "loop: operand " << o.var->aval.str() << " stays in shared memory (" << (o.tile.k_major ? "K-major" : "MN-major") << ")\n";
        // a body of two dots, the second accumulating P·V-like into a fragment carry, is rotated
        // (rotation.h): the pipeline keeps the second dot's stage an iteration longer for it
        L->rotation = plan_rotation(P, body, L->carries);
        L->pipeline = plan_pipeline(P, body, nc, fragment_dots, L->rotation ? L->rotation->second : nullptr, base + resident_bytes(L->resident));
        if (L->pipeline.stages) text << pipeline_text(L->pipeline);
        L->rotated = L->rotation && rotation_ready(*L->rotation, L->pipeline);
        if (L->rotated) {
          L->turns = warpgroup_turns(P, L->pipeline);
          if (L->turns)
            text << "warpgroups take turns: " << L->turns << " issue their dots one after another (named barriers 1.." << L->turns << ")\n";
          text << "loop rotated: the second dot of each iteration is issued after the first dot of the next\n";
        }
        inner = loop_regions(L->resident, L->pipeline, base).body_at;
        P.loops[&e] = std::move(L);
      }
      for (const ir::Jaxpr* s : ir::sub_jaxprs(e)) walk(*s, inner);
    }
  };
  walk(*call.kernel, P.smem.body);
  // (empty when no loop has anything planned: the section of a kernel without tensor-core loops)
  P.sections.push_back({"loop-plans", text.str()});
}

}  // namespace pallas::cuda
