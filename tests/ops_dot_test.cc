// dot against a double-precision reference: every operand dtype (f16, bf16, f32, f64, i8,
// i32), transposed operands, precisions (tf32 rounding at Default/High, IEEE at Highest),
// accumulator types, and a K loop over blocks.
//
// Tolerances: the interpreter accumulates in f32 (f64 for f64), so the error of a K-term
// product is at most ~K * 2^-24 relative to sum |a||b|; with positive-ish random data
// (condition ~1-6) and K = 48 that is below 2e-5 in norm. tf32 rounds each input to 11
// significant bits (2^-11 relative), so Default-precision f32 is within ~2e-3 of exact.
#include "tests/test_util.h"

namespace pt {
namespace {

// C = op(A) @ op(B) in double from the (already rounded) inputs.
std::vector<double> ref_dot(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k, int64_t n,
                            bool ta, bool tb) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = s;
    }
  return c;
}

// tf32 keeps 10 explicit mantissa bits, rounding ties away from zero (cvt.rna.tf32).
double tf32(double x) {
  float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&f, &u, 4);
  return static_cast<double>(f);
}

pl::Array dot_call(const pl::Array& a, const pl::Array& b, pl::DotOptions o, pl::ShapeDtype out) {
  auto call = interp_call(
      [o](pl::Ref ar, pl::Ref br, pl::Ref cr) { cr[pl::all] = pl::dot(ar[pl::all], br[pl::all], o); }, {out}, "dot");
  return call({a, b})[0];
}

struct DotCase {
  bool ta, tb;
};

class DotFloatTest : public ::testing::TestWithParam<std::tuple<pl::DType, int>> {};

TEST_P(DotFloatTest, MatchesReference) {
  pl::DType t = std::get<0>(GetParam());
  int tr = std::get<1>(GetParam());
  bool ta = tr & 1, tb = tr & 2;
  const int64_t M = 16, K = 48, N = 40;  // N not a multiple of 32: the vector kernel's tail runs
  auto av = with_edges(uniform(M * K, 1, -1, 2), t, false), bv = with_edges(uniform(K * N, 2, -1, 2), t, false);
  pl::Array a = make_array(av, ta ? pl::Shape{K, M} : pl::Shape{M, K}, t);
  pl::Array b = make_array(bv, tb ? pl::Shape{N, K} : pl::Shape{K, N}, t);
  pl::Precision prec = t == pl::f32 ? pl::Precision::Highest : pl::Precision::Default;
  pl::DType acc = t == pl::f64 ? pl::f64 : pl::f32;
  pl::Array c = dot_call(a, b, {.trans_a = ta, .trans_b = tb, .precision = prec}, pl::ShapeDtype({M, N}, acc));
  ASSERT_EQ(c.dtype(), acc);
  auto want = ref_dot(av, bv, M, K, N, ta, tb);
  EXPECT_TRUE(close(to_doubles(c), want, t == pl::f64 ? 1e-13 : 2e-5, false));
}

INSTANTIATE_TEST_SUITE_P(Ops, DotFloatTest,
                         ::testing::Combine(::testing::Values(pl::f16, pl::bf16, pl::f32, pl::f64), ::testing::Range(0, 4)),
                         [](const auto& info) {
                           int tr = std::get<1>(info.param);
                           return std::string(pl::dtype_name(std::get<0>(info.param))) + (tr & 1 ? "_ta" : "") +
                                  (tr & 2 ? "_tb" : "");
                         });

// f32 at Default and High precision rounds the inputs to tf32 (as the tensor cores do);
// Highest is IEEE f32. The Default result equals a reference on tf32-rounded inputs and
// differs measurably from the exact product.
TEST(Dot, F32PrecisionTf32) {
  const int64_t M = 16, K = 32, N = 32;
  auto av = with_edges(normal(M * K, 3), pl::f32, false), bv = with_edges(normal(K * N, 4), pl::f32, false);
  pl::Array a = make_array(av, {M, K}, pl::f32), b = make_array(bv, {K, N}, pl::f32);
  auto exact = ref_dot(av, bv, M, K, N, false, false);
  std::vector<double> at, bt;
  for (double x : av) at.push_back(tf32(x));
  for (double x : bv) bt.push_back(tf32(x));
  auto rounded = ref_dot(at, bt, M, K, N, false, false);
  for (pl::Precision p : {pl::Precision::Default, pl::Precision::High}) {
    auto c = to_doubles(dot_call(a, b, {.precision = p}, pl::ShapeDtype({M, N}, pl::f32)));
    EXPECT_TRUE(close(c, rounded, 2e-5, false));
    EXPECT_TRUE(close(c, exact, 3e-3, false));
    EXPECT_FALSE(close(c, exact, 1e-5, false)) << "Default precision should round the inputs to tf32";
  }
  auto hi = to_doubles(dot_call(a, b, {.precision = pl::Precision::Highest}, pl::ShapeDtype({M, N}, pl::f32)));
  EXPECT_TRUE(close(hi, exact, 2e-5, false));
}

// preferred_type sets the result dtype: f16 / bf16 results are the f32 sums rounded once.
TEST(Dot, PreferredType) {
  const int64_t M = 8, K = 32, N = 16;
  for (pl::DType in : {pl::f16, pl::bf16}) {
    for (pl::DType out : {pl::f16, pl::bf16, pl::f32}) {
      SCOPED_TRACE(std::string(pl::dtype_name(in)) + "->" + pl::dtype_name(out));
      auto av = with_edges(uniform(M * K, 5, 0, 1), in, false), bv = with_edges(uniform(K * N, 6, 0, 1), in, false);
      pl::Array c = dot_call(make_array(av, {M, K}, in), make_array(bv, {K, N}, in), {.preferred_type = out},
                             pl::ShapeDtype({M, N}, out));
      ASSERT_EQ(c.dtype(), out);
      auto want = ref_dot(av, bv, M, K, N, false, false);
      for (auto& w : want) w = round_to(w, out);
      EXPECT_TRUE(close(to_doubles(c), want, std::max(tol_for(out), 2e-5), false));
    }
  }
  // f32 inputs with an f64 result
  auto av = normal(M * K, 7), bv = normal(K * N, 8);
  for (auto& x : av) x = round_to(x, pl::f32);
  for (auto& x : bv) x = round_to(x, pl::f32);
  pl::Array c = dot_call(make_array(av, {M, K}, pl::f32), make_array(bv, {K, N}, pl::f32),
                         {.precision = pl::Precision::Highest, .preferred_type = pl::f64}, pl::ShapeDtype({M, N}, pl::f64));
  EXPECT_EQ(c.dtype(), pl::f64);
  EXPECT_TRUE(close(to_doubles(c), ref_dot(av, bv, M, K, N, false, false), 1e-5, false));
}

// Integer dots are exact: i8 accumulates in i32 (no overflow at this size), i32 wraps.
TEST(Dot, Integers) {
  const int64_t M = 8, K = 64, N = 24;
  for (int tr = 0; tr < 4; ++tr) {
    bool ta = tr & 1, tb = tr & 2;
    SCOPED_TRACE(tr);
    auto a8 = random_ints<int8_t>(M * K, 1), b8 = random_ints<int8_t>(K * N, 2);
    pl::Array c = dot_call(pl::Array::from_vector(a8, ta ? pl::Shape{K, M} : pl::Shape{M, K}),
                           pl::Array::from_vector(b8, tb ? pl::Shape{N, K} : pl::Shape{K, N}), {.trans_a = ta, .trans_b = tb},
                           pl::ShapeDtype({M, N}, pl::i32));
    ASSERT_EQ(c.dtype(), pl::i32);
    std::vector<double> ad(a8.begin(), a8.end()), bd(b8.begin(), b8.end());
    auto want = ref_dot(ad, bd, M, K, N, ta, tb);
    std::vector<int32_t> wi(want.begin(), want.end());
    EXPECT_TRUE(equal(c.to_vector<int32_t>(), wi));
  }
  // i32 operands with products that overflow: the sum wraps modulo 2^32
  auto a32 = random_ints<int32_t>(M * K, 3), b32 = random_ints<int32_t>(K * N, 4);
  pl::Array c = dot_call(pl::Array::from_vector(a32, {M, K}), pl::Array::from_vector(b32, {K, N}), {},
                         pl::ShapeDtype({M, N}, pl::i32));
  std::vector<int32_t> want(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      uint32_t s = 0;
      for (int64_t p = 0; p < K; ++p) s += static_cast<uint32_t>(a32[i * K + p]) * static_cast<uint32_t>(b32[p * N + j]);
      want[i * N + j] = static_cast<int32_t>(s);
    }
  EXPECT_TRUE(equal(c.to_vector<int32_t>(), want));
}

// A matmul over a grid with a K loop (fori_loop + ds), as the matmul example.
TEST(Dot, BlockedMatmulWithKLoop) {
  const int64_t M = 64, K = 96, N = 64, bm = 32, bn = 32, bk = 32;
  auto av = with_edges(uniform(M * K, 9, -1, 1), pl::bf16, false), bv = with_edges(uniform(K * N, 10, -1, 1), pl::bf16, false);
  pl::Array a = make_array(av, {M, K}, pl::bf16), b = make_array(bv, {K, N}, pl::bf16);
  auto call = pl::pallas_call(
      [](pl::Ref ar, pl::Ref br, pl::Ref cr) {
        pl::Value acc = pl::fori_loop(0, K / bk, pl::zeros({bm, bn}), [&](pl::Value k, pl::Value acc) {
          pl::Value x = ar(pl::all, pl::ds(k * bk, bk)), y = br(pl::ds(k * bk, bk), pl::all);
          return acc + pl::dot(x, y);
        });
        cr[pl::all] = acc.astype(pl::bf16);
      },
      pl::ShapeDtype({M, N}, pl::bf16),
      {.grid = {M / bm, N / bn},
       .in_specs = {pl::BlockSpec({bm, K}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
                    pl::BlockSpec({K, bn}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
       .name = "matmul"});
  pl::Array c = call(a, b);
  auto want = ref_dot(av, bv, M, K, N, false, false);
  for (auto& w : want) w = round_to(w, pl::bf16);
  EXPECT_TRUE(close(to_doubles(c), want, tol_for(pl::bf16), false));
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {
// Odd shapes exercise the scalar tails of the interpreter's f32 kernel.
TEST(Dot, OddShapes) {
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 7, 5}, {5, 3, 33}, {7, 16, 65}}) {
    SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N));
    auto av = with_edges(normal(M * K, 11), pl::f32, false), bv = with_edges(normal(K * N, 12), pl::f32, false);
    pl::Array c = dot_call(make_array(av, {M, K}, pl::f32), make_array(bv, {K, N}, pl::f32), {.precision = pl::Precision::Highest},
                           pl::ShapeDtype({M, N}, pl::f32));
    EXPECT_TRUE(close(to_doubles(c), ref_dot(av, bv, M, K, N, false, false), 2e-6, false));
  }
}
}  // namespace
}  // namespace pt
