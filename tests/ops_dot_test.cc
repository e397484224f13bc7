// dot against a double-precision reference: every operand dtype (f16, bf16, f32, f64, i8,
// i32), transposed operands, precisions (tf32 rounding at Default/High, IEEE at Highest),
// accumulator types, and a K loop over blocks.
//
// Tolerances: the interpreter accumulates in f32 (f64 for f64), so the error of a K-term
// product is at most ~K * 2^-24 relative to sum |a||b|; with positive-ish random data
// (condition ~1-6) and K = 48 that is below 2e-5 in norm. tf32 rounds each input to 11
// significant bits (2^-11 relative), so Default-precision f32 is within ~2e-3 of exact.
#include "tests/test_util.h"
#include "tests/transforms_util.h"

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

// Weight-only quantised dots: a bf16/f16/f32 activation times an i8 weight, the weight
// converted to the activation's dtype as it enters the dot (exact), with a per-column scale in
// the epilogue, in a K loop over a grid as a serving kernel writes it; either operand order.
TEST(Dot, Int8WeightsWithFloatActivations) {
  const int64_t M = 16, K = 128, N = 64, bk = 32;
  for (pl::DType t : {pl::bf16, pl::f16, pl::f32}) {
    for (bool weight_first : {false, true}) {
      SCOPED_TRACE(std::string(pl::dtype_name(t)) + (weight_first ? " w^T x^T" : " x w"));
      auto xv = with_edges(uniform(M * K, 21, -1, 1), t, false);
      auto w8 = random_ints<int8_t>(K * N, 22);
      auto sv = uniform(N, 23, 0.001, 0.01);
      pl::Array x = make_array(xv, {M, K}, t), w = pl::Array::from_vector(w8, {K, N}), scale = make_array(sv, {N}, pl::f32);
      auto call = pl::pallas_call(
          [=](pl::Ref xr, pl::Ref wr, pl::Ref sr, pl::Ref o) {
            pl::Value acc = pl::fori_loop(0, K / bk, pl::zeros({M, N}), [&](pl::Value k, pl::Value acc) {
              pl::Value xb = xr(pl::all, pl::ds(k * bk, bk)), wb = wr(pl::ds(k * bk, bk), pl::all);
              // (w^T x^T)^T = x w: the i8 operand first, both transposed
              return acc + (weight_first ? pl::transpose(pl::dot(wb, xb, {.trans_a = true, .trans_b = true})) : pl::dot(xb, wb));
            });
            o[pl::all] = (acc * pl::expand_dims(sr[pl::all], 0)).astype(t);
          },
          pl::ShapeDtype({M, N}, t), {.name = "int8_weights"});
      pl::Array c = call(x, w, scale);
      std::vector<double> wd(w8.begin(), w8.end());
      auto want = ref_dot(xv, wd, M, K, N, false, false);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) want[i * N + j] = round_to(want[i * N + j] * round_to(sv[j], pl::f32), t);
      // (f32 activations go through the tensor cores as tf32, Precision::Default)
      EXPECT_TRUE(close(to_doubles(c), want, t == pl::f32 ? 2e-3 : tol_for(t), false));
    }
  }
  // float x float of another width stays an error
  EXPECT_THROW_MSG(pl::pallas_call([](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = pl::dot(a[pl::all], b[pl::all]); },
                                   pl::ShapeDtype({16, 16}, pl::f32), {})(pl::Array::zeros({16, 16}, pl::f32), pl::Array::zeros({16, 16}, pl::f16)),
                   "dot: operands are f32 and f16");
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

// f32 K loops (tf32 dots) over a grid of 128-row blocks (the last one ragged), with either
// operand transposed. On sm_90a the loop pipeliner rounds the f32 operands to tf32 (to
// nearest, as the interpreter) after copying them: in place where the copy goes straight into
// the wgmma tile (K contiguous), word by word into the transposed place where the tile needs
// it (K-major tiles for tf32; blocks of K a multiple of 16), and through a staging tile for
// the rest (bk = 8). Exact up to the order of the sums.
TEST(Dot, F32KLoopRoundsEveryStageToTf32) {
  for (int64_t bk : {32, 8})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE("bk=" + std::to_string(bk) + (ta ? ", A transposed" : "") + (tb ? ", B transposed" : ""));
        const int64_t M = 200, K = 96, N = 64, bm = 128;
        auto av = uniform(M * K, 24, -1, 1), bv = uniform(K * N, 25, -1, 1);
        pl::Array a = make_array(av, ta ? pl::Shape{K, M} : pl::Shape{M, K}, pl::f32);
        pl::Array b = make_array(bv, tb ? pl::Shape{N, K} : pl::Shape{K, N}, pl::f32);
        auto call = pl::pallas_call(
            [=](pl::Ref ar, pl::Ref br, pl::Ref cr) {
              pl::Value acc = pl::fori_loop(0, K / bk, pl::zeros({bm, N}), [&](pl::Value k, pl::Value acc) {
                pl::Value x = ta ? ar(pl::ds(k * bk, bk), pl::all) : ar(pl::all, pl::ds(k * bk, bk));
                pl::Value y = tb ? br(pl::all, pl::ds(k * bk, bk)) : br(pl::ds(k * bk, bk), pl::all);
                return acc + pl::dot(x, y, {.trans_a = ta, .trans_b = tb});
              });
              cr[pl::all] = acc;
            },
            pl::ShapeDtype({M, N}, pl::f32),
            {.grid = {(M + bm - 1) / bm},
             .in_specs = {ta ? pl::BlockSpec({K, bm}, [](pl::Value i) { return pl::idx(0, i); })
                             : pl::BlockSpec({bm, K}, [](pl::Value i) { return pl::idx(i, 0); }),
                          pl::BlockSpec(tb ? pl::Shape{N, K} : pl::Shape{K, N}, [](pl::Value) { return pl::idx(0, 0); })},
             .out_specs = {pl::BlockSpec({bm, N}, [](pl::Value i) { return pl::idx(i, 0); })},
             .name = "tf32_kloop",
             .compiler_params = {.num_warps = 4, .num_stages = 3}});
        pl::Array c = call(a, b);
        std::vector<double> ar(av), br(bv);
        for (auto& x : ar) x = tf32(x);
        for (auto& x : br) x = tf32(x);
        EXPECT_TRUE(close(to_doubles(c), ref_dot(ar, br, M, K, N, ta, tb), 2e-6, false));
      }
}

// i8 K loops over 128 x 128 blocks, exact. wgmma reads 8-bit operands K-major only: on sm_90a
// an operand whose rows are K (B as stored, or A with trans_a) lands by TMA as loaded in a
// staging region and is moved into its K-major tile in 4 x 4-byte blocks transposed in
// registers (pipeline.h); bk = 64 and 128 (64 and 128 bytes of K a row), the edge rows of the
// value range included.
TEST(Dot, I8KLoopTransposesOperandsWithRowsK) {
  for (int64_t bk : {64, 128})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE("bk=" + std::to_string(bk) + (ta ? ", A transposed" : "") + (tb ? ", B transposed" : ""));
        const int64_t M = 256, K = 256, N = 256, bm = 128, bn = 128;
        auto a8 = random_ints<int8_t>(M * K, 31), b8 = random_ints<int8_t>(K * N, 32);
        pl::Array a = pl::Array::from_vector(a8, ta ? pl::Shape{K, M} : pl::Shape{M, K});
        pl::Array b = pl::Array::from_vector(b8, tb ? pl::Shape{N, K} : pl::Shape{K, N});
        auto call = pl::pallas_call(
            [=](pl::Ref ar, pl::Ref br, pl::Ref cr) {
              pl::Value acc = pl::fori_loop(0, K / bk, pl::zeros({bm, bn}, pl::i32), [&](pl::Value k, pl::Value acc) {
                pl::Value x = ta ? ar(pl::ds(k * bk, bk), pl::all) : ar(pl::all, pl::ds(k * bk, bk));
                pl::Value y = tb ? br(pl::all, pl::ds(k * bk, bk)) : br(pl::ds(k * bk, bk), pl::all);
                return acc + pl::dot(x, y, {.trans_a = ta, .trans_b = tb});
              });
              cr[pl::all] = acc;
            },
            pl::ShapeDtype({M, N}, pl::i32),
            {.grid = {M / bm, N / bn},
             .in_specs = {ta ? pl::BlockSpec({K, bm}, [](pl::Value i, pl::Value) { return pl::idx(0, i); })
                             : pl::BlockSpec({bm, K}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
                          tb ? pl::BlockSpec({bn, K}, [](pl::Value, pl::Value j) { return pl::idx(j, 0); })
                             : pl::BlockSpec({K, bn}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })},
             .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
             .name = "i8_kloop",
             .compiler_params = {.num_warps = 8, .num_stages = 3}});
        pl::Array c = call(a, b);
        std::vector<double> ad(a8.begin(), a8.end()), bd(b8.begin(), b8.end());
        auto want = ref_dot(ad, bd, M, K, N, ta, tb);
        std::vector<int32_t> wi(want.begin(), want.end());
        EXPECT_TRUE(equal(c.to_vector<int32_t>(), wi));
      }
}

// A K loop whose accumulator is rescaled row by row before each dot, as flash attention does:
// acc = acc * r[:, None] + dot(a_k, b_k), r computed in the body from the loop index (once
// before the dot, once through a reshape after it, in IR order). On the CUDA backend the
// accumulator stays in tensor-core fragments scaled in place: 64 rows (wgmma on sm_90a) and 32
// (mma.sync).
TEST(Dot, KLoopWithRowScaledAccumulator) {
  for (int64_t M : {64, 32}) {
    for (bool reshape_after : {false, true}) {
      SCOPED_TRACE("M=" + std::to_string(M) + (reshape_after ? ", r reshaped after the dot" : ""));
      const int64_t K = 96, N = 64, bk = 32;
      auto av = with_edges(uniform(M * K, 21, -1, 1), pl::bf16, false), bv = with_edges(uniform(K * N, 22, -1, 1), pl::bf16, false);
      auto rv = uniform(M, 23, 0.5, 1.5);
      pl::Array a = make_array(av, {M, K}, pl::bf16), b = make_array(bv, {K, N}, pl::bf16), r = make_array(rv, {M, 1}, pl::f32);
      auto call = pl::pallas_call(
          [=](pl::Ref ar, pl::Ref br, pl::Ref rr, pl::Ref cr) {
            pl::Value base = rr[pl::all];  // [M, 1]
            pl::Value acc = pl::fori_loop(0, K / bk, pl::zeros({M, N}), [&](pl::Value k, pl::Value acc) {
              pl::Value scale = pl::reshape(base, {M}) * (k.astype(pl::f32) * 0.25f + 1.f);  // [M]
              pl::Value rows_before = reshape_after ? pl::Value() : pl::expand_dims(scale, 1);
              pl::Value x = ar(pl::all, pl::ds(k * bk, bk)), y = br(pl::ds(k * bk, bk), pl::all);
              pl::Value d = pl::dot(x, y);
              pl::Value rows = reshape_after ? pl::expand_dims(scale, 1) : rows_before;
              return acc * rows + d;
            });
            cr[pl::all] = acc;
          },
          pl::ShapeDtype({M, N}, pl::f32), {.name = "scaled_kloop"});
      pl::Array c = call(a, b, r);
      std::vector<double> want(static_cast<size_t>(M * N), 0.0);
      for (int64_t k = 0; k < K / bk; ++k)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t p = k * bk; p < (k + 1) * bk; ++p) s += av[i * K + p] * bv[p * N + j];
            double sc = static_cast<double>(static_cast<float>(rv[i]) * (static_cast<float>(k) * 0.25f + 1.f));
            want[i * N + j] = want[i * N + j] * sc + s;
          }
      EXPECT_TRUE(close(to_doubles(c), want, 1e-4, false));
    }
  }
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

// ---- the interpreter's GEMM paths (src/backends/interpret/program.cc, rules_dot.cc): dots of
// ref slices read as strided views, `acc + dot` accumulated in place, loops whose dots are
// collected and run as one multi-segment GEMM. Each must give what the plain path gives.
namespace pt {
namespace {

// A K loop over slices of whole-array refs: o = sum_k op(a)[:, k-slice] @ op(b)[k-slice, :].
// Transposed refs are sliced along their other dim. `order` permutes the slices (the sum is
// then in that order); `store_in_body` adds a scratch store, so the dots run one by one.
pl::Array kloop(const pl::Array& a, const pl::Array& b, int64_t M, int64_t K, int64_t N, int64_t bk, bool ta, bool tb,
                pl::Precision prec, int order, bool store_in_body) {
  int64_t steps = K / bk;
  auto kernel = [=](pl::Ref ar, pl::Ref br, pl::Ref o, pl::Ref s) {
    pl::Value acc = pl::fori_loop(0, steps, pl::zeros({M, N}), [&](pl::Value k, pl::Value acc) {
      pl::Value kk = order == 0 ? k : (steps - 1 - k);
      pl::Value x = ta ? ar(pl::ds(kk * bk, bk), pl::all) : ar(pl::all, pl::ds(kk * bk, bk));
      pl::Value y = tb ? br(pl::all, pl::ds(kk * bk, bk)) : br(pl::ds(kk * bk, bk), pl::all);
      if (store_in_body) s[pl::all] = pl::zeros({1});
      return acc + pl::dot(x, y, {.trans_a = ta, .trans_b = tb, .precision = prec});
    });
    o[pl::all] = acc;
  };
  auto call = pl::pallas_call(kernel, pl::ShapeDtype({M, N}, pl::f32),
                              {.scratch_shapes = {pl::ShapeDtype({1}, pl::f32)}, .name = "kloop"});
  return call(a, b);
}

// Shapes past every edge of the GEMM: M not a multiple of its 6-row tile, N not a multiple of
// its 64-column panel, K past one 512 block; f16/bf16/f32 operands, each transposition.
TEST(InterpreterGemm, SlicedKLoopMatchesReference) {
  const int64_t M = 37, K = 640, N = 70, bk = 64;
  for (pl::DType t : {pl::f32, pl::bf16, pl::f16})
    for (int tr = 0; tr < 4; ++tr) {
      bool ta = tr & 1, tb = tr & 2;
      SCOPED_TRACE(std::string(pl::dtype_name(t)) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
      auto av = with_edges(uniform(M * K, 21, -1, 2), t, false), bv = with_edges(uniform(K * N, 22, -1, 2), t, false);
      pl::Array a = make_array(av, ta ? pl::Shape{K, M} : pl::Shape{M, K}, t);
      pl::Array b = make_array(bv, tb ? pl::Shape{N, K} : pl::Shape{K, N}, t);
      pl::Precision prec = t == pl::f32 ? pl::Precision::Highest : pl::Precision::Default;
      pl::Array c = kloop(a, b, M, K, N, bk, ta, tb, prec, 0, false);
      EXPECT_TRUE(close(to_doubles(c), ref_dot(av, bv, M, K, N, ta, tb), 5e-5, false));
    }
}

// Collected dots (adjacent slices merged into one, or not adjacent) give bit for bit what
// dots run one by one give: the same products summed in the same order.
TEST(InterpreterGemm, CollectedDotsEqualOneByOneInterpretOnly) {
  const int64_t M = 50, K = 1024, N = 96, bk = 32;
  auto av = normal(M * K, 23), bv = normal(K * N, 24);
  pl::Array a = make_array(av, {M, K}, pl::f32), b = make_array(bv, {K, N}, pl::f32);
  for (pl::Precision prec : {pl::Precision::Default, pl::Precision::Highest})
    for (int order = 0; order < 2; ++order) {
      auto collected = kloop(a, b, M, K, N, bk, false, false, prec, order, false).to_vector<float>();
      auto one_by_one = kloop(a, b, M, K, N, bk, false, false, prec, order, true).to_vector<float>();
      EXPECT_EQ(collected, one_by_one) << "order " << order;
    }
  // and the K loop equals one dot over the whole K up to rounding (the sums associate differently)
  auto whole = dot_call(a, b, {.precision = pl::Precision::Highest}, pl::ShapeDtype({M, N}, pl::f32));
  auto looped = kloop(a, b, M, K, N, bk, false, false, pl::Precision::Highest, 0, false);
  EXPECT_TRUE(close(to_doubles(looped), to_doubles(whole), 1e-5, false));
}

// acc + dot in every position the rewrite considers, and where it must not apply: the dot's
// result on either side, two dots summed, an accumulator still used afterwards, a loop carry
// also returned unchanged, a zero-trip loop, a while loop.
TEST(InterpreterGemm, AccumulateInPlaceOnlyWhenDead) {
  const int64_t M = 8, K = 16, N = 16;
  auto av = normal(M * K, 25), bv = normal(K * N, 26), cv = normal(M * N, 27);
  pl::Array a = make_array(av, {M, K}, pl::f32), b = make_array(bv, {K, N}, pl::f32), c = make_array(cv, {M, N}, pl::f32);
  auto ab = ref_dot(av, bv, M, K, N, false, false);
  auto hi = pl::DotOptions{.precision = pl::Precision::Highest};
  auto run = [&](auto kernel, int outs) {
    std::vector<pl::ShapeDtype> shapes(static_cast<size_t>(outs), pl::ShapeDtype({M, N}, pl::f32));
    return pl::pallas_call(kernel, shapes, {.name = "acc"})({a, b, c});
  };
  auto plus = [](std::vector<double> x, const std::vector<double>& y, double s = 1) {
    for (size_t i = 0; i < x.size(); ++i) x[i] += s * y[i];
    return x;
  };
  // dot + acc (acc a load: not owned, so a fresh result), and acc + dot
  auto r = run([&](pl::Ref ar, pl::Ref br, pl::Ref cr, pl::Ref o1, pl::Ref o2) {
    pl::Value acc = cr[pl::all];
    o1[pl::all] = pl::dot(ar[pl::all], br[pl::all], hi) + acc;
    o2[pl::all] = acc + pl::dot(ar[pl::all], br[pl::all], hi) + acc;
  }, 2);
  EXPECT_TRUE(close(to_doubles(r[0]), plus(ab, cv), 1e-5, false));
  EXPECT_TRUE(close(to_doubles(r[1]), plus(plus(ab, cv), cv), 1e-5, false));
  // dot + dot (the second accumulates into the first's buffer); a dot result used twice
  r = run([&](pl::Ref ar, pl::Ref br, pl::Ref, pl::Ref o1, pl::Ref o2) {
    pl::Value d1 = pl::dot(ar[pl::all], br[pl::all], hi);
    o1[pl::all] = d1 + pl::dot(ar[pl::all], br[pl::all], hi);
    pl::Value d2 = pl::dot(ar[pl::all], br[pl::all], hi);
    pl::Value s = d2 + pl::dot(ar[pl::all], br[pl::all], hi);
    o2[pl::all] = s + d2;
  }, 2);
  EXPECT_TRUE(close(to_doubles(r[0]), plus(ab, ab), 1e-5, false));
  EXPECT_TRUE(close(to_doubles(r[1]), plus(plus(ab, ab), ab), 1e-5, false));
  // a carry returned unchanged beside the accumulated one; the initial value used after the loop
  r = run([&](pl::Ref ar, pl::Ref br, pl::Ref cr, pl::Ref o1, pl::Ref o2) {
    pl::Value init = pl::zeros({M, N}) + 1.f;
    auto outs = pl::fori_loop(0, 3, {init, cr[pl::all].get()}, [&](pl::Value, std::vector<pl::Value> cs) {
      return std::vector<pl::Value>{cs[0] + pl::dot(ar[pl::all], br[pl::all], hi), cs[0]};
    });
    o1[pl::all] = outs[0] + init;
    o2[pl::all] = outs[1];
  }, 2);
  std::vector<double> ones(static_cast<size_t>(M * N), 1.0);
  EXPECT_TRUE(close(to_doubles(r[0]), plus(plus(ones, ab, 3), ones), 1e-5, false));
  EXPECT_TRUE(close(to_doubles(r[1]), plus(ones, ab, 2), 1e-5, false));
  // zero trips: the (adopted) initial value comes back
  r = run([&](pl::Ref ar, pl::Ref br, pl::Ref, pl::Ref o1) {
    o1[pl::all] = pl::fori_loop(0, 0, pl::zeros({M, N}) + 2.f,
                                [&](pl::Value, pl::Value acc) { return acc + pl::dot(ar[pl::all], br[pl::all], hi); });
  }, 1);
  for (double v : to_doubles(r[0])) EXPECT_EQ(v, 2.0);
  // a while loop accumulates in place too
  r = run([&](pl::Ref ar, pl::Ref br, pl::Ref, pl::Ref o1) {
    auto outs = pl::while_loop({pl::Value(pl::zeros({M, N})), pl::Value::constant(0, pl::i32)},
                               [](std::vector<pl::Value> cs) { return cs[1] < 4; },
                               [&](std::vector<pl::Value> cs) {
                                 return std::vector<pl::Value>{cs[0] + pl::dot(ar[pl::all], br[pl::all], hi), cs[1] + 1};
                               });
    o1[pl::all] = outs[0];
  }, 1);
  EXPECT_TRUE(close(to_doubles(r[0]), plus(std::vector<double>(ab.size(), 0.0), ab, 4), 1e-5, false));
}

// A load that feeds a dot reads the ref as it was at the load, even when the ref is written
// before the dot runs (such loads are copied, not viewed).
TEST(InterpreterGemm, SliceLoadedBeforeAStoreKeepsItsValue) {
  const int64_t M = 8, K = 8, N = 8;
  auto av = normal(M * K, 28), bv = normal(K * N, 29);
  pl::Array a = make_array(av, {M, K}, pl::f32), b = make_array(bv, {K, N}, pl::f32);
  auto call = pl::pallas_call(
      [](pl::Ref ar, pl::Ref br, pl::Ref o, pl::Ref s) {
        s[pl::all] = ar[pl::all];
        pl::Value x = s(pl::all, pl::ds(0, K));
        s[pl::all] = pl::zeros({M, K});
        o[pl::all] = pl::dot(x, br[pl::all], {.precision = pl::Precision::Highest});
      },
      pl::ShapeDtype({M, N}, pl::f32), {.scratch_shapes = {pl::ShapeDtype({M, K}, pl::f32)}, .name = "stale"});
  EXPECT_TRUE(close(to_doubles(call(a, b)), ref_dot(av, bv, M, K, N, false, false), 1e-5, false));
}

}  // namespace
}  // namespace pt
