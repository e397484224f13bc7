// Unary elementwise ops against double-precision references, for every dtype family they
// take, with edge values (NaN, infinities, signed zeros, extremes, subnormals, int min/max).
#include <bit>

#include "tests/test_util.h"

namespace pt {
namespace {

struct FloatUnary {
  const char* name;
  pl::Value (*op)(const pl::Value&);
  double (*ref)(double);
  double lo, hi;  // domain of the random inputs (edge values come on top)
};

double erf_inv_ref(double y) {
  if (std::isnan(y) || y < -1 || y > 1) return std::nan("");
  if (y == 1) return INFINITY;
  if (y == -1) return -INFINITY;
  if (y == 0) return y;  // keeps the sign of zero
  double lo = -7, hi = 7;  // bisection on erf, independent of the library's method
  for (int k = 0; k < 200; ++k) {
    double mid = 0.5 * (lo + hi);
    (std::erf(mid) < y ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

const FloatUnary kFloatUnary[] = {
    {"neg", pl::neg, [](double x) { return -x; }, -4, 4},
    {"abs", pl::abs, [](double x) { return std::fabs(x); }, -4, 4},
    {"sign", pl::sign, [](double x) { return std::isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : x; }, -4, 4},
    {"ceil", pl::ceil, [](double x) { return std::ceil(x); }, -6, 6},
    {"floor", pl::floor, [](double x) { return std::floor(x); }, -6, 6},
    {"round", pl::round, [](double x) { return std::round(x); }, -6, 6},  // half away from zero (lax.round)
    {"exp", pl::exp, [](double x) { return std::exp(x); }, -5, 5},
    {"exp2", pl::exp2, [](double x) { return std::exp2(x); }, -5, 5},
    {"expm1", pl::expm1, [](double x) { return std::expm1(x); }, -2, 2},
    {"log", pl::log, [](double x) { return std::log(x); }, 0.01, 10},
    {"log1p", pl::log1p, [](double x) { return std::log1p(x); }, -0.9, 10},
    {"sqrt", pl::sqrt, [](double x) { return std::sqrt(x); }, 0, 10},
    {"cbrt", pl::cbrt, [](double x) { return std::cbrt(x); }, -10, 10},
    {"rsqrt", pl::rsqrt, [](double x) { return 1.0 / std::sqrt(x); }, 0.01, 10},
    {"sin", pl::sin, [](double x) { return std::sin(x); }, -6, 6},
    {"cos", pl::cos, [](double x) { return std::cos(x); }, -6, 6},
    {"tan", pl::tan, [](double x) { return std::tan(x); }, -1.5, 1.5},
    {"asin", pl::asin, [](double x) { return std::asin(x); }, -1, 1},
    {"acos", pl::acos, [](double x) { return std::acos(x); }, -1, 1},
    {"atan", pl::atan, [](double x) { return std::atan(x); }, -5, 5},
    {"sinh", pl::sinh, [](double x) { return std::sinh(x); }, -3, 3},
    {"cosh", pl::cosh, [](double x) { return std::cosh(x); }, -3, 3},
    {"tanh", pl::tanh, [](double x) { return std::tanh(x); }, -3, 3},
    {"asinh", pl::asinh, [](double x) { return std::asinh(x); }, -5, 5},
    {"acosh", pl::acosh, [](double x) { return std::acosh(x); }, 1, 6},
    {"atanh", pl::atanh, [](double x) { return std::atanh(x); }, -0.95, 0.95},
    {"logistic", pl::logistic, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -6, 6},
    {"sigmoid", pl::sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -6, 6},
    {"erf", pl::erf, [](double x) { return std::erf(x); }, -3, 3},
    {"erf_inv", pl::erf_inv, erf_inv_ref, -0.9, 0.9},
    {"square", pl::square, [](double x) { return x * x; }, -4, 4},
    {"negate_operator", [](const pl::Value& x) { return -x; }, [](double x) { return -x; }, -4, 4},
};

class FloatUnaryTest : public ::testing::TestWithParam<std::tuple<int, pl::DType>> {};

TEST_P(FloatUnaryTest, MatchesReference) {
  const FloatUnary& op = kFloatUnary[std::get<0>(GetParam())];
  pl::DType t = std::get<1>(GetParam());
  const pl::Shape shape{8, 32};
  auto in = with_edges(uniform(256, 1 + std::get<0>(GetParam()), op.lo, op.hi), t);
  pl::Array x = make_array(in, shape, t);
  pl::Array out = run_unary(op.op, x, t);
  ASSERT_EQ(out.dtype(), t);
  ASSERT_EQ(out.shape(), shape);
  std::vector<double> want;
  for (double v : in) want.push_back(round_to(op.ref(v), t));
  EXPECT_TRUE(close(to_doubles(out), want, tol_for(t))) << op.name << " on " << pl::dtype_name(t);
}

std::string float_unary_name(const ::testing::TestParamInfo<std::tuple<int, pl::DType>>& info) {
  return std::string(kFloatUnary[std::get<0>(info.param)].name) + "_" + pl::dtype_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Ops, FloatUnaryTest,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kFloatUnary))),
                                            ::testing::ValuesIn(float_dtypes())),
                         float_unary_name);

// is_finite gives bool for every float dtype.
TEST(UnaryOps, IsFinite) {
  for (pl::DType t : float_dtypes()) {
    SCOPED_TRACE(pl::dtype_name(t));
    auto in = with_edges(normal(64, 3), t);
    pl::Array out = run_unary(pl::is_finite, make_array(in, {2, 32}, t), pl::bool_);
    ASSERT_EQ(out.dtype(), pl::bool_);
    auto got = out.to_vector<bool>();
    for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(got[i], std::isfinite(in[i])) << "element " << i << " = " << in[i];
  }
}

// Integer operands of float ops are converted to f32 first (as jnp).
TEST(UnaryOps, IntegerOperandOfFloatOpGivesF32) {
  std::vector<int32_t> in;
  for (int k = 0; k < 64; ++k) in.push_back(k - 30);
  pl::Array x = pl::Array::from_vector(in, {2, 32});
  pl::Array out = run_unary(pl::exp, x, pl::f32);
  ASSERT_EQ(out.dtype(), pl::f32);
  std::vector<double> want;
  for (int32_t v : in) want.push_back(round_to(std::exp(static_cast<double>(v)), pl::f32));
  EXPECT_TRUE(close(to_doubles(out), want, tol_for(pl::f32)));
  // and sqrt of an integer, and is_finite of an integer (always true)
  pl::Array s = run_unary(pl::sqrt, pl::Array::from_vector(std::vector<int32_t>(64, 49), {2, 32}), pl::f32);
  for (double v : to_doubles(s)) EXPECT_EQ(v, 7.0);
}

// ---- integer unary ops ----
template <class T>
using W = std::make_unsigned_t<T>;

template <class T>
T ref_neg(T x) { return static_cast<T>(W<T>(0) - static_cast<W<T>>(x)); }
template <class T>
T ref_abs(T x) {
  if constexpr (std::is_unsigned_v<T>) return x;
  else return x < 0 ? ref_neg(x) : x;  // abs(min) wraps to min
}
template <class T>
T ref_sign(T x) { return static_cast<T>(x > 0 ? 1 : (std::is_signed_v<T> && x < 0) ? -1 : 0); }
template <class T>
T ref_popcount(T x) {
  int n = 0;
  for (W<T> u = static_cast<W<T>>(x); u; u >>= 1) n += u & 1;
  return static_cast<T>(n);
}
template <class T>
T ref_clz(T x) {
  int bits = sizeof(T) * 8, n = 0;
  W<T> u = static_cast<W<T>>(x);
  for (int b = bits - 1; b >= 0 && !((u >> b) & 1); --b) ++n;
  return static_cast<T>(n);
}

template <class T>
void check_int_unary(const char* name, pl::Value (*op)(const pl::Value&), T (*ref)(T)) {
  SCOPED_TRACE(std::string(name) + " on " + pl::dtype_name(pl::dtype_of<T>()));
  auto in = random_ints<T>(128, 11);
  pl::Array x = pl::Array::from_vector(in, {4, 32});
  pl::Array out = run_unary(op, x, pl::dtype_of<T>());
  ASSERT_EQ(out.dtype(), pl::dtype_of<T>());
  std::vector<T> want;
  for (T v : in) want.push_back(ref(v));
  EXPECT_TRUE(equal(out.to_vector<T>(), want));
}

template <class T>
void check_all_int_unary() {
  check_int_unary<T>("neg", pl::neg, ref_neg<T>);
  check_int_unary<T>("abs", pl::abs, ref_abs<T>);
  check_int_unary<T>("sign", pl::sign, ref_sign<T>);
  check_int_unary<T>("bitwise_not", pl::bitwise_not, +[](T x) { return static_cast<T>(~x); });
  check_int_unary<T>("operator~", +[](const pl::Value& v) { return ~v; }, +[](T x) { return static_cast<T>(~x); });
  check_int_unary<T>("population_count", pl::population_count, ref_popcount<T>);
  check_int_unary<T>("clz", pl::clz, ref_clz<T>);
  check_int_unary<T>("integer_pow3", +[](const pl::Value& v) { return pl::integer_pow(v, 3); },
                     +[](T x) { uint64_t u = static_cast<uint64_t>(x); return static_cast<T>(u * u * u); });
}

TEST(UnaryOps, IntI8) { check_all_int_unary<int8_t>(); }
TEST(UnaryOps, IntI16) { check_all_int_unary<int16_t>(); }
TEST(UnaryOps, IntI32) { check_all_int_unary<int32_t>(); }
TEST(UnaryOps, IntI64) { check_all_int_unary<int64_t>(); }
TEST(UnaryOps, IntU8) { check_all_int_unary<uint8_t>(); }
TEST(UnaryOps, IntU16) { check_all_int_unary<uint16_t>(); }
TEST(UnaryOps, IntU32) { check_all_int_unary<uint32_t>(); }
TEST(UnaryOps, IntU64) { check_all_int_unary<uint64_t>(); }

// logical_not (operator!) gives bool: for bools it negates, for ints and floats it tests == 0.
TEST(UnaryOps, LogicalNot) {
  std::vector<bool> b;
  for (int k = 0; k < 64; ++k) b.push_back((k * 7) % 3 == 0);
  pl::Array out = run_unary([](const pl::Value& v) { return !v; }, pl::Array::from_vector(b, {2, 32}), pl::bool_);
  auto got = out.to_vector<bool>();
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(got[i], !b[i]);
  // bitwise_not of a bool is logical not as well
  out = run_unary(pl::bitwise_not, pl::Array::from_vector(b, {2, 32}), pl::bool_);
  got = out.to_vector<bool>();
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(got[i], !b[i]);

  auto ints = random_ints<int32_t>(64, 5);
  out = run_unary(pl::logical_not, pl::Array::from_vector(ints, {2, 32}), pl::bool_);
  got = out.to_vector<bool>();
  for (size_t i = 0; i < ints.size(); ++i) EXPECT_EQ(got[i], ints[i] == 0) << ints[i];

  auto fl = with_edges(normal(64, 5), pl::f32);
  out = run_unary(pl::logical_not, make_array(fl, {2, 32}, pl::f32), pl::bool_);
  got = out.to_vector<bool>();
  for (size_t i = 0; i < fl.size(); ++i) EXPECT_EQ(got[i], fl[i] == 0.0) << fl[i];  // NaN is "true": not gives false
}

// integer_pow on floats: positive, zero and negative exponents (x^-n = 1/x^n).
TEST(UnaryOps, IntegerPowFloat) {
  for (pl::DType t : float_dtypes())
    for (int n : {0, 1, 2, 5, -1, -3}) {
      SCOPED_TRACE(std::string(pl::dtype_name(t)) + " n=" + std::to_string(n));
      auto in = with_edges(uniform(64, 9, -2, 2), t);
      pl::Array out = run_unary([n](const pl::Value& v) { return pl::integer_pow(v, n); }, make_array(in, {2, 32}, t), t);
      std::vector<double> want;
      for (double v : in) want.push_back(round_to(std::pow(v, n), t));
      // repeated squaring rounds after each product: |n| roundings at most
      EXPECT_TRUE(close(to_doubles(out), want, tol_for(t) * 4, /*check_zero_sign=*/true));
    }
}

}  // namespace
}  // namespace pt
