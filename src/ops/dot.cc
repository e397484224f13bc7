// dot: 2-D matrix product with optional transposed operands, precision and accumulator type.
#include "src/ops/op_util.h"

namespace pallas::ops {
using ir::PrimId;

DType default_dot_type(DType in) {
  if (in == DType::F64) return DType::F64;
  if (is_float(in)) return DType::F32;
  return DType::I32;
}

void register_dot() {
  define_primitive(PrimId::dot, ir::PrimKind::Dot, [](const std::vector<Aval>& in, const Params& p) {
    expect_arity("dot", in, 2);
    expect_array("dot", in[0], "a");
    expect_array("dot", in[1], "b");
    const Aval &a = in[0], &b = in[1];
    if (a.ndim() != 2 || b.ndim() != 2) fail("dot", "a and b must be 2D, got " + avals_str(in));
    if (a.dtype != b.dtype)
      fail("dot", std::string("operands are ") + dtype_name(a.dtype) + " and " + dtype_name(b.dtype) + " (" + avals_str(in) +
                      "); a and b must have the same element type: convert one with .astype(pl::" + dtype_name(a.dtype) +
                      ") or .astype(pl::" + dtype_name(b.dtype) + ")");
    if (is_unsigned_int(a.dtype) || a.dtype == DType::Bool || a.dtype == DType::I16 || a.dtype == DType::I64)
      fail("dot", std::string("takes f16, bf16, f32, f64, f8e4m3, f8e5m2 or i8/i32 operands, got ") + dtype_name(a.dtype) +
                      " (unsigned integers are not supported: the tensor cores read integers as signed)");
    bool ta = p.get_bool("trans_a"), tb = p.get_bool("trans_b");
    int64_t m = ta ? a.shape[1] : a.shape[0], ka = ta ? a.shape[0] : a.shape[1];
    int64_t kb = tb ? b.shape[1] : b.shape[0], n = tb ? b.shape[0] : b.shape[1];
    if (ka != kb)
      fail("dot", "contraction dimensions differ: a is " + a.str() + (ta ? " (transposed)" : "") + ", b is " + b.str() +
                      (tb ? " (transposed)" : ""));
    DType out = p.has("preferred_type") ? p.get<DType>("preferred_type") : default_dot_type(a.dtype);
    return std::vector<Aval>{Aval::array({m, n}, out)};
  });
}

}  // namespace pallas::ops
