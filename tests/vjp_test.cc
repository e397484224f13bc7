// Automatic reverse mode of a plain pallas_call (pl::vjp, src/transforms/vjp.cc): the kernel is
// transposed into a second pallas_call. Gradients against central finite differences in f64
// and against plain references: elementwise kernels, inputs every program reads (their
// cotangents accumulate across programs), dots, reductions, broadcasts, masked edges, the
// library's softmax, layer norm and matmul forwards against their hand-written backward
// kernels, K loops of dots; and
// the kernels it refuses, each naming what and pointing to custom_vjp.
#include <cmath>

#include <pallas/kernels.h>

#include "src/transforms/transforms.h"
#include "tests/test_util.h"
#include "tests/transforms_util.h"

namespace pl = pallas;
using tu::rel_err;
using tu::vec;

namespace {

pl::Array N(pl::Shape s, uint64_t seed, pl::DType t = pl::f64) { return pl::random::normal(s, t, seed); }

// <grad_k, v> against central differences of f along a random v, for every floating input.
void expect_matches_fd(const pl::Call& f, const std::vector<pl::Array>& x, const std::vector<pl::Array>& ct, double tol = 1e-7,
                       pl::VjpOptions opts = {}) {
  auto [outs, pullback] = pl::vjp(f, x, opts);
  std::vector<pl::Array> g = pullback(ct);
  ASSERT_EQ(g.size(), x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    if (!pl::is_float(x[k].dtype())) {
      EXPECT_FALSE(g[k].defined());
      continue;
    }
    SCOPED_TRACE("input " + std::to_string(k));
    ASSERT_EQ(g[k].shape_dtype(), x[k].shape_dtype());
    pl::Array v = pl::random::normal(x[k].shape(), pl::f64, 500 + k);
    std::vector<pl::Array> xp = x, xm = x;
    double eps = 1e-6;
    xp[k] = tu::axpy(x[k], eps, v);
    xm[k] = tu::axpy(x[k], -eps, v);
    auto op = f(xp), om = f(xm);
    double want = 0;
    for (size_t o = 0; o < op.size(); ++o) {
      auto a = vec(op[o]), b = vec(om[o]);
      for (size_t i = 0; i < a.size(); ++i) want += vec(ct[o])[i] * (a[i] - b[i]) / (2 * eps);
    }
    double got = tu::vdot(vec(g[k]), vec(v));
    EXPECT_NEAR(got, want, tol * std::max(1.0, std::fabs(want)));
  }
}

pl::BlockSpec rows(int64_t br, int64_t c) { return pl::BlockSpec({br, c}, [](pl::Value i) { return pl::idx(i, 0); }); }
pl::BlockSpec whole(pl::Shape s) {
  return pl::BlockSpec(s, [n = s.size()](pl::Value) {
    pl::BlockIndex b;
    for (size_t d = 0; d < n; ++d) b.indices.push_back(pl::Value(0));
    return b;
  });
}

}  // namespace

// Elementwise ops with scalars, a select, max and a division, two outputs.
TEST(Vjp, ElementwiseKernelMatchesFiniteDifferences) {
  auto f = pl::pallas_call(
      [](pl::Ref x, pl::Ref y, pl::Ref a, pl::Ref b) {
        pl::Value u = x[pl::all], v = y[pl::all];
        a[pl::all] = pl::exp(pl::sin(u) * 0.5) / (1.0 + v * v) + pl::maximum(u, v);
        b[pl::all] = pl::where(u > 0.0, pl::tanh(u * v), pl::log(1.0 + v * v)) - 3.0 * u;
      },
      std::vector<pl::ShapeDtype>{{{16, 8}, pl::f64}, {{16, 8}, pl::f64}},
      {.grid = {4}, .in_specs = {rows(4, 8), rows(4, 8)}, .out_specs = {rows(4, 8), rows(4, 8)}, .name = "elementwise"});
  expect_matches_fd(f, {N({16, 8}, 1), N({16, 8}, 2)}, {N({16, 8}, 3), N({16, 8}, 4)});
}

// y = x * w + b over row blocks: w and b are read by every program, so their cotangents sum the
// programs' contributions (dw = sum over rows of dy * x, db = sum of dy); an integer input gets none.
TEST(Vjp, InputsEveryProgramReadsAccumulate) {
  auto f = pl::pallas_call(
      [](pl::Ref x, pl::Ref w, pl::Ref b, pl::Ref n, pl::Ref y) {
        y[pl::all] = x[pl::all] * w[pl::all] + b[pl::all] * n[pl::all].astype(pl::f64);
      },
      pl::ShapeDtype({12, 8}, pl::f64),
      {.grid = {3}, .in_specs = {rows(4, 8), whole({1, 8}), whole({1, 8}), rows(4, 8)}, .out_specs = {rows(4, 8)}, .name = "affine"});
  pl::Array x = N({12, 8}, 11), w = N({1, 8}, 12), b = N({1, 8}, 13), n = pl::random::randint({12, 8}, pl::i32, 14, -2, 3),
            dy = N({12, 8}, 15);
  expect_matches_fd(f, {x, w, b, n}, {dy});
  auto [outs, pullback] = pl::vjp(f, {x, w, b, n});
  auto g = pullback(dy);
  auto xv = vec(x), wv = vec(w), nv = vec(n), dyv = vec(dy);
  std::vector<double> dx(xv.size()), dw(8, 0.0), db(8, 0.0);
  for (int64_t i = 0; i < 12; ++i)
    for (int64_t j = 0; j < 8; ++j) {
      dx[i * 8 + j] = dyv[i * 8 + j] * wv[j];
      dw[j] += dyv[i * 8 + j] * xv[i * 8 + j];
      db[j] += dyv[i * 8 + j] * nv[i * 8 + j];
    }
  EXPECT_LT(rel_err(vec(g[0]), dx), 1e-14);
  EXPECT_LT(rel_err(vec(g[1]), dw), 1e-14);
  EXPECT_LT(rel_err(vec(g[2]), db), 1e-14);
  EXPECT_FALSE(g[3].defined());
}

// A dot of a row block with a shared weight, a transposed dot, a row reduction broadcast back
// (softmax-like), reshapes.
TEST(Vjp, DotsReductionsAndBroadcasts) {
  auto f = pl::pallas_call(
      [](pl::Ref a, pl::Ref w, pl::Ref v, pl::Ref o) {
        pl::Value s = pl::dot(a[pl::all], w[pl::all]);                 // [4, 8]
        pl::Value m = pl::max(s, 1, true);
        pl::Value p = pl::exp(s - m);
        p = p / pl::sum(p, 1, true);
        pl::Value t = pl::dot(p, v[pl::all], {.trans_b = true});      // [4, 6]
        o[pl::all] = pl::reshape(pl::transpose(t, {1, 0}), {6, 4}) + pl::sum(a[pl::all], 1).reshape({1, 4});
      },
      pl::ShapeDtype({6, 16}, pl::f64),
      {.grid = {4},
       .in_specs = {rows(4, 5), whole({5, 8}), whole({6, 8})},
       .out_specs = {pl::BlockSpec({6, 4}, [](pl::Value i) { return pl::idx(0, i); })},
       .name = "dots"});
  expect_matches_fd(f, {N({16, 5}, 21), N({5, 8}, 22), N({6, 8}, 23)}, {N({6, 16}, 24)});
}

// A masked load at a ragged edge (blocks of 8 over 20 elements of x): the masked-off lanes take
// `other`, whose cotangent flows to it; the output (24 elements) has no edge block.
TEST(Vjp, MaskedEdges) {
  auto f = pl::pallas_call(
      [](pl::Ref x, pl::Ref c, pl::Ref o) {
        pl::Value i = pl::program_id(0) * 8 + pl::iota(pl::i32, {8}, 0);
        pl::Value v = pl::load(x, {pl::ds(pl::program_id(0) * 8, 8)}, {.mask = i < 20, .other = c[pl::all] * 2.0});
        o[pl::all] = v * v;
      },
      pl::ShapeDtype({24}, pl::f64),
      {.grid = {3}, .in_specs = {whole({20}), whole({8})}, .out_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })}, .name = "masked"});
  expect_matches_fd(f, {N({20}, 31), N({8}, 32)}, {N({24}, 33)});
}

// Stores into disjoint static slices of one output each take their part of its cotangent.
TEST(Vjp, DisjointStoresIntoOneOutput) {
  auto f = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        o[pl::ds(0, 4)] = pl::exp(x[pl::ds(0, 4)]);
        o[pl::ds(4, 4)] = x[pl::ds(0, 4)] * x[pl::ds(4, 4)];
      },
      pl::ShapeDtype({8}, pl::f64), {.name = "halves"});
  expect_matches_fd(f, {N({8}, 35)}, {N({8}, 36)});
}

// The library's softmax and layer norm forwards, differentiated automatically, against their
// hand-written backward kernels (kernels/rows_vjp.cc).
TEST(Vjp, LibraryForwardsAgreeWithTheirBackwardKernels) {
  const int64_t R = 12, C = 32;
  pl::Array x = N({R, C}, 41), w = N({C}, 42), b = N({C}, 43), dy = N({R, C}, 44);
  {
    auto [o1, auto_pb] = pl::vjp(pl::kernels::softmax(R, C, pl::f64, {.block_rows = 4}), {x});
    auto [o2, hand_pb] = pl::vjp(pl::kernels::softmax_vjp(R, C, pl::f64, {.block_rows = 4}), {x});
    EXPECT_LT(rel_err(vec(auto_pb(dy)[0]), vec(hand_pb(dy)[0])), 1e-13);
  }
  {
    auto [o1, auto_pb] = pl::vjp(pl::kernels::layer_norm(R, C, pl::f64, 1e-5, {.block_rows = 3}), {x, w, b});
    auto [o2, hand_pb] = pl::vjp(pl::kernels::layer_norm_vjp(R, C, pl::f64, 1e-5), {x, w, b});
    auto ga = auto_pb(dy), gh = hand_pb(dy);
    for (int k = 0; k < 3; ++k) EXPECT_LT(rel_err(vec(ga[k]), vec(gh[k])), 1e-12) << "input " << k;
  }
}

// f32 inputs: cotangents in f32, against the f64 result of the same kernel.
TEST(Vjp, LowPrecisionAgainstF64) {
  auto f = [](pl::DType t) {
    return pl::pallas_call([](pl::Ref x, pl::Ref w, pl::Ref o) { o[pl::all] = pl::tanh(x[pl::all] * w[pl::all]); },
                           pl::ShapeDtype({8, 16}, t), {.grid = {2}, .in_specs = {rows(4, 16), whole({1, 16})}, .out_specs = {rows(4, 16)}});
  };
  pl::Array x = N({8, 16}, 51), w = N({1, 16}, 52), dy = N({8, 16}, 53);
  auto [o64, pb64] = pl::vjp(f(pl::f64), {x, w});
  auto [o32, pb32] = pl::vjp(f(pl::f32), {x.astype(pl::f32), w.astype(pl::f32)});
  auto g64 = pb64(dy), g32 = pb32(dy.astype(pl::f32));
  EXPECT_EQ(g32[0].dtype(), pl::f32);
  EXPECT_LT(rel_err(vec(g32[0]), vec(g64[0])), 1e-5);
  EXPECT_LT(rel_err(vec(g32[1]), vec(g64[1])), 1e-5);
}

// A K loop of dots (a matmul as a user writes it): its carry accumulates, so the transpose is a
// second loop over K that sends the carry's cotangent through each step's dot; the A and B
// blocks every program of a row (column) reads sum their programs' contributions. A value
// loaded before the loop and used in every step (q) gets its cotangent summed over the steps.
TEST(Vjp, AccumulatingLoops) {
  const int64_t M = 16, Nc = 12, K = 24, bm = 8, bn = 4, bk = 8;
  auto matmul = pl::pallas_call(
      [=](pl::Ref a, pl::Ref b, pl::Ref o) {
        o[pl::all] = pl::fori_loop(0, int(K / bk), pl::Value(pl::zeros({bm, bn}, pl::f64)), [&](pl::Value s, pl::Value acc) {
          return acc + pl::dot(a(pl::all, pl::ds(s * bk, bk)), b(pl::ds(s * bk, bk), pl::all));
        });
      },
      pl::ShapeDtype({M, Nc}, pl::f64),
      {.grid = {M / bm, Nc / bn},
       .in_specs = {pl::BlockSpec({bm, K}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
                    pl::BlockSpec({K, bn}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
       .name = "k_loop"});
  pl::Array a = N({M, K}, 71), b = N({K, Nc}, 72), dc = N({M, Nc}, 73);
  expect_matches_fd(matmul, {a, b}, {dc});
  auto [outs, pullback] = pl::vjp(matmul, {a, b});
  auto g = pullback(dc);
  auto av = vec(a), bv = vec(b), cv = vec(dc);
  std::vector<double> da(static_cast<size_t>(M * K)), db(static_cast<size_t>(K * Nc));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < Nc; ++j)
      for (int64_t p = 0; p < K; ++p) da[i * K + p] += cv[i * Nc + j] * bv[p * Nc + j], db[p * Nc + j] += av[i * K + p] * cv[i * Nc + j];
  EXPECT_LT(rel_err(vec(g[0]), da), 1e-13);
  EXPECT_LT(rel_err(vec(g[1]), db), 1e-13);

  // attention-like scores summed over key blocks, q loaded once before the loop
  auto scores = pl::pallas_call(
      [](pl::Ref q, pl::Ref k, pl::Ref o) {
        pl::Value qb = q[pl::all];
        o[pl::all] = pl::fori_loop(0, 3, pl::Value(pl::zeros({4}, pl::f64)), [&](pl::Value j, pl::Value acc) {
          return acc + pl::sum(pl::exp(pl::dot(qb, k(pl::ds(j * 4, 4), pl::all), {.trans_b = true}) * 0.25), 1);
        });
      },
      pl::ShapeDtype({8}, pl::f64),
      {.grid = {2},
       .in_specs = {rows(4, 6), whole({12, 6})},
       .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
       .name = "scores"});
  expect_matches_fd(scores, {N({8, 6}, 74), N({12, 6}, 75)}, {N({8}, 76)});
}

// The library's matmul (bf16 operands, f32 accumulation and output) differentiated
// automatically against matmul_vjp's two backward matmuls, on small integers (exact).
TEST(Vjp, LibraryMatmulAgreesWithItsBackwardMatmuls) {
  auto ints = [](pl::Shape s, uint64_t seed, pl::DType t) { return pl::random::randint(s, pl::i32, seed, -3, 4).astype(t); };
  pl::kernels::MatmulConfig cfg{.block_m = 32, .block_n = 16, .block_k = 16, .compiler_params = {.num_warps = 4}};
  pl::Array a = ints({64, 32}, 81, pl::bf16), b = ints({32, 48}, 82, pl::bf16), dc = ints({64, 48}, 83, pl::f32);
  auto [o1, auto_pb] = pl::vjp(pl::kernels::matmul(64, 48, 32, pl::bf16, pl::f32, cfg), {a, b});
  auto [o2, hand_pb] = pl::vjp(pl::kernels::matmul_vjp(64, 48, 32, pl::bf16, pl::f32, cfg), {a, b});
  auto ga = auto_pb(dc), gh = hand_pb(dc);
  EXPECT_EQ(vec(ga[0]), vec(gh[0]));
  EXPECT_EQ(vec(ga[1]), vec(gh[1]));
}

// Loops that carry state into the next iteration: the transpose runs the steps in reverse,
// with each step's incoming carries saved by the replayed forward (static bounds) or
// recomputed from the loop's start; both ways agree. A carry squared every step, an online
// maximum, a recurrence over loaded rows with a loop-invariant weight (its cotangent summed
// over the steps), an integer counter carry, and a dynamic trip count.
TEST(Vjp, LoopsCarryingState) {
 for (pl::VjpCarries how : {pl::VjpCarries::Saved, pl::VjpCarries::Recomputed}) {
  SCOPED_TRACE(how == pl::VjpCarries::Saved ? "saved" : "recomputed");
  const pl::VjpOptions opts{.carries = how};
  pl::Array x = N({8}, 61);
  auto scaled = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) { o[pl::all] = pl::fori_loop(0, 3, pl::Value(x[pl::all]), [](pl::Value, pl::Value c) { return c * c * 0.5; }); },
      pl::ShapeDtype({8}, pl::f64), {.name = "scaled"});
  expect_matches_fd(scaled, {x}, {N({8}, 62)}, 1e-7, opts);
  auto online = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        o[pl::all] = pl::fori_loop(0, 2, pl::Value(pl::zeros({4}, pl::f64)), [&](pl::Value j, pl::Value c) {
          return c + pl::maximum(c, x(pl::ds(j * 4, 4)));
        });
      },
      pl::ShapeDtype({4}, pl::f64), {.name = "online"});
  expect_matches_fd(online, {x}, {N({4}, 63)}, 1e-7, opts);
  // h <- tanh(h * w + x[t]) over the rows of each program's block, rows 0..n with n from the
  // program id (a dynamic trip count); two carries, one of them an integer count.
  auto rnn = pl::pallas_call(
      [](pl::Ref x, pl::Ref w, pl::Ref o) {
        pl::Value wv = w[pl::all];
        pl::Value n = pl::program_id(0) + 3;
        auto r = pl::fori_loop(0, n, std::vector<pl::Value>{pl::zeros({6}, pl::f64), pl::Value(int32_t{0})},
                               [&](pl::Value t, std::vector<pl::Value> c) {
                                 return std::vector<pl::Value>{pl::tanh(c[0] * wv + x(t, pl::all)), c[1] + 1};
                               });
        o[pl::all] = r[0] * r[1].astype(pl::f64);
      },
      pl::ShapeDtype({12}, pl::f64),
      {.grid = {2},
       .in_specs = {pl::BlockSpec({pl::squeezed, 5, 6}, [](pl::Value i) { return pl::idx(i, 0, 0); }), whole({6})},
       .out_specs = {pl::BlockSpec({6}, [](pl::Value i) { return pl::idx(i); })},
       .name = "rnn"});
  expect_matches_fd(rnn, {N({2, 5, 6}, 64), N({6}, 65)}, {N({12}, 66)}, 1e-7, opts);
  // static bounds, three carries (a row, a matrix, a count), over a grid of 2 x 3 programs:
  // each program's tape is its own
  auto gated = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        auto r = pl::fori_loop(1, 5, std::vector<pl::Value>{pl::zeros({4}, pl::f64), pl::zeros({2, 4}, pl::f64), pl::Value(int32_t{0})},
                               [&](pl::Value t, std::vector<pl::Value> c) {
                                 pl::Value xt = x(t, pl::all);
                                 pl::Value h = pl::logistic(c[0] + xt) * pl::exp(pl::sum(c[1], 0) * 0.25);
                                 pl::Value rows = pl::iota(pl::i32, {2, 4}, 0).astype(pl::f64);
                                 pl::Value m = c[1] * 0.5 + pl::expand_dims(h, 0) * (rows + 1.0);
                                 return std::vector<pl::Value>{h, m, c[2] + t};
                               });
        o[pl::all] = r[0] + pl::sum(r[1], 0) * r[2].astype(pl::f64);
      },
      pl::ShapeDtype({2, 3, 4}, pl::f64),
      {.grid = {2, 3},
       .in_specs = {pl::BlockSpec({pl::squeezed, pl::squeezed, 5, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j, 0, 0); })},
       .out_specs = {pl::BlockSpec({pl::squeezed, pl::squeezed, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j, 0); })},
       .name = "gated"});
  expect_matches_fd(gated, {N({2, 3, 5, 4}, 67)}, {N({2, 3, 4}, 68)}, 1e-7, opts);
 }
}

// The library's flash attention forward (an online softmax over key blocks, the causal loop
// bound depending on the program) differentiated automatically, against flash_attention_vjp's
// hand-written backward kernels.
TEST(Vjp, LibraryFlashAttentionAgreesWithItsBackwardKernels) {
  const int64_t B = 1, H = 2, S = 32, D = 8;
  pl::Array q = N({B, H, S, D}, 91), k = N({B, H, S, D}, 92), v = N({B, H, S, D}, 93), dout = N({B, H, S, D}, 94);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    pl::kernels::AttentionConfig cfg{.block_q = 16, .block_k = 8, .causal = causal};
    pl::Call fwd = pl::kernels::flash_attention(B, H, S, D, pl::f64, cfg);
    expect_matches_fd(fwd, {q, k, v}, {dout});
    auto [o2, hand_pb] = pl::vjp(pl::kernels::flash_attention_vjp(B, H, S, D, pl::f64, cfg), {q, k, v});
    auto gh = hand_pb(dout);
    for (pl::VjpCarries how : {pl::VjpCarries::Saved, pl::VjpCarries::Recomputed}) {
      auto [o1, auto_pb] = pl::vjp(fwd, {q, k, v}, {.carries = how});
      auto ga = auto_pb(dout);
      for (int a = 0; a < 3; ++a) EXPECT_LT(rel_err(vec(ga[a]), vec(gh[a])), 1e-12) << "input " << a;
    }
  }
}

// Outputs whose last blocks pass their edge (rows not a multiple of the block): the forward's
// writes there are dropped, so the transposed kernel reads the cotangent only inside the array
// (zeros past it), along one dimension or two.
TEST(Vjp, OutputBlocksPastTheEdge) {
  auto rows = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) { o[pl::all] = pl::tanh(x[pl::all]) * 2.0; }, pl::ShapeDtype({20, 6}, pl::f64),
      {.grid = {3},
       .in_specs = {pl::BlockSpec({8, 6}, [](pl::Value i) { return pl::idx(i, 0); })},
       .out_specs = {pl::BlockSpec({8, 6}, [](pl::Value i) { return pl::idx(i, 0); })},
       .name = "rows_past_edge"});
  expect_matches_fd(rows, {N({20, 6}, 111)}, {N({20, 6}, 112)});
  auto both = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::Value v = x[pl::all];
        o[pl::all] = pl::exp(v) - v * v * 0.5;
      },
      pl::ShapeDtype({10, 7}, pl::f64),
      {.grid = {3, 2},
       .in_specs = {pl::BlockSpec({4, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
       .out_specs = {pl::BlockSpec({4, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
       .name = "both_past_edge"});
  expect_matches_fd(both, {N({10, 7}, 113)}, {N({10, 7}, 114)});
  // blocks larger than the whole array along some dimensions
  for (int which = 0; which < 3; ++which) {
    SCOPED_TRACE("case " + std::to_string(which));
    pl::ShapeDtype os = which == 0 ? pl::ShapeDtype({43}, pl::f64) : which == 1 ? pl::ShapeDtype({1, 12, 28}, pl::f64) : pl::ShapeDtype({1, 168, 1}, pl::f64);
    auto k = pl::pallas_call(
        [which](pl::Ref x, pl::Ref o) {
          pl::Value m = pl::max(x[pl::all] * x[pl::all], pl::Axes(), false);
          o[pl::all] = pl::broadcast_to(m, which == 0 ? pl::Shape{12} : which == 1 ? pl::Shape{2, 32, 7} : pl::Shape{1, 48, 8});
        },
        os,
        {.grid = {4},
         .in_specs = {pl::BlockSpec({4, 8}, [](pl::Value i) { return pl::idx(i, 0); })},
         .out_specs = {which == 0   ? pl::BlockSpec({12}, [](pl::Value i) { return pl::idx(i); })
                       : which == 1 ? pl::BlockSpec({2, 32, 7}, [](pl::Value i) { return pl::idx(0, 0, i); })
                                    : pl::BlockSpec({1, 48, 8}, [](pl::Value i) { return pl::idx(0, i, 0); })},
         .name = "bigger_blocks"});
    expect_matches_fd(k, {N({16, 8}, 115)}, {N(os.shape, 116)});
  }
}

// Branches: the transpose is a branch on the same index whose cases send the results'
// cotangents back through the case the forward took — to its operands, to values it captured,
// and into the inputs it loads. A cond on the data, one on the program id whose branches load
// different inputs, and a switch inside a loop that carries state.
TEST(Vjp, Branches) {
  auto on_data = pl::pallas_call(
      [](pl::Ref x, pl::Ref w, pl::Ref o) {
        pl::Value xv = x[pl::all], wv = w[pl::all];
        o[pl::all] = pl::cond(pl::sum(xv) > 0.0, [&](std::vector<pl::Value> a) { return std::vector<pl::Value>{pl::exp(a[0]) * wv}; },
                              [&](std::vector<pl::Value> a) { return std::vector<pl::Value>{a[0] * a[0]}; }, {xv})[0];
      },
      pl::ShapeDtype({4, 6}, pl::f64),
      {.grid = {4}, .in_specs = {rows(1, 6), whole({1, 6})}, .out_specs = {rows(1, 6)}, .name = "on_data"});
  expect_matches_fd(on_data, {N({4, 6}, 101), N({1, 6}, 102)}, {N({4, 6}, 103)});
  auto on_program = pl::pallas_call(
      [](pl::Ref x, pl::Ref y, pl::Ref o) {
        o[pl::all] = pl::cond(pl::program_id(0) % 2 == 0, [&] { return pl::tanh(x[pl::all]); }, [&] { return pl::sin(y[pl::all]) * x[pl::all]; });
      },
      pl::ShapeDtype({4, 6}, pl::f64),
      {.grid = {4}, .in_specs = {rows(1, 6), rows(1, 6)}, .out_specs = {rows(1, 6)}, .name = "on_program"});
  expect_matches_fd(on_program, {N({4, 6}, 104), N({4, 6}, 105)}, {N({4, 6}, 106)});
  auto switched = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        o[pl::all] = pl::fori_loop(0, 4, pl::Value(x(0, pl::all)), [&](pl::Value t, pl::Value c) {
          return pl::switch_case(t % 3,
                                 {[](const std::vector<pl::Value>& a) { return std::vector<pl::Value>{a[0] * 1.5}; },
                                  [&](const std::vector<pl::Value>& a) { return std::vector<pl::Value>{pl::tanh(a[0] + x(t, pl::all))}; },
                                  [](const std::vector<pl::Value>& a) { return std::vector<pl::Value>{a[0] * a[0] * 0.5}; }},
                                 {c})[0];
        });
      },
      pl::ShapeDtype({6}, pl::f64), {.name = "switched"});
  expect_matches_fd(switched, {N({4, 6}, 107)}, {N({6}, 108)});
}

// The transposed call's shape: an input each program reads once, in a block of its own (a
// softmax's rows), gets its cotangent stored directly in its dtype — no zeros, no f32
// accumulator; a block every program reads (a norm's weight) adds into zeros in f32, aliased,
// spread over copies that are summed after the call;
// a loop that carries state with static bounds gets one tape output per carry.
TEST(Vjp, TransposedCallStoresExclusiveCotangentsAndSavesTapes) {
  const int64_t R = 8, C = 16;
  pl::Call ln = pl::kernels::layer_norm(R, C, pl::bf16, 1e-5, {.block_rows = 2});
  const auto& fwd = pl::transforms::pallas_call_of(ln, {{{R, C}, pl::bf16}, {{C}, pl::bf16}, {{C}, pl::bf16}});
  auto t = pl::transforms::vjp_pallas_call(fwd);
  // inputs: x, w, b, dy, zeros for dw and db; outputs: dx (bf16), dw, db (f32, aliased)
  ASSERT_EQ(t.grid.inputs.size(), 6u);
  ASSERT_EQ(t.grid.outputs.size(), 3u);
  EXPECT_EQ(t.grid.outputs[0].array.dtype, pl::bf16);
  // dw and db sum over the 4 programs: in 4 copies (slot: the program id mod 4), summed after
  EXPECT_EQ(t.grid.outputs[1].array, pl::ShapeDtype({4, C}, pl::f32));
  EXPECT_EQ(t.grid.inputs[4].array, pl::ShapeDtype({4, C}, pl::f32));
  EXPECT_EQ(t.aliases.size(), 2u);
  EXPECT_EQ(t.aliases.at(4), 1);
  EXPECT_EQ(t.aliases.at(5), 2);
  auto rnn = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        o[pl::all] = pl::fori_loop(0, 5, std::vector<pl::Value>{pl::zeros({4}, pl::f32), pl::Value(int32_t{0})}, [&](pl::Value i, std::vector<pl::Value> c) {
          return std::vector<pl::Value>{pl::tanh(c[0] + x(i, pl::all)), c[1] + 1};
        })[0];
      },
      pl::ShapeDtype({3, 4}, pl::f32),
      {.grid = {3},
       .in_specs = {pl::BlockSpec({pl::squeezed, 5, 4}, [](pl::Value i) { return pl::idx(i, 0, 0); })},
       .out_specs = {pl::BlockSpec({pl::squeezed, 4}, [](pl::Value i) { return pl::idx(i, 0); })}});
  const auto& rf = pl::transforms::pallas_call_of(rnn, {{{3, 5, 4}, pl::f32}});
  auto saved = pl::transforms::vjp_pallas_call(rf);
  ASSERT_EQ(saved.grid.outputs.size(), 3u);  // dx, then a tape per carry: [programs, steps, carry...]
  EXPECT_EQ(saved.grid.outputs[1].array, pl::ShapeDtype({3, 5, 4}, pl::f32));
  EXPECT_EQ(saved.grid.outputs[2].array, pl::ShapeDtype({3, 5}, pl::i32));
  EXPECT_EQ(pl::transforms::vjp_pallas_call(rf, {.carries = pl::VjpCarries::Recomputed}).grid.outputs.size(), 1u);
}

// What it does not transpose yet: each refusal names the construct and points to custom_vjp.
TEST(Vjp, RefusalsNameTheConstructAndPointToCustomVjp) {
  pl::Array x = N({8}, 61);
  auto branch = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        o[pl::all] = x[pl::all];
        pl::when(pl::sum(x[pl::all]) > 0.0, [&] { o[pl::all] = x[pl::all] * 2.0; });
      },
      pl::ShapeDtype({8}, pl::f64), {.name = "branch"});
  EXPECT_THROW_MSG(pl::vjp(branch, {x}), "kernel 'branch'", "writes a ref inside a branch", "pl::custom_vjp");
  auto until = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        o[pl::all] = pl::while_loop(pl::Value(x[pl::all]), [](pl::Value c) { return pl::sum(c) < 100.0; }, [](pl::Value c) { return c * 2.0; });
      },
      pl::ShapeDtype({8}, pl::f64), {.name = "until"});
  EXPECT_THROW_MSG(pl::vjp(until, {x}), "kernel 'until'", "while_loop", "pl::custom_vjp");
  auto read_back = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        o[pl::all] = x[pl::all];
        o[pl::all] = o[pl::all] * 2.0;
      },
      pl::ShapeDtype({8}, pl::f64), {.name = "read_back"});
  EXPECT_THROW_MSG(pl::vjp(read_back, {x}), "kernel 'read_back'", "reads output 0 back", "pl::custom_vjp");
  auto accumulate = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) { o[pl::all] += x[pl::all]; }, pl::ShapeDtype({8}, pl::f64), {.name = "accumulate"});
  EXPECT_THROW_MSG(pl::vjp(accumulate, {x}), "kernel 'accumulate'", "addupdate", "pl::custom_vjp");
  auto revisit = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({8}, pl::f64),
      {.grid = {2}, .in_specs = {whole({8})}, .out_specs = {whole({8})}, .name = "revisit"});
  EXPECT_THROW_MSG(pl::vjp(revisit, {x}), "kernel 'revisit'", "output 0 is written by several programs", "pl::custom_vjp");
  // two stores into one output that may overlap: the later one overwrites (found by the fuzzer)
  auto twice = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        o[pl::all] = x[pl::all];
        o[pl::all] = x[pl::all] * 2.0;
      },
      pl::ShapeDtype({8}, pl::f64), {.name = "twice"});
  EXPECT_THROW_MSG(pl::vjp(twice, {x}), "kernel 'twice'", "stores output 0 more than once where the stores may overlap", "pl::custom_vjp");
  // an output whose last block passes its edge, stored in part (20 elements in blocks of 8)
  auto edge = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::ds(0, 4)] = x[pl::ds(0, 4)] * 2.0; }, pl::ShapeDtype({20}, pl::f64),
                              {.grid = {3},
                               .in_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })},
                               .out_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })},
                               .name = "edge"});
  EXPECT_THROW_MSG(pl::vjp(edge, {N({20}, 62)}), "kernel 'edge'", "output 0's blocks overhang its edge and the kernel stores part of a block",
                   "pl::custom_vjp");
  auto cumsum = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::cumsum(x[pl::all], 0); }, pl::ShapeDtype({8}, pl::f64),
                                {.name = "scan"});
  EXPECT_THROW_MSG(pl::vjp(cumsum, {x}), "kernel 'scan'", "the primitive 'cumsum' has no transpose rule", "pl::custom_vjp");
}
