// Lowering rules for control flow (fori_loop, while, cond with tile-valued carries, inlined
// in scopes), grid queries, debug_print and check.
#include "src/backends/cuda/plan/loops.h"
#include "src/backends/cuda/rules.h"
#include "src/core/print_format.h"

namespace pallas::cuda {
using ir::PrimId;

namespace {

// dst <- src, both C arrays of value v's layout (or scalars).
void copy(Emitter& E, const std::string& dst, const ir::Var& v, const std::string& src) {
  if (Emitter::scalar_like(v.aval)) { E.line(dst + " = " + src + ";"); return; }
  E.line("for (int k = 0; k < " + std::to_string(E.slots(v)) + "; ++k) " + dst + "[k] = " + src + "[k];");
}

// After a body: carries <- body outputs, through temporaries (outputs may swap carries).
// `only`: the carries to assign (all when empty and not given).
void assign_outs(Emitter& E, const ir::Jaxpr& j, const std::vector<ir::Var>& outs, std::optional<std::vector<size_t>> only = std::nullopt) {
  std::vector<size_t> cs;
  if (only) cs = *only;
  else
    for (size_t c = 0; c < outs.size(); ++c) cs.push_back(c);
  std::vector<std::string> tmp;
  for (size_t c : cs) {
    const ir::Var& o = outs[c];
    std::string n = E.fresh("tmp");
    if (Emitter::scalar_like(o.aval)) E.line(ctype(o.aval.dtype) + " " + n + ";");
    else E.line(ctype(o.aval.dtype) + " " + n + "[" + std::to_string(E.slots(o)) + "];");
    copy(E, n, o, E.as_layout(j.outvars[c], E.layout_of(o)));  // a body output in the carry's layout
    tmp.push_back(n);
  }
  for (size_t i = 0; i < cs.size(); ++i) copy(E, E.name(outs[cs[i]]), outs[cs[i]], tmp[i]);
}

// The loop as the loop-plans pass planned it (plan/loops.h); the copies of its plans here
// take the printer's names (fragments, buffers).
void fori(Emitter& E, const ir::Eqn& e) {
  const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
  size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
  const LoopPlan& plan = E.plan.loop(e);
  // carries that only accumulate tensor-core dots live in MMA fragments (rules_dot.cc)
  std::vector<std::optional<FragmentCarry>> frag = plan.carries;
  for (size_t c = 0; c < nc; ++c) {
    E.declare(e.out[c]);  // in the carry's layout (value_layout.cc)
    std::string init = E.as_layout(e.in[2 + c], E.layout_of(e.out[c]));
    if (frag[c]) {
      frag[c]->frag = E.name(e.out[c]);
      begin_fragment_carry(E, *frag[c], init, Emitter::scalar_like(e.out[c].aval));
      continue;
    }
    copy(E, E.name(e.out[c]), e.out[c], init);
  }
  for (size_t q = 1 + nc; q < body.invars.size(); ++q) E.bind(body.invars[q], e.in[1 + q]);
  // loads that feed tensor-core dots go to shared memory stages ahead of use (pipeline.h)
  std::string lo = E.name(e.in[0]), hi = E.name(e.in[1]);
  ResidentOperands resident = plan.resident;
  begin_resident_operands(E, resident);
  std::optional<LoopRotation> rot = plan.rotation;
  if (rot)
    for (size_t c = 0; c < nc; ++c)
      if (frag[c] && frag[c]->dot == rot->second) rot->frag = frag[c]->frag;
  LoopPipeline pipe = plan.pipeline;
  if (pipe.stages) begin_pipeline(E, pipe, body, lo, hi);
  std::string T = ctype(ir::atom_aval(e.in[0]).dtype);
  auto bind_carries = [&] {
    for (size_t c = 0; c < nc; ++c) E.bind_name(body.invars[1 + c], E.name(e.out[c]));
  };
  std::vector<size_t> plain;
  for (size_t c = 0; c < nc; ++c)
    if (!frag[c]) plain.push_back(c);
  if (plan.rotated) {
    emit_rotated_loop(E, *rot, pipe, plan.turns, body, T, lo, hi, bind_carries, [&] { assign_outs(E, body, e.out, plain); });
  } else {
    std::string i = E.fresh("it");
    Emitter::Block loop = E.block("for (" + T + " " + i + " = " + lo + "; " + i + " < " + hi + "; ++" + i + ") {");
    if (pipe.stages) pipeline_iteration(E, pipe, body, i, lo, hi);
    E.bind_name(body.invars[0], i);
    bind_carries();
    E.emit_eqns(body);
    assign_outs(E, body, e.out, plain);
  }
  if (pipe.stages) end_pipeline(E, pipe);
  end_resident_operands(E, resident);
  for (size_t c = 0; c < nc; ++c)
    if (frag[c]) end_fragment_carry(E, *frag[c]);
}

void while_(Emitter& E, const ir::Eqn& e) {
  const ir::Jaxpr& cj = *e.params.get<ir::JaxprPtr>("cond_jaxpr");
  const ir::Jaxpr& bj = *e.params.get<ir::JaxprPtr>("body_jaxpr");
  size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
  size_t ncc = static_cast<size_t>(e.params.get_int("cond_nconsts"));
  for (size_t c = 0; c < nc; ++c) {
    E.declare(e.out[c]);
    copy(E, E.name(e.out[c]), e.out[c], E.name(e.in[c]));
  }
  Emitter::Block loop = E.block("while (true) {");
  std::string go = E.fresh("go");
  E.line("bool " + go + ";");
  {
    Emitter::Block test = E.block("{");
    for (size_t c = 0; c < nc; ++c) E.bind_name(cj.invars[c], E.name(e.out[c]));
    for (size_t q = 0; q < ncc; ++q) E.bind(cj.invars[nc + q], e.in[nc + q]);
    E.emit_eqns(cj);
    E.line(go + " = " + E.name(cj.outvars[0]) + ";");
  }
  E.line("if (!" + go + ") break;");
  for (size_t c = 0; c < nc; ++c) E.bind_name(bj.invars[c], E.name(e.out[c]));
  for (size_t q = nc; q < bj.invars.size(); ++q) E.bind(bj.invars[q], e.in[ncc + q]);
  E.emit_eqns(bj);
  assign_outs(E, bj, e.out);
}

void cond(Emitter& E, const ir::Eqn& e) {
  const auto& br = e.params.get<std::vector<ir::JaxprPtr>>("branches");
  for (auto& o : e.out) E.declare(o);
  std::string b = E.fresh("br");
  E.line("const int " + b + " = min(max((int)" + E.name(e.in[0]) + ", 0), " + std::to_string(br.size() - 1) + ");");
  for (size_t k = 0; k < br.size(); ++k) {
    // the next branch's `} else ` ends this one
    Emitter::Block branch = E.block(std::string(k ? "} else " : "") + (k + 1 < br.size() ? "if (" + b + " == " + std::to_string(k) + ") " : "") + "{",
                                    k + 1 < br.size() ? "" : "}");
    for (size_t q = 0; q < br[k]->invars.size(); ++q) E.bind(br[k]->invars[q], e.in[1 + q]);
    E.emit_eqns(*br[k]);
    for (size_t c = 0; c < e.out.size(); ++c) copy(E, E.name(e.out[c]), e.out[c], E.as_layout(br[k]->outvars[c], ValueLayout{}));
  }
}

}  // namespace

void register_control_rules(ir::RuleTable<LowerRule>& t) {
  t.set(PrimId::fori_loop, fori);
  t.set(PrimId::while_loop, while_);
  t.set(PrimId::cond, cond);
  t.set(PrimId::program_id, [](Emitter& E, const ir::Eqn& e) {
    E.declare(e.out[0]);
    E.line(E.name(e.out[0]) + " = " + E.program_ids.at(static_cast<size_t>(e.params.get_int("axis"))) + ";");
  });
  t.set(PrimId::num_programs, [](Emitter& E, const ir::Eqn& e) {
    E.declare(e.out[0]);
    E.line(E.name(e.out[0]) + " = " + E.grid_sizes.at(static_cast<size_t>(e.params.get_int("axis"))) + ";");
  });
  t.set(PrimId::debug_print, [](Emitter& E, const ir::Eqn& e) {
    // Appends one record to the print log (lower.h, PrintSite): tiles are gathered to shared
    // memory, then thread 0 reserves the record with one atomic and writes it. The runner
    // prints the records in program order with the interpreter's formatter, so both
    // backends print the same text and programs never interleave.
    PrintSite site{e.params.get<std::string>("fmt"), {}};
    for (auto& x : e.in) site.values.push_back(ir::atom_aval(x));
    int64_t id = static_cast<int64_t>(E.print_sites.size());
    int64_t R = site.slots();
    E.print_sites.push_back(site);
    std::vector<std::string> tiles(e.in.size());
    size_t off = 0;
    for (size_t k = 0; k < e.in.size(); ++k) {
      if (site.values[k].shape.empty()) continue;
      tiles[k] = E.put_shared(e.in[k], off);
      off = E.reserve(off, site.values[k]);
    }
    if (off) E.sync();
    {
      Emitter::Block one = E.block("if (threadIdx.x == 0 && plog) {");
      std::string o = E.fresh("po");
      E.line("unsigned long long " + o + " = atomicAdd(plog, " + std::to_string(R) + "ull);");
      Emitter::Block room = E.block("if (" + o + " + " + std::to_string(R) + "ull <= plog[1]) {");
      std::string r = E.fresh("pr");
      E.line("unsigned long long* " + r + " = plog + 2 + " + o + ";");
      E.line(r + "[0] = " + std::to_string(id) + "ull; " + r + "[1] = (unsigned long long)lin;");
      int64_t at = 2;
      for (size_t k = 0; k < e.in.size(); ++k) {
        const ir::Aval& a = site.values[k];
        if (a.shape.empty()) {
          E.line(r + "[" + std::to_string(at++) + "] = p_slot(" + E.name(e.in[k]) + ");");
        } else {
          int64_t n = shape_size(a.shape);
          E.line("for (long long i = 0; i < " + std::to_string(n) + "ll; ++i) " + r + "[" + std::to_string(at) + " + i] = p_slot(" +
                 tiles[k] + "[i]);");
          at += n;
        }
      }
    }
    if (off) E.sync();  // the exchange region is free again
  });
  t.set(PrimId::check, [](Emitter& E, const ir::Eqn& e) {
    // The first failing program (lowest linear id) is recorded in perr[0], the check's
    // index in perr[1] (approximately: racing programs may interleave). Outside checkify
    // (which rewrites checks into outputs) checks are on only with debug = true, as in the
    // interpreter.
    if (!E.plan.checks) return;
    ir::Aval a = ir::atom_aval(e.in[0]);
    int id = static_cast<int>(E.check_messages.size());
    E.check_messages.push_back(core::check_failure_text(e.loc, e.params.get<std::string>("fmt")));
    std::string bad = E.fresh("bad");
    E.line("int " + bad + " = 0;");
    E.foreach(a.shape, [&] { E.line("if (!" + E.elem(e.in[0], "k") + ") " + bad + " = 1;"); });
    E.line("if (__syncthreads_or(" + bad + ") && threadIdx.x == 0) { if (atomicMin(perr, (int)lin) > (int)lin) perr[1] = " +
           std::to_string(id) + "; }");
  });
}

int64_t PrintSite::slots() const {
  int64_t n = 2;
  for (auto& a : values) n += shape_size(a.shape);
  return n;
}

ir::RuleTable<LowerRule>& lowering_rules() {
  static ir::RuleTable<LowerRule>* t = [] {
    auto* r = new ir::RuleTable<LowerRule>("CUDA lowering");
    register_elementwise_rules(*r);
    register_shape_rules(*r);
    register_dot_rules(*r);
    register_memory_rules(*r);
    register_control_rules(*r);
    return r;
  }();
  return *t;
}

}  // namespace pallas::cuda
