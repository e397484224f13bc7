// Dtypes: properties, JAX's promotion lattice with weak C++ scalars (on its own and inside
// kernels), convert_element_type between every pair of dtypes with edge values (float -> int
// saturates, NaN -> 0; int -> int wraps), the 16-bit float codecs, and host Arrays.
#include "tests/test_util.h"

namespace pt {
namespace {

const std::vector<pl::DType> kAll{pl::bool_, pl::i8, pl::i16, pl::i32, pl::i64, pl::u8, pl::u16,
                                  pl::u32,   pl::u64, pl::f16, pl::bf16, pl::f32, pl::f64};

TEST(DType, Properties) {
  struct P {
    pl::DType t;
    const char* name;
    size_t size;
    int bits;
  };
  const P ps[] = {{pl::bool_, "bool", 1, 1}, {pl::i8, "i8", 1, 8},    {pl::i16, "i16", 2, 16}, {pl::i32, "i32", 4, 32},
                  {pl::i64, "i64", 8, 64},   {pl::u8, "u8", 1, 8},    {pl::u16, "u16", 2, 16}, {pl::u32, "u32", 4, 32},
                  {pl::u64, "u64", 8, 64},   {pl::f16, "f16", 2, 16}, {pl::bf16, "bf16", 2, 16}, {pl::f32, "f32", 4, 32},
                  {pl::f64, "f64", 8, 64}};
  for (const P& p : ps) {
    EXPECT_STREQ(pl::dtype_name(p.t), p.name);
    EXPECT_EQ(pl::itemsize(p.t), p.size);
    EXPECT_EQ(pl::bit_width(p.t), p.bits);
    std::string n = p.name;
    EXPECT_EQ(pl::is_float(p.t), n[0] == 'f' || n[0] == 'b' && n[1] == 'f');
    EXPECT_EQ(pl::is_signed_int(p.t), n[0] == 'i');
    EXPECT_EQ(pl::is_unsigned_int(p.t), n[0] == 'u');
    EXPECT_EQ(pl::is_integer(p.t), n[0] == 'i' || n[0] == 'u');
    EXPECT_EQ(pl::is_bool(p.t), n == "bool");
  }
  EXPECT_EQ(pl::shape_str({2, 3}, pl::f16), "f16[2,3]");
  EXPECT_EQ(pl::shape_str({}, pl::i32), "i32[]");
}

// Strong-type promotion (jnp.promote_types), symmetric.
TEST(DType, PromotionStrong) {
  struct C {
    pl::DType a, b, r;
  };
  const C cs[] = {
      {pl::bool_, pl::bool_, pl::bool_}, {pl::bool_, pl::i8, pl::i8},   {pl::bool_, pl::f16, pl::f16},
      {pl::i8, pl::i16, pl::i16},        {pl::i8, pl::u8, pl::i16},     {pl::u8, pl::u16, pl::u16},
      {pl::u16, pl::i16, pl::i32},       {pl::u32, pl::i32, pl::i64},   {pl::u32, pl::u64, pl::u64},
      {pl::i64, pl::u64, pl::f64},       {pl::i32, pl::i64, pl::i64},   {pl::i8, pl::f16, pl::f16},
      {pl::i64, pl::bf16, pl::bf16},     {pl::u64, pl::f32, pl::f32},   {pl::f16, pl::bf16, pl::f32},
      {pl::f16, pl::f32, pl::f32},       {pl::bf16, pl::f64, pl::f64},  {pl::f32, pl::f64, pl::f64},
      {pl::i32, pl::i32, pl::i32},       {pl::u8, pl::i8, pl::i16},
  };
  for (const C& c : cs) {
    EXPECT_EQ(pl::promote_types(c.a, c.b), c.r) << pl::dtype_name(c.a) << "+" << pl::dtype_name(c.b);
    EXPECT_EQ(pl::promote_types(c.b, c.a), c.r) << pl::dtype_name(c.b) << "+" << pl::dtype_name(c.a);
    auto p = pl::promote_types(c.a, false, c.b, false);
    EXPECT_FALSE(p.weak);
  }
  // the lattice is a join: promote(a, promote(b, c)) == promote(promote(a, b), c), except that
  // i64 + u64 is f64 where the lattice's join is the weak float (as jnp: not associative there)
  std::vector<pl::DType> no_u64;
  for (pl::DType t : kAll)
    if (t != pl::u64) no_u64.push_back(t);
  for (pl::DType a : no_u64)
    for (pl::DType b : no_u64)
      for (pl::DType c : no_u64)
        ASSERT_EQ(pl::promote_types(a, pl::promote_types(b, c)), pl::promote_types(pl::promote_types(a, b), c));
}

// Weak scalars (C++ ints and floats) take the other operand's dtype when it is of the same
// kind or higher.
TEST(DType, PromotionWeak) {
  struct C {
    pl::DType a;
    bool aw;
    pl::DType b;
    bool bw;
    pl::DType r;
    bool rw;
  };
  const C cs[] = {
      {pl::u8, false, pl::i32, true, pl::u8, false},     // x_u8 + 1
      {pl::i8, false, pl::i32, true, pl::i8, false},     // x_i8 + 1
      {pl::f16, false, pl::i32, true, pl::f16, false},   // x_f16 + 1
      {pl::bf16, false, pl::f32, true, pl::bf16, false}, // x_bf16 * 0.5
      {pl::i32, false, pl::f32, true, pl::f32, true},    // x_i32 + 1.5 -> weak f32
      {pl::u64, false, pl::f32, true, pl::f32, true},
      {pl::bool_, false, pl::i32, true, pl::i32, true},  // true + 1 -> weak i32
      {pl::i32, true, pl::f32, true, pl::f32, true},     // 1 + 1.5
      {pl::i32, true, pl::i32, true, pl::i32, true},
      {pl::f64, false, pl::f32, true, pl::f64, false},
  };
  for (const C& c : cs) {
    auto p = pl::promote_types(c.a, c.aw, c.b, c.bw);
    EXPECT_EQ(p.dtype, c.r) << pl::dtype_name(c.a) << (c.aw ? "*" : "") << "+" << pl::dtype_name(c.b) << (c.bw ? "*" : "");
    EXPECT_EQ(p.weak, c.rw);
    auto q = pl::promote_types(c.b, c.bw, c.a, c.aw);
    EXPECT_EQ(q.dtype, c.r);
    EXPECT_EQ(q.weak, c.rw);
  }
}

// The same rules seen from inside a kernel, through Values.
TEST(DType, PromotionInKernels) {
  std::vector<std::pair<std::string, pl::DType>> seen;
  auto call = interp_call(
      [&seen](pl::Ref u8, pl::Ref i8, pl::Ref f16, pl::Ref bf16, pl::Ref i32, pl::Ref b, pl::Ref o) {
        auto rec = [&](const char* what, const pl::Value& v) { seen.emplace_back(what, v.dtype()); };
        rec("u8+1", u8[pl::all] + 1);
        rec("u8+i8", u8[pl::all] + i8[pl::all]);
        rec("f16*2", f16[pl::all] * 2);
        rec("f16+0.5", f16[pl::all] + 0.5);
        rec("bf16+f16", bf16[pl::all] + f16[pl::all]);
        rec("i32+1.5", i32[pl::all] + 1.5);
        rec("i32/2", i32[pl::all] / 2);
        rec("b+1", b[pl::all] + 1);
        rec("i8<1", i8[pl::all] < 1);
        rec("exp(i8)", pl::exp(i8[pl::all]));
        rec("sum(u8)", pl::sum(u8[pl::all]));
        rec("f16.astype(f64)", f16[pl::all].astype(pl::f64));
        pl::Value w = pl::Value(3);
        rec("weak int", w);
        EXPECT_TRUE(w.weak_type());
        EXPECT_FALSE(pl::Value(true).weak_type());
        EXPECT_FALSE(pl::Value::constant(3, pl::i32).weak_type());
        EXPECT_TRUE((i32[pl::all] + 1.5).weak_type());
        EXPECT_FALSE((u8[pl::all] + 1).weak_type());
        o[pl::all] = pl::zeros({4});
      },
      {pl::ShapeDtype({4}, pl::f32)});
  call({pl::Array::zeros({4}, pl::u8), pl::Array::zeros({4}, pl::i8), pl::Array::zeros({4}, pl::f16),
        pl::Array::zeros({4}, pl::bf16), pl::Array::zeros({4}, pl::i32), pl::Array::zeros({4}, pl::bool_)});
  std::vector<std::pair<std::string, pl::DType>> want{
      {"u8+1", pl::u8},       {"u8+i8", pl::i16},   {"f16*2", pl::f16},   {"f16+0.5", pl::f16},
      {"bf16+f16", pl::f32},  {"i32+1.5", pl::f32}, {"i32/2", pl::i32},   {"b+1", pl::i32},
      {"i8<1", pl::bool_},    {"exp(i8)", pl::f32}, {"sum(u8)", pl::u8},  {"f16.astype(f64)", pl::f64},
      {"weak int", pl::i32}};
  ASSERT_EQ(seen.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(seen[k].first, want[k].first);
    EXPECT_EQ(seen[k].second, want[k].second) << want[k].first << " gave " << pl::dtype_name(seen[k].second);
  }
}

// ---- conversions ----
// A value of some dtype, exactly: integers as 64-bit patterns, floats as doubles.
struct Num {
  bool is_int = false;
  uint64_t bits = 0;  // integers: the value as a 64-bit two's-complement pattern
  double f = 0;       // floats and bools
};

std::vector<Num> read_exact(const pl::Array& a) {
  std::vector<Num> r;
  if (pl::is_integer(a.dtype())) {
    auto v = a.to_vector<uint64_t>();  // signed values sign-extend, unsigned zero-extend
    if (pl::is_signed_int(a.dtype())) {
      auto s = a.to_vector<int64_t>();
      for (int64_t x : s) r.push_back({true, static_cast<uint64_t>(x), 0});
    } else {
      for (uint64_t x : v) r.push_back({true, x, 0});
    }
  } else {
    for (double x : a.to_vector<double>()) r.push_back({false, 0, x});
  }
  return r;
}

// The reference conversion of x (of dtype from) to dtype to.
Num ref_convert(const Num& x, pl::DType from, pl::DType to) {
  long double v = x.is_int ? (pl::is_signed_int(from) ? static_cast<long double>(static_cast<int64_t>(x.bits))
                                                       : static_cast<long double>(x.bits))
                           : static_cast<long double>(x.f);
  if (to == pl::bool_) return {false, 0, (x.is_int ? x.bits != 0 : x.f != 0.0) ? 1.0 : 0.0};
  if (pl::is_float(to)) return {false, 0, round_to(static_cast<double>(v), to)};
  int bits = pl::bit_width(to);
  bool sgn = pl::is_signed_int(to);
  if (!x.is_int) {  // float -> int: truncate, saturate, NaN -> 0
    if (std::isnan(x.f)) return {true, 0, 0};
    long double lo = sgn ? -std::ldexp(1.0L, bits - 1) : 0.0L;
    long double hi = sgn ? std::ldexp(1.0L, bits - 1) - 1 : std::ldexp(1.0L, bits) - 1;
    long double t = std::trunc(v);
    if (t < lo) t = lo;
    if (t > hi) t = hi;
    int64_t s = sgn ? static_cast<int64_t>(t) : 0;
    uint64_t u = sgn ? static_cast<uint64_t>(s) : static_cast<uint64_t>(t);
    return {true, u, 0};
  }
  // int (or bool) -> int: keep the low bits, then sign- or zero-extend
  uint64_t b = from == pl::bool_ ? static_cast<uint64_t>(x.f != 0) : x.bits;
  if (bits < 64) {
    uint64_t mask = (uint64_t{1} << bits) - 1;
    b &= mask;
    if (sgn && (b >> (bits - 1))) b |= ~mask;
  }
  return {true, b, 0};
}

pl::Array source_values(pl::DType t) {
  const int n = 96;
  if (t == pl::bool_) {
    std::vector<bool> b;
    for (int k = 0; k < n; ++k) b.push_back(k % 3 == 1);
    return pl::Array::from_vector(b);
  }
  if (pl::is_float(t)) {
    std::vector<double> v{3e9, -3e9, 300, -129.5, 255.5, 256, -0.75, 0.75, 65519, 65520, 1e20, -1e20,
                          4294967296.0, 9.3e18, -9.3e18, 2e19, 127.9, -128.9, 32767.5, -32768.9, 1.5, -1.5};
    auto r = normal(n, 77, 0, 1000);
    for (int k = 0; k < 40; ++k) r[k] = v[k % v.size()];
    return make_array(with_edges(r, t), {n}, t);
  }
  switch (t) {
    case pl::DType::I8: return pl::Array::from_vector(random_ints<int8_t>(n, 1));
    case pl::DType::I16: return pl::Array::from_vector(random_ints<int16_t>(n, 2));
    case pl::DType::I32: return pl::Array::from_vector(random_ints<int32_t>(n, 3));
    case pl::DType::I64: return pl::Array::from_vector(random_ints<int64_t>(n, 4));
    case pl::DType::U8: return pl::Array::from_vector(random_ints<uint8_t>(n, 5));
    case pl::DType::U16: return pl::Array::from_vector(random_ints<uint16_t>(n, 6));
    case pl::DType::U32: return pl::Array::from_vector(random_ints<uint32_t>(n, 7));
    default: return pl::Array::from_vector(random_ints<uint64_t>(n, 8));
  }
}

class ConvertTest : public ::testing::TestWithParam<std::tuple<pl::DType, pl::DType>> {};

TEST_P(ConvertTest, MatchesReference) {
  pl::DType from = std::get<0>(GetParam()), to = std::get<1>(GetParam());
  pl::Array x = source_values(from);
  auto call = interp_call([to](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all].astype(to); },
                          {pl::ShapeDtype(x.shape(), to)}, "convert");
  pl::Array out = call({x})[0];
  ASSERT_EQ(out.dtype(), to);
  auto src = read_exact(x), got = read_exact(out), host = read_exact(x.astype(to));
  for (size_t i = 0; i < src.size(); ++i) {
    Num w = ref_convert(src[i], from, to);
    std::string in = src[i].is_int ? std::to_string(static_cast<int64_t>(src[i].bits)) : std::to_string(src[i].f);
    if (w.is_int) {
      ASSERT_EQ(got[i].bits, w.bits) << "converting " << in;
      ASSERT_EQ(host[i].bits, w.bits) << "host astype of " << in;
    } else if (std::isnan(w.f)) {
      ASSERT_TRUE(std::isnan(got[i].f) && std::isnan(host[i].f)) << in;
    } else {
      ASSERT_EQ(got[i].f, w.f) << "converting " << in;
      ASSERT_EQ(std::signbit(got[i].f), std::signbit(w.f)) << "sign of " << in;
      ASSERT_EQ(host[i].f, w.f) << "host astype of " << in;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPairs, ConvertTest, ::testing::Combine(::testing::ValuesIn(kAll), ::testing::ValuesIn(kAll)),
                         [](const auto& info) {
                           return std::string(pl::dtype_name(std::get<0>(info.param))) + "_to_" +
                                  pl::dtype_name(std::get<1>(info.param));
                         });

// Conversions of C++ constants are folded at trace time; they must agree with run-time ones.
TEST(DType, FoldedConstantConversionsMatchRuntime) {
  const double vals[] = {1e10, -1e10, 3.7, -3.7, 300.0, -129.0, NAN, INFINITY, -INFINITY, 4294967295.5};
  for (pl::DType t : {pl::i8, pl::u8, pl::i32, pl::u32, pl::i64}) {
    SCOPED_TRACE(pl::dtype_name(t));
    std::vector<double> vs(std::begin(vals), std::end(vals));
    auto call = interp_call(
        [t, vs](pl::Ref xr, pl::Ref folded, pl::Ref runtime) {
          for (size_t k = 0; k < vs.size(); ++k) {
            pl::store(folded, {static_cast<int64_t>(k)}, pl::Value(vs[k]).astype(t));  // a literal
            pl::store(runtime, {static_cast<int64_t>(k)}, xr(static_cast<int64_t>(k)).astype(t));
          }
        },
        {pl::ShapeDtype({10}, t), pl::ShapeDtype({10}, t)}, "fold");
    auto outs = call({pl::Array::from_vector(vs).astype(pl::f64)});
    auto f = outs[0].to_vector<int64_t>(), r = outs[1].to_vector<int64_t>();
    for (size_t k = 0; k < vs.size(); ++k) EXPECT_EQ(f[k], r[k]) << "converting " << vs[k];
  }
}

// The 16-bit float codecs against an independent decoder, for every bit pattern.
TEST(DType, F16AndBF16Codecs) {
  for (uint32_t b = 0; b < 65536; ++b) {
    uint16_t h = static_cast<uint16_t>(b);
    // f16: sign, 5 exponent bits (bias 15), 10 mantissa bits
    int e = (h >> 10) & 31, m = h & 1023;
    double s = (h & 0x8000) ? -1 : 1;
    double want = e == 0 ? s * std::ldexp(m, -24) : e == 31 ? (m ? NAN : s * INFINITY) : s * std::ldexp(1024 + m, e - 25);
    double got = pl::f16_to_float(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(got, want) << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << h;
      ASSERT_EQ(pl::float_to_f16(static_cast<float>(got)), h) << "round trip of " << h;
    }
    // bf16: the top half of an f32
    uint32_t fb = static_cast<uint32_t>(h) << 16;
    float fv;
    std::memcpy(&fv, &fb, 4);
    double bg = pl::bf16_to_float(h);
    if (std::isnan(fv)) {
      ASSERT_TRUE(std::isnan(bg));
      ASSERT_TRUE(std::isnan(pl::bf16_to_float(pl::float_to_bf16(fv))));
    } else {
      ASSERT_EQ(bg, static_cast<double>(fv));
      ASSERT_EQ(pl::float_to_bf16(fv), h);
    }
  }
  // rounding from f32: to nearest, ties to even, overflow to inf, underflow to (signed) zero
  auto xs = normal(4096, 12, 0, 100);
  for (int k = 0; k < 200; ++k) xs[k] = std::ldexp(1.0 + k / 256.0, -30 + k / 4);  // subnormal range and ties
  xs.push_back(65519.99);
  xs.push_back(65520.0);
  xs.push_back(-1e-9);
  for (double x : xs) {
    float f = static_cast<float>(x);
    EXPECT_EQ(pl::f16_to_float(pl::float_to_f16(f)), round_to(f, pl::f16)) << f;
    EXPECT_EQ(pl::bf16_to_float(pl::float_to_bf16(f)), round_to(f, pl::bf16)) << f;
  }
  EXPECT_EQ(pl::float_to_f16(-1e-9f), 0x8000);
  EXPECT_EQ(pl::float_to_f16(65520.f), 0x7c00);
}

// f64 -> bf16 rounds once from the double, not through f32 (which can round twice).
TEST(DType, F64ToBF16RoundsOnce) {
  // 1 + 2^-8 + 2^-30: just above the bf16 tie at 1 + 2^-8, but f32 rounding first lands exactly on it
  double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  pl::Array a = pl::Array::from_vector(std::vector<double>{x, -x});
  auto b = a.astype(pl::bf16).to_vector<double>();
  EXPECT_EQ(b[0], round_to(x, pl::bf16));
  EXPECT_EQ(b[1], round_to(-x, pl::bf16));
}

// ---- host arrays ----
TEST(Arrays, Basics) {
  std::vector<int16_t> v{1, -2, 3, -4, 5, -6};
  pl::Array a = pl::Array::from_vector(v, {2, 3});
  EXPECT_EQ(a.shape(), (pl::Shape{2, 3}));
  EXPECT_EQ(a.dtype(), pl::i16);
  EXPECT_EQ(a.ndim(), 2);
  EXPECT_EQ(a.size(), 6);
  EXPECT_EQ(a.nbytes(), 12u);
  EXPECT_TRUE(a.device().is_host());
  EXPECT_EQ(a.to_vector<int16_t>(), v);
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{1, -2, 3, -4, 5, -6}));
  pl::Array r = a.reshape({3, 2});  // shares storage
  static_cast<int16_t*>(r.data())[0] = 100;
  EXPECT_EQ(a.to_vector<int16_t>()[0], 100);
  pl::Array c = a.copy();  // does not
  static_cast<int16_t*>(c.data())[1] = 7;
  EXPECT_EQ(a.to_vector<int16_t>()[1], -2);
  EXPECT_EQ(pl::Array::scalar(2.5f).shape(), pl::Shape{});
  EXPECT_EQ(pl::Array::scalar<int64_t>(5).dtype(), pl::i64);
  EXPECT_EQ(pl::Array::full({3}, -1.5, pl::bf16).to_vector<float>(), std::vector<float>(3, -1.5f));
  EXPECT_EQ(pl::Array::zeros({2}, pl::u32).to_vector<uint32_t>(), std::vector<uint32_t>(2, 0));
  EXPECT_EQ(pl::Array::from_vector(std::vector<float>{1, 2}).shape_dtype(), pl::ShapeDtype({2}, pl::f32));
  EXPECT_EQ(pl::ShapeDtype({2, 2}, pl::u8).str(), "u8[2,2]");
  EXPECT_FALSE(pl::Array().defined());
}

TEST(Arrays, RandomIsDeterministicAndInRange) {
  auto a = pl::random::normal({1000}, pl::f32, 5).to_vector<double>();
  auto b = pl::random::normal({1000}, pl::f32, 5).to_vector<double>();
  auto c = pl::random::normal({1000}, pl::f32, 6).to_vector<double>();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0, var = 0;
  for (double x : a) mean += x / 1000;
  for (double x : a) var += (x - mean) * (x - mean) / 1000;
  EXPECT_NEAR(mean, 0.0, 0.15);
  EXPECT_NEAR(var, 1.0, 0.2);
  auto u = pl::random::uniform({1000}, pl::f64, 1, -2, 3).to_vector<double>();
  for (double x : u) ASSERT_TRUE(x >= -2 && x < 3);
  auto r = pl::random::randint({1000}, pl::i32, 2, -5, 5).to_vector<int32_t>();
  bool lo = false, hi = false;
  for (int32_t x : r) {
    ASSERT_TRUE(x >= -5 && x < 5);
    lo |= x == -5, hi |= x == 4;
  }
  EXPECT_TRUE(lo && hi);
  EXPECT_EQ(pl::random::uniform({10}, pl::bf16, 3).dtype(), pl::bf16);
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {
// Mixed-dtype arithmetic computes in the promoted dtype.
TEST(DType, MixedDtypeArithmeticValues) {
  std::vector<uint8_t> u{200, 255, 0, 17};
  std::vector<int8_t> s{-100, 127, -128, -1};
  std::vector<int32_t> i{1, -2, 3, 2147483647};
  std::vector<double> h{0.5, 1.5, -2.0, 65504.0}, b{0.25, -3.0, 1.0, 3e38};
  auto call = interp_call(
      [](pl::Ref ur, pl::Ref sr, pl::Ref ir, pl::Ref hr, pl::Ref br, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4) {
        o1[pl::all] = ur[pl::all] + sr[pl::all];   // i16
        o2[pl::all] = ir[pl::all] + 1.5;           // f32
        o3[pl::all] = hr[pl::all] + br[pl::all];   // f16 + bf16 -> f32
        o4[pl::all] = ur[pl::all] * 2;             // u8, wraps
      },
      {pl::ShapeDtype({4}, pl::i16), pl::ShapeDtype({4}, pl::f32), pl::ShapeDtype({4}, pl::f32), pl::ShapeDtype({4}, pl::u8)});
  auto outs = call({pl::Array::from_vector(u), pl::Array::from_vector(s), pl::Array::from_vector(i), make_array(h, {4}, pl::f16),
                    make_array(b, {4}, pl::bf16)});
  EXPECT_EQ(outs[0].to_vector<int16_t>(), (std::vector<int16_t>{100, 382, -128, 16}));
  EXPECT_EQ(outs[1].to_vector<float>(), (std::vector<float>{2.5f, -0.5f, 4.5f, 2147483648.f}));
  auto bb = to_doubles(make_array(b, {4}, pl::bf16));
  auto o3 = outs[2].to_vector<float>();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(o3[k], static_cast<float>(h[k] + bb[k]));
  EXPECT_EQ(outs[3].to_vector<uint8_t>(), (std::vector<uint8_t>{144, 254, 0, 34}));
}
}  // namespace
}  // namespace pt
