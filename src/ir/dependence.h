// Which outputs of a jaxpr depend on which inputs: a forward taint over the equations.
// Conservative: an equation's outputs depend on all of its inputs (sub-jaxprs in params are
// not looked into), so "does not depend" is always true when reported.
#pragma once
#include <optional>
#include <vector>

#include "src/ir/ir.h"

namespace pallas::ir {

// For each outvar of j: whether it depends on some invar k with tainted[k] (missing entries
// of `tainted` count as false).
std::vector<bool> outvars_depending_on(const Jaxpr& j, const std::vector<bool>& tainted);

// Whether the equation writes through its ref (store, swap, addupdate, an atomic).
bool is_ref_write(const Eqn& e);
// Whether the jaxpr, or one inside it, writes through any ref.
bool writes_any_ref(const Jaxpr& j);

// Whether the jaxpr writes through the ref bound to var_id (a kernel that writes an input block
// gets a private copy of that input on every backend, so the caller's array never changes).
bool writes_ref(const Jaxpr& j, int64_t var_id);

}  // namespace pallas::ir

namespace pallas::ir {

// An integer scalar of a jaxpr as an affine form over its first n invars: sum coef[k] * invar_k
// + offset. `affine` is false when no such form was found (a div, rem, min, select, a read of
// memory, ...); `offset` is known only when every term it came from was a literal.
// The arithmetic wraps at the value's width, as the backends' does: the form is exact modulo
// 2^bits (add, sub, neg and mul are ring operations), so coef and offset are kept modulo 2^64
// and mean their residues modulo 2^bits.
struct AffineForm {
  bool affine = false;
  std::vector<int64_t> coef;     // one per leading invar; 0: does not depend on it
  std::optional<int64_t> offset;  // the constant term, when known
  int bits = 64;                  // the width of the value's dtype
};

// The outvars of j as affine forms over its first n invars (index maps: the grid indices).
// Literals and values that depend on none of those invars are constants; add, sub, neg, a
// multiplication by a known constant, a conversion that keeps the width and signedness and the
// hints (multiple_of, max_contiguous) keep a form affine; anything else that depends on the
// invars does not (a widening conversion too: it extends the wrapped value, not the form).
std::vector<AffineForm> affine_outvars(const Jaxpr& j, size_t n);

}  // namespace pallas::ir
