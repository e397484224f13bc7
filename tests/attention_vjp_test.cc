// The library's flash attention backward (kernels/attention_vjp.cc) attached by custom_vjp:
// gradients against central finite differences in f64 and against a plain C++ reference of the
// attention vjp (f32, bf16 against the f64 reference from the inputs as stored); causal and not,
// head dims 64 and 128, grouped-query attention; the argument errors.
#include <cmath>

#include <pallas/kernels.h>

#include "tests/test_util.h"
#include "tests/transforms_util.h"

namespace pl = pallas;
using tu::expect_vjp_matches_fd;
using tu::rel_err;
using tu::vec;

namespace {

struct Shape {
  int64_t b, h, hkv, s, d;
};

// Attention and its vjp in double: o, lse and dq, dk, dv, from the inputs as stored.
struct AttnRef {
  std::vector<double> o, lse, dq, dk, dv;
};
// seg: segment ids [B * S] (empty: none); query i sees key j when both agree (and j <= i, causal).
AttnRef attention_ref(const Shape& sh, bool causal, double scale, const std::vector<double>& q,
                      const std::vector<double>& k, const std::vector<double>& v, const std::vector<double>& d_o,
                      const std::vector<int32_t>& seg = {}) {
  const int64_t S = sh.s, D = sh.d, G = sh.h / sh.hkv;
  AttnRef r;
  r.o.assign(q.size(), 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  r.lse.assign(static_cast<size_t>(sh.b * sh.h * S), 0.0);
  std::vector<double> p(S), dp(S);
  for (int64_t b = 0; b < sh.b; ++b)
    for (int64_t h = 0; h < sh.h; ++h) {
      const int64_t hk = h / G;
      const double* Q = &q[(b * sh.h + h) * S * D];
      const double* dO = &d_o[(b * sh.h + h) * S * D];
      const double* K = &k[(b * sh.hkv + hk) * S * D];
      const double* V = &v[(b * sh.hkv + hk) * S * D];
      double* O = &r.o[(b * sh.h + h) * S * D];
      double* dQ = &r.dq[(b * sh.h + h) * S * D];
      double* dK = &r.dk[(b * sh.hkv + hk) * S * D];
      double* dV = &r.dv[(b * sh.hkv + hk) * S * D];
      for (int64_t i = 0; i < S; ++i) {
        const int64_t n = causal ? i + 1 : S;  // keys row i may see
        auto hidden = [&](int64_t j) { return !seg.empty() && seg[b * S + i] != seg[b * S + j]; };
        double m = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t e = 0; e < D; ++e) s += Q[i * D + e] * K[j * D + e];
          p[j] = hidden(j) ? -INFINITY : s * scale;
          m = std::max(m, p[j]);
        }
        double l = 0;
        for (int64_t j = 0; j < n; ++j) l += std::exp(p[j] - m);
        r.lse[(b * sh.h + h) * S + i] = m + std::log(l);
        for (int64_t j = 0; j < n; ++j) p[j] = std::exp(p[j] - m) / l;
        for (int64_t j = 0; j < n; ++j)
          for (int64_t e = 0; e < D; ++e) O[i * D + e] += p[j] * V[j * D + e];
        // dP = dO V^T, delta = sum_j P dP = dO . o, dS = P (dP - delta)
        double delta = 0;
        for (int64_t j = 0; j < n; ++j) {
          double t = 0;
          for (int64_t e = 0; e < D; ++e) t += dO[i * D + e] * V[j * D + e];
          dp[j] = t;
          delta += p[j] * t;
        }
        for (int64_t j = 0; j < n; ++j) {
          double ds = p[j] * (dp[j] - delta);
          for (int64_t e = 0; e < D; ++e) {
            dV[j * D + e] += p[j] * dO[i * D + e];
            dQ[i * D + e] += scale * ds * K[j * D + e];
            dK[j * D + e] += scale * ds * Q[i * D + e];
          }
        }
      }
    }
  return r;
}

struct Inputs {
  pl::Array q, k, v, d_o;
};
Inputs inputs(const Shape& sh, pl::DType t, uint64_t seed) {
  return {pl::random::normal({sh.b, sh.h, sh.s, sh.d}, t, seed), pl::random::normal({sh.b, sh.hkv, sh.s, sh.d}, t, seed + 1),
          pl::random::normal({sh.b, sh.hkv, sh.s, sh.d}, t, seed + 2),
          pl::random::normal({sh.b, sh.h, sh.s, sh.d}, t, seed + 3)};
}

std::string describe(const Shape& sh, bool causal, pl::DType t) {
  return std::string(pl::dtype_name(t)) + " B" + std::to_string(sh.b) + " H" + std::to_string(sh.h) + " Hkv" +
         std::to_string(sh.hkv) + " S" + std::to_string(sh.s) + " D" + std::to_string(sh.d) +
         (causal ? " causal" : " non-causal");
}

// The pair's outputs, lse residual and gradients against the reference, each within tol.
void expect_matches_reference(const Shape& sh, bool causal, pl::DType t, double tol, pl::kernels::AttentionConfig cfg,
                              pl::kernels::AttentionBwdConfig bcfg = {}) {
  SCOPED_TRACE(describe(sh, causal, t));
  cfg.causal = causal;
  cfg.kv_heads = sh.hkv;
  Inputs in = inputs(sh, t, 100 + static_cast<uint64_t>(sh.d) + (causal ? 7 : 0));
  pl::CustomVjp f = pl::kernels::flash_attention_vjp(sh.b, sh.h, sh.s, sh.d, t, cfg, bcfg);
  auto [outs, pullback] = pl::vjp(f, {in.q, in.k, in.v});
  ASSERT_EQ(outs.size(), 1u);
  const auto& res = pullback.residuals();  // q, k, v, o (handed over, not copied), lse
  ASSERT_EQ(res.size(), 5u);
  EXPECT_EQ(res[0].raw_data(), in.q.raw_data());
  EXPECT_EQ(res[2].raw_data(), in.v.raw_data());
  EXPECT_EQ(res[3].raw_data(), outs[0].raw_data());
  EXPECT_EQ(res[4].dtype(), t == pl::f64 ? pl::f64 : pl::f32);
  std::vector<pl::Array> g = pullback(in.d_o);
  ASSERT_EQ(g.size(), 3u);
  for (int a = 0; a < 3; ++a) EXPECT_EQ(g[a].dtype(), t);
  double scale = 1 / std::sqrt(static_cast<double>(sh.d));
  AttnRef r = attention_ref(sh, causal, scale, vec(in.q), vec(in.k), vec(in.v), vec(in.d_o));
  EXPECT_LT(rel_err(vec(outs[0]), r.o), tol) << "o";
  EXPECT_LT(rel_err(vec(res[4]), r.lse), tol) << "lse";
  EXPECT_LT(rel_err(vec(g[0]), r.dq), tol) << "dq";
  EXPECT_LT(rel_err(vec(g[1]), r.dk), tol) << "dk";
  EXPECT_LT(rel_err(vec(g[2]), r.dv), tol) << "dv";
}

}  // namespace

// Packed sequences (AttentionConfig::segment_ids): segments that start inside blocks, a block
// whose keys all belong to an earlier segment than some of its queries (the forward's finite
// mask), causal and not, grouped-query; f64 against central differences and the reference,
// bf16 against the f64 reference. The segment ids get no cotangent.
TEST(AttentionVjp, SegmentIds) {
  for (Shape sh : {Shape{2, 2, 2, 32, 16}, Shape{1, 4, 2, 32, 16}})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(describe(sh, causal, pl::f64));
      // batch 0: segments of 5, 14 and 13 tokens; batch 1: one segment, then three
      std::vector<int32_t> seg;
      for (int64_t b = 0; b < sh.b; ++b)
        for (int64_t i = 0; i < sh.s; ++i) seg.push_back(b == 0 ? (i < 5 ? 0 : i < 19 ? 1 : 2) : (i < 20 ? 7 : i < 23 ? 8 : 9));
      pl::Array sa = pl::Array::from_vector(seg, {sh.b, sh.s});
      pl::kernels::AttentionConfig cfg{.block_q = 16, .block_k = 8, .causal = causal, .kv_heads = sh.hkv, .segment_ids = true};
      pl::kernels::AttentionBwdConfig bcfg{.block_q = 8, .block_k = 16};
      pl::CustomVjp f = pl::kernels::flash_attention_vjp(sh.b, sh.h, sh.s, sh.d, pl::f64, cfg, bcfg);
      Inputs in = inputs(sh, pl::f64, 41);
      expect_vjp_matches_fd(f, {in.q, in.k, in.v, sa}, {in.d_o}, 1e-6);
      auto [outs, pullback] = pl::vjp(f, {in.q, in.k, in.v, sa});
      std::vector<pl::Array> g = pullback(in.d_o);
      ASSERT_EQ(g.size(), 4u);
      EXPECT_FALSE(g[3].defined());
      double scale = 1 / std::sqrt(static_cast<double>(sh.d));
      AttnRef r = attention_ref(sh, causal, scale, vec(in.q), vec(in.k), vec(in.v), vec(in.d_o), seg);
      EXPECT_LT(rel_err(vec(outs[0]), r.o), 1e-13) << "o";
      EXPECT_LT(rel_err(vec(g[0]), r.dq), 1e-13) << "dq";
      EXPECT_LT(rel_err(vec(g[1]), r.dk), 1e-13) << "dk";
      EXPECT_LT(rel_err(vec(g[2]), r.dv), 1e-13) << "dv";
      // bf16, the default blocks
      Inputs lo = inputs(sh, pl::bf16, 43);
      pl::kernels::AttentionConfig lcfg{.causal = causal, .kv_heads = sh.hkv, .segment_ids = true};
      auto [lo_outs, lo_pull] = pl::vjp(pl::kernels::flash_attention_vjp(sh.b, sh.h, sh.s, sh.d, pl::bf16, lcfg), {lo.q, lo.k, lo.v, sa});
      std::vector<pl::Array> lg = lo_pull(lo.d_o);
      AttnRef lr = attention_ref(sh, causal, scale, vec(lo.q), vec(lo.k), vec(lo.v), vec(lo.d_o), seg);
      EXPECT_LT(rel_err(vec(lo_outs[0]), lr.o), 2e-2) << "o";
      EXPECT_LT(rel_err(vec(lg[0]), lr.dq), 2e-2) << "dq";
      EXPECT_LT(rel_err(vec(lg[1]), lr.dk), 2e-2) << "dk";
      EXPECT_LT(rel_err(vec(lg[2]), lr.dv), 2e-2) << "dv";
    }
}

// f64: the kernels compute in f64, so the pullback agrees with central differences of the
// primal (flash_attention) and with the reference to rounding. Blocks of 16 queries and 8 keys:
// several of each, and causal diagonal blocks that are not square.
TEST(AttentionVjp, F64MatchesFiniteDifferencesAndReference) {
  for (Shape sh : {Shape{1, 2, 2, 32, 16}, Shape{2, 4, 2, 16, 8}})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(describe(sh, causal, pl::f64));
      pl::kernels::AttentionConfig cfg{.block_q = 16, .block_k = 8, .causal = causal, .kv_heads = sh.hkv};
      pl::kernels::AttentionBwdConfig bcfg{.block_q = 16, .block_k = 8};
      pl::CustomVjp f = pl::kernels::flash_attention_vjp(sh.b, sh.h, sh.s, sh.d, pl::f64, cfg, bcfg);
      Inputs in = inputs(sh, pl::f64, causal ? 11 : 21);
      expect_vjp_matches_fd(f, {in.q, in.k, in.v}, {in.d_o}, 1e-6);
      expect_matches_reference(sh, causal, pl::f64, 1e-13, cfg, bcfg);
      // the other way round: blocks of 8 queries and 16 keys
      expect_matches_reference(sh, causal, pl::f64, 1e-13, {.block_q = 8, .block_k = 16}, {.block_q = 8, .block_k = 16});
    }
}

// f32 (its dots round to tf32, Precision::Default, on both backends) and bf16 against the f64
// reference of the inputs as stored, with the default blocks.
// Head dim 128 in f64, against central differences too (blocks of 16 rows).
TEST(AttentionVjp, F64HeadDim128MatchesFiniteDifferences) {
  Shape sh{1, 1, 1, 32, 128};
  for (bool causal : {false, true}) {
    SCOPED_TRACE(describe(sh, causal, pl::f64));
    pl::kernels::AttentionConfig cfg{.block_q = 16, .block_k = 16, .causal = causal};
    pl::kernels::AttentionBwdConfig bcfg{.block_q = 16, .block_k = 16};
    Inputs in = inputs(sh, pl::f64, 31);
    expect_vjp_matches_fd(pl::kernels::flash_attention_vjp(1, 1, 32, 128, pl::f64, cfg, bcfg), {in.q, in.k, in.v},
                          {in.d_o}, 1e-6);
    expect_matches_reference(sh, causal, pl::f64, 1e-13, cfg, bcfg);
  }
}

TEST(AttentionVjp, LowPrecisionAgainstF64Reference) {
  Shape sh{1, 2, 2, 128, 64};
  for (bool causal : {false, true})
    for (auto [t, tol] : std::vector<std::pair<pl::DType, double>>{{pl::f32, 2e-3}, {pl::bf16, 1e-2}})
      expect_matches_reference(sh, causal, t, tol, {});
}

TEST(AttentionVjp, HeadDims128And256) {
  for (bool causal : {false, true}) {
    expect_matches_reference({1, 2, 2, 128, 128}, causal, pl::bf16, 1e-2, {});
    expect_matches_reference({1, 1, 1, 64, 256}, causal, pl::bf16, 1e-2, {});
  }
  expect_matches_reference({1, 1, 1, 64, 128}, true, pl::f32, 2e-3, {.block_q = 32, .block_k = 32},
                           {.block_q = 32, .block_k = 16});
}

// Grouped-query attention: k and v with fewer heads; dk and dv sum over the group's query heads.
TEST(AttentionVjp, GroupedQuery) {
  for (bool causal : {false, true}) {
    expect_matches_reference({1, 4, 1, 64, 64}, causal, pl::bf16, 1e-2, {});
    expect_matches_reference({2, 4, 2, 64, 64}, causal, pl::f32, 2e-3, {.block_q = 32, .block_k = 64},
                             {.block_q = 16, .block_k = 32});
  }
}

// The kernels one by one: the forward's lse and the preprocess' delta.
TEST(AttentionVjp, ForwardResidualAndPreprocess) {
  Shape sh{1, 2, 2, 32, 16};
  Inputs in = inputs(sh, pl::f64, 5);
  auto fwd = pl::kernels::flash_attention_fwd(1, 2, 32, 16, pl::f64, {.block_q = 8, .block_k = 16, .causal = true});
  std::vector<pl::Array> r = fwd({in.q, in.k, in.v});
  ASSERT_EQ(r.size(), 2u);
  AttnRef want = attention_ref(sh, true, 0.25, vec(in.q), vec(in.k), vec(in.v), vec(in.d_o));
  EXPECT_LT(rel_err(vec(r[0]), want.o), 1e-13);
  EXPECT_LT(rel_err(vec(r[1]), want.lse), 1e-13);
  // the plain forward gives the same o
  auto plain = pl::kernels::flash_attention(1, 2, 32, 16, pl::f64, {.block_q = 8, .block_k = 16, .causal = true});
  EXPECT_LT(rel_err(vec(plain({in.q, in.k, in.v})[0]), want.o), 1e-13);
  pl::Array delta = pl::kernels::flash_attention_bwd_preprocess(1, 2, 32, 16, pl::f64, {.block_q = 8})({r[0], in.d_o})[0];
  auto o = vec(r[0]), d = vec(in.d_o), dl = vec(delta);
  ASSERT_EQ(dl.size(), 64u);
  for (int64_t row = 0; row < 64; ++row) {
    double t = 0;
    for (int64_t e = 0; e < 16; ++e) t += o[row * 16 + e] * d[row * 16 + e];
    EXPECT_NEAR(dl[row], t, 1e-12 * std::max(1.0, std::fabs(t)));
  }
}

TEST(AttentionVjp, BadArgumentsNameTheKernel) {
  namespace k = pl::kernels;
  EXPECT_THROW_MSG(k::flash_attention_vjp(1, 2, 64, 16, pl::i32), "pl::kernels::flash_attention_fwd: dtype is i32",
                   "f16, bf16, f32 or f64");
  EXPECT_THROW_MSG(k::flash_attention_bwd_dkdv(1, 2, 64, 16, pl::i8), "pl::kernels::flash_attention_bwd_dkdv: dtype is i8");
  EXPECT_THROW_MSG(k::flash_attention_bwd_dq(1, 2, 0, 16, pl::f32), "pl::kernels::flash_attention_bwd_dq",
                   "must be positive", "seq=0");
  EXPECT_THROW_MSG(k::flash_attention_bwd_preprocess(1, 2, 64, -4, pl::f32),
                   "pl::kernels::flash_attention_bwd_preprocess", "head_dim=-4");
  EXPECT_THROW_MSG(k::flash_attention_bwd_dkdv(1, 2, 48, 16, pl::f32, {}, {.block_k = 32}),
                   "pl::kernels::flash_attention_bwd_dkdv: seq=48 must be a multiple of block_k (32)");
  EXPECT_THROW_MSG(k::flash_attention_bwd_dq(1, 2, 48, 16, pl::f32, {}, {.block_q = -1}),
                   "pl::kernels::flash_attention_bwd_dq: block_q is -1");
  EXPECT_THROW_MSG(k::flash_attention_vjp(1, 6, 64, 16, pl::f32, {.kv_heads = 4}),
                   "pl::kernels::flash_attention_fwd: kv_heads is 4; it must divide heads (6)");
  EXPECT_THROW_MSG(k::flash_attention_bwd_dkdv(1, 6, 64, 16, pl::f32, {.kv_heads = -1}),
                   "pl::kernels::flash_attention_bwd_dkdv: kv_heads is -1");
  EXPECT_THROW_MSG(k::flash_attention(1, 1, 192, 64, pl::bf16, {.block_q = 128}),
                   "pl::kernels::flash_attention: seq=192 must be a multiple of block_q (128)");
  // arrays of other shapes or dtypes: the call and the pullback name the kernels
  pl::CustomVjp f = k::flash_attention_vjp(1, 2, 32, 16, pl::f32);
  pl::Array q = pl::random::normal({1, 2, 32, 16}, pl::f32, 1);
  EXPECT_THROW_MSG(f(q, q, pl::random::normal({1, 2, 32, 8}, pl::f32, 2)), "kernel 'flash_attention'",
                   "input 2 is f32[1,2,32,8] but the call was traced for f32[1,2,32,16]");
  auto [outs, pullback] = pl::vjp(f, {q, q, q});
  EXPECT_THROW_MSG(pullback(q.astype(pl::bf16)), "custom_vjp of kernel 'flash_attention_fwd'",
                   "flash_attention_bwd_preprocess + flash_attention_bwd_dkdv + flash_attention_bwd_dq",
                   "the cotangent of output 0 is bf16[1,2,32,16]");
  // a grouped k/v given to the ungrouped pair
  EXPECT_THROW_MSG(pl::vjp(f, {q, pl::random::normal({1, 1, 32, 16}, pl::f32, 3), q}), "kernel 'flash_attention_fwd'",
                   "input 1 is f32[1,1,32,16] but the call was traced for f32[1,2,32,16]");
  EXPECT_THROW_MSG(pl::vjp(f, {q, q, q.astype(pl::f64)}), "kernel 'flash_attention_fwd'", "input 2 is f64[1,2,32,16]");
}
