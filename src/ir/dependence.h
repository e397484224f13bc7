// Which outputs of a jaxpr depend on which inputs: a forward taint over the equations.
// Conservative: an equation's outputs depend on all of its inputs (sub-jaxprs in params are
// not looked into), so "does not depend" is always true when reported.
#pragma once
#include <vector>

#include "src/ir/ir.h"

namespace pallas::ir {

// For each outvar of j: whether it depends on some invar k with tainted[k] (missing entries
// of `tainted` count as false).
std::vector<bool> outvars_depending_on(const Jaxpr& j, const std::vector<bool>& tainted);

// Whether the jaxpr writes through the ref bound to var_id (a kernel that writes an input block
// gets a private copy of that input on every backend, so the caller's array never changes).
bool writes_ref(const Jaxpr& j, int64_t var_id);

}  // namespace pallas::ir
