// Kernels whose values the CUDA backend keeps in a tensor-core dot's fragments (value
// layouts, src/backends/cuda/value_layout.h): elementwise ops, causal masks from iota, row
// reductions and broadcasts of row statistics on a dot's result, P fed to a second dot from
// registers, fori carries of row statistics, and fragments meeting blocked values (loaded
// tiles, stores, column reductions). On the interpreter these are plain kernels; both
// backends are checked against double-precision references. 64-row dots take wgmma on sm_90a,
// 16- and 32-row dots mma.sync (whose 16 x 32 tiles split rows of 64 columns over warps, so
// their row statistics go through the blocked layout).
#include "tests/test_util.h"

#include "pallas/kernels.h"
#include "src/core/pallas_call.h"

namespace pt {
namespace {

// softmax(mask(Q K^T * scale)) V in double, row by row (masked scores -1e30), each P entry
// passed through round_p (the kernel's rounding of P to the dot's input type).
std::vector<double> attention_ref(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v, int64_t M, int64_t N,
                                  int64_t D, double scale, const std::function<bool(int64_t, int64_t)>& mask,
                                  const std::function<double(double)>& round_p) {
  std::vector<double> out(static_cast<size_t>(M * D));
  for (int64_t i = 0; i < M; ++i) {
    std::vector<double> s(static_cast<size_t>(N));
    double mx = -INFINITY, l = 0;
    for (int64_t j = 0; j < N; ++j) {
      double a = 0;
      for (int64_t d = 0; d < D; ++d) a += q[i * D + d] * k[j * D + d];
      s[j] = mask(i, j) ? a * scale : -1e30;
      mx = std::max(mx, s[j]);
    }
    for (auto& x : s) x = std::exp(x - mx), l += x;
    for (int64_t d = 0; d < D; ++d) {
      double a = 0;
      for (int64_t j = 0; j < N; ++j) a += round_p(s[j]) * v[j * D + d];
      out[i * D + d] = a / l;
    }
  }
  return out;
}

// One block of attention without a loop: P = softmax(Q K^T * c) row by row, O = P V / l.
// P is rounded to the input dtype before the second dot, as a user writes it.
TEST(FragmentValues, SoftmaxOfADotFeedsASecondDot) {
  struct Case {
    int64_t M, N, D;
    pl::DType t;
  };
  for (Case cs : {Case{64, 64, 64, pl::bf16}, Case{64, 128, 32, pl::f16}, Case{128, 64, 64, pl::bf16}, Case{64, 40, 32, pl::bf16},
                  Case{64, 64, 32, pl::f32}, Case{32, 64, 32, pl::bf16}, Case{16, 32, 16, pl::f16}}) {
    const int64_t M = cs.M, N = cs.N, D = cs.D;
    const pl::DType t = cs.t;
    SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " D=" + std::to_string(D) + " " + pl::dtype_name(t));
    auto qv = with_edges(uniform(M * D, 31, -1, 1), t, false), kv = with_edges(uniform(N * D, 32, -1, 1), t, false),
         vv = with_edges(uniform(N * D, 33, -1, 1), t, false);
    const float c = 0.5f;
    auto call = pl::pallas_call(
        [=](pl::Ref q, pl::Ref k, pl::Ref v, pl::Ref o) {
          pl::Value s = pl::dot(q[pl::all], k[pl::all], {.trans_b = true}) * c;
          pl::Value m = pl::max(s, {1});
          pl::Value p = pl::exp(s - pl::expand_dims(m, 1));
          pl::Value l = pl::sum(p, {1});
          o[pl::all] = pl::dot(p.astype(t), v[pl::all]) / pl::expand_dims(l, 1);
        },
        pl::ShapeDtype({M, D}, pl::f32), {.name = "softmax_dot", .compiler_params = {.num_warps = 4}});
    pl::Array out = call(make_array(qv, {M, D}, t), make_array(kv, {N, D}, t), make_array(vv, {N, D}, t));
    auto want = attention_ref(qv, kv, vv, M, N, D, c, [](int64_t, int64_t) { return true; },
                              [&](double p) { return round_to(p, t == pl::f32 ? pl::bf16 : t); });
    EXPECT_TRUE(close(to_doubles(out), want, 1e-2, false));
  }
}

// A causal mask built from iota on a dot's result, its row maxima, the masked scores stored
// (fragments to the blocked layout), a bias tile added (blocked to fragments), and column sums
// (a reduction the fragments do not hold whole).
TEST(FragmentValues, CausalMaskRowAndColumnStatisticsAndBlockedOperands) {
  for (int64_t M : {64, 128, 32}) {
    SCOPED_TRACE("M=" + std::to_string(M));
    const int64_t N = 64, K = 32;
    auto av = with_edges(uniform(M * K, 41, -1, 1), pl::bf16, false), bv = with_edges(uniform(K * N, 42, -1, 1), pl::bf16, false);
    auto biasv = uniform(M * N, 43, -1, 1);
    auto call = pl::pallas_call(
        [=](pl::Ref a, pl::Ref b, pl::Ref bias, pl::Ref masked, pl::Ref rowmax, pl::Ref colsum) {
          pl::Value s = pl::dot(a[pl::all], b[pl::all]);
          pl::Value row = pl::iota(pl::i32, {M, N}, 0), col = pl::iota(pl::i32, {M, N}, 1);
          pl::Value sm = pl::where(row + 8 >= col, s, pl::full({M, N}, -1e30f));
          masked[pl::all] = sm + bias[pl::all];
          rowmax[pl::all] = pl::max(sm, {1});
          colsum[pl::all] = pl::sum(s * 0.5f, {0});
        },
        {pl::ShapeDtype({M, N}, pl::f32), pl::ShapeDtype({M}, pl::f32), pl::ShapeDtype({N}, pl::f32)}, {.name = "causal_stats"});
    auto outs = call({make_array(av, {M, K}, pl::bf16), make_array(bv, {K, N}, pl::bf16), make_array(biasv, {M, N}, pl::f32)});
    std::vector<double> masked(static_cast<size_t>(M * N)), rowmax(static_cast<size_t>(M), -INFINITY), colsum(static_cast<size_t>(N), 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double a = 0;
        for (int64_t p = 0; p < K; ++p) a += av[i * K + p] * bv[p * N + j];
        double sm = i + 8 >= j ? a : -1e30;
        masked[i * N + j] = sm + biasv[i * N + j];
        rowmax[i] = std::max(rowmax[i], sm);
        colsum[j] += a * 0.5;
      }
    EXPECT_TRUE(close(to_doubles(outs[0]), masked, 1e-5, false));
    EXPECT_TRUE(close(to_doubles(outs[1]), rowmax, 1e-5, false));
    EXPECT_TRUE(close(to_doubles(outs[2]), colsum, 1e-5, false));
  }
}

// An epilogue's vectors broadcast over the fragments (gathered from shared memory into the
// fragments' layout, not the tile converted): a bf16 bias row [1, N], a per-row scale [M, 1]
// loaded from a ref (not a row statistic), and a 1-D row [N], with N = 48 leaving part of the
// last mma.sync tile empty.
TEST(FragmentValues, EpilogueVectorsBroadcastOverRowsAndColumns) {
  for (int64_t M : {64, 128, 32}) {
    for (int64_t N : {64, 48}) {
      SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N));
      const int64_t K = 32;
      auto av = with_edges(uniform(M * K, 61, -1, 1), pl::bf16, false), bv = with_edges(uniform(K * N, 62, -1, 1), pl::bf16, false);
      auto biasv = with_edges(uniform(N, 63, -1, 1), pl::bf16, false), scalev = uniform(M, 64, 0.5, 2), shiftv = uniform(N, 65, -1, 1);
      auto call = pl::pallas_call(
          [=](pl::Ref a, pl::Ref b, pl::Ref bias, pl::Ref scale, pl::Ref shift, pl::Ref o) {
            pl::Value s = pl::dot(a[pl::all], b[pl::all]);
            o[pl::all] = pl::maximum(s + bias[pl::all].astype(pl::f32), 0.f) * scale[pl::all] + shift[pl::all];
          },
          pl::ShapeDtype({M, N}, pl::f32), {.name = "epilogue_vectors"});
      pl::Array out = call(make_array(av, {M, K}, pl::bf16), make_array(bv, {K, N}, pl::bf16), make_array(biasv, {1, N}, pl::bf16),
                           make_array(scalev, {M, 1}, pl::f32), make_array(shiftv, {N}, pl::f32));
      std::vector<double> want(static_cast<size_t>(M * N));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double acc = 0;
          for (int64_t p = 0; p < K; ++p) acc += av[i * K + p] * bv[p * N + j];
          want[i * N + j] = std::max(acc + biasv[j], 0.0) * scalev[i] + shiftv[j];
        }
      EXPECT_TRUE(close(to_doubles(out), want, 1e-5, false));
    }
  }
}

// i8 dots accumulate exactly in i32: row maxima, minima and sums of the fragments (integer
// shuffles), and a row statistic broadcast back over the columns.
TEST(FragmentValues, IntegerDotRowStatisticsAreExact) {
  const int64_t M = 64, N = 48, K = 64;
  auto av = random_ints<int8_t>(M * K, 51, false), bv = random_ints<int8_t>(K * N, 52, false);
  std::vector<double> ad(av.begin(), av.end()), bd(bv.begin(), bv.end());
  auto call = pl::pallas_call(
      [=](pl::Ref a, pl::Ref b, pl::Ref mx, pl::Ref mn, pl::Ref sum, pl::Ref centered) {
        pl::Value s = pl::dot(a[pl::all], b[pl::all], {.preferred_type = pl::i32});
        mx[pl::all] = pl::max(s, {1});
        mn[pl::all] = pl::min(s, {1});
        sum[pl::all] = pl::sum(s, {1});
        centered[pl::all] = s - pl::expand_dims(pl::max(s, {1}), 1);
      },
      {pl::ShapeDtype({M}, pl::i32), pl::ShapeDtype({M}, pl::i32), pl::ShapeDtype({M}, pl::i32), pl::ShapeDtype({M, N}, pl::i32)},
      {.name = "int_stats"});
  auto outs = call({make_array(ad, {M, K}, pl::i8), make_array(bd, {K, N}, pl::i8)});
  std::vector<double> mx(static_cast<size_t>(M), -1e300), mn(static_cast<size_t>(M), 1e300), sum(static_cast<size_t>(M), 0.0), s(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double a = 0;
      for (int64_t p = 0; p < K; ++p) a += ad[i * K + p] * bd[p * N + j];
      s[i * N + j] = a;
      mx[i] = std::max(mx[i], a), mn[i] = std::min(mn[i], a), sum[i] += a;
    }
  std::vector<double> centered(s);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) centered[i * N + j] -= mx[i];
  EXPECT_EQ(to_doubles(outs[0]), mx);
  EXPECT_EQ(to_doubles(outs[1]), mn);
  EXPECT_EQ(to_doubles(outs[2]), sum);
  EXPECT_EQ(to_doubles(outs[3]), centered);
}

// The online softmax of flash attention, written as a user writes it, with a causal mask from
// iota inside the loop: the row maximum and sum are fori carries held per fragment row.
TEST(FragmentValues, OnlineSoftmaxLoopCarriesRowStatistics) {
  for (int64_t bk : {32, 64}) {
    SCOPED_TRACE("bk=" + std::to_string(bk));
    const int64_t M = 64, S = 128, D = 32;
    auto qv = with_edges(uniform(M * D, 61, -1, 1), pl::bf16, false), kv = with_edges(uniform(S * D, 62, -1, 1), pl::bf16, false),
         vv = with_edges(uniform(S * D, 63, -1, 1), pl::bf16, false);
    auto call = pl::pallas_call(
        [=](pl::Ref q, pl::Ref k, pl::Ref v, pl::Ref o) {
          pl::Value qb = q[pl::all];
          auto res = pl::fori_loop(0, int(S / bk), {pl::full({M}, -INFINITY), pl::zeros({M}), pl::zeros({M, D})},
                                   [&](pl::Value it, std::vector<pl::Value> c) -> std::vector<pl::Value> {
                                     pl::Value kb = k(pl::ds(it * bk, bk), pl::all), vb = v(pl::ds(it * bk, bk), pl::all);
                                     pl::Value s = pl::dot(qb, kb, {.trans_b = true});
                                     pl::Value col = pl::iota(pl::i32, {M, bk}, 1) + it * bk, row = pl::iota(pl::i32, {M, bk}, 0);
                                     s = pl::where(row * 2 >= col, s, pl::full({M, bk}, -1e30f));
                                     pl::Value m = pl::maximum(c[0], pl::max(s, {1}));
                                     pl::Value alpha = pl::exp(c[0] - m);
                                     pl::Value p = pl::exp(s - pl::expand_dims(m, 1));
                                     pl::Value l = c[1] * alpha + pl::sum(p, {1});
                                     pl::Value acc = c[2] * pl::expand_dims(alpha, 1) + pl::dot(p.astype(pl::bf16), vb);
                                     return {m, l, acc};
                                   });
          o[pl::all] = res[2] / pl::expand_dims(res[1], 1);
        },
        pl::ShapeDtype({M, D}, pl::f32), {.name = "online_softmax"});
    pl::Array out = call(make_array(qv, {M, D}, pl::bf16), make_array(kv, {S, D}, pl::bf16), make_array(vv, {S, D}, pl::bf16));
    auto want = attention_ref(qv, kv, vv, M, S, D, 1.0, [](int64_t i, int64_t j) { return i * 2 >= j; }, [](double p) { return p; });
    EXPECT_TRUE(close(to_doubles(out), want, 1e-2, false));
  }
}

// An attention backward's dK/dV loop written with the key rows first: each step's q and g
// blocks feed two dots each (once as the second operand of K Q^T / V G^T, once as the second
// operand of P^T Q / P^T G: one shared-memory copy read K-major and MN-major on sm_90a), the
// row statistic l is broadcast over the columns of a dot's fragments (read slot by slot there),
// and P^T feeds the next dots from registers. Against a double reference that rounds P^T and
// P^T * dP^T to bf16 as the kernel does.
TEST(FragmentValues, LoopLoadsFeedingTwoDotsAndColumnStatistics) {
  const int64_t Kr = 64, D = 128, bq = 64, steps = 4, S = bq * steps;
  auto qv = with_edges(uniform(S * D, 71, -0.5, 0.5), pl::bf16, false), gv = with_edges(uniform(S * D, 72, -1, 1), pl::bf16, false);
  auto kv = with_edges(uniform(Kr * D, 73, -0.5, 0.5), pl::bf16, false), vv = with_edges(uniform(Kr * D, 74, -1, 1), pl::bf16, false);
  auto lv = uniform(S, 75, 0, 1);
  using V = pl::Value;
  auto call = pl::pallas_call(
      [=](pl::Ref q, pl::Ref g, pl::Ref l, pl::Ref k, pl::Ref v, pl::Ref dk, pl::Ref dv) {
        V kb = k[pl::all], vb = v[pl::all];
        auto outs = pl::fori_loop(0, int(steps), std::vector<V>{pl::zeros({Kr, D}), pl::zeros({Kr, D})}, [&](V i, std::vector<V> c) {
          V qb = q(pl::ds(i * bq, bq), pl::all), gb = g(pl::ds(i * bq, bq), pl::all);
          V p = pl::exp(pl::dot(kb, qb, {.trans_b = true}) - pl::expand_dims(l(pl::ds(i * bq, bq)), 0));
          V dp = pl::dot(vb, gb, {.trans_b = true});
          return std::vector<V>{c[0] + pl::dot((p * dp).astype(pl::bf16), qb), c[1] + pl::dot(p.astype(pl::bf16), gb)};
        });
        dk[pl::all] = outs[0];
        dv[pl::all] = outs[1];
      },
      std::vector<pl::ShapeDtype>{pl::ShapeDtype({Kr, D}, pl::f32), pl::ShapeDtype({Kr, D}, pl::f32)},
      {.name = "two_readers", .compiler_params = {.num_warps = 4}});
  std::vector<pl::Array> out = call({make_array(qv, {S, D}, pl::bf16), make_array(gv, {S, D}, pl::bf16), make_array(lv, {S}, pl::f32),
                                     make_array(kv, {Kr, D}, pl::bf16), make_array(vv, {Kr, D}, pl::bf16)});
  std::vector<double> dk(static_cast<size_t>(Kr * D)), dv(dk.size());
  for (int64_t a = 0; a < Kr; ++a)
    for (int64_t b = 0; b < S; ++b) {
      double s = 0, t = 0;
      for (int64_t d = 0; d < D; ++d) s += kv[a * D + d] * qv[b * D + d], t += vv[a * D + d] * gv[b * D + d];
      double p = std::exp(s - lv[b]), pb = round_to(p, pl::bf16), ds = round_to(p * t, pl::bf16);
      for (int64_t d = 0; d < D; ++d) dk[a * D + d] += ds * qv[b * D + d], dv[a * D + d] += pb * gv[b * D + d];
    }
  EXPECT_TRUE(close(to_doubles(out[0]), dk, 1e-2, false));
  EXPECT_TRUE(close(to_doubles(out[1]), dv, 1e-2, false));
}

// The library's flash attention with 128 query rows over two warpgroups (8 warps): on sm_90a
// its loop is rotated and the warpgroups take turns issuing their dots (named barriers,
// rotation.h); causal programs run loops of different lengths. Each head against a double
// reference.
TEST(FragmentValues, FlashAttentionOverTwoWarpgroups) {
  const int64_t H = 2, S = 512, D = 64;
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal);
    auto qv = with_edges(uniform(H * S * D, 91, -1, 1), pl::bf16, false), kv = with_edges(uniform(H * S * D, 92, -1, 1), pl::bf16, false),
         vv = with_edges(uniform(H * S * D, 93, -1, 1), pl::bf16, false);
    pl::Call call = pl::kernels::flash_attention(1, H, S, D, pl::bf16,
                                                 {.block_q = 128, .block_k = 64, .causal = causal, .compiler_params = {.num_warps = 8}});
    pl::Shape sh{1, H, S, D};
    std::vector<double> out = to_doubles(call(make_array(qv, sh, pl::bf16), make_array(kv, sh, pl::bf16), make_array(vv, sh, pl::bf16)));
    for (int64_t h = 0; h < H; ++h) {
      SCOPED_TRACE(h);
      auto head = [&](const std::vector<double>& x) { return std::vector<double>(x.begin() + h * S * D, x.begin() + (h + 1) * S * D); };
      auto want = attention_ref(head(qv), head(kv), head(vv), S, S, D, 1 / std::sqrt(double(D)),
                                [&](int64_t i, int64_t j) { return !causal || i >= j; }, [](double p) { return p; });
      EXPECT_TRUE(close(head(out), want, 1e-2, false));
    }
  }
}

// The library's flash attention with its blocks unset chooses them from the head dim (128 x 64
// query x key rows for D <= 64, 128 x 128 up to 128, 64 x 64 beyond, halved until they divide
// S) and 8 warps for 128 query rows; each choice against a double reference, causal too.
TEST(FragmentValues, FlashAttentionChoosesItsBlocksByHeadDim) {
  struct Case {
    int64_t D, S, bq, warps;
    bool causal;
  };
  for (Case c : {Case{64, 256, 128, 8, false}, Case{128, 256, 128, 8, true}, Case{128, 192, 64, 4, false}, Case{256, 128, 64, 4, true}}) {
    SCOPED_TRACE("D=" + std::to_string(c.D) + " S=" + std::to_string(c.S));
    const int64_t S = c.S, D = c.D;
    auto qv = with_edges(uniform(S * D, 94, -1, 1), pl::bf16, false), kv = with_edges(uniform(S * D, 95, -1, 1), pl::bf16, false),
         vv = with_edges(uniform(S * D, 96, -1, 1), pl::bf16, false);
    pl::Call call = pl::kernels::flash_attention(1, 1, S, D, pl::bf16, {.causal = c.causal});
    pl::Shape sh{1, 1, S, D};
    pl::ShapeDtype sd(sh, pl::bf16);
    call.trace({sd, sd, sd});
    const auto& traced = call.state()->get_traced();
    EXPECT_EQ(traced.grid.grid.back(), S / c.bq);
    EXPECT_EQ(traced.compiler_params.num_warps, c.warps);
    std::vector<double> out = to_doubles(call(make_array(qv, sh, pl::bf16), make_array(kv, sh, pl::bf16), make_array(vv, sh, pl::bf16)));
    auto want = attention_ref(qv, kv, vv, S, S, D, 1 / std::sqrt(double(D)), [&](int64_t i, int64_t j) { return !c.causal || i >= j; },
                              [](double p) { return p; });
    EXPECT_TRUE(close(out, want, 1e-2, false));
  }
  // blocks given that do not divide S are the caller's to fix
  EXPECT_THROW(pl::kernels::flash_attention(1, 1, 192, 64, pl::bf16, {.block_q = 128}), pl::Error);
}

// One dot result both starts a loop carry and is read by every iteration: the carry goes
// through a transpose (so it is blocked) while the loop-invariant value stays in fragments.
TEST(FragmentValues, ValueUsedAsLoopCarryAndLoopInvariant) {
  const int64_t M = 64, K = 32;
  auto av = with_edges(uniform(M * K, 71, -1, 1), pl::bf16, false), bv = with_edges(uniform(K * M, 72, -1, 1), pl::bf16, false);
  auto call = pl::pallas_call(
      [=](pl::Ref a, pl::Ref b, pl::Ref o) {
        pl::Value s = pl::dot(a[pl::all], b[pl::all]);
        o[pl::all] = pl::fori_loop(0, 3, s, [&](pl::Value, pl::Value c) { return pl::transpose(c + s * 0.5f, {1, 0}); });
      },
      pl::ShapeDtype({M, M}, pl::f32), {.name = "carry_and_invariant"});
  pl::Array out = call(make_array(av, {M, K}, pl::bf16), make_array(bv, {K, M}, pl::bf16));
  std::vector<double> s(static_cast<size_t>(M * M));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < M; ++j)
      for (int64_t p = 0; p < K; ++p) s[i * M + j] += av[i * K + p] * bv[p * M + j];
  std::vector<double> c(s), n(s.size());
  for (int it = 0; it < 3; ++it) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < M; ++j) n[j * M + i] = c[i * M + j] + s[i * M + j] * 0.5;
    c.swap(n);
  }
  EXPECT_TRUE(close(to_doubles(out), c, 1e-5, false));
}

// Dots inside a cond's branches and a while loop's body: their results and row statistics live
// in fragments inside, and leave through the blocked layout the branch and loop outputs take.
TEST(FragmentValues, DotsInsideCondAndWhile) {
  const int64_t M = 64, K = 32;
  auto av = with_edges(uniform(M * K, 81, -1, 1), pl::bf16, false), bv = with_edges(uniform(K * M, 82, -1, 1), pl::bf16, false);
  for (int flag : {0, 1}) {
    SCOPED_TRACE(flag);
    auto call = pl::pallas_call(
        [=](pl::Ref a, pl::Ref b, pl::Ref f, pl::Ref o, pl::Ref rows) {
          pl::Value pred = f[0] > 0;
          o[pl::all] = pl::cond(
              pred, [&] { return pl::dot(a[pl::all], b[pl::all]) * 2.f; },
              [&] { return pl::dot(a[pl::all], b[pl::all]) - pl::expand_dims(pl::max(pl::dot(a[pl::all], b[pl::all]), {1}), 1); });
          // a while loop whose body takes row maxima of a dot: 3 iterations
          auto res = pl::while_loop(
              std::vector<pl::Value>{pl::Value(0), pl::zeros({M})}, [](const std::vector<pl::Value>& c) { return c[0] < 3; },
              [&](const std::vector<pl::Value>& c) -> std::vector<pl::Value> {
                pl::Value s = pl::dot(a[pl::all], b[pl::all]);
                return {c[0] + 1, c[1] + pl::max(s, {1}) * 0.5f};
              });
          rows[pl::all] = res[1];
        },
        {pl::ShapeDtype({M, M}, pl::f32), pl::ShapeDtype({M}, pl::f32)}, {.name = "dots_in_branches"});
    auto outs = call({make_array(av, {M, K}, pl::bf16), make_array(bv, {K, M}, pl::bf16), make_array({double(flag)}, {1}, pl::i32)});
    std::vector<double> s(static_cast<size_t>(M * M)), want(s.size()), rows(static_cast<size_t>(M), 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < M; ++j)
        for (int64_t p = 0; p < K; ++p) s[i * M + j] += av[i * K + p] * bv[p * M + j];
    for (int64_t i = 0; i < M; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < M; ++j) mx = std::max(mx, s[i * M + j]);
      for (int64_t j = 0; j < M; ++j) want[i * M + j] = flag ? s[i * M + j] * 2 : s[i * M + j] - mx;
      rows[i] = mx * 1.5;
    }
    EXPECT_TRUE(close(to_doubles(outs[0]), want, 1e-5, false));
    EXPECT_TRUE(close(to_doubles(outs[1]), rows, 1e-5, false));
  }
}

// Two carries that swap every iteration, one starting in fragments and one blocked: their
// layouts would alternate, so the pass's fixed point gives up after a few rounds and keeps
// both blocked (the loop still computes what the interpreter computes).
TEST(FragmentValues, LoopCarriesThatSwapLayouts) {
  const int64_t M = 64, K = 32;
  auto av = with_edges(uniform(M * K, 91, -1, 1), pl::bf16, false), bv = with_edges(uniform(K * M, 92, -1, 1), pl::bf16, false);
  auto tv = uniform(M * M, 93, -1, 1);
  auto call = pl::pallas_call(
      [=](pl::Ref a, pl::Ref b, pl::Ref t, pl::Ref o0, pl::Ref o1) {
        pl::Value s = pl::dot(a[pl::all], b[pl::all]);
        auto res = pl::fori_loop(0, 3, {s, t[pl::all]}, [](pl::Value, std::vector<pl::Value> c) -> std::vector<pl::Value> { return {c[1], c[0] * 2.f}; });
        o0[pl::all] = res[0];
        o1[pl::all] = res[1];
      },
      {pl::ShapeDtype({M, M}, pl::f32), pl::ShapeDtype({M, M}, pl::f32)}, {.name = "swapping_carries"});
  auto outs = call({make_array(av, {M, K}, pl::bf16), make_array(bv, {K, M}, pl::bf16), make_array(tv, {M, M}, pl::f32)});
  std::vector<double> c0(static_cast<size_t>(M * M)), c1(tv);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < M; ++j)
      for (int64_t p = 0; p < K; ++p) c0[i * M + j] += av[i * K + p] * bv[p * M + j];
  for (int it = 0; it < 3; ++it) {
    std::vector<double> n1(c0);
    for (auto& x : n1) x *= 2;
    c0.swap(c1);  // c0 <- c1
    c1.swap(n1);  // c1 <- 2 * old c0
  }
  EXPECT_TRUE(close(to_doubles(outs[0]), c0, 1e-5, false));
  EXPECT_TRUE(close(to_doubles(outs[1]), c1, 1e-5, false));
}

}  // namespace
}  // namespace pt
