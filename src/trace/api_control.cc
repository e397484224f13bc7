// Control flow: bodies are traced in nested frames into closed sub-jaxprs; captured outer
// values become explicit operands of the fori_loop / while / cond equation.
#include "pallas/kernel.h"
#include "src/trace/api_util.h"
#include "src/trace/trace.h"

namespace pallas {
using ir::Aval;
using ir::PrimId;
using detail::Operand;

namespace {

struct Traced {
  ir::JaxprPtr jaxpr;
  std::vector<ir::Atom> captured;  // outer atoms for the trailing invars
  std::vector<Aval> outs;
  std::vector<bool> out_weak;  // whether each result was a weak (C++ scalar) value
};

// Trace fn over fresh invars of the given avals; outputs are converted (dtype, and broadcast)
// to `target` where given.
Traced trace_sub(const std::vector<Aval>& in, const std::function<std::vector<Value>(const std::vector<Value>&)>& fn,
                 const std::vector<Aval>* target, const char* what) {
  trace::Frame& parent = trace::require_frame(what);
  Traced t;
  std::vector<Value> outs_v;
  ir::Jaxpr j;
  std::string mismatch;  // thrown once the body's frame is closed, so it names the loop's line
  {
    trace::Frame f(&parent.context(), true);
    std::vector<Value> args;
    for (auto& a : in) args.push_back(trace::make_value(f.add_invar(a)));  // weak only where the caller says
    std::vector<Value> outs = fn(args);
    if (target && outs.size() != target->size())
      mismatch = std::string(what) + ": the body returns " + std::to_string(outs.size()) + " values but " +
                 std::to_string(target->size()) + " are carried";
    if (target && mismatch.empty()) {
      for (size_t k = 0; k < outs.size(); ++k) {
        const Aval& tk = (*target)[k];
        Value o = outs[k];
        if (o.dtype() != tk.dtype && o.weak_type()) o = api::convert(o, tk.dtype, false);
        if (o.shape() != tk.shape && o.shape().size() <= tk.shape.size()) {
          try {
            o = api::broadcast(o, tk.shape);
          } catch (const Error&) {
          }
        }
        outs[k] = o;
      }
    }
    if (mismatch.empty()) {
      std::vector<ir::Atom> atoms;
      for (auto& o : outs) {
        atoms.push_back(trace::atom_of(o, what));
        Aval a = o.impl()->aval;
        t.out_weak.push_back(a.weak);
        a.weak = false;
        t.outs.push_back(a);
      }
      j = f.finish(atoms, &t.captured);
    }
  }
  if (!mismatch.empty()) throw Error(mismatch);
  t.jaxpr = std::make_shared<const ir::Jaxpr>(std::move(j));
  return t;
}

std::vector<Aval> avals_of(const std::vector<Value>& vs, const char* what) {
  std::vector<Aval> r;
  for (auto& v : vs) {
    Aval a = trace::aval_of(v, what);
    a.weak = false;
    r.push_back(a);
  }
  return r;
}

std::vector<Value> atoms_to_values(const std::vector<ir::Atom>& atoms) {
  std::vector<Value> r;
  for (auto& a : atoms) r.push_back(trace::make_value(a));
  return r;
}

void check_carry(const char* what, const std::vector<Aval>& want, const std::vector<Aval>& got) {
  for (size_t k = 0; k < want.size(); ++k)
    if (!want[k].same_type(got[k]))
      throw Error(std::string(what) + ": carry " + std::to_string(k) + " enters the body as " + want[k].str() +
                  " but the body returns " + got[k].str() + "; the carry's shape and dtype must not change");
}

}  // namespace

namespace detail {

std::vector<Value> fori_loop_impl(const Value& lo, const Value& hi, const std::vector<Value>& init,
                                  const LoopBody& body, int unroll, SourceLocation loc) {
  trace::Here here(loc);
  auto b = api::promote("fori_loop", {lo, hi}, false);
  DType it = b[0].weak_type() ? DType::I32 : b[0].dtype();
  Value l = api::convert(b[0], it, false), h = api::convert(b[1], it, false);
  std::vector<Value> carry = init;
  std::vector<Aval> cav = avals_of(carry, "fori_loop");
  std::vector<Aval> in{Aval::array({}, it)};
  in.insert(in.end(), cav.begin(), cav.end());
  auto fn = [&](const std::vector<Value>& a) {
    return body(a[0], std::vector<Value>(a.begin() + 1, a.end()));
  };
  // A weak init (a C++ scalar) takes the dtype the body gives it, as JAX does: the first
  // trace sees it as weak, so that `carry + x` takes x's dtype.
  std::vector<Aval> in_first = in;
  bool any_weak = false;
  for (size_t k = 0; k < carry.size(); ++k)
    if (carry[k].weak_type() && carry[k].shape().empty()) in_first[k + 1].weak = any_weak = true;
  Traced t = trace_sub(in_first, fn, &cav, "fori_loop");
  bool retrace = any_weak;  // the final body takes strong carries
  for (size_t k = 0; k < carry.size(); ++k)
    if (!cav[k].same_type(t.outs[k]) && carry[k].weak_type() && carry[k].shape().empty()) {
      carry[k] = api::broadcast(api::convert(carry[k], t.outs[k].dtype, false), t.outs[k].shape);
      cav[k] = t.outs[k];
      in[k + 1] = t.outs[k];
      retrace = true;
    }
  if (retrace) t = trace_sub(in, fn, &cav, "fori_loop");
  check_carry("fori_loop", cav, t.outs);
  std::vector<Value> ops{l, h};
  for (size_t k = 0; k < carry.size(); ++k) ops.push_back(api::convert(carry[k], cav[k].dtype, false));
  for (auto& v : atoms_to_values(t.captured)) ops.push_back(v);
  return trace::bind(PrimId::fori_loop, ops,
                     {{"body", t.jaxpr}, {"num_carry", static_cast<int64_t>(carry.size())}, {"unroll", int64_t{unroll}}});
}

std::vector<Value> while_loop_impl(const std::vector<Value>& init, const CondFn& cond, const Branch& body,
                                   SourceLocation loc) {
  trace::Here here(loc);
  std::vector<Aval> cav = avals_of(init, "while_loop");
  Traced tb = trace_sub(cav, body, &cav, "while_loop");
  check_carry("while_loop", cav, tb.outs);
  // The condition's result is checked once its frame is closed (the error then names the
  // while_loop's line); a non-bool scalar becomes `!= 0` inside it.
  Traced tc = trace_sub(
      cav,
      [&](const std::vector<Value>& a) {
        auto r = cond(a);
        if (r.size() == 1 && r[0].defined() && r[0].shape().empty() && r[0].dtype() != DType::Bool) r[0] = ne(r[0], 0);
        return r;
      },
      nullptr, "while_loop");
  if (tc.outs.size() != 1) throw Error("while_loop: the condition must return one bool scalar");
  if (!tc.outs[0].shape.empty())
    throw Error("while_loop: the condition must return a scalar, got " + tc.outs[0].str() +
                "; reduce it (pl::max, pl::min) to one value");
  std::vector<Value> ops;
  for (size_t k = 0; k < init.size(); ++k) ops.push_back(api::convert(init[k], cav[k].dtype, false));
  for (auto& v : atoms_to_values(tc.captured)) ops.push_back(v);
  for (auto& v : atoms_to_values(tb.captured)) ops.push_back(v);
  return trace::bind(PrimId::while_loop, ops,
                     {{"cond_jaxpr", tc.jaxpr},
                      {"body_jaxpr", tb.jaxpr},
                      {"num_carry", static_cast<int64_t>(init.size())},
                      {"cond_nconsts", static_cast<int64_t>(tc.captured.size())}});
}

std::vector<Value> switch_impl(const Value& index, const std::vector<Branch>& branches,
                               const std::vector<Value>& operands) {
  if (branches.empty()) throw Error("cond: needs at least one branch");
  std::vector<Aval> oav = avals_of(operands, "cond");
  std::vector<Traced> ts;
  for (auto& b : branches) ts.push_back(trace_sub(oav, b, nullptr, "cond"));
  // Join the branches' result types (a weak scalar in one branch takes the other's dtype).
  std::vector<Aval> target = ts[0].outs;
  std::vector<bool> target_weak = ts[0].out_weak;
  for (auto& t : ts) {
    if (t.outs.size() != target.size())
      throw Error("cond: branches return different numbers of values (" + std::to_string(target.size()) + " and " +
                  std::to_string(t.outs.size()) + ")");
    for (size_t k = 0; k < target.size(); ++k) {
      auto p = promote_types(target[k].dtype, target_weak[k], t.outs[k].dtype, t.out_weak[k]);
      target[k].dtype = p.dtype;
      target_weak[k] = p.weak;
      if (target[k].shape.size() < t.outs[k].shape.size()) target[k].shape = t.outs[k].shape;
    }
  }
  for (size_t b = 0; b < ts.size(); ++b) {
    bool same = true;
    for (size_t k = 0; k < target.size(); ++k) same = same && target[k].same_type(ts[b].outs[k]);
    if (!same) ts[b] = trace_sub(oav, branches[b], &target, "cond");
    for (size_t k = 0; k < target.size(); ++k)
      if (!target[k].same_type(ts[b].outs[k]))
        throw Error("cond: branch " + std::to_string(b) + " returns " + ts[b].outs[k].str() + " for result " +
                    std::to_string(k) + " where another branch returns " + target[k].str());
  }
  // Union of captured values; each branch gets invars for all of them.
  std::vector<ir::Atom> consts;
  std::vector<int64_t> const_ids;
  for (auto& t : ts)
    for (auto& c : t.captured) {
      int64_t id = std::get<ir::Var>(c).id;
      if (std::find(const_ids.begin(), const_ids.end(), id) == const_ids.end()) {
        const_ids.push_back(id);
        consts.push_back(c);
      }
    }
  std::vector<ir::JaxprPtr> js;
  for (auto& t : ts) {
    ir::Jaxpr j = *t.jaxpr;
    size_t nops = operands.size();
    std::vector<ir::Var> inv(j.invars.begin(), j.invars.begin() + nops);
    for (size_t c = 0; c < consts.size(); ++c) {
      bool found = false;
      for (size_t k = 0; k < t.captured.size(); ++k)
        if (std::get<ir::Var>(t.captured[k]).id == const_ids[c]) {
          inv.push_back(j.invars[nops + k]);
          found = true;
        }
      if (!found) inv.push_back(ir::new_var(std::get<ir::Var>(consts[c]).aval));
    }
    j.invars = inv;
    js.push_back(std::make_shared<const ir::Jaxpr>(std::move(j)));
  }
  Value idx = api::convert(index, DType::I32, false);
  std::vector<Value> ops{idx};
  for (size_t k = 0; k < operands.size(); ++k) ops.push_back(api::convert(operands[k], oav[k].dtype, false));
  for (auto& v : atoms_to_values(consts)) ops.push_back(v);
  return trace::bind(PrimId::cond, ops, {{"branches", js}});
}

std::vector<Value> cond_impl(const Operand& pred, const std::vector<Branch>& branches, const std::vector<Value>& operands) {
  trace::Here here(pred.loc);
  const Value& p = pred.v;
  if (!p.shape().empty())
    throw Error("pl::cond / pl::when: the predicate must be a scalar, got " + p.str() +
                "; reduce it (pl::max, pl::min) or use pl::where for elementwise choices");
  Value b = p.dtype() == DType::Bool ? p : ne(p, 0);
  return switch_impl(b.astype(DType::I32), branches, operands);
}

}  // namespace detail

std::vector<Value> switch_case(const Value& index, const std::vector<detail::Branch>& branches,
                               const std::vector<Value>& operands, SourceLocation loc) {
  trace::Here here(loc);
  Value i = clamp(Value(0), index.astype(DType::I32), Value(static_cast<int64_t>(branches.size()) - 1));
  return detail::switch_impl(i, branches, operands);
}

}  // namespace pallas
