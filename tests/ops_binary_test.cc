// Binary elementwise ops against references, for floats (every pair of edge values plus
// random pairs), integers of every width (wrapping, division by zero, INT_MIN / -1, shifts
// by the bit width and by negative amounts) and bools.
#include "tests/test_util.h"

namespace pt {
namespace {

// Pairs (a, b): every pair of edge values first, then random values in [lo, hi].
struct Pairs {
  std::vector<double> a, b;
};
Pairs float_pairs(pl::DType t, size_t n, uint64_t seed, double lo, double hi) {
  Pairs p;
  auto e = float_edges(t);
  for (double x : e)
    for (double y : e) {
      p.a.push_back(x);
      p.b.push_back(y);
    }
  auto ra = uniform(n, seed, lo, hi), rb = uniform(n, seed + 100, lo, hi);
  for (size_t k = 0; p.a.size() < n; ++k) {
    p.a.push_back(ra[k]);
    p.b.push_back(rb[k]);
  }
  p.a.resize(n);
  p.b.resize(n);
  for (auto& x : p.a) x = round_to(x, t);
  for (auto& x : p.b) x = round_to(x, t);
  return p;
}

double ref_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
double ref_min(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

struct FloatBinary {
  const char* name;
  pl::Value (*op)(const pl::Value&, const pl::Value&);
  double (*ref)(double, double);
  double lo, hi;
};

const FloatBinary kFloatBinary[] = {
    {"add", pl::add, [](double a, double b) { return a + b; }, -10, 10},
    {"sub", pl::sub, [](double a, double b) { return a - b; }, -10, 10},
    {"mul", pl::mul, [](double a, double b) { return a * b; }, -10, 10},
    {"div", pl::div, [](double a, double b) { return a / b; }, -10, 10},
    {"rem", pl::rem, [](double a, double b) { return std::fmod(a, b); }, -10, 10},
    {"pow", pl::pow, [](double a, double b) { return std::pow(a, b); }, 0.1, 3},
    {"atan2", pl::atan2, [](double a, double b) { return std::atan2(a, b); }, -5, 5},
    {"maximum", pl::maximum, ref_max, -10, 10},
    {"minimum", pl::minimum, ref_min, -10, 10},
    {"operator_plus", [](const pl::Value& a, const pl::Value& b) { return a + b; }, [](double a, double b) { return a + b; }, -10, 10},
    {"operator_minus", [](const pl::Value& a, const pl::Value& b) { return a - b; }, [](double a, double b) { return a - b; }, -10, 10},
    {"operator_times", [](const pl::Value& a, const pl::Value& b) { return a * b; }, [](double a, double b) { return a * b; }, -10, 10},
    {"operator_div", [](const pl::Value& a, const pl::Value& b) { return a / b; }, [](double a, double b) { return a / b; }, -10, 10},
    {"operator_mod", [](const pl::Value& a, const pl::Value& b) { return a % b; }, [](double a, double b) { return std::fmod(a, b); }, -10, 10},
};

class FloatBinaryTest : public ::testing::TestWithParam<std::tuple<int, pl::DType>> {};

TEST_P(FloatBinaryTest, MatchesReference) {
  const FloatBinary& op = kFloatBinary[std::get<0>(GetParam())];
  pl::DType t = std::get<1>(GetParam());
  Pairs p = float_pairs(t, 512, 7 + std::get<0>(GetParam()), op.lo, op.hi);
  pl::Array out = run_binary(op.op, make_array(p.a, {16, 32}, t), make_array(p.b, {16, 32}, t), t);
  ASSERT_EQ(out.dtype(), t);
  std::vector<double> want;
  for (size_t i = 0; i < p.a.size(); ++i) want.push_back(round_to(op.ref(p.a[i], p.b[i]), t));
  EXPECT_TRUE(close(to_doubles(out), want, tol_for(t))) << op.name << " on " << pl::dtype_name(t);
}

INSTANTIATE_TEST_SUITE_P(Ops, FloatBinaryTest,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kFloatBinary))),
                                            ::testing::ValuesIn(float_dtypes())),
                         [](const auto& info) {
                           return std::string(kFloatBinary[std::get<0>(info.param)].name) + "_" +
                                  pl::dtype_name(std::get<1>(info.param));
                         });

// nextafter steps one representable value of the operand's own format; compared bit for bit.
double ref_nextafter(double a, double b, pl::DType t) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  if (a == b) return b;
  // the smallest step of format t at a, towards b: scan the neighbours of a in t
  double dir = b > a ? 1 : -1;
  if (std::isinf(a)) return std::copysign(float_max(t), a);
  if (a == 0) {
    double tiny = std::ldexp(float_min_normal(t), -(float_precision(t) - 1));
    return dir * tiny;
  }
  int e = std::max(std::ilogb(a), std::ilogb(float_min_normal(t)));
  double ulp = std::ldexp(1.0, e - (float_precision(t) - 1));
  // stepping down from a power of two uses the finer spacing below it
  if (std::fabs(a) == std::ldexp(1.0, e) && (dir > 0) != (a > 0) && e > std::ilogb(float_min_normal(t))) ulp /= 2;
  double r = a + dir * ulp;
  if (std::fabs(r) > float_max(t)) return std::copysign(INFINITY, r);
  if (r == 0) return std::copysign(0.0, a);  // nextafter(-tiny, +1) = -0
  return r;
}

TEST(BinaryOps, Nextafter) {
  for (pl::DType t : float_dtypes()) {
    SCOPED_TRACE(pl::dtype_name(t));
    Pairs p = float_pairs(t, 512, 21, -4, 4);
    pl::Array out = run_binary(pl::nextafter, make_array(p.a, {16, 32}, t), make_array(p.b, {16, 32}, t), t);
    auto got = to_doubles(out);
    for (size_t i = 0; i < got.size(); ++i) {
      double want = ref_nextafter(p.a[i], p.b[i], t);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
      } else {
        EXPECT_EQ(got[i], want) << "nextafter(" << p.a[i] << ", " << p.b[i] << ")";
        if (want == 0) EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << i;
      }
    }
  }
}

// Comparisons: NaN compares unequal to everything (ne true), -0 == +0.
// max and min order -0 below +0 and give NaN when either operand is NaN, elementwise and in
// row reductions (on sm_80+ one max.NaN / min.NaN instruction), for every float dtype.
TEST(BinaryOps, MaxMinOrderSignedZerosAndPropagateNaN) {
  const double z = 0.0, nz = -0.0, nan = NAN;
  // pairs (a, b): both orders of the zeros, equal zeros, a NaN on either side and on both
  std::vector<double> av = {z, nz, z, nz, nan, 1, nan, -2}, bv = {nz, z, z, nz, 1, nan, nan, -3};
  for (pl::DType t : float_dtypes()) {
    SCOPED_TRACE(pl::dtype_name(t));
    std::vector<double> a, b;
    for (int r = 0; r < 8; ++r) a.insert(a.end(), av.begin(), av.end()), b.insert(b.end(), bv.begin(), bv.end());
    for (bool is_max : {true, false}) {
      auto op = is_max ? [](const pl::Value& x, const pl::Value& y) { return pl::maximum(x, y); }
                       : [](const pl::Value& x, const pl::Value& y) { return pl::minimum(x, y); };
      auto got = to_doubles(run_binary(op, make_array(a, {8, 8}, t), make_array(b, {8, 8}, t), t));
      for (size_t i = 0; i < got.size(); ++i) {
        double want = is_max ? ref_max(a[i], b[i]) : ref_min(a[i], b[i]);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got[i])) << (is_max ? "max(" : "min(") << a[i] << ", " << b[i] << ")";
        } else {
          EXPECT_EQ(got[i], want) << i;
          EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << (is_max ? "max(" : "min(") << a[i] << ", " << b[i] << ")";
        }
      }
    }
    // rows of zeros of both signs: max gives +0, min -0; a row with a NaN gives NaN
    std::vector<double> rows(4 * 32);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = (i * 7) % 3 ? nz : z;
    rows[2 * 32 + 5] = nan;
    auto call = pl::pallas_call(
        [](pl::Ref x, pl::Ref mx, pl::Ref mn) {
          pl::Value v = x[pl::all];
          mx[pl::all] = pl::max(v, {1});
          mn[pl::all] = pl::min(v, {1});
        },
        {pl::ShapeDtype({4}, t), pl::ShapeDtype({4}, t)}, {.name = "signed_zero_rows"});
    auto outs = call({make_array(rows, {4, 32}, t)});
    auto mx = to_doubles(outs[0]), mn = to_doubles(outs[1]);
    for (int r = 0; r < 4; ++r) {
      if (r == 2) {
        EXPECT_TRUE(std::isnan(mx[r]) && std::isnan(mn[r])) << "row " << r;
        continue;
      }
      EXPECT_TRUE(mx[r] == 0 && !std::signbit(mx[r])) << "max of row " << r << " = " << mx[r];
      EXPECT_TRUE(mn[r] == 0 && std::signbit(mn[r])) << "min of row " << r << " = " << mn[r];
    }
  }
}

TEST(BinaryOps, FloatComparisons) {
  struct Cmp {
    const char* name;
    pl::Value (*op)(const pl::Value&, const pl::Value&);
    bool (*ref)(double, double);
  };
  const Cmp cmps[] = {
      {"eq", pl::eq, [](double a, double b) { return a == b; }},
      {"ne", pl::ne, [](double a, double b) { return a != b; }},
      {"lt", pl::lt, [](double a, double b) { return a < b; }},
      {"le", pl::le, [](double a, double b) { return a <= b; }},
      {"gt", pl::gt, [](double a, double b) { return a > b; }},
      {"ge", pl::ge, [](double a, double b) { return a >= b; }},
      {"==", [](const pl::Value& a, const pl::Value& b) { return a == b; }, [](double a, double b) { return a == b; }},
      {"!=", [](const pl::Value& a, const pl::Value& b) { return a != b; }, [](double a, double b) { return a != b; }},
      {"<", [](const pl::Value& a, const pl::Value& b) { return a < b; }, [](double a, double b) { return a < b; }},
      {">=", [](const pl::Value& a, const pl::Value& b) { return a >= b; }, [](double a, double b) { return a >= b; }},
  };
  for (pl::DType t : float_dtypes())
    for (const Cmp& c : cmps) {
      SCOPED_TRACE(std::string(c.name) + " " + pl::dtype_name(t));
      Pairs p = float_pairs(t, 512, 3, -2, 2);
      pl::Array out = run_binary(c.op, make_array(p.a, {16, 32}, t), make_array(p.b, {16, 32}, t), pl::bool_);
      ASSERT_EQ(out.dtype(), pl::bool_);
      auto got = out.to_vector<bool>();
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], c.ref(p.a[i], p.b[i])) << p.a[i] << " vs " << p.b[i];
    }
}

// ---- integers ----
template <class T>
using U = std::make_unsigned_t<T>;
template <class T>
constexpr int kBits = sizeof(T) * 8;

template <class T>
struct IntRef {
  static T add(T a, T b) { return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
  static T sub(T a, T b) { return static_cast<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
  static T mul(T a, T b) { return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }
  static T div(T a, T b) {  // XLA: x / 0 = -1 (all ones), INT_MIN / -1 = INT_MIN
    if (b == 0) return static_cast<T>(-1);
    if (std::is_signed_v<T> && a == std::numeric_limits<T>::min() && b == static_cast<T>(-1)) return a;
    return static_cast<T>(a / b);
  }
  static T rem(T a, T b) {  // x % 0 = x, INT_MIN % -1 = 0, sign of the dividend
    if (b == 0) return a;
    if (std::is_signed_v<T> && a == std::numeric_limits<T>::min() && b == static_cast<T>(-1)) return 0;
    return static_cast<T>(a % b);
  }
  static T max(T a, T b) { return a > b ? a : b; }
  static T min(T a, T b) { return a < b ? a : b; }
  static T and_(T a, T b) { return static_cast<T>(a & b); }
  static T or_(T a, T b) { return static_cast<T>(a | b); }
  static T xor_(T a, T b) { return static_cast<T>(a ^ b); }
  // shift amounts outside [0, bits) give 0 (left, logical) or the sign fill (arithmetic)
  static bool out_of_range(T b) { return static_cast<uint64_t>(static_cast<U<T>>(b)) >= kBits<T>; }
  static T shl(T a, T b) {
    if (out_of_range(b)) return 0;
    return static_cast<T>(static_cast<uint64_t>(static_cast<U<T>>(a)) << static_cast<int>(b));
  }
  static T shr_logical(T a, T b) {
    if (out_of_range(b)) return 0;
    return static_cast<T>(static_cast<U<T>>(a) >> static_cast<int>(b));
  }
  static T shr_arith(T a, T b) {  // on the two's-complement pattern, for unsigned too (as XLA)
    using S = std::make_signed_t<T>;
    S s = static_cast<S>(a);
    int sh = out_of_range(b) ? kBits<T> - 1 : static_cast<int>(b);
    return static_cast<T>(static_cast<S>(s >> sh));
  }
};

template <class T>
void check_int_binary(const char* name, pl::Value (*op)(const pl::Value&, const pl::Value&), T (*ref)(T, T),
                      bool shift_amounts = false) {
  SCOPED_TRACE(std::string(name) + " on " + pl::dtype_name(pl::dtype_of<T>()));
  auto ea = random_ints<T>(8, 1), eb = random_ints<T>(8, 2);  // the edge values
  std::vector<T> a, b;
  for (T x : ea)
    for (T y : eb) a.push_back(x), b.push_back(y);
  auto ra = random_ints<T>(192, 3, false), rb = random_ints<T>(192, 4, false);
  a.insert(a.end(), ra.begin(), ra.end());
  b.insert(b.end(), rb.begin(), rb.end());
  if (shift_amounts)  // amounts from -2 to bits + 2: in range, the bit width, beyond, negative
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<T>(static_cast<int>(i % (kBits<T> + 5)) - 2);
  pl::Array out = run_binary(op, pl::Array::from_vector(a, {8, 32}), pl::Array::from_vector(b, {8, 32}), pl::dtype_of<T>());
  ASSERT_EQ(out.dtype(), pl::dtype_of<T>());
  std::vector<T> want;
  for (size_t i = 0; i < a.size(); ++i) want.push_back(ref(a[i], b[i]));
  auto got = out.to_vector<T>();
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(static_cast<int64_t>(got[i]), static_cast<int64_t>(want[i]))
        << name << "(" << static_cast<int64_t>(a[i]) << ", " << static_cast<int64_t>(b[i]) << ")";
}

template <class T>
void check_int_comparisons() {
  auto a = random_ints<T>(256, 8), b = random_ints<T>(256, 9);
  for (size_t i = 0; i < 32; ++i) b[i] = a[i];  // some equal pairs
  struct C {
    pl::Value (*op)(const pl::Value&, const pl::Value&);
    bool (*ref)(T, T);
  };
  const C cs[] = {{pl::eq, [](T x, T y) { return x == y; }}, {pl::ne, [](T x, T y) { return x != y; }},
                  {pl::lt, [](T x, T y) { return x < y; }},  {pl::le, [](T x, T y) { return x <= y; }},
                  {pl::gt, [](T x, T y) { return x > y; }},  {pl::ge, [](T x, T y) { return x >= y; }}};
  for (const C& c : cs) {
    pl::Array out = run_binary(c.op, pl::Array::from_vector(a, {8, 32}), pl::Array::from_vector(b, {8, 32}), pl::bool_);
    auto got = out.to_vector<bool>();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(got[i], c.ref(a[i], b[i])) << static_cast<int64_t>(a[i]);
  }
}

template <class T>
void check_all_int_binary() {
  using R = IntRef<T>;
  check_int_binary<T>("add", pl::add, R::add);
  check_int_binary<T>("sub", pl::sub, R::sub);
  check_int_binary<T>("mul", pl::mul, R::mul);
  check_int_binary<T>("div", pl::div, R::div);
  check_int_binary<T>("operator/", [](const pl::Value& a, const pl::Value& b) { return a / b; }, R::div);
  check_int_binary<T>("rem", pl::rem, R::rem);
  check_int_binary<T>("operator%", [](const pl::Value& a, const pl::Value& b) { return a % b; }, R::rem);
  check_int_binary<T>("maximum", pl::maximum, R::max);
  check_int_binary<T>("minimum", pl::minimum, R::min);
  check_int_binary<T>("bitwise_and", pl::bitwise_and, R::and_);
  check_int_binary<T>("bitwise_or", pl::bitwise_or, R::or_);
  check_int_binary<T>("bitwise_xor", pl::bitwise_xor, R::xor_);
  check_int_binary<T>("operator&", [](const pl::Value& a, const pl::Value& b) { return a & b; }, R::and_);
  check_int_binary<T>("operator|", [](const pl::Value& a, const pl::Value& b) { return a | b; }, R::or_);
  check_int_binary<T>("operator^", [](const pl::Value& a, const pl::Value& b) { return a ^ b; }, R::xor_);
  check_int_binary<T>("shift_left", pl::shift_left, R::shl, true);
  check_int_binary<T>("shift_right_logical", pl::shift_right_logical, R::shr_logical, true);
  check_int_binary<T>("shift_right_arithmetic", pl::shift_right_arithmetic, R::shr_arith, true);
  check_int_binary<T>("operator<<", [](const pl::Value& a, const pl::Value& b) { return a << b; }, R::shl, true);
  // >> is arithmetic for signed and logical for unsigned operands
  check_int_binary<T>("operator>>", [](const pl::Value& a, const pl::Value& b) { return a >> b; },
                      std::is_signed_v<T> ? R::shr_arith : R::shr_logical, true);
  check_int_comparisons<T>();
}

TEST(BinaryOps, IntI8) { check_all_int_binary<int8_t>(); }
TEST(BinaryOps, IntI16) { check_all_int_binary<int16_t>(); }
TEST(BinaryOps, IntI32) { check_all_int_binary<int32_t>(); }
TEST(BinaryOps, IntI64) { check_all_int_binary<int64_t>(); }
TEST(BinaryOps, IntU8) { check_all_int_binary<uint8_t>(); }
TEST(BinaryOps, IntU16) { check_all_int_binary<uint16_t>(); }
TEST(BinaryOps, IntU32) { check_all_int_binary<uint32_t>(); }
TEST(BinaryOps, IntU64) { check_all_int_binary<uint64_t>(); }

// Specific overflow cases spelled out, so a failure reads plainly.
TEST(BinaryOps, IntegerOverflowWraps) {
  std::vector<int32_t> a{INT32_MAX, INT32_MIN, INT32_MIN, 7, -7, INT32_MIN};
  std::vector<int32_t> b{1, -1, -1, 0, 0, 2};
  pl::Array add = run_binary(pl::add, pl::Array::from_vector(a, {2, 3}), pl::Array::from_vector(b, {2, 3}), pl::i32);
  EXPECT_EQ(add.to_vector<int32_t>()[0], INT32_MIN);
  EXPECT_EQ(add.to_vector<int32_t>()[1], INT32_MAX);
  pl::Array div = run_binary(pl::div, pl::Array::from_vector(a, {2, 3}), pl::Array::from_vector(b, {2, 3}), pl::i32);
  EXPECT_EQ(div.to_vector<int32_t>()[2], INT32_MIN);  // INT_MIN / -1
  EXPECT_EQ(div.to_vector<int32_t>()[3], -1);         // 7 / 0
  EXPECT_EQ(div.to_vector<int32_t>()[4], -1);         // -7 / 0
  pl::Array rem = run_binary(pl::rem, pl::Array::from_vector(a, {2, 3}), pl::Array::from_vector(b, {2, 3}), pl::i32);
  EXPECT_EQ(rem.to_vector<int32_t>()[2], 0);   // INT_MIN % -1
  EXPECT_EQ(rem.to_vector<int32_t>()[3], 7);   // 7 % 0
  EXPECT_EQ(rem.to_vector<int32_t>()[4], -7);  // -7 % 0
  pl::Array mul = run_binary(pl::mul, pl::Array::from_vector(a, {2, 3}), pl::Array::from_vector(b, {2, 3}), pl::i32);
  EXPECT_EQ(mul.to_vector<int32_t>()[5], 0);  // INT_MIN * 2 wraps to 0
}

// Shifts by exactly the bit width and beyond, for each width.
template <class T>
void check_shift_by_width() {
  std::vector<T> a(4, static_cast<T>(std::is_signed_v<T> ? -5 : 5)), b{kBits<T>, kBits<T> + 1, static_cast<T>(kBits<T> - 1), 0};
  auto av = pl::Array::from_vector(a, {2, 2}), bv = pl::Array::from_vector(b, {2, 2});
  auto shl = run_binary(pl::shift_left, av, bv, pl::dtype_of<T>()).template to_vector<T>();
  auto shrl = run_binary(pl::shift_right_logical, av, bv, pl::dtype_of<T>()).template to_vector<T>();
  auto shra = run_binary(pl::shift_right_arithmetic, av, bv, pl::dtype_of<T>()).template to_vector<T>();
  EXPECT_EQ(shl[0], T(0));
  EXPECT_EQ(shl[1], T(0));
  EXPECT_EQ(shrl[0], T(0));
  EXPECT_EQ(shrl[1], T(0));
  EXPECT_EQ(shl[3], a[3]);
  T fill = std::is_signed_v<T> ? static_cast<T>(-1) : T(0);
  EXPECT_EQ(shra[0], fill);
  EXPECT_EQ(shra[1], fill);
  EXPECT_EQ(shra[2], fill);  // by bits - 1: the sign bit everywhere (5 >> 7 = 0 unsigned)
}
TEST(BinaryOps, ShiftByBitWidth) {
  check_shift_by_width<int8_t>();
  check_shift_by_width<uint8_t>();
  check_shift_by_width<int16_t>();
  check_shift_by_width<int32_t>();
  check_shift_by_width<uint32_t>();
  check_shift_by_width<int64_t>();
  check_shift_by_width<uint64_t>();
}

// ---- bools ----
TEST(BinaryOps, Bool) {
  std::vector<bool> a, b;
  for (int k = 0; k < 64; ++k) a.push_back(k & 1), b.push_back(k & 2);
  struct B {
    const char* name;
    pl::Value (*op)(const pl::Value&, const pl::Value&);
    bool (*ref)(bool, bool);
  };
  const B ops[] = {
      {"and", pl::bitwise_and, [](bool x, bool y) { return x && y; }},
      {"or", pl::bitwise_or, [](bool x, bool y) { return x || y; }},
      {"xor", pl::bitwise_xor, [](bool x, bool y) { return x != y; }},
      {"&", [](const pl::Value& x, const pl::Value& y) { return x & y; }, [](bool x, bool y) { return x && y; }},
      {"|", [](const pl::Value& x, const pl::Value& y) { return x | y; }, [](bool x, bool y) { return x || y; }},
      {"max", pl::maximum, [](bool x, bool y) { return x || y; }},
      {"min", pl::minimum, [](bool x, bool y) { return x && y; }},
      {"eq", pl::eq, [](bool x, bool y) { return x == y; }},
      {"ne", pl::ne, [](bool x, bool y) { return x != y; }},
      {"lt", pl::lt, [](bool x, bool y) { return !x && y; }},
      {"ge", pl::ge, [](bool x, bool y) { return x || !y; }},
  };
  for (const B& op : ops) {
    SCOPED_TRACE(op.name);
    pl::Array out = run_binary(op.op, pl::Array::from_vector(a, {2, 32}), pl::Array::from_vector(b, {2, 32}), pl::bool_);
    ASSERT_EQ(out.dtype(), pl::bool_);
    auto got = out.to_vector<bool>();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(got[i], op.ref(a[i], b[i])) << a[i] << " " << b[i];
  }
}

// ---- broadcasting inside a kernel ----
TEST(BinaryOps, ScalarAndTileBroadcast) {
  auto xs = normal(128, 4);
  pl::Array x = make_array(xs, {4, 32}, pl::f32);
  pl::Array col = make_array(normal(4, 5), {4, 1}, pl::f32);
  pl::Array row = make_array(normal(32, 6), {1, 32}, pl::f32);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref cr, pl::Ref rr, pl::Ref o1, pl::Ref o2, pl::Ref o3) {
        pl::Value x = xr[pl::all];
        pl::Value s = xr(1, 2);  // a rank-0 value read from the ref
        o1[pl::all] = x * s;     // tile * scalar
        o2[pl::all] = cr[pl::all] + rr[pl::all];  // [4,1] + [1,32] -> [4,32]
        o3[pl::all] = 2.5 * x - 1;  // weak C++ scalars keep f32
      },
      {pl::ShapeDtype({4, 32}, pl::f32), pl::ShapeDtype({4, 32}, pl::f32), pl::ShapeDtype({4, 32}, pl::f32)});
  auto outs = call({x, col, row});
  auto cv = to_doubles(col), rv = to_doubles(row);
  auto xv = to_doubles(x);
  std::vector<double> w1, w2, w3;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 32; ++j) {
      w1.push_back(round_to(xv[i * 32 + j] * xv[1 * 32 + 2], pl::f32));
      w2.push_back(round_to(cv[i] + rv[j], pl::f32));
      w3.push_back(round_to(2.5 * xv[i * 32 + j] - 1, pl::f32));
    }
  EXPECT_TRUE(close(to_doubles(outs[0]), w1, tol_for(pl::f32)));
  EXPECT_TRUE(close(to_doubles(outs[1]), w2, tol_for(pl::f32)));
  EXPECT_TRUE(close(to_doubles(outs[2]), w3, tol_for(pl::f32)));
}

}  // namespace
}  // namespace pt
