// Helpers shared by the public API implementation (src/trace/api_*.cc).
#pragma once
#include <vector>

#include "pallas/kernel.h"

namespace pallas::api {
Value convert(const Value& x, DType t, bool weak);
// numpy's rule: `from` broadcasts to `to` (each dim equal or 1, leading ones may be missing)
bool broadcastable(const Shape& from, const Shape& to);
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
Value broadcast(const Value& x, const Shape& shape);
// Where a ref access happens: the first of its indexers' places (they were all converted in
// the kernel's one expression), if any.
SourceLocation loc_of(const Indexers& idx);
// JAX promotion of dtypes (weak scalars adapt), numpy broadcasting of shapes; rank-0
// operands stay scalars unless broadcast_scalars.
std::vector<Value> promote(const char* op, const std::vector<Value>& xs, bool broadcast_scalars);
Value to_float(const Value& x);
}  // namespace pallas::api
