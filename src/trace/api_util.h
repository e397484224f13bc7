// Helpers shared by the public API implementation (src/trace/api_*.cc).
#pragma once
#include <vector>

#include "pallas/kernel.h"

namespace pallas::api {
Value convert(const Value& x, DType t, bool weak);
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
Value broadcast(const Value& x, const Shape& shape);
// JAX promotion of dtypes (weak scalars adapt), numpy broadcasting of shapes; rank-0
// operands stay scalars unless broadcast_scalars.
std::vector<Value> promote(const char* op, const std::vector<Value>& xs, bool broadcast_scalars);
Value to_float(const Value& x);
}  // namespace pallas::api
