// The public Value/Ref API: promotion, broadcasting and ref indexing on top of bind().
#include <algorithm>
#include <cmath>

#include "pallas/kernel.h"
#include "src/ops/op_util.h"
#include "src/trace/api_util.h"
#include "src/trace/trace.h"

namespace pallas {
using ir::Literal;
using ir::PrimId;
using trace::atom_of;
using trace::aval_of;
using trace::bind1;
using trace::make_value;
using detail::Operand;

void Value::init_bool(bool v) { *this = make_value(Literal::of_int(v ? 1 : 0, DType::Bool, false)); }
void Value::init_float(double v) { *this = make_value(Literal::of_float(v, DType::F32, true)); }
void Value::init_int(int64_t v) { *this = make_value(Literal::of_int(v, DType::I32, true)); }
Value Value::constant(double v, DType t) {
  if (is_float(t)) return make_value(Literal::of_float(v, t, false));
  // an integer or bool constant from a double converts as Array::full does (saturating, NaN -> 0)
  Literal d;
  d.dtype = DType::F64;
  d.f = v;
  return api::convert(make_value(d), t, false);
}

const Shape& Value::shape() const { return aval_of(*this, "Value::shape").shape; }
DType Value::dtype() const { return aval_of(*this, "Value::dtype").dtype; }
bool Value::weak_type() const { return aval_of(*this, "Value::weak_type").weak; }
std::string Value::str() const { return defined() ? impl_->aval.str() : std::string("<empty Value>"); }
Value Value::astype(DType t, SourceLocation loc) const { trace::Here here(loc); return convert_element_type(*this, t); }
Value Value::reshape(Shape s, SourceLocation loc) const { return pallas::reshape(*this, s, loc); }
Value Value::T(SourceLocation loc) const { return transpose(*this, {}, loc); }

namespace detail {
Operand::Operand(const RefView& r, SourceLocation l) : v(r.get()), loc(l) {}
Operand::Operand(const Filled& f, SourceLocation l) : loc(l) {
  trace::Here here(l);  // (the broadcast of a tile constant)
  v = f;
}
}  // namespace detail

namespace api {

Value convert(const Value& x, DType t, bool weak) {
  const ir::Aval& a = aval_of(x, "astype");
  if (a.dtype == t && a.weak == weak) return x;
  if (auto* l = std::get_if<Literal>(&atom_of(x, "astype"))) {
    // Fold constant conversions so weak scalars stay literals.
    Literal r;
    if (is_float(t)) {
      r = Literal::of_float(l->as_double(), t, weak);
    } else if (t == DType::Bool) {
      r = Literal::of_int(l->as_double() != 0.0 ? 1 : 0, t, weak);
    } else {
      // Through the run-time conversion, so folded constants convert exactly as tiles do
      // (float -> int saturates, NaN -> 0; int -> int wraps).
      unsigned char buf[8] = {};
      if (is_float(l->dtype)) {
        double d = l->f;
        convert_elements(DType::F64, &d, t, buf, 1);
      } else {
        int64_t v = l->i;
        convert_elements(l->dtype == DType::U64 ? DType::U64 : DType::I64, &v, t, buf, 1);
      }
      int64_t iv = 0;
      convert_elements(t, buf, is_unsigned_int(t) ? DType::U64 : DType::I64, &iv, 1);
      r = Literal::of_int(iv, t, weak);
    }
    return make_value(r);
  }
  if (a.dtype == t) return x;  // only weakness differs: keep the variable
  ir::Params p{{"new_dtype", t}};
  p.set_flag("weak_type", weak);  // as lax.convert_element_type(weak_type=...): i32 + 1.5 is a weak f32
  return bind1(PrimId::convert_element_type, {x}, p);
}

bool broadcastable(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  size_t off = to.size() - from.size();
  for (size_t k = 0; k < from.size(); ++k)
    if (from[k] != to[off + k] && from[k] != 1) return false;
  return true;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (size_t k = 0; k < n; ++k) {
    int64_t da = k < n - a.size() ? 1 : a[k - (n - a.size())];
    int64_t db = k < n - b.size() ? 1 : b[k - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                  " cannot be broadcast together (dimensions, aligned from the last, must be equal or 1); reshape, "
                  "transpose or slice an operand to match");
    r[k] = da == 1 ? db : da;
  }
  return r;
}

// (Callers that broadcast on the user's behalf check broadcastable() first and say what they
// were doing; this message is for pl::broadcast_to itself.)
Value broadcast(const Value& x, const Shape& shape) {
  const Shape& s = x.shape();
  if (s == shape) return x;
  if (!broadcastable(s, shape))
    throw Error("broadcast_to: cannot broadcast " + x.str() + " to " + shape_str(shape) +
                "; each dimension must equal the target's or be 1 (leading ones may be missing)");
  std::vector<int64_t> dims;
  size_t off = shape.size() - s.size();
  for (size_t k = 0; k < s.size(); ++k) dims.push_back(static_cast<int64_t>(off + k));
  return bind1(PrimId::broadcast_in_dim, {x}, {{"shape", shape}, {"broadcast_dimensions", dims}});
}

std::vector<Value> promote(const char* op, const std::vector<Value>& xs, bool broadcast_scalars) {
  ir::Aval first = aval_of(xs.at(0), op);
  DType t = first.dtype;
  bool weak = first.weak;
  Shape shape = first.shape;
  for (size_t k = 1; k < xs.size(); ++k) {
    const ir::Aval& a = aval_of(xs[k], op);
    auto p = promote_types(t, weak, a.dtype, a.weak);
    t = p.dtype;
    weak = p.weak;
    shape = broadcast_shapes(op, shape, a.shape);
  }
  std::vector<Value> r;
  for (auto& x : xs) {
    Value v = convert(x, t, weak);
    if (!v.shape().empty() || broadcast_scalars) v = broadcast(v, shape);
    r.push_back(v);
  }
  return r;
}

Value to_float(const Value& x) {
  const ir::Aval& a = aval_of(x, "op");
  if (is_float(a.dtype)) return x;
  return convert(x, DType::F32, a.weak);
}

}  // namespace api

// ---- elementwise ----
namespace {
Value unary(PrimId id, const Value& x) { return bind1(id, {x}); }
Value float_unary(PrimId id, const Value& x) { return bind1(id, {api::to_float(x)}); }
Value binary(PrimId id, const Value& a, const Value& b) {
  auto v = api::promote(ir::prim(id).name.c_str(), {a, b}, false);
  return bind1(id, {v[0], v[1]});
}
Value float_binary(PrimId id, const Value& a, const Value& b) {
  auto v = api::promote(ir::prim(id).name.c_str(), {a, b}, false);
  return bind1(id, {api::to_float(v[0]), api::to_float(v[1])});
}
}  // namespace

Value neg(const Value& x) { return unary(PrimId::neg, x); }
Value abs(const Value& x) { return unary(PrimId::abs, x); }
Value sign(const Value& x) { return unary(PrimId::sign, x); }
#define PALLAS_X(name) \
  Value name(const Value& x) { return float_unary(PrimId::name, x); }
PALLAS_X(ceil) PALLAS_X(floor) PALLAS_X(round) PALLAS_X(exp) PALLAS_X(exp2) PALLAS_X(expm1) PALLAS_X(log)
PALLAS_X(log1p) PALLAS_X(sqrt) PALLAS_X(cbrt) PALLAS_X(rsqrt) PALLAS_X(sin) PALLAS_X(cos) PALLAS_X(tan)
PALLAS_X(asin) PALLAS_X(acos) PALLAS_X(atan) PALLAS_X(sinh) PALLAS_X(cosh) PALLAS_X(tanh) PALLAS_X(asinh)
PALLAS_X(acosh) PALLAS_X(atanh) PALLAS_X(logistic) PALLAS_X(erf) PALLAS_X(erf_inv) PALLAS_X(is_finite)
#undef PALLAS_X
Value population_count(const Value& x) { return unary(PrimId::population_count, x); }
Value clz(const Value& x) { return unary(PrimId::clz, x); }
Value logical_not(const Value& x) { return unary(PrimId::not_, x.dtype() == DType::Bool ? x : ne(x, 0)); }
Value bitwise_not(const Value& x) { return unary(PrimId::not_, x); }

Value add(const Value& a, const Value& b) { return binary(PrimId::add, a, b); }
Value sub(const Value& a, const Value& b) { return binary(PrimId::sub, a, b); }
Value mul(const Value& a, const Value& b) { return binary(PrimId::mul, a, b); }
Value div(const Value& a, const Value& b) { return binary(PrimId::div, a, b); }
Value rem(const Value& a, const Value& b) { return binary(PrimId::rem, a, b); }
Value pow(const Value& a, const Value& b) { return float_binary(PrimId::pow, a, b); }
Value atan2(const Value& a, const Value& b) { return float_binary(PrimId::atan2, a, b); }
Value nextafter(const Value& a, const Value& b) { return float_binary(PrimId::nextafter, a, b); }
Value maximum(const Value& a, const Value& b) { return binary(PrimId::max, a, b); }
Value minimum(const Value& a, const Value& b) { return binary(PrimId::min, a, b); }
Value bitwise_and(const Value& a, const Value& b) { return binary(PrimId::and_, a, b); }
Value bitwise_or(const Value& a, const Value& b) { return binary(PrimId::or_, a, b); }
Value bitwise_xor(const Value& a, const Value& b) { return binary(PrimId::xor_, a, b); }
Value shift_left(const Value& a, const Value& b) { return binary(PrimId::shift_left, a, b); }
Value shift_right_arithmetic(const Value& a, const Value& b) { return binary(PrimId::shift_right_arithmetic, a, b); }
Value shift_right_logical(const Value& a, const Value& b) { return binary(PrimId::shift_right_logical, a, b); }
Value eq(const Value& a, const Value& b) { return binary(PrimId::eq, a, b); }
Value ne(const Value& a, const Value& b) { return binary(PrimId::ne, a, b); }
Value lt(const Value& a, const Value& b) { return binary(PrimId::lt, a, b); }
Value le(const Value& a, const Value& b) { return binary(PrimId::le, a, b); }
Value gt(const Value& a, const Value& b) { return binary(PrimId::gt, a, b); }
Value ge(const Value& a, const Value& b) { return binary(PrimId::ge, a, b); }

// Each operator binds under its own line (its operands' conversions were made there).
Value operator+(Operand a, Operand b) { trace::Here h(a.loc); return add(a.v, b.v); }
Value operator-(Operand a, Operand b) { trace::Here h(a.loc); return sub(a.v, b.v); }
Value operator*(Operand a, Operand b) { trace::Here h(a.loc); return mul(a.v, b.v); }
Value operator/(Operand a, Operand b) { trace::Here h(a.loc); return div(a.v, b.v); }
Value operator%(Operand a, Operand b) { trace::Here h(a.loc); return rem(a.v, b.v); }
Value operator&(Operand a, Operand b) { trace::Here h(a.loc); return bitwise_and(a.v, b.v); }
Value operator|(Operand a, Operand b) { trace::Here h(a.loc); return bitwise_or(a.v, b.v); }
Value operator^(Operand a, Operand b) { trace::Here h(a.loc); return bitwise_xor(a.v, b.v); }
Value operator<<(Operand a, Operand b) { trace::Here h(a.loc); return shift_left(a.v, b.v); }
Value operator>>(Operand a, Operand b) {
  trace::Here h(a.loc);
  auto v = api::promote(">>", {a.v, b.v}, false);
  return bind1(is_unsigned_int(v[0].dtype()) ? PrimId::shift_right_logical : PrimId::shift_right_arithmetic, {v[0], v[1]});
}
Value operator==(Operand a, Operand b) { trace::Here h(a.loc); return eq(a.v, b.v); }
Value operator!=(Operand a, Operand b) { trace::Here h(a.loc); return ne(a.v, b.v); }
Value operator<(Operand a, Operand b) { trace::Here h(a.loc); return lt(a.v, b.v); }
Value operator<=(Operand a, Operand b) { trace::Here h(a.loc); return le(a.v, b.v); }
Value operator>(Operand a, Operand b) { trace::Here h(a.loc); return gt(a.v, b.v); }
Value operator>=(Operand a, Operand b) { trace::Here h(a.loc); return ge(a.v, b.v); }
Value operator-(Operand a) { trace::Here h(a.loc); return neg(a.v); }
Value operator!(Operand a) { trace::Here h(a.loc); return logical_not(a.v); }
Value operator~(Operand a) { trace::Here h(a.loc); return bitwise_not(a.v); }

Value where(const Value& c, const Value& x, const Value& y, SourceLocation loc) { trace::Here here(loc);
  Value cb = c.dtype() == DType::Bool ? c : ne(c, 0);
  auto v = api::promote("where", {x, y}, false);
  Shape s = api::broadcast_shapes("where", api::broadcast_shapes("where", v[0].shape(), v[1].shape()), cb.shape());
  Value xb = api::broadcast(v[0], s), yb = api::broadcast(v[1], s);
  if (!cb.shape().empty()) cb = api::broadcast(cb, s);
  return bind1(PrimId::select_n, {cb, yb, xb});
}

Value select_n(const Value& which, const std::vector<Value>& cases, SourceLocation loc) {
  trace::Here here(loc);
  if (cases.empty()) throw Error("select_n: needs at least one case");
  auto v = api::promote("select_n", cases, false);
  Shape s = v[0].shape();
  for (auto& c : v) s = api::broadcast_shapes("select_n", s, c.shape());
  s = api::broadcast_shapes("select_n", s, which.shape());
  std::vector<Value> in{which.shape().empty() ? which : api::broadcast(which, s)};
  for (auto& c : v) in.push_back(api::broadcast(c, s));
  return bind1(PrimId::select_n, in);
}

Value clamp(const Value& lo, const Value& x, const Value& hi, SourceLocation loc) { trace::Here here(loc);
  DType t = x.dtype();
  auto fit = [&](const Value& b, const char* which) {
    Value c = b.weak_type() || b.dtype() == t ? api::convert(b, t, false) : b;
    if (c.shape().empty()) return c;
    if (!api::broadcastable(c.shape(), x.shape()))
      throw Error(std::string("clamp: ") + which + " " + b.str() + " does not broadcast to x's shape " + shape_str(x.shape()) +
                  "; give a scalar bound or one of x's shape");
    return api::broadcast(c, x.shape());
  };
  return bind1(PrimId::clamp, {fit(lo, "lo"), x, fit(hi, "hi")});
}

Value integer_pow(const Value& x, int n, SourceLocation loc) { trace::Here here(loc); return bind1(PrimId::integer_pow, {x}, {{"y", int64_t{n}}}); }
Value square(const Value& x) { return integer_pow(x, 2); }
Value bitcast(const Value& x, DType t, SourceLocation loc) {
  trace::Here here(loc);
  return bind1(PrimId::bitcast_convert_type, {x}, {{"new_dtype", t}}); }
Value stop_gradient(const Value& x) { return bind1(PrimId::stop_gradient, {x}); }
Value convert_element_type(const Value& x, DType t, SourceLocation loc) { trace::Here here(loc); return api::convert(x, t, false); }

// ---- shapes ----
Value broadcast_to(const Value& x, const Shape& shape, SourceLocation loc) { trace::Here here(loc); return api::broadcast(x, shape); }
Value broadcast_in_dim(const Value& x, const Shape& shape, const std::vector<int>& dims, SourceLocation loc) {
  trace::Here here(loc);
  return bind1(PrimId::broadcast_in_dim, {x},
               {{"shape", shape}, {"broadcast_dimensions", std::vector<int64_t>(dims.begin(), dims.end())}});
}
Value reshape(const Value& x, const Shape& shape, SourceLocation loc) { trace::Here here(loc);
  Shape s = shape;
  int64_t known = 1;
  int infer = -1;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == -1) {
      if (infer >= 0) throw Error("reshape: only one dimension may be -1");
      infer = static_cast<int>(k);
    } else {
      known *= s[k];
    }
  }
  if (infer >= 0) s[infer] = known ? shape_size(x.shape()) / known : 0;
  if (s == x.shape()) return x;
  return bind1(PrimId::reshape, {x}, {{"new_sizes", s}});
}
Value squeeze(const Value& x, Axes axes, SourceLocation loc) {
  trace::Here here(loc);
  std::vector<int64_t> dims;
  if (axes.all) {
    for (int k = 0; k < x.ndim(); ++k)
      if (x.shape()[k] == 1) dims.push_back(k);
  } else {
    dims.assign(axes.axes.begin(), axes.axes.end());
  }
  if (dims.empty()) return x;
  return bind1(PrimId::squeeze, {x}, {{"dimensions", dims}});
}
Value expand_dims(const Value& x, int axis, SourceLocation loc) { trace::Here here(loc);
  Shape s = x.shape();
  int n = static_cast<int>(s.size()) + 1;
  int a = axis < 0 ? axis + n : axis;
  if (a < 0 || a >= n) throw Error("expand_dims: axis " + std::to_string(axis) + " is out of range for " + x.str());
  s.insert(s.begin() + a, 1);
  return bind1(PrimId::reshape, {x}, {{"new_sizes", s}});
}
Value transpose(const Value& x, std::vector<int> perm, SourceLocation loc) { trace::Here here(loc);
  std::vector<int64_t> p;
  if (perm.empty())
    for (int k = x.ndim() - 1; k >= 0; --k) p.push_back(k);
  else
    p.assign(perm.begin(), perm.end());
  return bind1(PrimId::transpose, {x}, {{"permutation", p}});
}
Value iota(DType dtype, const Shape& shape, int dimension, SourceLocation loc) { trace::Here here(loc);
  int d = ops::normalize_axis("iota", dimension, static_cast<int>(shape.size()));  // -1: the last
  return bind1(PrimId::iota, {}, {{"dtype", dtype}, {"shape", shape}, {"dimension", int64_t{d}}});
}
Value arange(int64_t stop, SourceLocation loc) { return iota(DType::I32, {stop}, 0, loc); }
Value arange(int64_t start, int64_t stop, SourceLocation loc) {
  trace::Here here(loc);
  Value r = iota(DType::I32, {stop - start}, 0);
  return start ? add(r, Value(start)) : r;
}
Filled::operator Value() const {
  Value c = Value::constant(value, dtype);
  return shape.empty() ? c : api::broadcast(c, shape);
}
Value full_like(const Value& x, double value, SourceLocation loc) {
  trace::Here here(loc);
  return Filled{x.shape(), value, x.dtype()};
}
Value zeros_like(const Value& x, SourceLocation loc) { return full_like(x, 0.0, loc); }

// ---- dot ----
Value dot(const Value& a, const Value& b, DotOptions o, SourceLocation loc) { trace::Here here(loc);
  // Weight-only quantised operands: an i8 or 8-bit float operand with a wider float one is
  // converted to the wider float's dtype as it enters the dot (exact: every i8, f8e4m3 and
  // f8e5m2 value is an f16, bf16, f32 and f64). Other mixed operands stay an error of the dot
  // rule (a silent f32 x f16 is more often a bug; e4m3 x e5m2 has no exact common 8-bit type).
  auto narrow = [](DType t) { return t == DType::I8 || is_float8(t); };
  auto wide_float = [](DType t) { return is_float(t) && !is_float8(t); };
  if (a.dtype() != b.dtype() && ((narrow(a.dtype()) && wide_float(b.dtype())) || (narrow(b.dtype()) && wide_float(a.dtype())))) {
    DType t = wide_float(a.dtype()) ? a.dtype() : b.dtype();
    return dot(a.dtype() == t ? a : a.astype(t), b.dtype() == t ? b : b.astype(t), o, loc);
  }
  ir::Params p;
  p.set_flag("trans_a", o.trans_a);
  p.set_flag("trans_b", o.trans_b);
  if (o.precision != Precision::Default) p.set("precision", static_cast<int64_t>(o.precision));
  if (o.preferred_type) p.set("preferred_type", *o.preferred_type);
  return bind1(PrimId::dot, {a, b}, p);
}

// ---- reductions ----
namespace {
std::vector<int64_t> axes_of(const Value& x, const Axes& axes) {
  std::vector<int64_t> r;
  if (axes.all)
    for (int k = 0; k < x.ndim(); ++k) r.push_back(k);
  else
    for (int a : axes.axes) r.push_back(ops::normalize_axis("reduce", a, x.ndim()));
  return r;
}
Value keep(const Value& r, const Value& x, const std::vector<int64_t>& axes, bool keepdims) {
  if (!keepdims) return r;
  Shape s = x.shape();
  for (int64_t a : axes) s[a] = 1;
  return reshape(r, s);
}
Value reduce(PrimId id, const Value& x, const Axes& axes, bool keepdims) {
  auto ax = axes_of(x, axes);
  if (ax.empty()) return x;
  return keep(bind1(id, {x}, {{"axes", ax}}), x, ax, keepdims);
}
Value arg(PrimId id, const Value& x, int axis, bool keepdims) {
  int a = ops::normalize_axis(id == PrimId::argmax ? "argmax" : "argmin", axis, x.ndim());
  return keep(bind1(id, {x}, {{"axis", int64_t{a}}, {"index_dtype", DType::I32}}), x, {a}, keepdims);
}
}  // namespace
Value sum(const Value& x, Axes axes, bool keepdims, SourceLocation loc) { trace::Here here(loc); return reduce(PrimId::reduce_sum, x, axes, keepdims); }
Value max(const Value& x, Axes axes, bool keepdims, SourceLocation loc) { trace::Here here(loc); return reduce(PrimId::reduce_max, x, axes, keepdims); }
Value min(const Value& x, Axes axes, bool keepdims, SourceLocation loc) { trace::Here here(loc); return reduce(PrimId::reduce_min, x, axes, keepdims); }
Value prod(const Value& x, Axes axes, bool keepdims, SourceLocation loc) { trace::Here here(loc); return reduce(PrimId::reduce_prod, x, axes, keepdims); }
Value argmax(const Value& x, int axis, bool keepdims, SourceLocation loc) { trace::Here here(loc); return arg(PrimId::argmax, x, axis, keepdims); }
Value argmin(const Value& x, int axis, bool keepdims, SourceLocation loc) { trace::Here here(loc); return arg(PrimId::argmin, x, axis, keepdims); }
Value cumsum(const Value& x, int axis, SourceLocation loc) { trace::Here here(loc);
  return bind1(PrimId::cumsum, {x}, {{"axis", int64_t{ops::normalize_axis("cumsum", axis, x.ndim())}}});
}

// ---- grid ----
Value program_id(int axis, SourceLocation loc) {
  trace::Here here(loc);
  auto& f = trace::require_frame("program_id");
  const auto& ctx = f.context();
  if (!ctx.allows_program_id)
    throw Error(ctx.what + ": pl::program_id is only available in kernels; index maps receive the grid indices as arguments");
  if (axis < 0 || axis >= static_cast<int>(ctx.grid.size()))
    throw Error(ctx.what + ": program_id axis " + std::to_string(axis) + " is out of bounds for a grid of rank " +
                std::to_string(ctx.grid.size()));
  return bind1(PrimId::program_id, {}, {{"axis", int64_t{axis}}});
}
Value num_programs(int axis, SourceLocation loc) {
  trace::Here here(loc);
  auto& f = trace::require_frame("num_programs");
  const auto& ctx = f.context();
  if (axis < 0 || axis >= static_cast<int>(ctx.grid.size()))
    throw Error(ctx.what + ": num_programs axis " + std::to_string(axis) + " is out of bounds for a grid of rank " +
                std::to_string(ctx.grid.size()));
  if (ctx.grid[axis] >= 0) return Value::constant(static_cast<double>(ctx.grid[axis]), DType::I32);
  return bind1(PrimId::num_programs, {}, {{"axis", int64_t{axis}}});
}

// ---- hints, printing ----
Value multiple_of(const Value& x, std::vector<int64_t> v, SourceLocation loc) {
  trace::Here here(loc);
  return bind1(PrimId::multiple_of, {x}, {{"values", v}});
}
Value max_contiguous(const Value& x, std::vector<int64_t> v, SourceLocation loc) {
  trace::Here here(loc);
  return bind1(PrimId::max_contiguous, {x}, {{"values", v}});
}
void debug_print(const std::string& fmt, const std::vector<Value>& values, SourceLocation loc) {
  trace::Here here(loc);
  trace::bind(PrimId::debug_print, values, {{"fmt", fmt}});
}

}  // namespace pallas
