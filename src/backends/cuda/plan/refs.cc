// The refs pass: for every ref the kernel or its loops and branches see, whether it is a block of
// an input array in global memory and where it lies in that array (RefPlan). A sub-jaxpr's ref
// operand is the ref it is bound to (as the printer binds it). An input the grid pipeline
// copies into shared memory is read there, not from its array.
#include <sstream>

#include "src/backends/cuda/plan/passes.h"

namespace pallas::cuda {
using ir::PrimId;

namespace {

void bind(KernelPlan& P, const ir::Var& inner, const ir::Atom& outer) {
  auto* o = std::get_if<ir::Var>(&outer);
  if (!inner.aval.is_ref || !o) return;
  auto it = P.refs.find(o->id);
  if (it != P.refs.end()) P.refs[inner.id] = it->second;
}

void walk(KernelPlan& P, const ir::Jaxpr& j) {
  for (const ir::Eqn& e : j.eqns) {
    if (e.prim->id == PrimId::fori_loop) {
      const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
      size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
      for (size_t q = 1 + nc; q < body.invars.size(); ++q) bind(P, body.invars[q], e.in[1 + q]);
      walk(P, body);
    } else if (e.prim->id == PrimId::while_loop) {
      const ir::Jaxpr& cj = *e.params.get<ir::JaxprPtr>("cond_jaxpr");
      const ir::Jaxpr& bj = *e.params.get<ir::JaxprPtr>("body_jaxpr");
      size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
      size_t ncc = static_cast<size_t>(e.params.get_int("cond_nconsts"));
      for (size_t q = 0; q < ncc; ++q) bind(P, cj.invars[nc + q], e.in[nc + q]);
      for (size_t q = nc; q < bj.invars.size(); ++q) bind(P, bj.invars[q], e.in[ncc + q]);
      walk(P, cj);
      walk(P, bj);
    } else if (e.prim->id == PrimId::cond) {
      for (const ir::JaxprPtr& b : e.params.get<std::vector<ir::JaxprPtr>>("branches")) {
        for (size_t q = 0; q < b->invars.size(); ++q) bind(P, b->invars[q], e.in[1 + q]);
        walk(P, *b);
      }
    }
  }
}

}  // namespace

void plan_refs(const core::PallasCall& call, KernelPlan& P) {
  const core::GridMapping& gm = call.grid;
  const ir::Jaxpr& k = *call.kernel;
  size_t np = gm.prefetch.size();
  std::ostringstream text;
  for (size_t a = 0; a < gm.inputs.size(); ++a) {
    const core::BlockMapping& bm = gm.inputs[a];
    bool staged = false;
    if (P.grid.pipeline)
      for (const GridPipelinedInput& in : P.grid.pipeline->inputs) staged = staged || in.input == a;
    if (staged) {
      text << "input " << a << ": read from the grid pipeline's stage\n";
      continue;
    }
    RefPlan r;
    r.param = static_cast<int>(np + a);
    r.array_shape = bm.array.shape;
    for (size_t d = 0; d < bm.array.shape.size(); ++d)
      if (!bm.squeezed[d]) r.array_dim.push_back(static_cast<int>(d));
    P.refs[k.invars[np + a].id] = r;
    text << "input " << a << ": a block of array parameter p" << r.param << " " << bm.array.str() << "\n";
  }
  walk(P, k);
  P.sections.push_back({"refs", text.str().empty() ? "no input blocks in global memory\n" : text.str()});
}

}  // namespace pallas::cuda
