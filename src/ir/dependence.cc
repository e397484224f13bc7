#include "src/ir/dependence.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "src/ir/primitive.h"

namespace pallas::ir {

std::vector<bool> outvars_depending_on(const Jaxpr& j, const std::vector<bool>& tainted) {
  std::unordered_set<int64_t> dirty;
  for (size_t k = 0; k < j.invars.size() && k < tainted.size(); ++k)
    if (tainted[k]) dirty.insert(j.invars[k].id);
  auto is_dirty = [&](const Atom& a) { return std::holds_alternative<Var>(a) && dirty.count(std::get<Var>(a).id); };
  for (const Eqn& e : j.eqns) {
    bool any = false;
    for (const Atom& a : e.in) any = any || is_dirty(a);
    if (any)
      for (const Var& v : e.out) dirty.insert(v.id);
  }
  std::vector<bool> r;
  for (const Atom& a : j.outvars) r.push_back(is_dirty(a));
  return r;
}

bool is_ref_write(const Eqn& e) {
  switch (e.prim->id) {
    case PrimId::store:
    case PrimId::swap:
    case PrimId::addupdate:
    case PrimId::atomic_rmw:
    case PrimId::atomic_cas: return true;
    default: return false;
  }
}

bool writes_any_ref(const Jaxpr& j) {
  for (const Eqn& e : j.eqns) {
    if (is_ref_write(e)) return true;
    for (const Jaxpr* s : sub_jaxprs(e))
      if (writes_any_ref(*s)) return true;
  }
  return false;
}

// Stores, swaps, addupdates and atomics through the ref, also inside sub-jaxprs that receive
// it as an operand.
bool writes_ref(const ir::Jaxpr& j, int64_t var_id) {
  for (auto& e : j.eqns) {
    if (is_ref_write(e)) {
      if (auto* v = std::get_if<ir::Var>(&e.in[0]); v && v->id == var_id) return true;
    }
    // Sub-jaxprs see the ref as a captured operand: follow it into the matching invar.
    for (const ir::Jaxpr* s : sub_jaxprs(e)) {
      // operands map to the sub-jaxpr's invars from the end (captured consts are trailing)
      size_t off = e.in.size() >= s->invars.size() ? e.in.size() - s->invars.size() : 0;
      for (size_t a = 0; a < s->invars.size() && off + a < e.in.size(); ++a)
        if (auto* v = std::get_if<ir::Var>(&e.in[off + a]); v && v->id == var_id)
          if (writes_ref(*s, s->invars[a].id)) return true;
    }
  }
  return false;
}

}  // namespace pallas::ir

namespace pallas::ir {

std::vector<AffineForm> affine_outvars(const Jaxpr& j, size_t n) {
  n = std::min(n, j.invars.size());
  auto constant = [&](std::optional<int64_t> v) { return AffineForm{true, std::vector<int64_t>(n, 0), v}; };
  std::unordered_map<int64_t, AffineForm> form;
  for (size_t k = 0; k < n; ++k) {
    AffineForm f = constant(0);
    f.coef[k] = 1;
    form[j.invars[k].id] = f;
  }
  // Invars past the first n (scalar-prefetch refs) and values computed from them alone are
  // constants of unknown value; so is anything that depends on no leading invar.
  auto of = [&](const Atom& a) -> AffineForm {
    if (auto* l = std::get_if<Literal>(&a))
      return constant(is_integer(l->dtype) || l->dtype == DType::Bool ? std::optional<int64_t>(l->i) : std::nullopt);
    auto it = form.find(std::get<Var>(a).id);
    return it != form.end() ? it->second : constant(std::nullopt);
  };
  auto depends = [](const AffineForm& f) {
    for (int64_t c : f.coef)
      if (c) return true;
    return false;
  };
  auto opaque = [&](const Eqn& e) {  // not affine if it depends on a leading invar, else a constant
    bool dep = false;
    for (const Atom& a : e.in) {
      AffineForm f = of(a);
      dep = dep || !f.affine || depends(f);
    }
    return dep ? AffineForm{false, {}, std::nullopt} : constant(std::nullopt);
  };
  auto lin = [&](const AffineForm& x, const AffineForm& y, int64_t sy) {  // x + sy * y, modulo 2^64
    if (!x.affine || !y.affine) return AffineForm{false, {}, std::nullopt};
    auto mad = [](int64_t a, int64_t s, int64_t b) {
      return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(s) * static_cast<uint64_t>(b));
    };
    AffineForm r = constant(std::nullopt);
    for (size_t k = 0; k < n; ++k) r.coef[k] = mad(x.coef[k], sy, y.coef[k]);
    if (x.offset && y.offset) r.offset = mad(*x.offset, sy, *y.offset);
    return r;
  };
  for (const Eqn& e : j.eqns) {
    if (e.out.size() != 1 || !e.out[0].aval.shape.empty() || !is_integer(e.out[0].aval.dtype)) {
      for (const Var& v : e.out) form[v.id] = opaque(e);
      continue;
    }
    AffineForm r;
    switch (e.prim->id) {
      case PrimId::add: r = lin(of(e.in[0]), of(e.in[1]), 1); break;
      case PrimId::sub: r = lin(of(e.in[0]), of(e.in[1]), -1); break;
      case PrimId::neg: r = lin(constant(0), of(e.in[0]), -1); break;
      case PrimId::mul: {
        AffineForm x = of(e.in[0]), y = of(e.in[1]);
        if (x.affine && !depends(x) && x.offset) std::swap(x, y);
        if (x.affine && y.affine && !depends(y) && y.offset) r = lin(constant(0), x, *y.offset);
        else r = opaque(e);
        break;
      }
      case PrimId::convert_element_type: {
        DType from = atom_aval(e.in[0]).dtype, to = e.out[0].aval.dtype;
        bool same = is_integer(from) && itemsize(to) == itemsize(from) && is_signed_int(to) == is_signed_int(from);
        r = same ? of(e.in[0]) : opaque(e);
        break;
      }
      case PrimId::multiple_of:
      case PrimId::max_contiguous: r = of(e.in[0]); break;
      default: r = opaque(e);
    }
    form[e.out[0].id] = r;
  }
  std::vector<AffineForm> out;
  for (const Atom& a : j.outvars) {
    out.push_back(of(a));
    out.back().bits = static_cast<int>(itemsize(atom_aval(a).dtype) * 8);
  }
  return out;
}

}  // namespace pallas::ir
