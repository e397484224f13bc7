// Lowering rules for elementwise primitives: one expression per op over the compute type
// (float for f16/bf16, rounded back once per op as the interpreter does).
#include "src/backends/cuda/rules.h"

namespace pallas::cuda {
using ir::PrimId;

namespace {

// out = f(args...) elementwise; operands of one element broadcast.
void elementwise(Emitter& E, const ir::Eqn& e, const std::function<std::string(const std::vector<std::string>&, const std::string& C)>& f,
                 bool raw_result = false) {
  const ir::Var& o = e.out[0];
  E.declare(o);
  DType in_t = ir::atom_aval(e.in.back()).dtype;
  std::string C = compute_type(in_t);
  E.foreach_value(o, [&] {
    std::vector<std::string> a;
    for (auto& x : e.in) a.push_back("ld(" + E.elem(x, "k") + ")");
    std::string r = f(a, C);
    DType t = o.aval.dtype;
    if (t == DType::Bool || raw_result) E.line(E.elem(o, "k") + " = " + r + ";");
    else E.line(E.elem(o, "k") + " = cv<" + ctype(t) + ">((" + C + ")(" + r + "));");
  });
}

LowerRule callC(const std::string& fn) {  // templated helper, explicit compute type
  return [fn](Emitter& E, const ir::Eqn& e) {
    elementwise(E, e, [&](const std::vector<std::string>& a, const std::string& C) {
      std::string s = fn + "<" + C + ">(";
      for (size_t k = 0; k < a.size(); ++k) s += (k ? ", (" : "(") + C + ")" + a[k];
      return s + ")";
    });
  };
}
LowerRule infix(const std::string& op) {
  return [op](Emitter& E, const ir::Eqn& e) {
    elementwise(E, e, [&](const std::vector<std::string>& a, const std::string& C) { return "(" + a[0] + " " + op + " " + a[1] + ")"; });
  };
}
LowerRule float_only(const std::string& fn) {
  return [fn](Emitter& E, const ir::Eqn& e) {
    if (!is_float(ir::atom_aval(e.in[0]).dtype)) E.fail(e, "takes floating-point operands");
    elementwise(E, e, [&](const std::vector<std::string>& a, const std::string& C) {
      std::string s = fn + "(";
      for (size_t k = 0; k < a.size(); ++k) s += (k ? ", (" : "(") + C + ")" + a[k];
      return s + ")";
    });
  };
}

}  // namespace

void register_elementwise_rules(ir::RuleTable<LowerRule>& t) {
  t.set(PrimId::neg, callC("p_neg"));
  t.set(PrimId::abs, callC("p_abs"));
  t.set(PrimId::sign, callC("p_sign"));
  for (auto [id, fn] : std::vector<std::pair<PrimId, const char*>>{
           {PrimId::ceil, "ceil"}, {PrimId::floor, "floor"}, {PrimId::round, "p_round"}, {PrimId::exp, "exp"},
           {PrimId::exp2, "p_exp2"}, {PrimId::expm1, "expm1"}, {PrimId::log, "log"}, {PrimId::log1p, "log1p"},
           {PrimId::sqrt, "sqrt"}, {PrimId::cbrt, "cbrt"}, {PrimId::rsqrt, "p_rsqrt"}, {PrimId::sin, "sin"},
           {PrimId::cos, "cos"}, {PrimId::tan, "tan"}, {PrimId::asin, "asin"}, {PrimId::acos, "acos"},
           {PrimId::atan, "atan"}, {PrimId::sinh, "sinh"}, {PrimId::cosh, "cosh"}, {PrimId::tanh, "tanh"},
           {PrimId::asinh, "asinh"}, {PrimId::acosh, "acosh"}, {PrimId::atanh, "atanh"},
           {PrimId::logistic, "p_logistic"}, {PrimId::erf, "erf"}, {PrimId::erf_inv, "p_erfinv"},
           {PrimId::is_finite, "p_isfinite"}, {PrimId::pow, "pow"}, {PrimId::atan2, "atan2"}})
    t.set(id, float_only(fn));
  t.set(PrimId::nextafter, [](Emitter& E, const ir::Eqn& e) {  // steps in the storage format
    DType st = ir::atom_aval(e.in[0]).dtype;
    if (!is_float(st)) E.fail(e, "takes floating-point operands");
    elementwise(E, e, [&](const std::vector<std::string>& a, const std::string& C) {
      return "p_nextafter<" + ctype(st) + ", " + C + ">((" + C + ")" + a[0] + ", (" + C + ")" + a[1] + ")";
    });
  });
  t.set(PrimId::not_, callC("p_not"));
  t.set(PrimId::population_count, callC("p_popc"));
  t.set(PrimId::clz, callC("p_clz"));
  t.set(PrimId::add, callC("p_add"));
  t.set(PrimId::sub, callC("p_sub"));
  t.set(PrimId::mul, callC("p_mul"));
  t.set(PrimId::div, callC("p_div"));
  t.set(PrimId::rem, callC("p_rem"));
  t.set(PrimId::max, callC("p_max"));
  t.set(PrimId::min, callC("p_min"));
  t.set(PrimId::and_, infix("&"));
  t.set(PrimId::or_, infix("|"));
  t.set(PrimId::xor_, infix("^"));
  t.set(PrimId::shift_left, callC("p_shl"));
  t.set(PrimId::shift_right_arithmetic, callC("p_shra"));
  t.set(PrimId::shift_right_logical, callC("p_shrl"));
  t.set(PrimId::eq, infix("=="));
  t.set(PrimId::ne, infix("!="));
  t.set(PrimId::lt, infix("<"));
  t.set(PrimId::le, infix("<="));
  t.set(PrimId::gt, infix(">"));
  t.set(PrimId::ge, infix(">="));
  t.set(PrimId::integer_pow, [](Emitter& E, const ir::Eqn& e) {
    int64_t y = e.params.get_int("y");
    elementwise(E, e, [&](const std::vector<std::string>& a, const std::string& C) {
      return "p_ipow<" + C + ">((" + C + ")" + a[0] + ", " + std::to_string(y) + "ll)";
    });
  });
  t.set(PrimId::select_n, [](Emitter& E, const ir::Eqn& e) {
    const ir::Var& o = e.out[0];
    E.declare(o);
    E.foreach_value(o, [&] {
      std::string w = E.elem(e.in[0], "k");
      std::string r = E.elem(e.in.back(), "k");
      // an i32 selector out of range is clamped, as in the interpreter: below 0 takes case 0
      for (int c = static_cast<int>(e.in.size()) - 3; c >= 0; --c)
        r = "((int)(" + w + ") " + (c == 0 ? "<=" : "==") + " " + std::to_string(c) + " ? " + E.elem(e.in[1 + c], "k") + " : " + r + ")";
      E.line(E.elem(o, "k") + " = " + r + ";");
    });
  });
  t.set(PrimId::clamp, [](Emitter& E, const ir::Eqn& e) {
    elementwise(E, e, [&](const std::vector<std::string>& a, const std::string& C) {
      return "p_min<" + C + ">(p_max<" + C + ">((" + C + ")" + a[1] + ", (" + C + ")" + a[0] + "), (" + C + ")" + a[2] + ")";
    });
  });
  t.set(PrimId::convert_element_type, [](Emitter& E, const ir::Eqn& e) {
    const ir::Var& o = e.out[0];
    E.declare(o);
    std::string from = ctype(ir::atom_aval(e.in[0]).dtype), to = ctype(o.aval.dtype);
    E.foreach_value(o, [&] { E.line(E.elem(o, "k") + " = conv<" + to + ", " + from + ">(" + E.elem(e.in[0], "k") + ");"); });
  });
  t.set(PrimId::bitcast_convert_type, [](Emitter& E, const ir::Eqn& e) {
    const ir::Var& o = e.out[0];
    ir::Aval in = ir::atom_aval(e.in[0]);
    if (itemsize(in.dtype) != itemsize(o.aval.dtype)) E.fail(e, "bitcasts between types of different widths are not lowered");
    E.declare(o);
    E.foreach_value(o, [&] {
      E.line("{ " + ctype(in.dtype) + " s_ = " + E.elem(e.in[0], "k") + "; memcpy(&" + E.elem(o, "k") + ", &s_, " +
             std::to_string(itemsize(in.dtype)) + "); }");
    });
  });
  auto alias = [](Emitter& E, const ir::Eqn& e) { E.bind_name(e.out[0], E.name(e.in[0])); };
  t.set(PrimId::stop_gradient, alias);
  t.set(PrimId::multiple_of, alias);
  t.set(PrimId::max_contiguous, alias);
}

}  // namespace pallas::cuda
