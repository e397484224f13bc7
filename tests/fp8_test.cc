// The 8-bit floats f8e4m3 (OCP E4M3 "fn": no infinities, 0x7f/0xff NaN, largest 448) and
// f8e5m2 (IEEE-like, largest 57344): conversions against an independent reference (round to
// nearest even, saturating to the largest finite value), promotion, conversions and arithmetic
// inside kernels (the GPU agrees with the interpreter bit for bit), and dots on the tensor
// cores, alone and as weights of a wider float.
#include <cmath>

#include "pallas/dlpack.h"
#include "pallas/kernels.h"
#include "tests/test_util.h"
#include "tests/transforms_util.h"

namespace pt {
namespace {

// C = op(A) @ op(B) in double from the (already rounded) inputs.
std::vector<double> ref_dot(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k, int64_t n, bool ta, bool tb) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += (ta ? a[static_cast<size_t>(p * m + i)] : a[static_cast<size_t>(i * k + p)]) * (tb ? b[static_cast<size_t>(j * k + p)] : b[static_cast<size_t>(p * n + j)]);
      c[static_cast<size_t>(i * n + j)] = s;
    }
  return c;
}

// The stored bytes of an array of 8-bit elements.
std::vector<uint8_t> bitcast_bytes(const pl::Array& a) {
  pl::Array h = a.to_host();
  const auto* p = static_cast<const uint8_t*>(h.raw_data());
  return std::vector<uint8_t>(p, p + h.size());
}

const std::vector<pl::DType>& f8_dtypes() {
  static const std::vector<pl::DType> v{pl::f8e4m3, pl::f8e5m2};
  return v;
}

// Independent decoder: sign, exponent and mantissa fields read by the format's definition.
double decode(uint8_t b, pl::DType t) {
  bool e4 = t == pl::f8e4m3;
  int M = e4 ? 3 : 2, E = e4 ? 4 : 5, bias = e4 ? 7 : 15;
  int exp = (b >> M) & ((1 << E) - 1), man = b & ((1 << M) - 1);
  double s = (b & 0x80) ? -1.0 : 1.0;
  if (e4 && (b & 0x7f) == 0x7f) return std::nan("");
  if (!e4 && exp == 31) return man ? std::nan("") : s * INFINITY;
  if (exp == 0) return s * std::ldexp(man, 1 - bias - M);
  return s * std::ldexp(man + (1 << M), exp - bias - M);
}

uint8_t encode(float f, pl::DType t) { return t == pl::f8e4m3 ? pl::float_to_f8e4m3(f) : pl::float_to_f8e5m2(f); }
float widen(uint8_t b, pl::DType t) { return t == pl::f8e4m3 ? pl::f8e4m3_to_float(b) : pl::f8e5m2_to_float(b); }

// Floats worth converting: every f8 value, the midpoints between neighbours (ties) and a hair
// either side of them, values past the largest, infinities, NaN, f32 subnormals, and random ones.
std::vector<float> probe_floats(pl::DType t) {
  std::vector<double> finite;
  for (int b = 0; b < 128; ++b)
    if (double v = decode(static_cast<uint8_t>(b), t); std::isfinite(v)) finite.push_back(v);
  std::vector<float> f;
  for (size_t i = 0; i < finite.size(); ++i) {
    for (double s : {1.0, -1.0}) {
      f.push_back(static_cast<float>(s * finite[i]));
      if (i + 1 < finite.size()) {
        float mid = static_cast<float>(s * (finite[i] + finite[i + 1]) / 2);
        f.push_back(mid);
        f.push_back(std::nextafter(mid, INFINITY));
        f.push_back(std::nextafter(mid, -INFINITY));
      }
    }
  }
  double mx = float_max(t);
  for (double v : {mx * 1.03, mx * 1.07, mx * 2, 1e30, 3.0e38})
    for (double s : {1.0, -1.0}) f.push_back(static_cast<float>(s * v));
  f.push_back(INFINITY);
  f.push_back(-INFINITY);
  f.push_back(std::nanf(""));
  f.push_back(1e-40f);  // an f32 subnormal
  f.push_back(-1e-40f);
  for (double v : uniform(2000, 71, -2 * mx, 2 * mx)) f.push_back(static_cast<float>(v));
  for (double v : normal(2000, 72, 0, 1e-3)) f.push_back(static_cast<float>(v));
  return f;
}

TEST(Fp8, WideningIsExactForEveryBitPattern) {
  for (pl::DType t : f8_dtypes()) {
    SCOPED_TRACE(pl::dtype_name(t));
    for (int b = 0; b < 256; ++b) {
      double want = decode(static_cast<uint8_t>(b), t);
      float got = widen(static_cast<uint8_t>(b), t);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << b;
        continue;
      }
      EXPECT_EQ(static_cast<double>(got), want) << b;
      EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << b;
      if (std::isfinite(want)) EXPECT_EQ(encode(got, t), b) << "round trip of " << b;
    }
  }
  EXPECT_EQ(pl::f8e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(pl::f8e5m2_to_float(0x7b), 57344.0f);
  EXPECT_EQ(pl::f8e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(pl::f8e5m2_to_float(0x01), std::ldexp(1.0f, -16));
}

TEST(Fp8, NarrowingRoundsToNearestEvenAndSaturates) {
  for (pl::DType t : f8_dtypes()) {
    SCOPED_TRACE(pl::dtype_name(t));
    for (float f : probe_floats(t)) {
      uint8_t b = encode(f, t);
      if (std::isnan(f)) {
        EXPECT_EQ(b, 0x7f);
        continue;
      }
      double want = round_to(static_cast<double>(f), t);
      EXPECT_EQ(decode(b, t), want) << f;
      EXPECT_EQ((b & 0x80) != 0, std::signbit(f)) << f;
    }
  }
  EXPECT_EQ(pl::float_to_f8e4m3(INFINITY), 0x7e);
  EXPECT_EQ(pl::float_to_f8e4m3(-1e9f), 0xfe);
  EXPECT_EQ(pl::float_to_f8e5m2(INFINITY), 0x7b);
  EXPECT_EQ(pl::float_to_f8e4m3(464.0f), 0x7e);  // a tie below 480 rounds to even: 448
  EXPECT_EQ(pl::float_to_f8e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: even
  EXPECT_EQ(pl::float_to_f8e4m3(std::ldexp(1.5f, -10)), 0x01);
}

// Host conversions from every dtype go through the same rounding (f64 without double rounding).
TEST(Fp8, ArrayConversions) {
  for (pl::DType t : f8_dtypes()) {
    SCOPED_TRACE(pl::dtype_name(t));
    // just above a tie in f64 that f32 would round onto the tie: no double rounding
    double step = t == pl::f8e4m3 ? 0.125 : 0.25, tie = 1.0 + step / 2, above = tie + 1e-12;
    std::vector<double> v{above, -above, tie, 1e10, -1e10, 0.1, -0.0};
    pl::Array a = pl::Array::from_vector(v).astype(t);
    std::vector<double> got = a.to_vector<double>();
    EXPECT_EQ(got[0], 1.0 + step);
    EXPECT_EQ(got[1], -1.0 - step);
    EXPECT_EQ(got[2], 1.0);
    EXPECT_EQ(got[3], float_max(t));
    EXPECT_EQ(got[4], -float_max(t));
    EXPECT_EQ(got[5], round_to(0.1, t));
    EXPECT_TRUE(std::signbit(got[6]));
    for (pl::DType to : {pl::bf16, pl::f16, pl::f32, pl::i32, pl::i8, pl::u8})
      EXPECT_EQ(a.astype(to).astype(pl::f64).to_vector<double>(), pl::Array::from_vector(got).astype(to).astype(pl::f64).to_vector<double>())
          << pl::dtype_name(to);
    EXPECT_EQ(std::string(pl::dtype_name(t)), t == pl::f8e4m3 ? "f8e4m3" : "f8e5m2");
    EXPECT_EQ(pl::itemsize(t), 1u);
    EXPECT_TRUE(pl::is_float(t));
  }
}

TEST(Fp8, PromotesOnlyWithItselfAndWeakScalars) {
  EXPECT_EQ(pl::promote_types(pl::f8e4m3, pl::f8e4m3), pl::f8e4m3);
  EXPECT_EQ(pl::promote_types(pl::f8e5m2, false, pl::f32, true).dtype, pl::f8e5m2);
  EXPECT_EQ(pl::promote_types(pl::i32, pl::f8e4m3), pl::f8e4m3);  // as JAX: ints below every float
  EXPECT_THROW_MSG(pl::promote_types(pl::f8e4m3, pl::bf16), "convert one operand explicitly");
  EXPECT_THROW_MSG(pl::promote_types(pl::f8e4m3, pl::f8e5m2), "no implicit promotion between f8e4m3 and f8e5m2");
  // in a kernel: an f8 plus a bf16 is an error naming both; with a C++ scalar it stays f8
  pl::Array x = pl::Array::zeros({8}, pl::f8e4m3), y = pl::Array::zeros({8}, pl::bf16);
  EXPECT_THROW_MSG(pl::pallas_call([](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = a[pl::all] + b[pl::all]; }, pl::ShapeDtype({8}, pl::bf16),
                                   {.name = "mixed_f8"})(x, y),
                   "f8e4m3 and bf16");
  pl::Array z = pl::pallas_call([](pl::Ref a, pl::Ref o) { o[pl::all] = a[pl::all] * 2.0 + 1.0; }, pl::ShapeDtype({8}, pl::f8e4m3),
                                {.name = "f8_scalar"})(x);
  EXPECT_EQ(z.to_vector<double>(), std::vector<double>(8, 1.0));
}

// Conversions inside a kernel, both ways and from every probe value: the GPU agrees with the
// interpreter (and the host) bit for bit.
TEST(Fp8, ConversionsInKernels) {
  for (pl::DType t : f8_dtypes()) {
    SCOPED_TRACE(pl::dtype_name(t));
    std::vector<float> probes = probe_floats(t);
    int64_t n = static_cast<int64_t>(probes.size()) / 256 * 256;
    probes.resize(static_cast<size_t>(n));
    pl::Array x = pl::Array::from_vector(probes);
    std::vector<uint8_t> patterns(256);
    for (int b = 0; b < 256; ++b) patterns[static_cast<size_t>(b)] = static_cast<uint8_t>(b);
    pl::Array bits = pl::Array::from_vector(patterns);
    auto narrow = pl::pallas_call([=](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all].astype(t); }, pl::ShapeDtype({n}, t),
                                  {.grid = {n / 256}, .in_specs = {pl::BlockSpec({256}, [](pl::Value i) { return pl::idx(i); })},
                                   .out_specs = {pl::BlockSpec({256}, [](pl::Value i) { return pl::idx(i); })},
                                   .name = "f8_narrow"});
    std::vector<uint8_t> got = bitcast_bytes(narrow(x));
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], encode(probes[static_cast<size_t>(i)], t)) << probes[static_cast<size_t>(i)];
    // every pattern widened to f32, bf16 and f16, and narrowed back from f32
    auto widen_call = pl::pallas_call(
        [=](pl::Ref br, pl::Ref o32, pl::Ref obf, pl::Ref oh, pl::Ref back) {
          pl::Value v = pl::bitcast(br[pl::all], t);
          o32[pl::all] = v.astype(pl::f32);
          obf[pl::all] = v.astype(pl::bf16);
          oh[pl::all] = v.astype(pl::f16);
          back[pl::all] = v.astype(pl::f32).astype(t);
        },
        {pl::ShapeDtype({256}, pl::f32), pl::ShapeDtype({256}, pl::bf16), pl::ShapeDtype({256}, pl::f16), pl::ShapeDtype({256}, t)},
        {.name = "f8_widen"});
    auto outs = widen_call({bits});
    std::vector<double> w32 = outs[0].to_vector<double>(), wbf = outs[1].to_vector<double>(), wh = outs[2].to_vector<double>();
    std::vector<uint8_t> back = bitcast_bytes(outs[3]);
    for (int b = 0; b < 256; ++b) {
      double want = decode(static_cast<uint8_t>(b), t);
      size_t k = static_cast<size_t>(b);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(w32[k]) && std::isnan(wbf[k]) && std::isnan(wh[k])) << b;
        EXPECT_EQ(back[k], 0x7f) << b;
        continue;
      }
      EXPECT_EQ(w32[k], want) << b;
      EXPECT_EQ(wbf[k], want) << b;
      EXPECT_EQ(wh[k], want) << b;
      EXPECT_EQ(back[k], std::isinf(want) ? encode(static_cast<float>(want), t) : b) << b;
    }
  }
}

// Arithmetic on 8-bit floats is computed in f32 and rounded once per op (as 16-bit floats are).
TEST(Fp8, ElementwiseArithmetic) {
  const int64_t n = 1024;
  for (pl::DType t : f8_dtypes()) {
    SCOPED_TRACE(pl::dtype_name(t));
    auto av = with_edges(uniform(n, 81, -8, 8), t, false), bv = with_edges(uniform(n, 82, 0.5, 4), t, false);
    pl::Array a = make_array(av, {n}, t), b = make_array(bv, {n}, t);
    auto call = pl::pallas_call(
        [](pl::Ref ar, pl::Ref br, pl::Ref o, pl::Ref m) {
          pl::Value x = ar[pl::all], y = br[pl::all];
          o[pl::all] = x * y + pl::exp(x / y);
          m[pl::all] = pl::maximum(x, y).astype(pl::f32) + pl::nextafter(x, y).astype(pl::f32);
        },
        {pl::ShapeDtype({n}, t), pl::ShapeDtype({n}, pl::f32)},
        {.grid = {4}, .in_specs = {pl::BlockSpec({256}, [](pl::Value i) { return pl::idx(i); }), pl::BlockSpec({256}, [](pl::Value i) { return pl::idx(i); })},
         .out_specs = {pl::BlockSpec({256}, [](pl::Value i) { return pl::idx(i); }), pl::BlockSpec({256}, [](pl::Value i) { return pl::idx(i); })},
         .name = "f8_elementwise"});
    auto outs = call({a, b});
    std::vector<double> got = outs[0].to_vector<double>(), gm = outs[1].to_vector<double>();
    for (int64_t i = 0; i < n; ++i) {
      size_t k = static_cast<size_t>(i);
      double x = av[k], y = bv[k];
      double prod = round_to(x * y, t), q = round_to(x / y, t), e = round_to(std::exp(q), t);
      // each op rounds once to the format: the f32 exp may sit an ulp of f32 off, never an f8 ulp
      EXPECT_NEAR(got[k], round_to(prod + e, t), std::fabs(round_to(prod + e, t)) * tol_for(t) + 1e-9) << x << " " << y;
      // nextafter steps in the 8-bit format
      double next = x == y ? y : decode(static_cast<uint8_t>(encode(static_cast<float>(x), t) + ((x < y) == (x > 0) ? 1 : -1)), t);
      if (x == 0 && x != y) next = std::copysign(decode(1, t), y);
      EXPECT_EQ(gm[k], std::max(x, y) + next) << x << " " << y;
    }
  }
}

// Dots of 8-bit floats on the tensor cores (wgmma's e4m3/e5m2 kinds on sm_90a, mma.sync on
// sm_89) accumulate in f32: products of two 8-bit values are exact in f32, so only the order of
// the f32 sums differs from the f64 reference. A K loop over a grid, as a matmul is written,
// with per-row and per-column scales in the epilogue; B given as [N, K] (trans_b, the layout
// the tensor cores read 8-bit operands in) and as [K, N].
TEST(Fp8, DotsAccumulateInF32WithScales) {
  const int64_t M = 128, N = 128, K = 256, bm = 64, bn = 64, bk = 64;
  for (pl::DType t : f8_dtypes()) {
    for (bool tb : {true, false}) {
      SCOPED_TRACE(std::string(pl::dtype_name(t)) + (tb ? " b [N, K]" : " b [K, N]"));
      auto av = with_edges(normal(M * K, 91, 0, 2), t, false), bv = with_edges(normal(K * N, 92, 0, 2), t, false);
      auto sa = uniform(M, 93, 0.5, 2), sb = uniform(N, 94, 0.5, 2);
      pl::Array a = make_array(av, {M, K}, t), b = make_array(bv, tb ? pl::Shape{N, K} : pl::Shape{K, N}, t);
      pl::Array as = make_array(sa, {M, 1}, pl::f32), bs = make_array(sb, {1, N}, pl::f32);
      auto call = pl::pallas_call(
          [=](pl::Ref ar, pl::Ref br, pl::Ref asr, pl::Ref bsr, pl::Ref o) {
            pl::Value acc = pl::fori_loop(0, K / bk, pl::zeros({bm, bn}), [&](pl::Value k, pl::Value acc) {
              pl::Value x = ar(pl::all, pl::ds(k * bk, bk));
              pl::Value y = tb ? br(pl::all, pl::ds(k * bk, bk)) : br(pl::ds(k * bk, bk), pl::all);
              return acc + pl::dot(x, y, {.trans_b = tb});
            });
            o[pl::all] = (acc * asr[pl::all] * bsr[pl::all]).astype(pl::bf16);
          },
          pl::ShapeDtype({M, N}, pl::bf16),
          {.grid = {M / bm, N / bn},
           .in_specs = {pl::BlockSpec({bm, K}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
                        tb ? pl::BlockSpec({bn, K}, [](pl::Value, pl::Value j) { return pl::idx(j, 0); }) : pl::BlockSpec({K, bn}, [](pl::Value, pl::Value j) { return pl::idx(0, j); }),
                        pl::BlockSpec({bm, 1}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }), pl::BlockSpec({1, bn}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })},
           .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
           .name = "f8_scaled_matmul"});
      pl::Array c = call(a, b, as, bs);
      auto want = ref_dot(av, bv, M, K, N, false, tb);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double& w = want[static_cast<size_t>(i * N + j)];
          w = round_to(w * round_to(sa[static_cast<size_t>(i)], pl::f32) * round_to(sb[static_cast<size_t>(j)], pl::f32), pl::bf16);
        }
      EXPECT_TRUE(close(to_doubles(c), want, tol_for(pl::bf16), false));
    }
  }
  // e4m3 x e5m2 has no exact common 8-bit type: an error asking for a convert
  EXPECT_THROW_MSG(pl::pallas_call([](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = pl::dot(a[pl::all], b[pl::all]); },
                                   pl::ShapeDtype({16, 16}, pl::f32), {})(pl::Array::zeros({16, 16}, pl::f8e4m3), pl::Array::zeros({16, 16}, pl::f8e5m2)),
                   "dot: operands are f8e4m3 and f8e5m2");
}

// Weight-only 8-bit float weights: a bf16/f16 activation times an f8 weight, the weight
// widened exactly as it enters the dot, a few rows as in decoding.
TEST(Fp8, WeightsWithWiderActivations) {
  const int64_t M = 16, K = 128, N = 64, bk = 32;
  for (pl::DType w8t : f8_dtypes()) {
    for (pl::DType t : {pl::bf16, pl::f16}) {
      SCOPED_TRACE(std::string(pl::dtype_name(w8t)) + " x " + pl::dtype_name(t));
      auto xv = with_edges(uniform(M * K, 101, -1, 1), t, false), wv = with_edges(normal(K * N, 102, 0, 1), w8t, false);
      pl::Array x = make_array(xv, {M, K}, t), w = make_array(wv, {K, N}, w8t);
      auto call = pl::pallas_call(
          [=](pl::Ref xr, pl::Ref wr, pl::Ref o) {
            pl::Value acc = pl::fori_loop(0, K / bk, pl::zeros({M, N}), [&](pl::Value k, pl::Value acc) {
              return acc + pl::dot(xr(pl::all, pl::ds(k * bk, bk)), wr(pl::ds(k * bk, bk), pl::all));
            });
            o[pl::all] = acc.astype(t);
          },
          pl::ShapeDtype({M, N}, t), {.name = "f8_weights"});
      pl::Array c = call(x, w);
      auto want = ref_dot(xv, wv, M, K, N, false, false);
      for (auto& v : want) v = round_to(v, t);
      EXPECT_TRUE(close(to_doubles(c), want, tol_for(t), false));
    }
  }
}

TEST(Fp8, DlpackRoundTrip) {
  for (pl::DType t : f8_dtypes()) {
    pl::Array a = make_array({1.0, -2.0, 0.5, 448.0}, {4}, t);
    pl::Array b = pl::dlpack::from_dlpack(pl::dlpack::to_dlpack(a));
    EXPECT_EQ(b.dtype(), t);
    EXPECT_EQ(b.to_vector<double>(), a.to_vector<double>());
  }
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// kernels::scaled_matmul against an f64 reference, for each scale kind and 8-bit float, and
// with blocks narrower than the 128-column scale blocks.
TEST(Fp8, ScaledMatmulLibraryKernel) {
  const int64_t M = 256, N = 256, K = 384;
  using pl::kernels::ScaleKind;
  for (pl::DType t : f8_dtypes()) {
    for (ScaleKind kind : {ScaleKind::Tensorwise, ScaleKind::Rowwise, ScaleKind::Blockwise}) {
      for (int64_t bn : {128, 64, 256}) {
        if (bn != 128 && kind != ScaleKind::Blockwise) continue;
        SCOPED_TRACE(std::string(pl::dtype_name(t)) + " scales " + std::to_string(static_cast<int>(kind)) + " block_n " + std::to_string(bn));
        auto av = with_edges(normal(M * K, 111, 0, 3), t, false), bv = with_edges(normal(N * K, 112, 0, 3), t, false);
        pl::Array a = make_array(av, {M, K}, t), b = make_array(bv, {N, K}, t);
        pl::Shape sas = kind == ScaleKind::Tensorwise ? pl::Shape{1, 1} : kind == ScaleKind::Rowwise ? pl::Shape{M, 1} : pl::Shape{M, K / 128};
        pl::Shape sbs = kind == ScaleKind::Tensorwise ? pl::Shape{1, 1} : kind == ScaleKind::Rowwise ? pl::Shape{1, N} : pl::Shape{N / 128, K / 128};
        auto sav = with_edges(uniform(static_cast<size_t>(sas[0] * sas[1]), 113, 0.25, 2), pl::f32, false);
        auto sbv = with_edges(uniform(static_cast<size_t>(sbs[0] * sbs[1]), 114, 0.25, 2), pl::f32, false);
        pl::Array sa = make_array(sav, sas, pl::f32), sb = make_array(sbv, sbs, pl::f32);
        pl::Call call = pl::kernels::scaled_matmul(M, N, K, t, pl::bf16, {.block_n = bn, .scales = kind});
        pl::Array c = call({a, b, sa, sb})[0];
        // fast accumulation: the same answer on the interpreter (f32 either way); on the GPU the
        // tensor cores' fewer accumulator bits stay within bf16's tolerance at this K
        pl::Array cf = pl::kernels::scaled_matmul(M, N, K, t, pl::bf16, {.block_n = bn, .scales = kind, .fast_accumulation = true})({a, b, sa, sb})[0];
        std::vector<double> want(static_cast<size_t>(M * N), 0.0);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t p = 0; p < K; ++p) {
              double x = av[static_cast<size_t>(i * K + p)] * bv[static_cast<size_t>(j * K + p)];
              if (kind == ScaleKind::Blockwise) x *= sav[static_cast<size_t>(i * (K / 128) + p / 128)] * sbv[static_cast<size_t>((j / 128) * (K / 128) + p / 128)];
              s += x;
            }
            if (kind == ScaleKind::Tensorwise) s *= sav[0] * sbv[0];
            if (kind == ScaleKind::Rowwise) s *= sav[static_cast<size_t>(i)] * sbv[static_cast<size_t>(j)];
            want[static_cast<size_t>(i * N + j)] = round_to(s, pl::bf16);
          }
        EXPECT_TRUE(close(to_doubles(c), want, tol_for(pl::bf16), false));
        EXPECT_TRUE(close(to_doubles(cf), want, tol_for(pl::bf16), false));
      }
    }
  }
  EXPECT_THROW_MSG(pl::kernels::scaled_matmul(128, 128, 128, pl::bf16, pl::bf16), "must be f8e4m3 or f8e5m2");
  EXPECT_THROW_MSG(pl::kernels::scaled_matmul(128, 100, 128, pl::f8e4m3, pl::bf16, {.scales = ScaleKind::Blockwise}), "multiples of 128");
  EXPECT_THROW_MSG(pl::kernels::scaled_matmul(128, 128, 96, pl::f8e4m3, pl::bf16, {.block_k = 64}), "K=96 is not a multiple");
}

}  // namespace
}  // namespace pt
