// Automatic reverse mode of a pallas_call (pl::vjp of a plain Call): the kernel is transposed
// into a second pallas_call over the same grid. Its body replays the forward body (the primal
// values the cotangents need are recomputed, never saved), then walks the equations backwards
// with one vjp rule per primitive: a store of an output becomes a read of that output's
// cotangent at the same indices, a load of an input becomes an accumulation (`+=`) into the
// input's cotangent at the same indices, and every op in between sends its output's cotangent
// to its operands (a dot to two dots with transposed operands, a broadcast to a sum, a reduction
// to a broadcast, ...). The input cotangents are outputs aliased to zero arrays, so programs
// that read one input block (a weight row every program loads) all add into it: on the GPU the
// backend makes those adds atomic where programs on parallel axes share the block.
//
// It takes loads of inputs (masked: a masked atomic add, `+=` having no mask) and stores of
// outputs (masked or not, any indexers; an output's stores must not overlap), the elementwise,
// shape, reduction and dot primitives, and fori_loops: those whose carries accumulate (c' =
// c + g, g not reading the carries: K loops of dots, sums over blocks) become a second loop
// over the same range; those that carry state (an online softmax) a loop over the steps in
// reverse that reads each step's incoming carries from a tape the replayed forward wrote, or
// recomputes them (VjpOptions); and conds, as a cond on the same index. Cotangents of inputs
// whose blocks tile them, read once, are stored directly; others add into zeros (16-bit ones in
// f32, shared blocks in several copies). A loop or branch that writes a ref, a while loop, an
// output read back, accumulated or stored in part where its blocks pass its edge, an atomic,
// scratch, scalar prefetch or a primitive without a rule is refused with an error that names
// it and points to custom_vjp. pallas_fuzz --vjp checks it against jvp.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <tuple>
#include <unordered_set>

#include "src/ir/dependence.h"
#include "src/ir/scalar_eval.h"
#include "src/trace/api_util.h"
#include "src/trace/trace.h"
#include "src/transforms/transforms.h"

namespace pallas::transforms {
using ir::PrimId;

namespace {

[[noreturn]] void refuse(const std::string& what, const std::string& why) {
  throw Error(what + ": pl::vjp cannot transpose this kernel yet: " + why +
              ". Write its backward as a second pallas_call and pair them with pl::custom_vjp (docs/transforms.md, "
              "\"custom_vjp\")");
}

// Where 16-bit floats' cotangents are summed: f32.
DType acc_dtype(DType t) { return t == DType::F16 || t == DType::BF16 || is_float8(t) ? DType::F32 : t; }

// A sum of cotangents, in f32 for 16-bit floats (a broadcast over hundreds of elements summed
// in f16 loses a tenth of its value; found by the fuzzer's transpose check).
Value acc_sum(const Value& v, Axes axes, bool keepdims) {
  DType t = v.dtype();
  if (acc_dtype(t) == t) return sum(v, std::move(axes), keepdims);
  return sum(v.astype(acc_dtype(t)), std::move(axes), keepdims).astype(t);
}

// The cotangent of a value of shape `shape` from one of `ct`'s shape that broadcast it: summed
// over the broadcast dimensions (a scalar operand of a binary op, size-1 dimensions).
Value unbroadcast(const Value& ct, const Shape& shape) {
  if (ct.shape() == shape) return ct;
  if (shape.empty()) return acc_sum(ct, Axes(), false);
  std::vector<int> axes;
  size_t lead = ct.shape().size() - shape.size();
  for (size_t d = 0; d < ct.shape().size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && ct.shape()[d] != 1)) axes.push_back(static_cast<int>(d));
  Value r = axes.empty() ? ct : acc_sum(ct, Axes(axes), true);
  return r.shape() == shape ? r : r.reshape(shape);
}

Value fit(const Value& ct, const Value& x) { return unbroadcast(ct, x.shape()).astype(x.dtype()); }

struct VjpEqn {
  const ir::Eqn& e;
  std::vector<Value> x;  // primal inputs (replayed)
  std::vector<Value> y;  // primal outputs
  Value ct;              // the cotangent of output 0
};
// One cotangent per input (undefined: none).
using VjpRule = std::function<std::vector<Value>(const VjpEqn&)>;


const std::map<PrimId, VjpRule>& vjp_rules() {
  static const std::map<PrimId, VjpRule> r = [] {
    std::map<PrimId, VjpRule> m;
    auto unary = [&](PrimId id, std::function<Value(const Value& x, const Value& y, const Value& ct)> f) {
      m[id] = [f](const VjpEqn& q) { return std::vector<Value>{f(q.x[0], q.y[0], q.ct)}; };
    };
    unary(PrimId::neg, [](auto&, auto&, auto& ct) { return -ct; });
    unary(PrimId::exp, [](auto&, auto& y, auto& ct) { return ct * y; });
    unary(PrimId::exp2, [](auto&, auto& y, auto& ct) { return ct * y * std::numbers::ln2; });
    unary(PrimId::expm1, [](auto&, auto& y, auto& ct) { return ct * (y + 1.0); });
    unary(PrimId::log, [](auto& x, auto&, auto& ct) { return ct / x; });
    unary(PrimId::log1p, [](auto& x, auto&, auto& ct) { return ct / (x + 1.0); });
    unary(PrimId::sqrt, [](auto&, auto& y, auto& ct) { return ct * 0.5 / y; });
    unary(PrimId::rsqrt, [](auto& x, auto& y, auto& ct) { return ct * -0.5 * y / x; });
    unary(PrimId::tanh, [](auto&, auto& y, auto& ct) { return ct * (1.0 - y * y); });
    unary(PrimId::logistic, [](auto&, auto& y, auto& ct) { return ct * y * (1.0 - y); });
    unary(PrimId::sin, [](auto& x, auto&, auto& ct) { return ct * cos(x); });
    unary(PrimId::cos, [](auto& x, auto&, auto& ct) { return -ct * sin(x); });
    unary(PrimId::abs, [](auto& x, auto&, auto& ct) { return ct * sign(x); });
    unary(PrimId::reshape, [](auto& x, auto&, auto& ct) { return ct.reshape(x.shape()); });
    unary(PrimId::squeeze, [](auto& x, auto&, auto& ct) { return ct.reshape(x.shape()); });
    m[PrimId::add] = [](const VjpEqn& q) { return std::vector<Value>{fit(q.ct, q.x[0]), fit(q.ct, q.x[1])}; };
    m[PrimId::sub] = [](const VjpEqn& q) { return std::vector<Value>{fit(q.ct, q.x[0]), fit(-q.ct, q.x[1])}; };
    m[PrimId::mul] = [](const VjpEqn& q) { return std::vector<Value>{fit(q.ct * q.x[1], q.x[0]), fit(q.ct * q.x[0], q.x[1])}; };
    m[PrimId::div] = [](const VjpEqn& q) {
      return std::vector<Value>{fit(q.ct / q.x[1], q.x[0]), fit(-q.ct * q.x[0] / (q.x[1] * q.x[1]), q.x[1])};
    };
    for (bool is_max : {true, false})
      m[is_max ? PrimId::max : PrimId::min] = [is_max](const VjpEqn& q) {
        return std::vector<Value>{fit(q.ct * wins(q.x[0], q.x[1], is_max, q.x[0]), q.x[0]), fit(q.ct * wins(q.x[1], q.x[0], is_max, q.x[1]), q.x[1])};
      };
    m[PrimId::convert_element_type] = [](const VjpEqn& q) {
      return std::vector<Value>{is_float(q.x[0].dtype()) ? q.ct.astype(q.x[0].dtype()) : Value()};
    };
    m[PrimId::stop_gradient] = [](const VjpEqn&) { return std::vector<Value>{Value()}; };
    m[PrimId::select_n] = [](const VjpEqn& q) {  // select_n(which, case 0, case 1, ...); `which` clamped to the cases
      std::vector<Value> r{Value()};
      const int32_t last = static_cast<int32_t>(q.x.size()) - 2;
      for (size_t c = 1; c < q.x.size(); ++c) {
        const int32_t k = static_cast<int32_t>(c - 1);
        Value pick = q.x[0].dtype() == DType::Bool ? (c == 1 ? !q.x[0] : c == 2 ? q.x[0] : q.x[0] & !q.x[0])
                     : k == 0 && k == last ? q.x[0] == q.x[0]
                     : k == 0             ? q.x[0] <= 0
                     : k == last          ? q.x[0] >= last
                                          : q.x[0] == k;
        r.push_back(fit(where(pick, q.ct, zeros_like(q.ct)), q.x[c]));
      }
      return r;
    };
    m[PrimId::broadcast_in_dim] = [](const VjpEqn& q) {
      const Shape& in = q.x[0].shape();
      auto bd = q.e.params.get<std::vector<int64_t>>("broadcast_dimensions");
      std::vector<int> axes;  // output dims the input does not have, or has with size 1
      for (size_t d = 0; d < q.ct.shape().size(); ++d) {
        auto it = std::find(bd.begin(), bd.end(), static_cast<int64_t>(d));
        if (it == bd.end() || (in[static_cast<size_t>(it - bd.begin())] == 1 && q.ct.shape()[d] != 1)) axes.push_back(static_cast<int>(d));
      }
      Value s = axes.empty() ? q.ct : acc_sum(q.ct, Axes(axes), true);
      return std::vector<Value>{s.reshape(in).astype(q.x[0].dtype())};
    };
    m[PrimId::reduce_sum] = [](const VjpEqn& q) {
      Shape kept = q.x[0].shape();
      for (int64_t a : q.e.params.get<std::vector<int64_t>>("axes")) kept[static_cast<size_t>(a)] = 1;
      return std::vector<Value>{api::broadcast(q.ct.reshape(kept), q.x[0].shape())};
    };
    for (PrimId id : {PrimId::reduce_max, PrimId::reduce_min})
      m[id] = [](const VjpEqn& q) {  // to the extremes, split evenly between ties
        std::vector<int> axes;
        Shape kept = q.x[0].shape();
        for (int64_t a : q.e.params.get<std::vector<int64_t>>("axes")) kept[static_cast<size_t>(a)] = 1, axes.push_back(static_cast<int>(a));
        Value hit = (q.x[0] == api::broadcast(q.y[0].reshape(kept), q.x[0].shape())).astype(q.x[0].dtype());
        Value count = api::broadcast(acc_sum(hit, Axes(axes), true), q.x[0].shape());
        return std::vector<Value>{hit / count * api::broadcast(q.ct.reshape(kept), q.x[0].shape())};
      };
    m[PrimId::transpose] = [](const VjpEqn& q) {
      auto perm = q.e.params.get<std::vector<int64_t>>("permutation");
      std::vector<int> inv(perm.size());
      for (size_t k = 0; k < perm.size(); ++k) inv[static_cast<size_t>(perm[k])] = static_cast<int>(k);
      return std::vector<Value>{transpose(q.ct, inv)};
    };
    m[PrimId::dot] = [](const VjpEqn& q) {
      const Value &a = q.x[0], &b = q.x[1];
      bool ta = q.e.params.get_bool("trans_a"), tb = q.e.params.get_bool("trans_b");
      std::vector<Value> r(2);
      if (is_float(a.dtype())) {  // d op(A) = ct op(B)^T
        Value c = q.ct.astype(b.dtype());
        r[0] = (ta ? dot(b, c, {.trans_a = tb, .trans_b = true}) : dot(c, b, {.trans_b = !tb})).astype(a.dtype());
      }
      if (is_float(b.dtype())) {  // d op(B) = op(A)^T ct
        Value c = q.ct.astype(a.dtype());
        r[1] = (tb ? dot(c, a, {.trans_a = true, .trans_b = ta}) : dot(a, c, {.trans_a = !ta})).astype(b.dtype());
      }
      return r;
    };
    return m;
  }();
  return r;
}

// The transposition of one jaxpr (the kernel, or a loop body inside it).
struct Tx {
  std::string what;
  std::unordered_map<int64_t, Value> p;   // old var -> its replayed primal (refs: the new refs)
  std::unordered_map<int64_t, Value> ct;  // old var -> its cotangent
  std::unordered_map<int64_t, int> root;  // old ref var -> the kernel ref it is (inputs, then outputs)
  std::vector<Value> dx;                  // per kernel input: its cotangent ref in this frame (undefined: none)
  std::vector<ir::Aval> dx_aval;          // their refs' avals
  size_t nin = 0;
  // Top-level loops whose carries are saved (VjpCarries::Saved): per loop, one tape ref per
  // carry ([steps, carry shape...] of this program), written by the replayed forward.
  struct Tape {
    std::vector<Value> refs;
    int64_t lo = 0;
  };
  std::unordered_map<const ir::Eqn*, Tape> tapes;
  // Per kernel input: its cotangent is stored by its one load's transpose (direct), not added.
  std::vector<bool> direct, stored;

  Value get(const ir::Atom& a) const {
    if (auto* v = std::get_if<ir::Var>(&a)) {
      auto it = p.find(v->id);
      if (it == p.end()) throw Error(what + ": internal: vjp met an undefined variable");
      return it->second;
    }
    return trace::make_value(a);
  }
  int root_of(const ir::Eqn& e) const {
    auto* v = std::get_if<ir::Var>(&e.in[0]);
    auto it = v ? root.find(v->id) : root.end();
    if (it == root.end()) throw Error(what + ": internal: vjp met a ref that is not one of the kernel's");
    return it->second;
  }
  // A frame nested in s's (a loop body, a branch): the same kernel refs and cotangent refs'
  // avals, none of its cotangent refs bound yet.
  static Tx nested(const Tx& s) {
    Tx b;
    b.what = s.what, b.nin = s.nin, b.root = s.root, b.dx_aval = s.dx_aval;
    b.dx.assign(s.dx.size(), Value());
    return b;
  }
  // v (an invar of a body being rebuilt in f) as a new invar of f; a ref passed in as `outer`
  // stays the kernel ref it is.
  Value bind(trace::Frame& f, const ir::Var& v, const ir::Atom& outer, const Tx& s) {
    ir::Aval av = v.aval;
    av.weak = false;
    Value x = p[v.id] = trace::make_value(f.add_invar(av));
    if (auto* o = std::get_if<ir::Var>(&outer); o && v.aval.is_ref)
      if (auto r = s.root.find(o->id); r != s.root.end()) root[v.id] = r->second;
    return x;
  }
  // The kernel inputs whose cotangent refs this frame holds.
  std::vector<size_t> dx_bound() const {
    std::vector<size_t> r;
    for (size_t k = 0; k < dx.size(); ++k)
      if (dx[k].defined()) r.push_back(k);
    return r;
  }
  void add_ct(const ir::Atom& a, const Value& c) {
    auto* v = std::get_if<ir::Var>(&a);
    if (!v || !c.defined() || !is_float(v->aval.dtype) || v->aval.is_ref) return;
    Value fitted = fit(c, p.at(v->id));
    Value& slot = ct[v->id];
    slot = slot.defined() ? slot + fitted : fitted;
  }
};

// A new (not weak) invar of the frame being built.
Value new_invar(trace::Frame& f, ir::Aval av) {
  av.weak = false;
  return trace::make_value(f.add_invar(av));
}

// Of e's operands [first, first + n), those that take a cotangent: floating values, not refs.
std::vector<size_t> floating_values(const ir::Eqn& e, size_t first, size_t n) {
  std::vector<size_t> r;
  for (size_t k = 0; k < n; ++k) {
    const ir::Aval av = ir::atom_aval(e.in[first + k]);
    if (!av.is_ref && is_float(av.dtype)) r.push_back(k);
  }
  return r;
}

struct Store {
  const ir::Eqn* e;
  int output;
};

std::vector<Value> saving_loop(const ir::Eqn& e, Tx& s, const Tx::Tape& tape);

// Replays j's equations (all but `skip` and the stores, which are recorded; stores only at the
// kernel's top level) and returns them in order.
std::vector<const ir::Eqn*> replay(const ir::Jaxpr& j, Tx& s, std::vector<Store>* stores,
                                  const std::unordered_set<const ir::Eqn*>& skip = {}) {
  std::vector<const ir::Eqn*> order;
  for (const ir::Eqn& e : j.eqns) {
    if (skip.count(&e)) continue;
    PrimId id = e.prim->id;
    if (id == PrimId::while_loop)
      refuse(s.what, "its kernel has a while_loop (its trip count depends on the data; fori_loop and cond are transposed)");
    if (id == PrimId::fori_loop || id == PrimId::cond) {
      const char* where = id == PrimId::cond ? "a branch" : "a fori_loop";
      std::vector<ir::JaxprPtr> subs = id == PrimId::cond ? e.params.get<std::vector<ir::JaxprPtr>>("branches")
                                                         : std::vector<ir::JaxprPtr>{e.params.get<ir::JaxprPtr>("body")};
      for (const ir::JaxprPtr& j : subs)
        if (ir::writes_any_ref(*j)) refuse(s.what, std::string("its kernel writes a ref inside ") + where);
      for (const ir::Atom& a : e.in)
        if (auto* v = std::get_if<ir::Var>(&a); v && v->aval.is_ref) {
          auto r = s.root.find(v->id);
          if (r != s.root.end() && r->second >= static_cast<int>(s.nin))
            refuse(s.what, "its kernel reads output " + std::to_string(r->second - static_cast<int>(s.nin)) + " inside " + where);
        }
    }
    if (id == PrimId::store) {
      int r = s.root_of(e);
      if (r < static_cast<int>(s.nin)) refuse(s.what, "its kernel writes input " + std::to_string(r));
      if (!stores) refuse(s.what, "its kernel stores output " + std::to_string(r - static_cast<int>(s.nin)) + " inside a loop");
      stores->push_back({&e, r - static_cast<int>(s.nin)});
      continue;
    }
    if (id == PrimId::swap || id == PrimId::addupdate || id == PrimId::atomic_rmw || id == PrimId::atomic_cas)
      refuse(s.what, "its kernel uses " + e.prim->name + " (an accumulation or read-modify-write of a ref)");
    if (id == PrimId::load && s.root_of(e) >= static_cast<int>(s.nin))
      refuse(s.what, "its kernel reads output " + std::to_string(s.root_of(e) - static_cast<int>(s.nin)) + " back");
    if (auto t = s.tapes.find(&e); t != s.tapes.end()) {
      std::vector<Value> y = saving_loop(e, s, t->second);
      for (size_t k = 0; k < e.out.size(); ++k) s.p[e.out[k].id] = y.at(k);
      order.push_back(&e);
      continue;
    }
    std::vector<Value> x;
    for (const ir::Atom& a : e.in) x.push_back(s.get(a));
    std::vector<Value> y = trace::bind(id, x, e.params);
    for (size_t k = 0; k < e.out.size(); ++k) s.p[e.out[k].id] = y.at(k);
    order.push_back(&e);
  }
  return order;
}

// The indexers of step k of a tape: [k, all of the carry's dimensions].
Indexers tape_step(const Value& k, size_t carry_rank) {
  Indexers idx{Indexer(k)};
  for (size_t d = 0; d < carry_rank; ++d) idx.push_back(all);
  return idx;
}

// The forward loop as replayed when its carries are saved: the same body, which first writes
// the carries entering step i to step i - lo of the tapes.
std::vector<Value> saving_loop(const ir::Eqn& e, Tx& s, const Tx::Tape& tape) {
  const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
  const size_t nc = static_cast<size_t>(e.params.get_int("num_carry")), nconst = e.in.size() - 2 - nc;
  ir::JaxprPtr sj;
  {
    trace::Frame f(&trace::require_frame("vjp").context(), true);
    Tx b = Tx::nested(s);
    Value i = new_invar(f, body.invars[0].aval);
    b.p[body.invars[0].id] = i;
    for (size_t c = 0; c < nc; ++c) b.p[body.invars[1 + c].id] = new_invar(f, body.invars[1 + c].aval);
    for (size_t k = 0; k < nconst; ++k) b.bind(f, body.invars[1 + nc + k], e.in[2 + nc + k], s);
    for (size_t c = 0; c < nc; ++c) {
      Value t = new_invar(f, ir::atom_aval(trace::atom_of(tape.refs[c], "vjp")));
      store(Ref(t), tape_step(i - static_cast<int>(tape.lo), body.invars[1 + c].aval.shape.size()), b.p[body.invars[1 + c].id]);
    }
    replay(body, b, nullptr);
    std::vector<ir::Atom> outs;
    for (size_t c = 0; c < nc; ++c) outs.push_back(trace::atom_of(b.get(body.outvars[c]), "vjp"));
    sj = std::make_shared<const ir::Jaxpr>(f.finish(outs, nullptr));
  }
  std::vector<Value> ops;
  for (const ir::Atom& a : e.in) ops.push_back(s.get(a));
  for (const Value& t : tape.refs) ops.push_back(t);
  ir::Params prm = e.params;
  prm.set("body", sj);
  return trace::bind(PrimId::fori_loop, ops, prm);
}

void reverse(const std::vector<const ir::Eqn*>& order, Tx& s);

// Whether two stores' boxes may overlap: per dimension, [lo, hi) from static slices and
// integers; anything dynamic, or an index array, may touch anything.
bool may_overlap(const ir::Eqn& a, const ir::Eqn& b) {
  const auto &da = a.params.get<ir::NDIndexer>("idx").dims, &db = b.params.get<ir::NDIndexer>("idx").dims;
  auto box = [](const ir::IndexDim& d, int64_t* lo, int64_t* hi) {
    using K = ir::IndexDim::Kind;
    if (d.kind == K::Index) return *lo = d.start, *hi = d.start + 1, true;
    if (d.kind == K::Slice && d.stride > 0) return *lo = d.start, *hi = d.start + (d.size - 1) * d.stride + 1, true;
    return false;
  };
  for (size_t k = 0; k < std::min(da.size(), db.size()); ++k) {
    int64_t alo, ahi, blo, bhi;
    if (box(da[k], &alo, &ahi) && box(db[k], &blo, &bhi) && (ahi <= blo || bhi <= alo)) return false;  // apart along k
  }
  return true;
}

// Whether every carry of a fori_loop body accumulates, c' = c + g with g independent of the
// carries (a matmul's K loop, a sum over blocks); if so, the adds and each carry's term g.
bool accumulating_carries(const ir::Jaxpr& body, size_t nc, std::unordered_set<const ir::Eqn*>& adds, std::vector<ir::Atom>& term) {
  std::unordered_map<int64_t, const ir::Eqn*> def;
  std::unordered_map<int64_t, int> uses;
  for (const ir::Eqn& q : body.eqns) {
    for (const ir::Var& o : q.out) def[o.id] = &q;
    for (const ir::Atom& a : q.in)
      if (auto* v = std::get_if<ir::Var>(&a)) ++uses[v->id];
  }
  for (const ir::Atom& a : body.outvars)
    if (auto* v = std::get_if<ir::Var>(&a)) ++uses[v->id];
  term.assign(nc, ir::Atom());
  std::unordered_set<int64_t> tainted;
  for (size_t c = 0; c < nc; ++c) tainted.insert(body.invars[1 + c].id);
  for (size_t c = 0; c < nc; ++c) {
    const ir::Var& cv = body.invars[1 + c];
    auto* out = std::get_if<ir::Var>(&body.outvars[c]);
    auto d = out ? def.find(out->id) : def.end();
    if (!is_float(cv.aval.dtype) || d == def.end() || d->second->prim->id != PrimId::add || uses[cv.id] != 1) return false;
    const ir::Eqn& a = *d->second;
    auto is_c = [&](const ir::Atom& x) { auto* v = std::get_if<ir::Var>(&x); return v && v->id == cv.id; };
    if (is_c(a.in[0]) == is_c(a.in[1])) return false;
    term[c] = is_c(a.in[0]) ? a.in[1] : a.in[0];
    adds.insert(&a);
  }
  for (const ir::Eqn& q : body.eqns) {  // the terms must not read a carry
    if (adds.count(&q)) continue;
    bool t = false;
    for (const ir::Atom& a : q.in)
      if (auto* v = std::get_if<ir::Var>(&a); v && tainted.count(v->id)) t = true;
    if (t)
      for (const ir::Var& o : q.out) tainted.insert(o.id);
  }
  for (size_t c = 0; c < nc; ++c)
    if (auto* v = std::get_if<ir::Var>(&term[c]); v && tainted.count(v->id)) return false;
  return true;
}

void transpose_fori_state(const ir::Eqn& e, Tx& s);

// A fori_loop whose every carry accumulates, c' = c + g with g independent of the carries:
// the carries' cotangents are the same at every iteration, so the transpose is another loop
// over the same range that replays the body and sends them back through g; what it gives
// loop-invariant operands is summed in its carries, what it gives loaded blocks is added into
// their inputs' cotangents. Any other loop carries state: transpose_fori_state.
void transpose_fori(const ir::Eqn& e, Tx& s) {
  const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
  const size_t nc = static_cast<size_t>(e.params.get_int("num_carry")), nconst = e.in.size() - 2 - nc;
  std::unordered_set<const ir::Eqn*> adds;
  std::vector<ir::Atom> term;  // g of each carry
  if (!accumulating_carries(body, nc, adds, term)) return transpose_fori_state(e, s);

  std::vector<Value> ct_out(nc);
  bool any = false;
  for (size_t c = 0; c < nc; ++c) {
    auto it = s.ct.find(e.out[c].id);
    if (it != s.ct.end()) ct_out[c] = it->second, any = true;
    s.add_ct(e.in[2 + c], ct_out[c]);  // out = init + sum of the terms
  }
  if (!any) return;
  // the reverse loop: [i, ct carries (per floating value operand)..., consts..., ct_out..., dx refs...]
  const std::vector<size_t> vconst = floating_values(e, 2 + nc, nconst);  // consts that take a cotangent
  const std::vector<size_t> dx_in = s.dx_bound();
  ir::JaxprPtr rj;
  {
    trace::Frame f(&trace::require_frame("vjp").context(), true);
    Tx b = Tx::nested(s);
    b.p[body.invars[0].id] = new_invar(f, body.invars[0].aval);
    std::vector<Value> ctc;
    for (size_t k : vconst) ctc.push_back(new_invar(f, body.invars[1 + nc + k].aval));
    for (size_t k = 0; k < nconst; ++k) b.bind(f, body.invars[1 + nc + k], e.in[2 + nc + k], s);
    std::vector<Value> cto(nc);
    for (size_t c = 0; c < nc; ++c)
      if (ct_out[c].defined()) cto[c] = new_invar(f, ir::Aval::array(ct_out[c].shape(), ct_out[c].dtype()));
    for (size_t r : dx_in) b.dx[r] = new_invar(f, s.dx_aval[r]);
    std::vector<const ir::Eqn*> order = replay(body, b, nullptr, adds);
    for (size_t c = 0; c < nc; ++c)
      if (cto[c].defined()) b.add_ct(term[c], cto[c]);
    reverse(order, b);
    std::vector<ir::Atom> outs;
    for (size_t j = 0; j < vconst.size(); ++j) {
      auto it = b.ct.find(body.invars[1 + nc + vconst[j]].id);
      Value r = it == b.ct.end() ? ctc[j] : ctc[j] + it->second;
      outs.push_back(trace::atom_of(r, "vjp"));
    }
    rj = std::make_shared<const ir::Jaxpr>(f.finish(outs, nullptr));
  }
  std::vector<Value> ops{s.get(e.in[0]), s.get(e.in[1])};
  for (size_t k : vconst) ops.push_back(zeros_like(s.get(e.in[2 + nc + k])));
  for (size_t k = 0; k < nconst; ++k) ops.push_back(s.get(e.in[2 + nc + k]));
  for (size_t c = 0; c < nc; ++c)
    if (ct_out[c].defined()) ops.push_back(ct_out[c]);
  for (size_t r : dx_in) ops.push_back(s.dx[r]);
  ir::Params prm = e.params;
  prm.set("body", rj);
  prm.set("num_carry", static_cast<int64_t>(vconst.size()));
  std::vector<Value> res = trace::bind(PrimId::fori_loop, ops, prm);
  for (size_t j = 0; j < vconst.size(); ++j) s.add_ct(e.in[2 + nc + vconst[j]], res[j]);
}

// A fori_loop that carries state from one iteration to the next (c' = f(i, c, consts): an
// online softmax, a recurrence). Its transpose is a loop running i from hi - 1 down to lo with
// the carries' cotangents as its carries: at each step it gets the carries c_i the forward had
// entering step i — from the loop's tape when the replayed forward saved them (saving_loop),
// else by running the forward loop again from lo to i (T steps then cost T (T + 1) / 2 body
// evaluations) — replays the body from c_i and sends the cotangents of its results back to
// c_i, to the loop-invariant operands (summed in further carries) and, through its loads,
// into the inputs' cotangents.
void transpose_fori_state(const ir::Eqn& e, Tx& s) {
  const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
  const size_t nc = static_cast<size_t>(e.params.get_int("num_carry")), nconst = e.in.size() - 2 - nc;
  std::vector<size_t> fc;  // the carries that take a cotangent (floating)
  for (size_t c = 0; c < nc; ++c)
    if (is_float(body.invars[1 + c].aval.dtype)) fc.push_back(c);
  std::vector<Value> ct_out;
  bool any = false;
  for (size_t c : fc) {
    auto it = s.ct.find(e.out[c].id);
    any = any || it != s.ct.end();
    ct_out.push_back(it != s.ct.end() ? it->second : zeros_like(s.get(e.out[c])));
  }
  if (!any) return;
  const std::vector<size_t> vconst = floating_values(e, 2 + nc, nconst);  // consts that take a cotangent
  const std::vector<size_t> dx_in = s.dx_bound();
  auto tape_it = s.tapes.find(&e);
  const Tx::Tape* tape = tape_it == s.tapes.end() ? nullptr : &tape_it->second;
  // the reverse loop: [j, ct carries..., ct consts..., lo, hi, init carries..., consts..., dx refs..., tapes...]
  ir::JaxprPtr rj;
  {
    trace::Frame f(&trace::require_frame("vjp").context(), true);
    Tx b = Tx::nested(s);
    Value j = new_invar(f, body.invars[0].aval);
    std::vector<Value> ctc, ctk;
    for (size_t c : fc) ctc.push_back(new_invar(f, body.invars[1 + c].aval));
    for (size_t k : vconst) ctk.push_back(new_invar(f, body.invars[1 + nc + k].aval));
    Value lo = new_invar(f, body.invars[0].aval), hi = new_invar(f, body.invars[0].aval);
    std::vector<Value> fwd_ops{lo, Value()};  // the recomputing loop: [lo, i, init..., consts...]
    for (size_t c = 0; c < nc; ++c) fwd_ops.push_back(new_invar(f, body.invars[1 + c].aval));
    for (size_t k = 0; k < nconst; ++k) fwd_ops.push_back(b.bind(f, body.invars[1 + nc + k], e.in[2 + nc + k], s));
    for (size_t r : dx_in) b.dx[r] = new_invar(f, s.dx_aval[r]);
    Value i = (lo + hi - 1 - j).astype(body.invars[0].aval.dtype);
    std::vector<Value> ci;
    if (tape) {  // saved by the replayed forward
      for (size_t c = 0; c < nc; ++c) {
        Value t = new_invar(f, ir::atom_aval(trace::atom_of(tape->refs[c], "vjp")));
        ci.push_back(load(Ref(t), tape_step(i - static_cast<int>(tape->lo), body.invars[1 + c].aval.shape.size())));
      }
    } else {  // recomputed: the forward loop again, from lo to i
      fwd_ops[1] = i;
      ci = trace::bind(PrimId::fori_loop, fwd_ops, e.params);
    }
    b.p[body.invars[0].id] = i;
    for (size_t c = 0; c < nc; ++c) b.p[body.invars[1 + c].id] = ci.at(c);
    std::vector<const ir::Eqn*> order = replay(body, b, nullptr);
    for (size_t n = 0; n < fc.size(); ++n) b.add_ct(body.outvars[fc[n]], ctc[n]);
    reverse(order, b);
    std::vector<ir::Atom> outs;
    for (size_t n = 0; n < fc.size(); ++n) {
      auto it = b.ct.find(body.invars[1 + fc[n]].id);
      outs.push_back(trace::atom_of(it == b.ct.end() ? zeros_like(ci[fc[n]]) : it->second, "vjp"));
    }
    for (size_t n = 0; n < vconst.size(); ++n) {
      auto it = b.ct.find(body.invars[1 + nc + vconst[n]].id);
      outs.push_back(trace::atom_of(it == b.ct.end() ? ctk[n] : ctk[n] + it->second, "vjp"));
    }
    rj = std::make_shared<const ir::Jaxpr>(f.finish(outs, nullptr));
  }
  Value lo = s.get(e.in[0]), hi = s.get(e.in[1]);
  std::vector<Value> ops{lo, hi};
  for (const Value& c : ct_out) ops.push_back(c);
  for (size_t k : vconst) ops.push_back(zeros_like(s.get(e.in[2 + nc + k])));
  ops.push_back(lo), ops.push_back(hi);
  for (size_t c = 0; c < nc; ++c) ops.push_back(s.get(e.in[2 + c]));
  for (size_t k = 0; k < nconst; ++k) ops.push_back(s.get(e.in[2 + nc + k]));
  for (size_t r : dx_in) ops.push_back(s.dx[r]);
  if (tape)
    for (const Value& t : tape->refs) ops.push_back(t);
  ir::Params prm = e.params;
  prm.set("body", rj);
  prm.set("num_carry", static_cast<int64_t>(fc.size() + vconst.size()));
  std::vector<Value> res = trace::bind(PrimId::fori_loop, ops, prm);
  for (size_t n = 0; n < fc.size(); ++n) s.add_ct(e.in[2 + fc[n]], res[n]);
  for (size_t n = 0; n < vconst.size(); ++n) s.add_ct(e.in[2 + nc + vconst[n]], res[fc.size() + n]);
}

// A cond (pl::cond, pl::switch_case; pl::when with results): the transpose is a cond on the
// same index whose branches replay their forward branch and send the results' cotangents back
// to its operands and, through its loads, into the inputs' cotangents.
void transpose_cond(const ir::Eqn& e, Tx& s) {
  const auto& branches = e.params.get<std::vector<ir::JaxprPtr>>("branches");
  const size_t nops = e.in.size() - 1;  // [index, operands and captured values...]
  std::vector<size_t> fo;               // the results that take a cotangent
  std::vector<Value> ct_out;
  bool any = false;
  for (size_t k = 0; k < e.out.size(); ++k) {
    if (!is_float(e.out[k].aval.dtype)) continue;
    auto it = s.ct.find(e.out[k].id);
    any = any || it != s.ct.end();
    fo.push_back(k);
    ct_out.push_back(it != s.ct.end() ? it->second : zeros_like(s.get(e.out[k])));
  }
  if (!any) return;
  const std::vector<size_t> vop = floating_values(e, 1, nops);  // operands that take a cotangent
  const std::vector<size_t> dx_in = s.dx_bound();
  // each transposed branch: [ct results..., operands..., dx refs...] -> ct operands
  std::vector<ir::JaxprPtr> tb;
  for (const ir::JaxprPtr& br : branches) {
    trace::Frame f(&trace::require_frame("vjp").context(), true);
    Tx b = Tx::nested(s);
    std::vector<Value> cto;
    for (size_t k : fo) cto.push_back(new_invar(f, e.out[k].aval));
    for (size_t k = 0; k < nops; ++k) b.bind(f, br->invars[k], e.in[1 + k], s);
    for (size_t r : dx_in) b.dx[r] = new_invar(f, s.dx_aval[r]);
    std::vector<const ir::Eqn*> order = replay(*br, b, nullptr);
    for (size_t n = 0; n < fo.size(); ++n) b.add_ct(br->outvars[fo[n]], cto[n]);
    reverse(order, b);
    std::vector<ir::Atom> outs;
    for (size_t k : vop) {
      auto it = b.ct.find(br->invars[k].id);
      outs.push_back(trace::atom_of(it == b.ct.end() ? zeros_like(b.p.at(br->invars[k].id)) : it->second, "vjp"));
    }
    tb.push_back(std::make_shared<const ir::Jaxpr>(f.finish(outs, nullptr)));
  }
  std::vector<Value> ops{s.get(e.in[0])};
  for (const Value& c : ct_out) ops.push_back(c);
  for (size_t k = 0; k < nops; ++k) ops.push_back(s.get(e.in[1 + k]));
  for (size_t r : dx_in) ops.push_back(s.dx[r]);
  ir::Params prm = e.params;
  prm.set("branches", tb);
  std::vector<Value> res = trace::bind(PrimId::cond, ops, prm);
  for (size_t n = 0; n < vop.size(); ++n) s.add_ct(e.in[1 + vop[n]], res[n]);
}

void reverse(const std::vector<const ir::Eqn*>& order, Tx& s) {
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const ir::Eqn& e = **it;
    PrimId id = e.prim->id;
    if (id == PrimId::fori_loop) {
      transpose_fori(e, s);
      continue;
    }
    if (id == PrimId::cond) {
      transpose_cond(e, s);
      continue;
    }
    if (e.out.empty()) continue;
    auto c = s.ct.find(e.out[0].id);
    if (c == s.ct.end()) continue;  // no cotangent reaches it (integer, or unused)
    if (id == PrimId::load) {  // [ref, dyn..., mask?, other?] -> dx[idx] += ct
      int r = s.root_of(e);
      bool masked = e.params.get_bool("has_mask"), other = e.params.get_bool("has_other");
      size_t end = e.in.size() - (masked ? 1 : 0) - (other ? 1 : 0);
      if (other) s.add_ct(e.in.back(), where(s.get(e.in[end]), zeros_like(c->second), c->second));
      const Value& dx = s.dx[static_cast<size_t>(r)];
      if (!dx.defined()) continue;
      std::vector<Value> in{dx, c->second.astype(dx.dtype())};
      for (size_t k = 1; k < end; ++k) in.push_back(s.get(e.in[k]));
      ir::Params ap{{"idx", e.params.get<ir::NDIndexer>("idx")}, {"idx_start", int64_t{2}}};
      if (static_cast<size_t>(r) < s.direct.size() && s.direct[static_cast<size_t>(r)]) {  // the element's only cotangent
        ap.set_flag("has_mask", masked);
        if (masked) in.push_back(s.get(e.in[end]));
        trace::bind(PrimId::store, in, ap);
        s.stored[static_cast<size_t>(r)] = true;
      } else if (masked) {  // `+=` takes no mask: a masked atomic add, touching only the lanes the load read
        ap.set("op", ir::AtomicOp::Add);
        ap.set_flag("has_mask", true);
        in.push_back(s.get(e.in[end]));
        trace::bind(PrimId::atomic_rmw, in, ap);
      } else {
        trace::bind(PrimId::addupdate, in, ap);
      }
      continue;
    }
    auto rule = vjp_rules().find(id);
    if (rule == vjp_rules().end()) refuse(s.what, "the primitive '" + e.prim->name + "' has no transpose rule");
    if (e.out.size() != 1) refuse(s.what, "the primitive '" + e.prim->name + "' has several results");
    VjpEqn q{e, {}, {s.p.at(e.out[0].id)}, c->second};
    for (const ir::Atom& a : e.in) q.x.push_back(s.get(a));
    std::vector<Value> g = rule->second(q);
    for (size_t k = 0; k < g.size() && k < e.in.size(); ++k) s.add_ct(e.in[k], g[k]);
  }
}

}  // namespace

namespace {

// The loops whose carries the transposed kernel saves: top-level fori_loops that carry state,
// with static bounds, while all their tapes stay within kMaxTapeBytes (the rest recompute).
constexpr int64_t kMaxTapeBytes = int64_t{1} << 30;
struct SavedLoop {
  const ir::Eqn* loop;
  int64_t lo, steps;
};
std::vector<SavedLoop> loops_to_save(const ir::Jaxpr& kj, int64_t programs) {
  std::vector<SavedLoop> r;
  int64_t bytes = 0;
  for (const ir::Eqn& e : kj.eqns) {
    if (e.prim->id != PrimId::fori_loop) continue;
    auto *lo = std::get_if<ir::Literal>(&e.in[0]), *hi = std::get_if<ir::Literal>(&e.in[1]);
    if (!lo || !hi || hi->as_int() <= lo->as_int()) continue;
    const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
    const size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
    std::unordered_set<const ir::Eqn*> adds;
    std::vector<ir::Atom> term;
    if (nc == 0 || accumulating_carries(body, nc, adds, term)) continue;
    const int64_t steps = hi->as_int() - lo->as_int();
    int64_t per_step = 0;
    for (size_t c = 0; c < nc; ++c) per_step += body.invars[1 + c].aval.size() * static_cast<int64_t>(itemsize(body.invars[1 + c].aval.dtype));
    if (bytes + programs * steps * per_step > kMaxTapeBytes) continue;
    bytes += programs * steps * per_step;
    r.push_back({&e, lo->as_int(), steps});
  }
  return r;
}

// An index map's invars, the grid indices (into pid), and the program's row-major linear id.
Value program_ids(trace::Frame& f, const std::vector<int64_t>& grid, std::vector<Value>& pid) {
  Value lin(0);
  for (int64_t g : grid) {
    pid.push_back(trace::make_value(f.add_invar(ir::Aval::array({}, DType::I32))));
    lin = lin * static_cast<int>(g) + pid.back();
  }
  return lin.astype(DType::I32);
}

// The block of a tape: program p (row-major over the grid) writes row p.
core::BlockMapping tape_mapping(const std::string& what, const std::vector<int64_t>& grid, int64_t programs, int64_t steps,
                                const ir::Aval& carry) {
  core::BlockMapping m;
  m.what = what;
  m.array.shape = {programs, steps};
  m.array.shape.insert(m.array.shape.end(), carry.shape.begin(), carry.shape.end());
  m.array.dtype = carry.dtype;
  m.block_shape = m.array.shape;
  m.block_shape[0] = 1;
  m.squeezed.assign(m.array.shape.size(), false);
  m.squeezed[0] = true;
  trace::KernelContext ctx{what, grid, false};
  trace::Frame f(&ctx, false);
  std::vector<Value> pid;
  std::vector<ir::Atom> outs{trace::atom_of(program_ids(f, grid, pid), "vjp")};
  for (size_t d = 1; d < m.array.shape.size(); ++d) outs.push_back(ir::Literal::of_int(0, DType::I32));
  m.index_map = std::make_shared<const ir::Jaxpr>(f.finish(outs, nullptr));
  return m;
}

// Whether the programs' blocks of m tile its array exactly: every block read by one program,
// every program's block a different one (the index map run over the static grid, up to 2^16
// programs; otherwise no).
bool tiles_exactly(const core::GridMapping& g, const core::BlockMapping& m) {
  int64_t programs = 1, blocks = 1;
  for (int64_t e : g.grid) {
    if (e <= 0 || programs > (int64_t{1} << 16) / e) return false;
    programs *= e;
  }
  std::vector<int64_t> per(m.array.shape.size());
  for (size_t d = 0; d < per.size(); ++d) {
    per[d] = (m.array.shape[d] + m.block_shape[d] - 1) / m.block_shape[d];
    blocks *= per[d];
  }
  if (blocks != programs) return false;
  std::optional<ir::ScalarProgram> map = ir::ScalarProgram::compile(*m.index_map, g.grid.size());
  if (!map) return false;
  std::vector<bool> seen(static_cast<size_t>(blocks), false);
  std::vector<int64_t> pid(g.grid.size(), 0), block(map->num_outputs()), slots;
  for (int64_t p = 0; p < programs; ++p) {
    map->run(pid.data(), block.data(), slots);
    int64_t lin = 0;
    for (size_t d = 0; d < per.size(); ++d) {
      if (block[d] < 0 || block[d] >= per[d]) return false;
      lin = lin * per[d] + block[d];
    }
    if (seen[static_cast<size_t>(lin)]) return false;
    seen[static_cast<size_t>(lin)] = true;
    for (size_t a = pid.size(); a-- > 0;) {
      if (++pid[a] < g.grid[a]) break;
      pid[a] = 0;
    }
  }
  return true;
}

// Past an output's edge the forward's writes are dropped, and the cotangent read there would
// be poison, not zero: for a store of a whole block of an output whose last blocks pass its
// edge, the elements inside the array (from this program's block index), else undefined (no
// edge). Stores of part of such a block are refused.
Value inside_edge(const core::PallasCall& c, size_t output, const ir::Eqn& st, const std::string& what) {
  const core::BlockMapping& bm = c.grid.outputs[output];
  bool overhang = false;
  for (size_t d = 0; d < bm.block_shape.size(); ++d) overhang = overhang || (!bm.squeezed[d] && bm.array.shape[d] % bm.block_shape[d] != 0);
  if (!overhang) return Value();
  const Shape ref = bm.ref_shape();
  const auto& dims = st.params.get<ir::NDIndexer>("idx").dims;
  bool whole = dims.size() == ref.size();
  for (size_t d = 0; whole && d < dims.size(); ++d)
    whole = dims[d].kind == ir::IndexDim::Kind::Slice && dims[d].start == 0 && dims[d].stride == 1 && dims[d].size == ref[d];
  if (!whole)
    refuse(what, bm.what + "'s blocks overhang its edge and the kernel stores part of a block (only whole-block stores of such "
                           "an output are transposed)");
  std::vector<Value> pid;
  for (size_t a = 0; a < c.grid.grid.size(); ++a) pid.push_back(program_id(static_cast<int>(a)));
  std::vector<Value> block = inline_jaxpr(*bm.index_map, pid);
  Value in;
  for (size_t d = 0, r = 0; d < bm.block_shape.size(); ++d) {
    if (bm.squeezed[d]) continue;
    if (bm.array.shape[d] % bm.block_shape[d] != 0) {
      Value ok = block[d] * static_cast<int>(bm.block_shape[d]) + iota(DType::I32, ref, static_cast<int>(r)) < static_cast<int>(bm.array.shape[d]);
      in = in.defined() ? in & ok : ok;
    }
    ++r;
  }
  return in;
}

}  // namespace

core::PallasCall vjp_pallas_call(const core::PallasCall& c, VjpOptions opts) {
  const std::string& what = c.what;
  if (c.grid.num_dynamic_bounds() > 0) refuse(what, "its grid has dynamic bounds");
  if (!c.grid.prefetch.empty()) refuse(what, "it takes scalar prefetch operands");
  if (!c.aliases.empty()) refuse(what, "it has input_output_aliases");
  if (!c.grid.scratch.empty()) refuse(what, "it has scratch operands");
  const size_t nin = c.grid.inputs.size(), nout = c.grid.outputs.size();
  for (size_t o = 0; o < nout; ++o) {
    const core::BlockMapping& bm = c.grid.outputs[o];
    for (bool r : revisit_axes(c.grid, bm))
      if (r) refuse(what, bm.what + " is written by several programs (its block is revisited along a grid axis, an accumulation)");
  }
  std::vector<size_t> diff;  // floating inputs: each gets a cotangent
  for (size_t k = 0; k < nin; ++k)
    if (is_float(c.grid.inputs[k].array.dtype)) diff.push_back(k);
  const ir::Jaxpr& kj = *c.kernel;
  const auto& kin = kj.invars;
  // Inputs whose cotangent is stored directly, in the input's dtype: read by one load at the
  // kernel's top level without index arrays, the programs' blocks tiling the array (each
  // read by one program, none left out), so every element's cotangent is that load's alone — no zeros to add into, no f32 accumulator and
  // no conversion after the call (a softmax's or a norm's rows). `full`: that load reads the
  // whole block unmasked; otherwise the block is zeroed first.
  std::vector<bool> direct(nin, false), full(nin, false);
  // A cotangent every program of some grid axes adds into is summed in `spread` partial copies
  // (slot: the program's linear id mod spread) and the copies summed after the call: atomics
  // from thousands of programs on one [4096] weight row spent most of a layer norm's
  // automatic vjp waiting on each other. Up to 64 copies, within 64 MiB.
  std::vector<int64_t> spread(nin, 1);
  for (size_t k : diff) {
    bool shared = false;
    int64_t sharing = 1;
    std::vector<bool> along = revisit_axes(c.grid, c.grid.inputs[k]);
    for (size_t a = 0; a < along.size(); ++a)
      if (along[a]) shared = true, sharing *= c.grid.grid[a];
    const int64_t bytes = shape_size(c.grid.inputs[k].array.shape) * static_cast<int64_t>(itemsize(acc_dtype(c.grid.inputs[k].array.dtype)));
    while (spread[k] * 2 <= std::min<int64_t>(64, sharing) && spread[k] * 2 * bytes <= (int64_t{64} << 20)) spread[k] *= 2;
    int loads = 0;
    bool elsewhere = false;
    const ir::Eqn* load = nullptr;
    for (const ir::Eqn& e : kj.eqns)
      for (const ir::Atom& a : e.in)
        if (auto* v = std::get_if<ir::Var>(&a); v && v->id == kin[k].id) {
          if (e.prim->id == PrimId::load) ++loads, load = &e;
          else elsewhere = true;
        }
    direct[k] = !shared && !elsewhere && loads == 1 && tiles_exactly(c.grid, c.grid.inputs[k]);
    if (direct[k])  // a gather may read an element twice: its cotangents must add
      for (const ir::IndexDim& d : load->params.get<ir::NDIndexer>("idx").dims) direct[k] = direct[k] && d.kind != ir::IndexDim::Kind::Array;
    if (direct[k]) {
      bool whole = !load->params.get_bool("has_mask");
      const Shape& rs = kin[k].aval.shape;
      const auto& dims = load->params.get<ir::NDIndexer>("idx").dims;
      for (size_t d = 0; d < dims.size(); ++d)
        whole = whole && dims[d].kind == ir::IndexDim::Kind::Slice && dims[d].start == 0 && dims[d].stride == 1 &&
                d < rs.size() && dims[d].size == rs[d];
      full[k] = whole && dims.size() == rs.size();
    }
  }
  int64_t programs = 1;
  for (int64_t g : c.grid.grid) programs *= g;
  const std::vector<SavedLoop> saved = opts.carries == VjpCarries::Saved ? loops_to_save(kj, programs) : std::vector<SavedLoop>{};
  std::vector<core::BlockMapping> tapes;

  trace::KernelContext ctx{what, c.grid.grid, true};
  ir::Jaxpr body;
  {
    trace::Frame f(&ctx, false);
    Tx s;
    s.what = what, s.nin = nin;
    std::vector<Value> dy_refs;
    for (size_t k = 0; k < nin; ++k) s.p[kin[k].id] = trace::make_value(f.add_invar(kin[k].aval));
    for (size_t k = 0; k < nout; ++k) dy_refs.push_back(s.p[kin[nin + k].id] = trace::make_value(f.add_invar(kin[nin + k].aval)));
    // The input cotangents accumulate in f32 for 16-bit inputs (sums over programs and steps;
    // atomic adds have no 16-bit float form), converted to the input's dtype after the call.
    auto acc_aval = [&](size_t k) {
      ir::Aval av = kin[k].aval;
      av.dtype = acc_dtype(av.dtype);
      return av;
    };
    for (size_t k : diff)
      if (!direct[k]) f.add_invar(acc_aval(k));  // the zeros the cotangents start from (aliased)
    s.dx.assign(nin, Value());
    s.dx_aval.assign(nin, ir::Aval());
    s.direct = direct;
    s.stored.assign(nin, false);
    for (size_t k : diff) {
      s.dx_aval[k] = direct[k] ? kin[k].aval : acc_aval(k);
      s.dx[k] = trace::make_value(f.add_invar(s.dx_aval[k]));
    }
    for (size_t k : diff)  // a direct cotangent's elements its load does not read are zeros
      if (direct[k] && !full[k]) store(Ref(s.dx[k]), Indexers{}, zeros(kin[k].aval.shape, kin[k].aval.dtype));
    for (size_t k = 0; k < nin + nout; ++k) s.root[kin[k].id] = static_cast<int>(k);
    for (const SavedLoop& l : saved) {  // the tapes, after the cotangents
      Tx::Tape& t = s.tapes[l.loop];
      t.lo = l.lo;
      const ir::Jaxpr& lb = *l.loop->params.get<ir::JaxprPtr>("body");
      for (size_t k = 0; k < static_cast<size_t>(l.loop->params.get_int("num_carry")); ++k) {
        const ir::Aval& cv = lb.invars[1 + k].aval;
        Shape shape{l.steps};
        shape.insert(shape.end(), cv.shape.begin(), cv.shape.end());
        t.refs.push_back(trace::make_value(f.add_invar(ir::Aval::ref(shape, cv.dtype))));
        tapes.push_back(tape_mapping("tape of carry " + std::to_string(k) + " of a fori_loop", c.grid.grid, programs, l.steps, cv));
      }
    }

    std::vector<Store> stores;
    std::vector<const ir::Eqn*> order = replay(kj, s, &stores);
    // An element a later store overwrites takes nothing from the earlier one: each output's
    // stores must be apart (static boxes that do not meet) for their cotangents to be reads.
    for (size_t a = 0; a < stores.size(); ++a)
      for (size_t b = a + 1; b < stores.size(); ++b)
        if (stores[a].output == stores[b].output && may_overlap(*stores[a].e, *stores[b].e))
          refuse(what, "its kernel stores output " + std::to_string(stores[a].output) +
                           " more than once where the stores may overlap (a later store overwrites an earlier one's elements)");
    // stores read the output cotangents at their indices; then every equation in reverse
    for (auto it = stores.rbegin(); it != stores.rend(); ++it) {
      const ir::Eqn& st = *it->e;  // [ref, value, dyn..., mask?]
      if (!is_float(ir::atom_aval(st.in[1]).dtype)) continue;
      Value mask = st.params.get_bool("has_mask") ? s.get(st.in.back()) : Value();
      if (Value edge = inside_edge(c, static_cast<size_t>(it->output), st, what); edge.defined()) mask = mask.defined() ? mask & edge : edge;
      std::vector<Value> in{dy_refs[static_cast<size_t>(it->output)]};
      for (size_t k = 2; k < st.in.size() - (st.params.get_bool("has_mask") ? 1 : 0); ++k) in.push_back(s.get(st.in[k]));
      ir::Params lp{{"idx", st.params.get<ir::NDIndexer>("idx")}, {"idx_start", int64_t{1}}};
      lp.set_flag("has_mask", mask.defined());
      lp.set_flag("has_other", mask.defined());
      if (mask.defined()) in.push_back(mask), in.push_back(zeros_like(s.get(st.in[1])));
      s.add_ct(st.in[1], trace::bind1(PrimId::load, in, lp));
    }
    reverse(order, s);
    for (size_t k : diff)  // a load no cotangent reached: zeros
      if (direct[k] && full[k] && !s.stored[k]) store(Ref(s.dx[k]), Indexers{}, zeros(kin[k].aval.shape, kin[k].aval.dtype));
    body = f.finish({}, nullptr);
  }

  core::PallasCall n = c;
  n.what = "vjp of " + c.what;
  n.name = (c.name.empty() ? std::string("kernel") : c.name) + "_vjp";
  n.kernel = std::make_shared<const ir::Jaxpr>(std::move(body));
  ir::verify(*n.kernel, n.what);
  n.grid.inputs = c.grid.inputs;
  for (size_t o = 0; o < nout; ++o) {
    n.grid.inputs.push_back(c.grid.outputs[o]);
    n.grid.inputs.back().what = "cotangent of " + c.grid.outputs[o].what;
  }
  n.grid.outputs.clear();
  auto acc_mapping = [&](size_t k) {
    core::BlockMapping m = c.grid.inputs[k];
    m.array.dtype = acc_dtype(m.array.dtype);
    if (spread[k] > 1) {  // [spread, array...]: the program's copy, then the input's block
      m.array.shape.insert(m.array.shape.begin(), spread[k]);
      m.block_shape.insert(m.block_shape.begin(), 1);
      m.squeezed.insert(m.squeezed.begin(), true);
      trace::KernelContext ctx{m.what, c.grid.grid, false};
      trace::Frame f(&ctx, false);
      std::vector<Value> pid;
      Value lin = program_ids(f, c.grid.grid, pid);
      std::vector<ir::Atom> outs{trace::atom_of((lin % static_cast<int>(spread[k])).astype(DType::I32), "vjp")};
      for (const Value& v : inline_jaxpr(*c.grid.inputs[k].index_map, pid)) outs.push_back(trace::atom_of(v, "vjp"));
      m.index_map = std::make_shared<const ir::Jaxpr>(f.finish(outs, nullptr));
    }
    return m;
  };
  int zeros_in = 0;
  for (size_t k : diff)
    if (!direct[k]) {
      n.grid.inputs.push_back(acc_mapping(k));
      n.grid.inputs.back().what = "zeros for the cotangent of " + c.grid.inputs[k].what;
    }
  for (size_t j = 0; j < diff.size(); ++j) {
    n.grid.outputs.push_back(direct[diff[j]] ? c.grid.inputs[diff[j]] : acc_mapping(diff[j]));
    n.grid.outputs.back().what = "cotangent of " + c.grid.inputs[diff[j]].what;
    if (!direct[diff[j]]) n.aliases[static_cast<int>(nin + nout) + zeros_in++] = static_cast<int>(j);
  }
  for (core::BlockMapping& t : tapes) n.grid.outputs.push_back(std::move(t));
  n.cost_estimate.reset();
  return n;
}

}  // namespace pallas::transforms

// ---- public API ----
namespace pallas {
using namespace transforms;

namespace {

// x converted to dtype t where it is: on a device by a pallas_call (an elementwise kernel over
// the flattened array, made once per size and dtypes), on the host element by element.
Array convert(const Array& x, DType t) {
  if (x.device().is_host()) return x.astype(t);
  if (x.size() == 0) return Array(x.shape(), t, x.device());
  static std::mutex mu;
  static std::map<std::tuple<int64_t, DType, DType>, Call> calls;
  const int64_t n = x.size(), block = std::min<int64_t>(n, 4096);
  Call c;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_tuple(n, x.dtype(), t);
    auto it = calls.find(key);
    if (it == calls.end()) {
      BlockSpec spec({block}, [](Value i) { return idx(i); });
      it = calls.emplace(key, pallas_call([t](Ref in, Ref out) { out[all] = in[all].astype(t); }, ShapeDtype({n}, t),
                                          {.grid = {(n + block - 1) / block}, .in_specs = {spec}, .out_specs = {spec},
                                           .name = "vjp_convert"}))
               .first;
    }
    c = it->second;
  }
  return c(x.reshape({n})).reshape(x.shape());
}

// The sum over the leading axis of x [copies, ...], in dtype t: 512 columns a program, a loop
// over the copies (on the host's interpreter or the device, as any call).
Array sum_copies(const Array& x, DType t) {
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, DType, DType>, Call> calls;
  const int64_t copies = x.shape()[0], n = x.size() / copies, block = std::min<int64_t>(n, 512);
  Shape out(x.shape().begin() + 1, x.shape().end());
  if (n == 0) return Array::zeros(out, t, x.device());
  Call c;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_tuple(copies, n, x.dtype(), t);
    auto it = calls.find(key);
    if (it == calls.end()) {
      const DType acc = x.dtype();
      auto kernel = [=](Ref in, Ref o) {
        Value sum = fori_loop(0, static_cast<int>(copies), zeros({block}, acc), [&](Value i, Value a) { return a + in(i, all); });
        o[all] = sum.astype(t);
      };
      it = calls.emplace(key, pallas_call(kernel, ShapeDtype({n}, t),
                                          {.grid = {(n + block - 1) / block},
                                           .in_specs = {BlockSpec({copies, block}, [](Value j) { return idx(0, j); })},
                                           .out_specs = {BlockSpec({block}, [](Value j) { return idx(j); })},
                                           .name = "vjp_sum_copies"}))
               .first;
    }
    c = it->second;
  }
  return c(x.reshape({copies, n})).reshape(out);
}

}  // namespace

VjpResult vjp(const Call& f, const std::vector<Array>& primals, VjpOptions opts) {
  if (!f.state()) throw Error("pl::vjp: empty Call");
  const std::string& what = f.state()->what;
  if (num_dynamic_args(f) > 0) refuse(what, "its grid has dynamic bounds");
  std::vector<ShapeDtype> shapes;
  for (size_t k = 0; k < primals.size(); ++k) {
    if (!primals[k].defined()) throw Error(what + ": vjp: primal " + std::to_string(k) + " is an empty Array");
    shapes.push_back(primals[k].shape_dtype());
  }
  const core::PallasCall& pc = pallas_call_of(f, shapes);
  // The transposed call, made once per call and input shapes (so repeated vjps reuse the
  // backend's compiled kernel).
  std::string key;
  for (const ShapeDtype& s : shapes) key += s.str() + ";";
  key += opts.carries == VjpCarries::Saved ? "saved" : "recomputed";
  std::shared_ptr<const core::PallasCall> tc =
      cached_rewrite<core::PallasCall>(f, key, std::function<core::PallasCall()>([&] { return vjp_pallas_call(pc, opts); }));
  // As a custom_vjp pair: f is the forward (nothing saved but its inputs), the transposed call
  // the backward, given the inputs, the output cotangents and zeros for the input cotangents.
  std::vector<int> all(primals.size());
  for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<int>(k);
  // bwd gets the inputs, then the floating outputs' cotangents; the transposed call takes one
  // per output (an integer output's is never read: zeros).
  std::vector<ShapeDtype> outs;
  for (const core::BlockMapping& o : pc.grid.outputs) outs.push_back(o.array);
  BwdFn bwd = [tc, shapes, outs](const std::vector<Array>& a) {
    std::vector<Array> args(a.begin(), a.begin() + static_cast<long>(shapes.size()));
    size_t next = shapes.size();
    for (const ShapeDtype& o : outs) args.push_back(is_float(o.dtype) ? a.at(next++) : Array::zeros(o.shape, o.dtype));
    // the zeros shared cotangents add into, where the inputs are (set on the device there)
    const Device dev = a.empty() ? Device::host() : a[0].device();
    for (size_t i = args.size(); i < tc->grid.inputs.size(); ++i)
      args.push_back(Array::zeros(tc->grid.inputs[i].array.shape, tc->grid.inputs[i].array.dtype, dev));
    core::check_arguments(*tc, args);
    std::vector<Array> g = core::execute(*tc, args);
    size_t j = 0;
    for (const ShapeDtype& s : shapes)
      if (is_float(s.dtype)) {
        if (g[j].shape() != s.shape) g[j] = sum_copies(g[j], s.dtype);  // a cotangent summed in several copies
        else if (g[j].dtype() != s.dtype) g[j] = convert(g[j], s.dtype);  // 16-bit cotangents summed in f32
        ++j;
      }
    g.resize(j);  // the tapes of saved carries stay behind
    return g;
  };
  CustomVjp pair = custom_vjp(f, bwd, f.num_outputs(), {.residual_inputs = all}, "the transposed kernel");
  return vjp(pair, primals);
}

}  // namespace pallas
