// Lowering rules for control flow (fori_loop, while, cond with tile-valued carries, inlined
// in scopes), grid queries, debug_print and check.
#include "src/backends/cuda/rules.h"

namespace pallas::cuda {
using ir::PrimId;

namespace {

void copy(Emitter& E, const std::string& dst, const ir::Aval& a, const std::string& src) {
  if (Emitter::scalar_like(a)) { E.line(dst + " = " + src + ";"); return; }
  E.line("for (int k = 0; k < " + std::to_string(E.per_thread(a.shape)) + "; ++k) " + dst + "[k] = " + src + "[k];");
}

// After a body: carries <- body outputs, through temporaries (outputs may swap carries).
void assign_outs(Emitter& E, const ir::Jaxpr& j, const std::vector<ir::Var>& outs) {
  std::vector<std::string> tmp;
  for (size_t c = 0; c < outs.size(); ++c) {
    ir::Var t{-1, outs[c].aval};
    std::string n = E.fresh("tmp");
    if (Emitter::scalar_like(t.aval)) E.line(ctype(t.aval.dtype) + " " + n + ";");
    else E.line(ctype(t.aval.dtype) + " " + n + "[" + std::to_string(E.per_thread(t.aval.shape)) + "];");
    copy(E, n, t.aval, E.name(j.outvars[c]));
    tmp.push_back(n);
  }
  for (size_t c = 0; c < outs.size(); ++c) copy(E, E.name(outs[c]), outs[c].aval, tmp[c]);
}

void fori(Emitter& E, const ir::Eqn& e) {
  const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
  size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
  for (size_t c = 0; c < nc; ++c) {
    E.declare(e.out[c]);
    copy(E, E.name(e.out[c]), e.out[c].aval, E.name(e.in[2 + c]));
  }
  std::string i = E.fresh("it");
  std::string T = ctype(ir::atom_aval(e.in[0]).dtype);
  E.line("for (" + T + " " + i + " = " + E.name(e.in[0]) + "; " + i + " < " + E.name(e.in[1]) + "; ++" + i + ") {");
  ++E.depth;
  E.names[body.invars[0].id] = i;
  for (size_t c = 0; c < nc; ++c) E.names[body.invars[1 + c].id] = E.name(e.out[c]);
  for (size_t q = 1 + nc; q < body.invars.size(); ++q) E.bind(body.invars[q], e.in[1 + q]);
  E.emit_eqns(body);
  assign_outs(E, body, e.out);
  --E.depth;
  E.line("}");
}

void while_(Emitter& E, const ir::Eqn& e) {
  const ir::Jaxpr& cj = *e.params.get<ir::JaxprPtr>("cond_jaxpr");
  const ir::Jaxpr& bj = *e.params.get<ir::JaxprPtr>("body_jaxpr");
  size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
  size_t ncc = static_cast<size_t>(e.params.get_int("cond_nconsts"));
  for (size_t c = 0; c < nc; ++c) {
    E.declare(e.out[c]);
    copy(E, E.name(e.out[c]), e.out[c].aval, E.name(e.in[c]));
  }
  E.line("while (true) {");
  ++E.depth;
  std::string go = E.fresh("go");
  E.line("bool " + go + ";");
  E.line("{");
  ++E.depth;
  for (size_t c = 0; c < nc; ++c) E.names[cj.invars[c].id] = E.name(e.out[c]);
  for (size_t q = 0; q < ncc; ++q) E.bind(cj.invars[nc + q], e.in[nc + q]);
  E.emit_eqns(cj);
  E.line(go + " = " + E.name(cj.outvars[0]) + ";");
  --E.depth;
  E.line("}");
  E.line("if (!" + go + ") break;");
  for (size_t c = 0; c < nc; ++c) E.names[bj.invars[c].id] = E.name(e.out[c]);
  for (size_t q = nc; q < bj.invars.size(); ++q) E.bind(bj.invars[q], e.in[ncc + q]);
  E.emit_eqns(bj);
  assign_outs(E, bj, e.out);
  --E.depth;
  E.line("}");
}

void cond(Emitter& E, const ir::Eqn& e) {
  const auto& br = e.params.get<std::vector<ir::JaxprPtr>>("branches");
  for (auto& o : e.out) E.declare(o);
  std::string b = E.fresh("br");
  E.line("const int " + b + " = min(max((int)" + E.name(e.in[0]) + ", 0), " + std::to_string(br.size() - 1) + ");");
  for (size_t k = 0; k < br.size(); ++k) {
    E.line(std::string(k ? "} else " : "") + (k + 1 < br.size() ? "if (" + b + " == " + std::to_string(k) + ") " : "") + "{");
    ++E.depth;
    for (size_t q = 0; q < br[k]->invars.size(); ++q) E.bind(br[k]->invars[q], e.in[1 + q]);
    E.emit_eqns(*br[k]);
    for (size_t c = 0; c < e.out.size(); ++c) copy(E, E.name(e.out[c]), e.out[c].aval, E.name(br[k]->outvars[c]));
    --E.depth;
  }
  E.line("}");
}

std::string printf_spec(DType t) { return is_float(t) ? "%g" : t == DType::U64 ? "%llu" : "%lld"; }
std::string printf_arg(const std::string& v, DType t) {
  if (is_float(t)) return "(double)ld(" + v + ")";
  return t == DType::U64 ? "(unsigned long long)" + v : "(long long)" + v;
}

}  // namespace

void register_control_rules(ir::RuleTable<LowerRule>& t) {
  t.set(PrimId::fori_loop, fori);
  t.set(PrimId::while_loop, while_);
  t.set(PrimId::cond, cond);
  t.set(PrimId::program_id, [](Emitter& E, const ir::Eqn& e) {
    E.declare(e.out[0]);
    E.line(E.name(e.out[0]) + " = " + E.names.at(-1000 - e.params.get_int("axis")) + ";");
  });
  t.set(PrimId::num_programs, [](Emitter& E, const ir::Eqn& e) {
    E.declare(e.out[0]);
    E.line(E.name(e.out[0]) + " = " + E.names.at(-2000 - e.params.get_int("axis")) + ";");
  });
  t.set(PrimId::debug_print, [](Emitter& E, const ir::Eqn& e) {
    // The interpreter's format (docs/design.md, src/backends/interpret/rules_control.cc):
    // "[program (i, j)] " then fmt with each {} replaced by a scalar's value, or by a tile's
    // "dtype[d0,d1] [[a b] [c d]]" in row-major order. Tiles are gathered to shared memory;
    // thread 0 prints, piece by piece (programs running at once may interleave lines).
    std::string fmt = e.params.get<std::string>("fmt");
    std::vector<std::string> tiles(e.in.size());
    size_t off = 0;
    for (size_t k = 0; k < e.in.size(); ++k) {
      ir::Aval a = ir::atom_aval(e.in[k]);
      if (a.shape.empty()) continue;
      tiles[k] = E.put_shared(e.in[k], off);
      off = E.reserve(off, a);
    }
    if (off) E.sync();
    auto quote = [](const std::string& text) {
      std::string q;
      for (char c : text) {
        if (c == '%') q += "%%";
        else if (c == '"' || c == '\\') q += std::string("\\") + c;
        else if (c == '\n') q += "\\n";
        else q += c;
      }
      return q;
    };
    auto value = [](const std::string& v, DType t) {
      if (t == DType::Bool) return "printf(\"%s\", (" + v + ") ? \"True\" : \"False\");";
      return "printf(\"" + printf_spec(t) + "\", " + printf_arg(v, t) + ");";
    };
    E.line("if (threadIdx.x == 0) {");
    ++E.depth;
    std::string pid = "printf(\"[program (", args;
    size_t rank = 0;
    while (E.names.count(-1000 - static_cast<int64_t>(rank))) ++rank;
    for (size_t d = 0; d < rank; ++d) {
      pid += std::string(d ? ", " : "") + "%lld";
      args += ", (long long)" + E.names.at(-1000 - static_cast<int64_t>(d));
    }
    E.line(pid + (rank == 1 ? ",)] \"" : ")] \"") + args + ");");
    std::string text;
    size_t arg = 0;
    for (size_t k = 0; k < fmt.size(); ++k) {
      if (!(fmt[k] == '{' && k + 1 < fmt.size() && fmt[k + 1] == '}' && arg < e.in.size())) {
        text += fmt[k];
        continue;
      }
      if (!text.empty()) E.line("printf(\"" + quote(text) + "\");"), text.clear();
      ir::Aval a = ir::atom_aval(e.in[arg]);
      if (a.shape.empty()) {
        E.line(value(E.name(e.in[arg]), a.dtype));
      } else {
        std::string head = std::string(dtype_name(a.dtype)) + "[";
        for (size_t d = 0; d < a.shape.size(); ++d) head += (d ? "," : "") + std::to_string(a.shape[d]);
        E.line("printf(\"" + head + "] \");");
        int64_t n = shape_size(a.shape);
        if (n == 0) {
          E.line("printf(\"" + std::string(a.shape.size(), '[') + std::string(a.shape.size(), ']') + "\");");
        } else {
          // strides[d]: elements in one index step of dim d and below; a bracket opens where the
          // flat index is a multiple of it and closes where the next one is
          std::vector<int64_t> st(a.shape.size());
          int64_t acc = 1;
          for (size_t d = a.shape.size(); d-- > 0;) acc *= a.shape[d], st[d] = acc;
          E.line("for (long long i = 0; i < " + std::to_string(n) + "ll; ++i) {");
          ++E.depth;
          E.line("if (i) printf(\" \");");
          for (size_t d = 0; d < st.size(); ++d) E.line("if (i % " + std::to_string(st[d]) + "ll == 0) printf(\"[\");");
          E.line(value(tiles[arg] + "[i]", a.dtype));
          for (size_t d = st.size(); d-- > 0;) E.line("if ((i + 1) % " + std::to_string(st[d]) + "ll == 0) printf(\"]\");");
          --E.depth;
          E.line("}");
        }
      }
      ++arg, ++k;
    }
    E.line("printf(\"" + quote(text) + "\\n\");");
    --E.depth;
    E.line("}");
    if (off) E.sync();  // the exchange region is free again
  });
  t.set(PrimId::check, [](Emitter& E, const ir::Eqn& e) {
    // The first failing program (lowest linear id) is recorded in perr[0], the check's
    // index in perr[1] (approximately: racing programs may interleave). Outside checkify
    // (which rewrites checks into outputs) checks are on only with debug = true, as in the
    // interpreter.
    if (!E.checks_enabled) return;
    ir::Aval a = ir::atom_aval(e.in[0]);
    int id = static_cast<int>(E.check_messages.size());
    E.check_messages.push_back(e.params.get<std::string>("fmt"));
    std::string bad = E.fresh("bad");
    E.line("int " + bad + " = 0;");
    E.foreach(a.shape, [&] { E.line("if (!" + E.elem(e.in[0], "k") + ") " + bad + " = 1;"); });
    E.line("if (__syncthreads_or(" + bad + ") && threadIdx.x == 0) { if (atomicMin(perr, (int)lin) > (int)lin) perr[1] = " +
           std::to_string(id) + "; }");
  });
}

ir::RuleTable<LowerRule>& lowering_rules() {
  static ir::RuleTable<LowerRule>* t = [] {
    auto* r = new ir::RuleTable<LowerRule>("CUDA lowering");
    register_elementwise_rules(*r);
    register_shape_rules(*r);
    register_memory_rules(*r);
    register_control_rules(*r);
    return r;
  }();
  return *t;
}

}  // namespace pallas::cuda
