// Reductions over axes (sum, max, min, prod), argmax/argmin over one axis, cumsum.
#include <algorithm>

#include "src/ops/op_util.h"

namespace pallas::ops {
using ir::PrimId;

namespace {
std::vector<Aval> reduce_eval(const char* op, const std::vector<Aval>& in, const Params& p) {
  expect_arity(op, in, 1);
  expect_array(op, in[0], "the operand");
  auto axes = p.get<std::vector<int64_t>>("axes");
  std::vector<bool> red(in[0].ndim(), false);
  for (int64_t a : axes) {
    int n = normalize_axis(op, a, in[0].ndim());
    if (red[n]) fail(op, "axis " + std::to_string(a) + " is repeated");
    red[n] = true;
  }
  if (std::string(op) != "reduce_max" && std::string(op) != "reduce_min" && in[0].dtype == DType::Bool)
    fail(op, "does not take bool operands; convert with .astype(pl::i32)");
  Shape s;
  for (int k = 0; k < in[0].ndim(); ++k)
    if (!red[k]) s.push_back(in[0].shape[k]);
  return {Aval::array(s, in[0].dtype, in[0].weak)};
}

std::vector<Aval> arg_eval(const char* op, const std::vector<Aval>& in, const Params& p) {
  expect_arity(op, in, 1);
  expect_array(op, in[0], "the operand");
  int ax = normalize_axis(op, p.get_int("axis"), in[0].ndim());
  if (in[0].shape[ax] == 0) fail(op, "cannot reduce an empty axis");
  DType t = p.get<DType>("index_dtype");
  if (t != DType::I32) fail(op, "`index_type` must be i32");
  Shape s = in[0].shape;
  s.erase(s.begin() + ax);
  return {Aval::array(s, t)};
}
}  // namespace

void register_reduce() {
  define_primitive(PrimId::reduce_sum, ir::PrimKind::Reduce, [](auto& in, auto& p) { return reduce_eval("reduce_sum", in, p); });
  define_primitive(PrimId::reduce_max, ir::PrimKind::Reduce, [](auto& in, auto& p) { return reduce_eval("reduce_max", in, p); });
  define_primitive(PrimId::reduce_min, ir::PrimKind::Reduce, [](auto& in, auto& p) { return reduce_eval("reduce_min", in, p); });
  define_primitive(PrimId::reduce_prod, ir::PrimKind::Reduce, [](auto& in, auto& p) { return reduce_eval("reduce_prod", in, p); });
  define_primitive(PrimId::argmax, ir::PrimKind::Reduce, [](auto& in, auto& p) { return arg_eval("argmax", in, p); });
  define_primitive(PrimId::argmin, ir::PrimKind::Reduce, [](auto& in, auto& p) { return arg_eval("argmin", in, p); });
  define_primitive(PrimId::cumsum, ir::PrimKind::Reduce, [](const std::vector<Aval>& in, const Params& p) {
    expect_arity("cumsum", in, 1);
    expect_array("cumsum", in[0], "the operand");
    normalize_axis("cumsum", p.get_int("axis"), in[0].ndim());
    if (p.get_bool("reverse")) fail("cumsum", "Reverse cumsum is not supported.");
    if (in[0].dtype == DType::Bool) fail("cumsum", "does not take bool operands");
    return std::vector<Aval>{in[0]};
  });
}

}  // namespace pallas::ops
