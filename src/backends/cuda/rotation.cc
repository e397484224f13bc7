// Loop rotation (rotation.h).
#include "src/backends/cuda/rotation.h"

namespace pallas::cuda {
using ir::PrimId;

std::optional<LoopRotation> plan_rotation(const KernelPlan& P, const ir::Jaxpr& body, const std::vector<std::optional<FragmentCarry>>& carries) {
  if (!P.wgmma || count_dots(body) != 2 || P.target.no_rotation) return std::nullopt;
  const FragmentCarry* fc = nullptr;
  for (const auto& c : carries)
    if (c) {
      if (fc) return std::nullopt;  // one accumulator
      fc = &*c;
    }
  if (!fc) return std::nullopt;
  const ir::Eqn* second = fc->dot;
  if (!wgmma_a_from_registers(P, *second, P.layout_of(second->in[0]))) return std::nullopt;
  const ir::Eqn* first = nullptr;
  for (const ir::Eqn& e : body.eqns) {
    if (&e == second) break;
    if (e.prim->id == PrimId::dot) first = &e;
  }
  if (!first || P.layout_of(first->out[0]).kind != ValueLayout::Mma) return std::nullopt;  // its result stays in fragments
  LoopRotation r;
  r.first = first;
  r.second = second;
  r.frag = fc->frag;
  if (fc->scale_mul) {
    auto* v = std::get_if<ir::Var>(&fc->scale_rows);
    if (!v) return std::nullopt;
    for (const ir::Eqn& e : body.eqns)
      for (const ir::Var& o : e.out)
        if (o.id == v->id) r.rows = v;
  }
  return r;
}

bool rotation_ready(const LoopRotation& r, const LoopPipeline& p) {
  auto* z = std::get_if<ir::Var>(&r.second->in[1]);
  return p.stages && p.rotated_dot == r.second && z && !pipelined_operand_at(p, *z, "0", "0").empty();
}

int warpgroup_turns(const KernelPlan& P, const LoopPipeline& p) {
  const int groups = P.threads / 128;
  if (groups < 2 || groups > 15 || !p.barrier_free) return 0;
  return P.target.pingpong ? groups : 0;  // opt-in: no consistent gain measured
}

void emit_rotated_loop(Emitter& E, const LoopRotation& r, const LoopPipeline& p, int turns, const ir::Jaxpr& body, const std::string& index_type,
                       const std::string& lo, const std::string& hi, const std::function<void()>& bind_carries,
                       const std::function<void()>& assign_carries) {
  const ir::Eqn& second = *r.second;
  const ir::Var& z = std::get<ir::Var>(second.in[1]);
  // carried across the back edge: p packed, r in its layout
  std::string pc = E.fresh("pc"), rc;
  E.line("u32 " + pc + "[" + std::to_string(packed_a_words(E, second)) + "];");
  if (r.rows) {
    rc = E.fresh("rc");
    bool scalar = Emitter::scalar_like(r.rows->aval);
    E.line(ctype(r.rows->aval.dtype) + " " + rc + (scalar ? "" : "[" + std::to_string(E.slots(*r.rows)) + "]") + ";");
    // 1 before the first iteration, whose scaling of the carry is then exact and needs no branch
    std::string one = "cv<" + ctype(r.rows->aval.dtype) + ">(1.0f)";
    if (scalar) E.line(rc + " = " + one + ";");
    else E.line("for (int k = 0; k < " + std::to_string(E.slots(*r.rows)) + "; ++k) " + rc + "[k] = " + one + ";");
  }
  auto end_iteration = [&] {  // p and r of this iteration for the next; the plain carries
    pack_a_operand(E, second, pc);
    if (r.rows) {
      if (Emitter::scalar_like(r.rows->aval)) E.line(rc + " = " + E.name(*r.rows) + ";");
      else E.line("for (int k = 0; k < " + std::to_string(E.slots(*r.rows)) + "; ++k) " + rc + "[k] = " + E.name(*r.rows) + "[k];");
    }
    assign_carries();
  };
  // runs f with r naming the carried r of the iteration before (r(i) is named only later in
  // the body, if at all yet)
  auto with_carried_rows = [&](const std::function<void()>& f) {
    auto saved_rows = r.rows ? E.bound_name(*r.rows) : std::nullopt;
    if (r.rows) E.bind_name(*r.rows, rc);
    f();
    if (saved_rows) E.bind_name(*r.rows, *saved_rows);
    else if (r.rows) E.unbind_name(*r.rows);
  };
  // the second dot of iteration `it` from the carried p and r and its stage
  auto issue_second = [&](const std::string& it, bool in_flight) {
    auto saved_z = E.smem_operands.find(z.id) != E.smem_operands.end() ? std::optional<std::string>(E.smem_operands.at(z.id)) : std::nullopt;
    E.smem_operands[z.id] = pipelined_operand_at(p, z, it, lo);
    const ir::Eqn* saved_flight = E.wgmma_in_flight;
    if (in_flight) E.wgmma_in_flight = &second;  // ends by waiting for all groups but its own
    E.absorbed.erase(&second);
    with_carried_rows([&] { lowering_rules().get(PrimId::dot)(E, second); });
    E.absorbed.insert(&second);
    E.wgmma_in_flight = saved_flight;
    if (saved_z) E.smem_operands[z.id] = *saved_z;
    else E.smem_operands.erase(z.id);
  };
  // One body for every iteration (emitting the first iteration apart made first calls up to twice as slow):
  // iteration lo has no second dot before it, so it waits for its first dot alone.
  E.line("// rotated loop: iteration i issues its first dot, then iteration i - 1's second dot");
  Emitter::Block nonempty = E.block("if (" + lo + " < " + hi + ") {");
  // Warpgroups taking turns (named barriers 1..G): warpgroup w waits on barrier 1 + w before
  // issuing its dots and arrives on the next one's right after, so one warpgroup's softmax
  // runs while the next one's dots hold the tensor cores. The last warpgroup opens the first
  // turn; warpgroup 0 takes the last arrival after the loop, so every barrier is balanced.
  std::string wg;
  auto arrive_next = [&] {
    E.line("asm volatile(\"bar.arrive %0, 256;\" :: \"r\"(1 + (" + wg + " + 1) % " + std::to_string(turns) + ") : \"memory\");");
  };
  if (turns) {
    wg = E.fresh("wg");
    E.line("const int " + wg + " = threadIdx.x >> 7;  // this warpgroup's turn");
    E.line("if (" + wg + " == " + std::to_string(turns - 1) + ") asm volatile(\"bar.arrive 1, 256;\" ::: \"memory\");");
  }
  std::string it = E.fresh("it");
  {
    Emitter::Block loop = E.block("for (" + index_type + " " + it + " = " + lo + "; " + it + " < " + hi + "; ++" + it + ") {");
    pipeline_iteration(E, p, body, it, lo, hi);
    bind_carries();
    // acc *= r(i - 1) now, before the first dot is issued: ptxas waits for every wgmma in flight
    // before an instruction that touches an accumulator between them (its info C7517), and
    // serialises the wgmmas when the scaling is under a branch (C7515), so it is not: r is 1 in
    // iteration lo. A loop-invariant r is left to the dot's rule.
    if (r.rows) with_carried_rows([&] { scale_fragment_carry(E, second); });
    Emitter::Rotation rot{r.first, &second,
                          [&] {
                            {
                              Emitter::Block later = E.block("if (" + it + " > " + lo + ") {", "");  // uniform: the wgmmas stay unserialised
                              issue_second(it + " - 1", true);
                            }
                            Emitter::Block first = E.block("} else {");
                            if (turns) arrive_next();
                            E.line("asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");");
                          },
                          pc, /*carry_scaled=*/r.rows != nullptr};
    if (turns) {
      rot.before_first = [&] { E.line("asm volatile(\"bar.sync %0, 256;\" :: \"r\"(1 + " + wg + ") : \"memory\");"); };
      rot.after_second = arrive_next;
    }
    E.absorbed.insert(&second);
    E.rotation = &rot;
    E.emit_eqns(body);
    E.rotation = nullptr;
    E.line("asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");");
    fence_fragments(E, r.frag, E.plan.dot(second).result->slots(), true, /*arithmetic_users=*/true);
    end_iteration();
  }
  if (turns) E.line("if (" + wg + " == 0) asm volatile(\"bar.sync 1, 256;\" ::: \"memory\");  // the last turn's arrival");
  // iteration hi - 1's second dot
  Emitter::Rotation last{nullptr, &second, {}, pc};
  E.rotation = &last;
  issue_second("(" + hi + " - 1)", false);
  E.rotation = nullptr;
  E.absorbed.erase(&second);
}

}  // namespace pallas::cuda
