// jvp of a pallas_call: the kernel is differentiated equation by equation with one jvp rule
// per primitive (written in the kernel language itself), refs get tangent refs, loops and
// cond carry tangents; the new call takes primals then tangents and writes primal outputs
// then tangent outputs, with every block mapping duplicated.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <numbers>

#include "src/trace/api_util.h"
#include "src/trace/trace.h"
#include "src/transforms/transforms.h"

namespace pallas::transforms {
using ir::PrimId;

struct JvpScope {
  std::string what;
  std::unordered_map<int64_t, Value> p, t;  // old var id -> new primal / tangent
  std::unordered_map<int64_t, int> root;    // old ref var id -> index of the kernel ref it is
};

namespace {

// Thrown when a nonzero tangent is written into a ref without a tangent ref; the rewrite
// restarts with a tangent ref for that kernel ref.
struct NeedTangent {
  int root;
};

Value get_p(JvpScope& s, const ir::Atom& a) {
  if (auto* v = std::get_if<ir::Var>(&a)) {
    auto it = s.p.find(v->id);
    if (it == s.p.end()) throw Error(s.what + ": internal: jvp met an undefined variable");
    return it->second;
  }
  return trace::make_value(a);
}
Value get_t(JvpScope& s, const ir::Atom& a) {
  if (auto* v = std::get_if<ir::Var>(&a)) {
    auto it = s.t.find(v->id);
    if (it != s.t.end()) return it->second;
  }
  return Value();
}

// A tangent with its primal's shape and dtype.
Value fit(const Value& t, const Value& y) {
  Value r = t;
  if (r.dtype() != y.dtype()) r = api::convert(r, y.dtype(), false);
  if (r.shape() != y.shape()) r = api::broadcast(r, y.shape());
  return r;
}
Value or_zeros(const Value& t, const Value& like) { return t.defined() ? fit(t, like) : zeros_like(like); }

void jvp_eqns(const ir::Jaxpr& j, JvpScope& s) {
  for (const ir::Eqn& e : j.eqns) {
    JvpArgs a{e, {}, {}, s};
    for (auto& in : e.in) {
      a.x.push_back(get_p(s, in));
      a.t.push_back(get_t(s, in));
    }
    JvpOut o = jvp_rules().get(e.prim->id)(a);
    for (size_t k = 0; k < e.out.size(); ++k) {
      s.p[e.out[k].id] = o.y.at(k);
      if (k < o.t.size() && o.t[k].defined() && is_float(e.out[k].aval.dtype) && !e.out[k].aval.is_ref)
        s.t[e.out[k].id] = fit(o.t[k], o.y[k]);
    }
  }
}

std::vector<Value> copy(JvpArgs& a) { return trace::bind(a.eqn.prim->id, a.x, a.eqn.params); }
Value plus(const Value& a, const Value& b) { return !a.defined() ? b : !b.defined() ? a : a + b; }

JvpOut zero_rule(JvpArgs& a) { return {copy(a), {}}; }

// Linear in its (single-operand or all-operand) inputs: the same op on the tangents.
JvpOut linear_rule(JvpArgs& a) {
  JvpOut o{copy(a), {}};
  bool any = false;
  for (auto& t : a.t) any = any || t.defined();
  if (!any) return o;
  std::vector<Value> ts;
  for (size_t k = 0; k < a.x.size(); ++k) ts.push_back(or_zeros(a.t[k], a.x[k]));
  o.t = trace::bind(a.eqn.prim->id, ts, a.eqn.params);
  return o;
}

using UnaryF = std::function<Value(const Value& x, const Value& y, const Value& t)>;
JvpRule unary(UnaryF f) {
  return [f](JvpArgs& a) {
    JvpOut o{copy(a), {}};
    if (a.t[0].defined()) o.t = {f(a.x[0], o.y[0], a.t[0])};
    return o;
  };
}
using PartialF = std::function<Value(const Value& a, const Value& b, const Value& y, const Value& t)>;
JvpRule binary(PartialF fa, PartialF fb) {
  return [fa, fb](JvpArgs& a) {
    JvpOut o{copy(a), {}};
    Value r;
    if (a.t[0].defined()) r = fa(a.x[0], a.x[1], o.y[0], a.t[0]);
    if (a.t[1].defined()) r = plus(r, fb(a.x[0], a.x[1], o.y[0], a.t[1]));
    if (r.defined()) o.t = {r};
    return o;
  };
}

Value as(const Value& b, const Value& like) { return b.astype(like.dtype()); }

// ---- refs ----
int root_of(JvpScope& s, const ir::Atom& ref) {
  auto it = s.root.find(std::get<ir::Var>(ref).id);
  return it == s.root.end() ? -1 : it->second;
}
[[noreturn]] void need_tangent(JvpArgs& a) {
  int r = root_of(a.scope, a.eqn.in[0]);
  if (r < 0) throw Error(a.scope.what + ": internal: jvp cannot trace a ref to the kernel's refs");
  throw NeedTangent{r};
}
std::vector<Value> with(std::vector<Value> v, size_t k, const Value& x) {
  v[k] = x;
  return v;
}

JvpOut load_rule(JvpArgs& a) {
  JvpOut o{copy(a), {}};
  if (!a.t[0].defined()) return o;
  std::vector<Value> in = with(a.x, 0, a.t[0]);
  if (a.eqn.params.get_bool("has_other")) in.back() = or_zeros(a.t.back(), a.x.back());
  o.t = trace::bind(PrimId::load, in, a.eqn.params);
  return o;
}

// store, swap, addupdate: [ref, value, dyn..., mask?]
JvpOut store_rule(JvpArgs& a) {
  JvpOut o{copy(a), {}};
  bool float_ref = is_float(a.x[0].dtype());
  if (!a.t[0].defined()) {
    if (a.t[1].defined() && float_ref) need_tangent(a);
    return o;
  }
  PrimId id = a.eqn.prim->id;
  if (id == PrimId::addupdate && !a.t[1].defined()) return o;
  std::vector<Value> in = with(a.x, 0, a.t[0]);
  in[1] = or_zeros(a.t[1], a.x[1]);
  o.t = trace::bind(id, in, a.eqn.params);
  return o;
}

JvpOut atomic_rule(JvpArgs& a) {
  const ir::AtomicOp op = a.eqn.params.get<ir::AtomicOp>("op");
  JvpOut o{copy(a), {}};
  if (!a.t[0].defined()) {
    if (a.t[1].defined() && is_float(a.x[0].dtype())) need_tangent(a);
    return o;
  }
  bool linear = false;  // the tangent update is the same op on the tangents
  switch (op) {
    case ir::AtomicOp::Add:
    case ir::AtomicOp::Xchg: linear = true; break;
    case ir::AtomicOp::Max:
    case ir::AtomicOp::Min:
    case ir::AtomicOp::And:
    case ir::AtomicOp::Or:
    case ir::AtomicOp::Xor: linear = false; break;
  }
  if (!linear)
    throw Error(a.scope.what + ": jvp of atomic_" + ir::enum_name(op) + " on the floating ref " + a.x[0].str() +
                " is not supported: its tangent depends on which program wins the race; use atomic_add or "
                "pl::stop_gradient the value");
  std::vector<Value> in = with(a.x, 0, a.t[0]);
  in[1] = or_zeros(a.t[1], a.x[1]);
  o.t = trace::bind(PrimId::atomic_rmw, in, a.eqn.params);
  return o;
}

JvpOut cas_rule(JvpArgs& a) {
  if (a.t[0].defined() || ((a.t[1].defined() || a.t[2].defined()) && is_float(a.x[0].dtype())))
    throw Error(a.scope.what + ": jvp of atomic_cas on the floating ref " + a.x[0].str() +
                " is not supported (a compare-and-swap has no tangent); keep locks on integer refs");
  return zero_rule(a);
}

// ---- control flow ----
struct Body {
  ir::JaxprPtr jaxpr;
  std::vector<bool> out_nz;  // which results had a nonzero tangent
};

// Differentiate a closed sub-jaxpr whose invars are [lead..., carry..., consts...] and whose
// results are `nres` values (the carry for loops). New invars: lead, carry, carry tangents
// (cnz), consts, const tangents (ctan); results: primal, then tangents where res_nz.
Body jvp_body(JvpArgs& a, const ir::Jaxpr& j, size_t lead, size_t nc, const std::vector<bool>& cnz,
              const std::vector<ir::Atom>& const_atoms, const std::vector<Value>& const_t,
              const std::vector<bool>& res_nz) {
  trace::Frame f(&trace::require_frame("jvp").context(), true);
  JvpScope s;
  s.what = a.scope.what;
  size_t nconst = const_atoms.size();
  auto add = [&](const ir::Var& old) {
    ir::Aval av = old.aval;
    av.weak = false;
    return trace::make_value(f.add_invar(av));
  };
  for (size_t k = 0; k < lead + nc; ++k) s.p[j.invars[k].id] = add(j.invars[k]);
  for (size_t k = 0; k < nc; ++k)
    if (cnz[k]) s.t[j.invars[lead + k].id] = add(j.invars[lead + k]);
  for (size_t k = 0; k < nconst; ++k) {
    const ir::Var& v = j.invars[lead + nc + k];
    s.p[v.id] = add(v);
    if (v.aval.is_ref && std::holds_alternative<ir::Var>(const_atoms[k])) {
      int r = root_of(a.scope, const_atoms[k]);
      if (r >= 0) s.root[v.id] = r;
    }
  }
  for (size_t k = 0; k < nconst; ++k)
    if (const_t[k].defined()) s.t[j.invars[lead + nc + k].id] = add(j.invars[lead + nc + k]);
  jvp_eqns(j, s);
  std::vector<ir::Atom> outs;
  std::vector<Value> ys;
  Body b;
  for (auto& o : j.outvars) {
    ys.push_back(get_p(s, o));
    outs.push_back(trace::atom_of(ys.back(), "jvp"));
  }
  for (size_t k = 0; k < j.outvars.size(); ++k) {
    Value t = get_t(s, j.outvars[k]);
    b.out_nz.push_back(t.defined());
    if (k < res_nz.size() && res_nz[k]) outs.push_back(trace::atom_of(or_zeros(t, ys[k]), "jvp"));
  }
  b.jaxpr = std::make_shared<const ir::Jaxpr>(f.finish(outs, nullptr));
  return b;
}

bool grow(std::vector<bool>& nz, const std::vector<bool>& out) {
  bool changed = false;
  for (size_t k = 0; k < nz.size(); ++k)
    if (out[k] && !nz[k]) nz[k] = true, changed = true;
  return changed;
}

void push_tangents(std::vector<Value>& ops, const std::vector<Value>& x, const std::vector<Value>& t, size_t from,
                   size_t n, const std::vector<bool>* nz) {
  for (size_t k = 0; k < n; ++k) {
    bool on = nz ? (*nz)[k] : t[from + k].defined();
    if (on) ops.push_back(x[from + k].impl()->aval.is_ref ? t[from + k] : or_zeros(t[from + k], x[from + k]));
  }
}

JvpOut split(const std::vector<Value>& outs, size_t n, const std::vector<bool>& nz) {
  JvpOut o;
  o.y.assign(outs.begin(), outs.begin() + static_cast<long>(n));
  o.t.resize(n);
  size_t k = n;
  for (size_t i = 0; i < n; ++i)
    if (nz[i]) o.t[i] = outs.at(k++);
  return o;
}

JvpOut fori_rule(JvpArgs& a) {
  const ir::Eqn& e = a.eqn;
  const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
  size_t nc = static_cast<size_t>(e.params.get_int("num_carry")), nconst = e.in.size() - 2 - nc;
  std::vector<bool> cnz(nc);
  for (size_t k = 0; k < nc; ++k) cnz[k] = a.t[2 + k].defined();
  std::vector<ir::Atom> catoms(e.in.begin() + 2 + nc, e.in.end());
  std::vector<Value> ct(a.t.begin() + 2 + nc, a.t.end());
  Body b;
  do b = jvp_body(a, body, 1, nc, cnz, catoms, ct, cnz);
  while (grow(cnz, b.out_nz));
  std::vector<Value> ops(a.x.begin(), a.x.begin() + 2 + nc);
  push_tangents(ops, a.x, a.t, 2, nc, &cnz);
  ops.insert(ops.end(), a.x.begin() + 2 + nc, a.x.end());
  push_tangents(ops, a.x, a.t, 2 + nc, nconst, nullptr);
  ir::Params p = e.params;
  p.set("body", b.jaxpr);
  size_t ntc = 0;
  for (bool z : cnz) ntc += z;
  p.set("num_carry", static_cast<int64_t>(nc + ntc));
  return split(trace::bind(PrimId::fori_loop, ops, p), nc, cnz);
}

JvpOut while_rule(JvpArgs& a) {
  const ir::Eqn& e = a.eqn;
  const ir::Jaxpr& cj = *e.params.get<ir::JaxprPtr>("cond_jaxpr");
  const ir::Jaxpr& bj = *e.params.get<ir::JaxprPtr>("body_jaxpr");
  size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
  size_t ncc = static_cast<size_t>(e.params.get_int("cond_nconsts"));
  size_t nbc = e.in.size() - nc - ncc;
  std::vector<bool> cnz(nc);
  for (size_t k = 0; k < nc; ++k) cnz[k] = a.t[k].defined();
  std::vector<ir::Atom> batoms(e.in.begin() + nc + ncc, e.in.end());
  std::vector<Value> bt(a.t.begin() + nc + ncc, a.t.end());
  Body b;
  do b = jvp_body(a, bj, 0, nc, cnz, batoms, bt, cnz);
  while (grow(cnz, b.out_nz));
  // The condition sees the primal carry only; tangent carries are extra, unused invars.
  ir::Jaxpr c2 = cj;
  c2.invars.assign(cj.invars.begin(), cj.invars.begin() + nc);
  for (size_t k = 0; k < nc; ++k)
    if (cnz[k]) {
      ir::Aval av = cj.invars[k].aval;
      av.weak = false;
      c2.invars.push_back(ir::new_var(av));
    }
  c2.invars.insert(c2.invars.end(), cj.invars.begin() + nc, cj.invars.end());
  std::vector<Value> ops(a.x.begin(), a.x.begin() + nc);
  push_tangents(ops, a.x, a.t, 0, nc, &cnz);
  ops.insert(ops.end(), a.x.begin() + nc, a.x.end());
  push_tangents(ops, a.x, a.t, nc + ncc, nbc, nullptr);
  size_t ntc = 0;
  for (bool z : cnz) ntc += z;
  ir::Params p = e.params;
  p.set("cond_jaxpr", std::make_shared<const ir::Jaxpr>(std::move(c2)));
  p.set("body_jaxpr", b.jaxpr);
  p.set("num_carry", static_cast<int64_t>(nc + ntc));
  return split(trace::bind(PrimId::while_loop, ops, p), nc, cnz);
}

JvpOut cond_rule(JvpArgs& a) {
  const ir::Eqn& e = a.eqn;
  const auto& branches = e.params.get<std::vector<ir::JaxprPtr>>("branches");
  std::vector<ir::Atom> oatoms(e.in.begin() + 1, e.in.end());
  std::vector<Value> ot(a.t.begin() + 1, a.t.end());
  size_t nout = e.out.size();
  std::vector<bool> nz(nout, false), none;
  for (auto& br : branches) grow(nz, jvp_body(a, *br, 0, 0, none, oatoms, ot, none).out_nz);
  std::vector<ir::JaxprPtr> js;
  for (auto& br : branches) js.push_back(jvp_body(a, *br, 0, 0, none, oatoms, ot, nz).jaxpr);
  std::vector<Value> ops = a.x;
  push_tangents(ops, a.x, a.t, 1, oatoms.size(), nullptr);
  ir::Params p = e.params;
  p.set("branches", js);
  return split(trace::bind(PrimId::cond, ops, p), nout, nz);
}

// ---- the table ----
ir::RuleTable<JvpRule> make_rules() {
  ir::RuleTable<JvpRule> r("jvp");
  using X = const Value&;
  const double ln2 = std::numbers::ln2, two_rsqrt_pi = 2.0 / std::sqrt(std::numbers::pi),
               sqrt_pi_2 = std::sqrt(std::numbers::pi) / 2.0;
  for (PrimId id : {PrimId::sign, PrimId::ceil, PrimId::floor, PrimId::round, PrimId::is_finite, PrimId::not_,
                    PrimId::population_count, PrimId::clz, PrimId::nextafter, PrimId::and_, PrimId::or_,
                    PrimId::xor_, PrimId::shift_left, PrimId::shift_right_arithmetic,
                    PrimId::shift_right_logical, PrimId::eq, PrimId::ne, PrimId::lt, PrimId::le, PrimId::gt,
                    PrimId::ge, PrimId::bitcast_convert_type, PrimId::stop_gradient, PrimId::iota,
                    PrimId::program_id, PrimId::num_programs, PrimId::argmax, PrimId::argmin,
                    PrimId::multiple_of, PrimId::max_contiguous, PrimId::debug_print, PrimId::check})
    r.set(id, zero_rule);
  for (PrimId id : {PrimId::neg, PrimId::broadcast_in_dim, PrimId::reshape, PrimId::squeeze, PrimId::transpose,
                    PrimId::reduce_sum, PrimId::cumsum})
    r.set(id, linear_rule);
  r.set(PrimId::abs, unary([](X x, X, X t) { return t * sign(x); }));
  r.set(PrimId::exp, unary([](X, X y, X t) { return t * y; }));
  r.set(PrimId::exp2, unary([ln2](X, X y, X t) { return t * y * ln2; }));
  r.set(PrimId::expm1, unary([](X, X y, X t) { return t * (y + 1.0); }));
  r.set(PrimId::log, unary([](X x, X, X t) { return t / x; }));
  r.set(PrimId::log1p, unary([](X x, X, X t) { return t / (x + 1.0); }));
  r.set(PrimId::sqrt, unary([](X, X y, X t) { return t / (y * 2.0); }));
  r.set(PrimId::cbrt, unary([](X, X y, X t) { return t / (y * y * 3.0); }));
  r.set(PrimId::rsqrt, unary([](X x, X y, X t) { return t * y / x * -0.5; }));
  r.set(PrimId::sin, unary([](X x, X, X t) { return t * cos(x); }));
  r.set(PrimId::cos, unary([](X x, X, X t) { return -(t * sin(x)); }));
  r.set(PrimId::tan, unary([](X, X y, X t) { return t * (y * y + 1.0); }));
  r.set(PrimId::asin, unary([](X x, X, X t) { return t * rsqrt(1.0 - x * x); }));
  r.set(PrimId::acos, unary([](X x, X, X t) { return -(t * rsqrt(1.0 - x * x)); }));
  r.set(PrimId::atan, unary([](X x, X, X t) { return t / (x * x + 1.0); }));
  r.set(PrimId::sinh, unary([](X x, X, X t) { return t * cosh(x); }));
  r.set(PrimId::cosh, unary([](X x, X, X t) { return t * sinh(x); }));
  r.set(PrimId::tanh, unary([](X, X y, X t) { return t * (1.0 - y * y); }));
  r.set(PrimId::asinh, unary([](X x, X, X t) { return t * rsqrt(x * x + 1.0); }));
  r.set(PrimId::acosh, unary([](X x, X, X t) { return t * rsqrt((x - 1.0) * (x + 1.0)); }));
  r.set(PrimId::atanh, unary([](X x, X, X t) { return t / (1.0 - x * x); }));
  r.set(PrimId::logistic, unary([](X, X y, X t) { return t * y * (1.0 - y); }));
  r.set(PrimId::erf, unary([two_rsqrt_pi](X x, X, X t) { return t * exp(-(x * x)) * two_rsqrt_pi; }));
  r.set(PrimId::erf_inv, unary([sqrt_pi_2](X, X y, X t) { return t * exp(y * y) * sqrt_pi_2; }));

  auto id_t = [](X, X, X, X t) { return t; };
  r.set(PrimId::add, binary(id_t, id_t));
  r.set(PrimId::sub, binary(id_t, [](X, X, X, X t) { return -t; }));
  r.set(PrimId::mul, binary([](X, X b, X, X t) { return t * b; }, [](X a, X, X, X t) { return a * t; }));
  r.set(PrimId::div, binary([](X, X b, X, X t) { return t / b; }, [](X, X b, X y, X t) { return -(t * y / b); }));
  r.set(PrimId::rem, binary(id_t, [](X a, X b, X y, X t) { return -(t * ((a - y) / b)); }));
  r.set(PrimId::pow, binary([](X a, X b, X, X t) { return t * b * pow(a, b - 1.0); },
                            [](X a, X, X y, X t) { return t * log(where(a == 0.0, Value(1.0), a)) * y; }));
  r.set(PrimId::atan2, binary([](X a, X b, X, X t) { return t * b / (a * a + b * b); },
                              [](X a, X b, X, X t) { return -(t * a / (a * a + b * b)); }));
  r.set(PrimId::max, binary([](X a, X b, X, X t) { return t * wins(a, b, true, t); },
                            [](X a, X b, X, X t) { return t * wins(b, a, true, t); }));
  r.set(PrimId::min, binary([](X a, X b, X, X t) { return t * wins(a, b, false, t); },
                            [](X a, X b, X, X t) { return t * wins(b, a, false, t); }));

  r.set(PrimId::select_n, [](JvpArgs& a) {
    JvpOut o{copy(a), {}};
    bool any = false;
    for (size_t k = 1; k < a.t.size(); ++k) any = any || a.t[k].defined();
    if (!any) return o;
    std::vector<Value> in{a.x[0]};
    for (size_t k = 1; k < a.x.size(); ++k) in.push_back(or_zeros(a.t[k], a.x[k]));
    o.t = trace::bind(PrimId::select_n, in);
    return o;
  });
  r.set(PrimId::clamp, [](JvpArgs& a) {
    JvpOut o{copy(a), {}};
    X lo = a.x[0], x = a.x[1], hi = a.x[2];
    Value t, zero = zeros_like(x);
    if (a.t[1].defined()) t = where((x > lo) & (x < hi), fit(a.t[1], x), zero);
    if (a.t[0].defined()) t = plus(t, where((lo > x) & (lo < hi), fit(a.t[0], x), zero));
    if (a.t[2].defined()) t = plus(t, where(hi < x, fit(a.t[2], x), zero));
    if (t.defined()) o.t = {t};
    return o;
  });
  r.set(PrimId::integer_pow, [](JvpArgs& a) {
    JvpOut o{copy(a), {}};
    int64_t n = a.eqn.params.get_int("y");
    if (!a.t[0].defined() || n == 0) return o;
    Value d = n == 1 ? Value(1.0) : n == 2 ? a.x[0] : integer_pow(a.x[0], static_cast<int>(n - 1));
    o.t = {a.t[0] * d * static_cast<double>(n)};
    return o;
  });
  r.set(PrimId::convert_element_type, [](JvpArgs& a) {
    JvpOut o{copy(a), {}};
    DType to = a.eqn.params.get<DType>("new_dtype");
    if (a.t[0].defined() && is_float(to) && is_float(a.x[0].dtype())) o.t = {api::convert(a.t[0], to, false)};
    return o;
  });
  r.set(PrimId::dot, [](JvpArgs& a) {
    JvpOut o{copy(a), {}};
    Value t;
    if (a.t[0].defined()) t = trace::bind1(PrimId::dot, {a.t[0], a.x[1]}, a.eqn.params);
    if (a.t[1].defined()) t = plus(t, trace::bind1(PrimId::dot, {a.x[0], a.t[1]}, a.eqn.params));
    if (t.defined()) o.t = {t};
    return o;
  });
  auto kept_dims = [](const Value& x, const std::vector<int64_t>& axes) {
    std::vector<int> dims;
    for (int d = 0; d < x.ndim(); ++d)
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) dims.push_back(d);
    return dims;
  };
  auto chooser = [kept_dims](JvpArgs& a) {
    JvpOut o{copy(a), {}};
    if (!a.t[0].defined()) return o;
    auto axes = a.eqn.params.get<std::vector<int64_t>>("axes");
    X x = a.x[0];
    Value yb = broadcast_in_dim(o.y[0], x.shape(), kept_dims(x, axes));
    Value m = as(x == yb, x);
    Value num = trace::bind1(PrimId::reduce_sum, {fit(a.t[0], x) * m}, a.eqn.params);
    Value den = trace::bind1(PrimId::reduce_sum, {m}, a.eqn.params);
    o.t = {num / den};
    return o;
  };
  r.set(PrimId::reduce_max, chooser);
  r.set(PrimId::reduce_min, chooser);
  r.set(PrimId::reduce_prod, [kept_dims](JvpArgs& a) {
    JvpOut o{copy(a), {}};
    if (!a.t[0].defined()) return o;
    X x = a.x[0];
    Value yb = broadcast_in_dim(o.y[0], x.shape(), kept_dims(x, a.eqn.params.get<std::vector<int64_t>>("axes")));
    o.t = {trace::bind1(PrimId::reduce_sum, {fit(a.t[0], x) * yb / x}, a.eqn.params)};
    return o;
  });
  r.set(PrimId::load, load_rule);
  r.set(PrimId::store, store_rule);
  r.set(PrimId::swap, store_rule);
  r.set(PrimId::addupdate, store_rule);
  r.set(PrimId::atomic_rmw, atomic_rule);
  r.set(PrimId::atomic_cas, cas_rule);
  r.set(PrimId::fori_loop, fori_rule);
  r.set(PrimId::while_loop, while_rule);
  r.set(PrimId::cond, cond_rule);
  return r;
}

}  // namespace

Value wins(const Value& a, const Value& b, bool is_max, const Value& like) {
  Value w = is_max ? a > b : a < b;
  return w.astype(like.dtype()) + 0.5 * (a == b).astype(like.dtype());
}

const ir::RuleTable<JvpRule>& jvp_rules() {
  static const ir::RuleTable<JvpRule> t = make_rules();
  return t;
}

const std::map<PrimId, std::string>& jvp_partial() {
  static const std::map<PrimId, std::string> m{
      {PrimId::atomic_rmw, "atomic_max/min (and and/or/xor, integer only) on floating refs: the tangent depends on "
                           "which program wins; atomic_add and atomic_xchg are differentiated"},
      {PrimId::atomic_cas, "compare-and-swap has no tangent; integer refs (locks) pass through"},
      {PrimId::reduce_prod, "the tangent sum(t * prod / x) is undefined where an element is zero"},
  };
  return m;
}

JvpCall jvp_pallas_call(const core::PallasCall& c, std::vector<bool> in_tangent) {
  if (c.grid.num_dynamic_bounds() > 0)
    throw Error(c.what + ": jvp of a pallas_call with dynamic grid bounds is not supported; give the grid static sizes");
  if (!c.grid.prefetch.empty())
    throw Error(c.what + ": jvp of a pallas_call with scalar prefetch (num_scalar_prefetch = " +
                std::to_string(c.grid.prefetch.size()) + ") is not supported");
  if (!c.aliases.empty())
    throw Error(c.what + ": jvp of a pallas_call with input_output_aliases is not supported; drop the aliases "
                         "(write to a fresh output) to differentiate it");
  size_t nin = c.grid.inputs.size(), nout = c.grid.outputs.size(), nscr = c.grid.scratch.size();
  in_tangent.resize(nin, false);
  for (size_t k = 0; k < nin; ++k) in_tangent[k] = in_tangent[k] && is_float(c.grid.inputs[k].array.dtype);
  std::vector<bool> scr_tangent(nscr, false);
  const auto& kin = c.kernel->invars;
  for (;;) {
    try {
      trace::KernelContext ctx{c.what, c.grid.grid, true};
      ir::Jaxpr kj;
      {
        trace::Frame f(&ctx, false);
        JvpScope s;
        s.what = c.what;
        auto add = [&](size_t k) { return trace::make_value(f.add_invar(kin[k].aval)); };
        auto primal = [&](size_t k) {
          s.p[kin[k].id] = add(k);
          s.root[kin[k].id] = static_cast<int>(k);
        };
        for (size_t k = 0; k < nin; ++k) primal(k);
        for (size_t k = 0; k < nin; ++k)
          if (in_tangent[k]) s.t[kin[k].id] = add(k);
        for (size_t k = nin; k < nin + nout; ++k) primal(k);
        for (size_t k = nin; k < nin + nout; ++k) s.t[kin[k].id] = add(k);
        for (size_t k = nin + nout; k < nin + nout + nscr; ++k) primal(k);
        for (size_t k = 0; k < nscr; ++k)
          if (scr_tangent[k]) s.t[kin[nin + nout + k].id] = add(nin + nout + k);
        jvp_eqns(*c.kernel, s);
        kj = f.finish({}, nullptr);
      }
      JvpCall r{c, in_tangent};
      core::PallasCall& n = r.call;
      n.what = c.what.rfind("jvp of ", 0) == 0 ? c.what : "jvp of " + c.what;
      n.kernel = std::make_shared<const ir::Jaxpr>(std::move(kj));
      ir::verify(*n.kernel, n.what);
      for (size_t k = 0; k < nin; ++k)
        if (in_tangent[k]) {
          n.grid.inputs.push_back(c.grid.inputs[k]);
          n.grid.inputs.back().what = "tangent of " + c.grid.inputs[k].what;
        }
      for (size_t k = 0; k < nout; ++k) {
        n.grid.outputs.push_back(c.grid.outputs[k]);
        n.grid.outputs.back().what = "tangent of " + c.grid.outputs[k].what;
      }
      for (size_t k = 0; k < nscr; ++k)
        if (scr_tangent[k]) n.grid.scratch.push_back(c.grid.scratch[k]);
      if (n.cost_estimate) {
        n.cost_estimate->flops *= 2;
        n.cost_estimate->transcendentals *= 2;
        n.cost_estimate->bytes_accessed *= 2;
      }
      return r;
    } catch (const NeedTangent& nt) {
      size_t k = static_cast<size_t>(nt.root);
      if (k < nin && !in_tangent[k]) in_tangent[k] = true;
      else if (k >= nin + nout && k < nin + nout + nscr && !scr_tangent[k - nin - nout]) scr_tangent[k - nin - nout] = true;
      else throw Error(c.what + ": internal: jvp could not give ref " + std::to_string(k) + " a tangent");
    }
  }
}

}  // namespace pallas::transforms

// ---- public API ----
namespace pallas {
using namespace transforms;
namespace {
void check_tangent(const std::string& what, size_t k, const Array& p, const Array& t) {
  if (!t.defined()) return;
  if (!(t.shape_dtype() == p.shape_dtype()))
    throw Error(what + ": jvp: tangent " + std::to_string(k) + " is " + t.shape_dtype().str() + " but its primal is " +
                p.shape_dtype().str() + "; a tangent has its primal's shape and dtype");
}
}  // namespace

JvpResult jvp(const Call& call, const std::vector<Array>& primals, const std::vector<Array>& tangents) {
  if (!call.state()) throw Error("pl::jvp: empty Call");
  const std::string& what = call.state()->what;
  if (tangents.size() != primals.size())
    throw Error(what + ": jvp: " + std::to_string(primals.size()) + " primals but " + std::to_string(tangents.size()) +
                " tangents; give one tangent per input (pl::zero_tangent() for a zero one)");
  int nd = num_dynamic_args(call);
  if (nd > 0) throw Error(what + ": jvp of a pallas_call with dynamic grid bounds is not supported; give the grid static sizes");
  std::vector<ShapeDtype> shapes;
  for (size_t k = 0; k < primals.size(); ++k) {
    if (!primals[k].defined()) throw Error(what + ": jvp: primal " + std::to_string(k) + " is an empty Array");
    shapes.push_back(primals[k].shape_dtype());
    check_tangent(what, k, primals[k], tangents[k]);
  }
  const core::PallasCall& pc = pallas_call_of(call, shapes);
  std::vector<bool> want(primals.size());
  for (size_t k = 0; k < primals.size(); ++k) want[k] = tangents[k].defined();
  // The rewrite is cached per call and tangent pattern, so repeated jvps reuse the
  // backend's compiled kernel (caches are keyed by the kernel).
  std::shared_ptr<const JvpCall> jp = cached_rewrite<JvpCall>(call, want, std::function<JvpCall()>([&] { return jvp_pallas_call(pc, want); }));
  const JvpCall& j = *jp;
  std::vector<Array> args = primals;
  for (size_t k = 0; k < primals.size(); ++k)
    if (j.in_tangent[k])
      args.push_back(tangents[k].defined() ? tangents[k] : Array::zeros(primals[k].shape(), primals[k].dtype()));
  core::check_arguments(j.call, args);
  std::vector<Array> outs = core::execute(j.call, args);
  size_t n = pc.grid.outputs.size();
  JvpResult r;
  r.first.assign(outs.begin(), outs.begin() + static_cast<long>(n));
  r.second.assign(outs.begin() + static_cast<long>(n), outs.end());
  return r;
}

Call jvp_call(const Call& call, std::vector<bool> with_tangent) {
  if (!call.state()) throw Error("pl::jvp_call: empty Call");
  std::string what = "jvp of " + call.state()->what;
  if (num_dynamic_args(call) > 0)
    throw Error(call.state()->what + ": jvp of a pallas_call with dynamic grid bounds is not supported; give the grid static sizes");
  auto build = [call, with_tangent, what](const std::vector<ShapeDtype>& shapes) {
    std::vector<bool> wt = with_tangent;
    size_t nin = 0;
    if (wt.empty()) {  // every floating input: find n with n + floats(n) == shapes.size()
      size_t floats = 0;
      for (nin = 0; nin < shapes.size() && nin + floats < shapes.size(); ++nin) floats += is_float(shapes[nin].dtype);
      if (nin + floats != shapes.size())
        throw Error(what + ": the inputs do not split into primals and one tangent per floating primal");
      for (size_t k = 0; k < nin; ++k) wt.push_back(is_float(shapes[k].dtype));
    } else {
      nin = wt.size();
    }
    std::vector<ShapeDtype> primal(shapes.begin(), shapes.begin() + static_cast<long>(std::min(nin, shapes.size())));
    const core::PallasCall& pc = pallas_call_of(call, primal);
    JvpCall j = jvp_pallas_call(pc, wt);
    for (size_t k = 0; k < nin; ++k)
      if (j.in_tangent[k] != wt[k])
        throw Error(what + ": input " + std::to_string(k) + (wt[k] ? " is not floating and has no tangent"
                                                                    : " is written with a nonzero tangent by the kernel; give it a tangent"));
    return std::move(j.call);
  };
  return make_transformed(what, call.name(), {}, 2 * call.num_outputs(), build);
}

}  // namespace pallas
