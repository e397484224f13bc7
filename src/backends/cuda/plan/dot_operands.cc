// The dot-operands pass: where each tensor-core dot reads its operands from — A from registers (held
// in the accumulator layout of an earlier dot, as attention's P), a loop pipeline's stage (a
// load the loop-plans pass pipelines), a tile kept in shared memory for the loop (a resident
// operand), or written to the exchange region by the dot itself. The dot rule reads them where
// this says and checks that the printer put them there.
#include <sstream>
#include <vector>

#include "src/backends/cuda/plan/loops.h"
#include "src/backends/cuda/plan/passes.h"
#include "src/backends/cuda/rules.h"

namespace pallas::cuda {
using ir::PrimId;

namespace {

struct Walk {
  KernelPlan& P;
  std::ostringstream text;

  // `loop`: the plan of the fori whose body j is (nullptr: not a fori body).
  void run(const ir::Jaxpr& j, const LoopPlan* loop) {
    for (const ir::Eqn& e : j.eqns) {
      if (e.prim->id == PrimId::dot) place(e, loop);
      if (e.prim->id == PrimId::fori_loop) {
        run(*e.params.get<ir::JaxprPtr>("body"), &P.loop(e));
        continue;
      }
      for (const ir::Jaxpr* s : ir::sub_jaxprs(e)) run(*s, nullptr);
    }
  }

  DotPlan::Operand where(const ir::Atom& x, const LoopPlan* loop) const {
    auto* v = std::get_if<ir::Var>(&x);
    if (v && loop) {
      for (const PipelinedLoad& l : loop->pipeline.loads)
        if (l.load->out[0].id == v->id) return DotPlan::Operand::Stage;
      for (const ResidentOperand& o : loop->resident.ops)
        if (o.var->id == v->id) return DotPlan::Operand::Resident;
    }
    return DotPlan::Operand::Written;
  }

  void place(const ir::Eqn& e, const LoopPlan* loop) {
    DotPlan& d = P.dots.at(&e);
    if (d.kind == DotPlan::Kind::MmaSync) {
      // mma.sync reads a loop's stage or resident tile (swizzled) where it is, and has every
      // other operand written to its padded tiles; listed only when something is in place
      d.a = where(e.in[0], loop);
      d.b = where(e.in[1], loop);
      if (d.a == DotPlan::Operand::Written && d.b == DotPlan::Operand::Written) return;
      auto name = [](DotPlan::Operand o) {
        return o == DotPlan::Operand::Stage ? "a loop stage" : o == DotPlan::Operand::Resident ? "a resident tile" : "written to shared memory";
      };
      text << "dot " << ir::atom_aval(e.in[0]).str() << (d.ta ? "^T" : "") << " x " << ir::atom_aval(e.in[1]).str() << (d.tb ? "^T" : "")
           << ": mma.sync " << d.grid.TM * d.grid.TN << " tile(s) over " << d.grid.W << " warp(s); A " << name(d.a) << ", B " << name(d.b) << "\n";
      return;
    }
    if (d.kind != DotPlan::Kind::Wgmma) return;
    // (an A held otherwise is converted to the blocked layout before the dot: operand_layout)
    d.a = wgmma_a_from_registers(P, e, P.layout_of(e.in[0])) ? DotPlan::Operand::Registers : where(e.in[0], loop);
    d.b = where(e.in[1], loop);
    bool a_rows_mn = false;
    int64_t kpad = 0;
    auto A = wgmma_operand_tile(P, e, 0, &a_rows_mn, &kpad), B = wgmma_operand_tile(P, e, 1, &a_rows_mn, &kpad);
    auto in_smem = [](DotPlan::Operand o) { return o == DotPlan::Operand::Written ? " written to shared memory" : " in shared memory"; };
    text << "dot " << ir::atom_aval(e.in[0]).str() << (d.ta ? "^T" : "") << " x " << ir::atom_aval(e.in[1]).str() << (d.tb ? "^T" : "")
         << ": wgmma m64n" << 8 * d.grid.NS << "k" << d.mma->k << ", " << d.grid.TM * d.grid.TN << " tile(s) over " << d.grid.W
         << " warpgroup(s); A "
         << (d.a == DotPlan::Operand::Registers ? std::string("in registers (its fragments)")
                                                : std::string(A->k_major ? "K-major" : "MN-major") + in_smem(d.a))
         << ", B " << (B->k_major ? "K-major" : "MN-major") << in_smem(d.b) << "\n";
  }
};

}  // namespace

void plan_dot_operands(const core::PallasCall& call, KernelPlan& P) {
  Walk w{P, {}};
  w.run(*call.kernel, nullptr);
  P.sections.push_back({"dot-operands", w.text.str()});
}

}  // namespace pallas::cuda
