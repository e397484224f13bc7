#include "src/ir/dependence.h"

#include <unordered_set>

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

}  // namespace pallas::ir
