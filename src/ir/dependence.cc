#include "src/ir/dependence.h"

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

// Stores, swaps, addupdates and atomics through the ref, also inside sub-jaxprs that receive
// it as an operand.
bool writes_ref(const ir::Jaxpr& j, int64_t var_id) {
  for (auto& e : j.eqns) {
    auto id = e.prim->id;
    bool writer = id == PrimId::store || id == PrimId::swap || id == PrimId::addupdate ||
                  id == PrimId::atomic_rmw || id == PrimId::atomic_cas;
    if (writer) {
      if (auto* v = std::get_if<ir::Var>(&e.in[0]); v && v->id == var_id) return true;
    }
    // Sub-jaxprs see the ref as a captured operand: follow it into the matching invar.
    for (auto& [k, pv] : e.params.items) {
      std::vector<ir::JaxprPtr> subs;
      if (auto* s = std::get_if<ir::JaxprPtr>(&pv)) subs.push_back(*s);
      if (auto* ss = std::get_if<std::vector<ir::JaxprPtr>>(&pv)) subs = *ss;
      for (auto& s : subs) {
        // operands map to the sub-jaxpr's invars from the end (captured consts are trailing)
        size_t off = e.in.size() >= s->invars.size() ? e.in.size() - s->invars.size() : 0;
        for (size_t a = 0; a < s->invars.size() && off + a < e.in.size(); ++a)
          if (auto* v = std::get_if<ir::Var>(&e.in[off + a]); v && v->id == var_id)
            if (writes_ref(*s, s->invars[a].id)) return true;
      }
    }
  }
  return false;
}

}  // namespace pallas::ir
