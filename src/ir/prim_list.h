// The one list of primitives: it drives the PrimId enum, the printer's names, the registry
// and every backend's rule table (a test checks each table covers every entry).
#pragma once

// X(id, "printed name")
#define PALLAS_UNARY_PRIMS(X)                                                                   \
  X(neg, "neg") X(abs, "abs") X(sign, "sign") X(ceil, "ceil") X(floor, "floor")                 \
  X(round, "round") X(exp, "exp") X(exp2, "exp2") X(expm1, "expm1") X(log, "log")               \
  X(log1p, "log1p") X(sqrt, "sqrt") X(cbrt, "cbrt") X(rsqrt, "rsqrt") X(sin, "sin")             \
  X(cos, "cos") X(tan, "tan") X(asin, "asin") X(acos, "acos") X(atan, "atan") X(sinh, "sinh")   \
  X(cosh, "cosh") X(tanh, "tanh") X(asinh, "asinh") X(acosh, "acosh") X(atanh, "atanh")         \
  X(logistic, "logistic") X(erf, "erf") X(erf_inv, "erf_inv") X(is_finite, "is_finite")         \
  X(not_, "not") X(population_count, "population_count") X(clz, "clz")

#define PALLAS_BINARY_PRIMS(X)                                                                  \
  X(add, "add") X(sub, "sub") X(mul, "mul") X(div, "div") X(rem, "rem") X(pow, "pow")           \
  X(atan2, "atan2") X(max, "max") X(min, "min") X(nextafter, "nextafter") X(and_, "and")        \
  X(or_, "or") X(xor_, "xor") X(shift_left, "shift_left")                                       \
  X(shift_right_arithmetic, "shift_right_arithmetic")                                           \
  X(shift_right_logical, "shift_right_logical") X(eq, "eq") X(ne, "ne") X(lt, "lt")             \
  X(le, "le") X(gt, "gt") X(ge, "ge")

#define PALLAS_OTHER_PRIMS(X)                                                                   \
  X(select_n, "select_n") X(clamp, "clamp") X(integer_pow, "integer_pow")                       \
  X(convert_element_type, "convert_element_type")                                               \
  X(bitcast_convert_type, "bitcast_convert_type") X(stop_gradient, "stop_gradient")             \
  X(iota, "iota") X(broadcast_in_dim, "broadcast_in_dim") X(reshape, "reshape")                 \
  X(squeeze, "squeeze") X(transpose, "transpose")                                               \
  X(program_id, "program_id") X(num_programs, "num_programs")                                   \
  X(load, "load") X(store, "store") X(swap, "swap") X(addupdate, "addupdate")                   \
  X(atomic_rmw, "atomic_rmw") X(atomic_cas, "atomic_cas")                                       \
  X(dot, "dot")                                                                                 \
  X(reduce_sum, "reduce_sum") X(reduce_max, "reduce_max") X(reduce_min, "reduce_min")           \
  X(reduce_prod, "reduce_prod") X(argmax, "argmax") X(argmin, "argmin") X(cumsum, "cumsum")     \
  X(fori_loop, "fori_loop") X(while_loop, "while") X(cond, "cond")                              \
  X(multiple_of, "multiple_of") X(max_contiguous, "max_contiguous")                             \
  X(debug_print, "debug_print") X(check, "check")

#define PALLAS_PRIMITIVES(X) PALLAS_UNARY_PRIMS(X) PALLAS_BINARY_PRIMS(X) PALLAS_OTHER_PRIMS(X)
