// Elementwise primitives: unary and binary ops, select_n, clamp, integer_pow, conversions.
// Operands have equal shapes, or are rank-0 scalars next to a tile (broadcast by the rule).
#include <map>

#include "src/ops/op_util.h"

namespace pallas::ops {
using ir::PrimId;

namespace {

Family unary_family(PrimId id) {
  switch (id) {
    case PrimId::neg: case PrimId::abs: case PrimId::sign: return Family::Numeric;
    case PrimId::not_: return Family::IntOrBool;
    case PrimId::population_count: case PrimId::clz: return Family::Int;
    default: return Family::Float;
  }
}

Family binary_family(PrimId id) {
  switch (id) {
    case PrimId::add: case PrimId::sub: case PrimId::mul: case PrimId::div: case PrimId::rem:
      return Family::Numeric;
    case PrimId::max: case PrimId::min: return Family::Any;
    case PrimId::pow: case PrimId::atan2: case PrimId::nextafter: return Family::Float;
    case PrimId::and_: case PrimId::or_: case PrimId::xor_: return Family::IntOrBool;
    case PrimId::shift_left: case PrimId::shift_right_arithmetic: case PrimId::shift_right_logical:
      return Family::Int;
    default: return Family::Any;  // comparisons
  }
}

bool is_comparison(PrimId id) {
  return id == PrimId::eq || id == PrimId::ne || id == PrimId::lt || id == PrimId::le || id == PrimId::gt ||
         id == PrimId::ge;
}

void check_family(const std::string& op, const Aval& a, Family f) {
  if (!in_family(a.dtype, f)) fail(op, "takes " + std::string(family_name(f)) + ", got " + a.str());
}

// The common shape of same-shaped or rank-0 operands.
Shape elementwise_shape(const std::string& op, const std::vector<Aval>& in) {
  Shape s;
  bool have = false;
  for (auto& a : in) {
    expect_array(op, a, "an operand");
    if (a.shape.empty()) continue;
    if (!have) s = a.shape, have = true;
    else if (a.shape != s)
      fail(op, "operand shapes " + avals_str(in) + " do not match (operands must have equal shapes, or be scalars)");
  }
  return s;
}

bool all_weak(const std::vector<Aval>& in) {
  for (auto& a : in)
    if (!a.weak) return false;
  return !in.empty();
}

}  // namespace

void register_elementwise() {
#define PALLAS_X(id, name)                                                                      \
  define_primitive(PrimId::id, ir::PrimKind::Unary, [](const std::vector<Aval>& in, const Params&) { \
    expect_arity(name, in, 1);                                                                  \
    expect_array(name, in[0], "the operand");                                                   \
    check_family(name, in[0], unary_family(PrimId::id));                                        \
    DType out = PrimId::id == PrimId::is_finite ? DType::Bool : in[0].dtype;                    \
    return std::vector<Aval>{Aval::array(in[0].shape, out, in[0].weak && out == in[0].dtype)};  \
  });
  PALLAS_UNARY_PRIMS(PALLAS_X)
#undef PALLAS_X

#define PALLAS_X(id, name)                                                                         \
  define_primitive(PrimId::id, ir::PrimKind::Binary, [](const std::vector<Aval>& in, const Params&) { \
    expect_arity(name, in, 2);                                                                     \
    Shape s = elementwise_shape(name, in);                                                         \
    if (in[0].dtype != in[1].dtype)                                                                \
      fail(name, "operands must have the same dtype, got " + avals_str(in));                       \
    check_family(name, in[0], binary_family(PrimId::id));                                          \
    DType out = is_comparison(PrimId::id) ? DType::Bool : in[0].dtype;                             \
    return std::vector<Aval>{Aval::array(s, out, all_weak(in) && out == in[0].dtype)};             \
  });
  PALLAS_BINARY_PRIMS(PALLAS_X)
#undef PALLAS_X

  // select_n(which, case0, case1, ...): which is bool (2 cases) or i32.
  define_primitive(PrimId::select_n, ir::PrimKind::Elementwise, [](const std::vector<Aval>& in, const Params&) {
    if (in.size() < 2) fail("select_n", "needs a selector and at least one case");
    Shape s = elementwise_shape("select_n", in);
    const Aval& w = in[0];
    if (w.dtype != DType::Bool && w.dtype != DType::I32)
      fail("select_n", "the selector must be bool or i32, got " + w.str());
    if (w.dtype == DType::Bool && in.size() > 3) fail("select_n", "a bool selector takes at most two cases");
    for (size_t k = 2; k < in.size(); ++k)
      if (in[k].dtype != in[1].dtype || in[k].shape != in[1].shape)
        fail("select_n", "cases must have the same shape and dtype, got " + avals_str(in));
    std::vector<Aval> cases(in.begin() + 1, in.end());
    return std::vector<Aval>{Aval::array(s, in[1].dtype, all_weak(cases))};
  });

  define_primitive(PrimId::clamp, ir::PrimKind::Elementwise, [](const std::vector<Aval>& in, const Params&) {
    expect_arity("clamp", in, 3);
    elementwise_shape("clamp", in);
    if (in[0].dtype != in[1].dtype || in[2].dtype != in[1].dtype)
      fail("clamp", "operands must have the same dtype, got " + avals_str(in));
    if ((!in[0].shape.empty() && in[0].shape != in[1].shape) || (!in[2].shape.empty() && in[2].shape != in[1].shape))
      fail("clamp", "lo and hi must be scalars or have x's shape, got " + avals_str(in));
    return std::vector<Aval>{Aval::array(in[1].shape, in[1].dtype, in[1].weak)};
  });

  define_primitive(PrimId::integer_pow, ir::PrimKind::Elementwise, [](const std::vector<Aval>& in, const Params& p) {
    expect_arity("integer_pow", in, 1);
    expect_array("integer_pow", in[0], "the operand");
    check_family("integer_pow", in[0], Family::Numeric);
    if (is_integer(in[0].dtype) && p.get_int("y") < 0)
      fail("integer_pow", "a negative exponent needs a floating operand, got " + in[0].str());
    return std::vector<Aval>{in[0]};
  });

  define_primitive(PrimId::convert_element_type, ir::PrimKind::Elementwise,
                   [](const std::vector<Aval>& in, const Params& p) {
                     expect_arity("convert_element_type", in, 1);
                     expect_array("convert_element_type", in[0], "the operand");
                     return std::vector<Aval>{Aval::array(in[0].shape, p.get<DType>("new_dtype"), p.get_bool("weak_type"))};
                   });

  define_primitive(PrimId::bitcast_convert_type, ir::PrimKind::Elementwise,
                   [](const std::vector<Aval>& in, const Params& p) {
                     expect_arity("bitcast_convert_type", in, 1);
                     expect_array("bitcast_convert_type", in[0], "the operand");
                     DType t = p.get<DType>("new_dtype");
                     if (bit_width(t) != bit_width(in[0].dtype) || t == DType::Bool || in[0].dtype == DType::Bool)
                       fail("bitcast_convert_type", std::string("cannot bitcast ") + in[0].str() + " to " +
                                                        dtype_name(t) + " because of different widths");
                     return std::vector<Aval>{Aval::array(in[0].shape, t, false)};
                   });

  define_primitive(PrimId::stop_gradient, ir::PrimKind::Elementwise, [](const std::vector<Aval>& in, const Params&) {
    expect_arity("stop_gradient", in, 1);
    expect_array("stop_gradient", in[0], "the operand");
    return std::vector<Aval>{in[0]};
  });
}

}  // namespace pallas::ops
