// jvp of pallas_calls against central finite differences in f64.
#include <functional>

#include "src/ir/primitive.h"
#include "src/transforms/transforms.h"
#include "tests/transforms_util.h"

namespace pl = pallas;
using tu::expect_jvp_matches_fd;
using V = pl::Value;

namespace {
const pl::ShapeDtype kS({4, 8}, pl::f64);

pl::Call unary_call(std::function<V(V)> f) {
  return pl::pallas_call([f](pl::Ref x, pl::Ref o) { o[pl::all] = f(x[pl::all]); }, kS,
                         {.grid = {2}, .in_specs = {tu::rows(2, 8)}, .out_specs = {tu::rows(2, 8)}});
}
pl::Call binary_call(std::function<V(V, V)> f) {
  return pl::pallas_call([f](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = f(x[pl::all], y[pl::all]); }, kS,
                         {.grid = {2},
                          .in_specs = {tu::rows(2, 8), tu::rows(2, 8)},
                          .out_specs = {tu::rows(2, 8)}});
}
pl::Array U(double lo, double hi, uint64_t seed) { return pl::random::uniform({4, 8}, pl::f64, seed, lo, hi); }
pl::Array N(uint64_t seed) { return pl::random::normal({4, 8}, pl::f64, seed); }

struct UnaryCase {
  const char* name;
  std::function<V(V)> f;
  double lo, hi;
};
}  // namespace

TEST(TransformsJvp, EveryDifferentiableUnaryOp) {
  std::vector<UnaryCase> cases = {
      {"neg", [](V x) { return -x; }, -2, 2},
      {"abs", [](V x) { return pl::abs(x); }, 0.1, 2},
      {"exp", [](V x) { return pl::exp(x); }, -2, 2},
      {"exp2", [](V x) { return pl::exp2(x); }, -2, 2},
      {"expm1", [](V x) { return pl::expm1(x); }, -2, 2},
      {"log", [](V x) { return pl::log(x); }, 0.2, 3},
      {"log1p", [](V x) { return pl::log1p(x); }, -0.5, 3},
      {"sqrt", [](V x) { return pl::sqrt(x); }, 0.2, 3},
      {"cbrt", [](V x) { return pl::cbrt(x); }, 0.2, 3},
      {"rsqrt", [](V x) { return pl::rsqrt(x); }, 0.2, 3},
      {"sin", [](V x) { return pl::sin(x); }, -3, 3},
      {"cos", [](V x) { return pl::cos(x); }, -3, 3},
      {"tan", [](V x) { return pl::tan(x); }, -1.2, 1.2},
      {"asin", [](V x) { return pl::asin(x); }, -0.9, 0.9},
      {"acos", [](V x) { return pl::acos(x); }, -0.9, 0.9},
      {"atan", [](V x) { return pl::atan(x); }, -3, 3},
      {"sinh", [](V x) { return pl::sinh(x); }, -2, 2},
      {"cosh", [](V x) { return pl::cosh(x); }, -2, 2},
      {"tanh", [](V x) { return pl::tanh(x); }, -2, 2},
      {"asinh", [](V x) { return pl::asinh(x); }, -2, 2},
      {"acosh", [](V x) { return pl::acosh(x); }, 1.2, 3},
      {"atanh", [](V x) { return pl::atanh(x); }, -0.9, 0.9},
      {"logistic", [](V x) { return pl::logistic(x); }, -3, 3},
      {"erf", [](V x) { return pl::erf(x); }, -2, 2},
      {"erf_inv", [](V x) { return pl::erf_inv(x); }, -0.9, 0.9},
      {"integer_pow", [](V x) { return pl::integer_pow(x, 3); }, -2, 2},
      {"square", [](V x) { return pl::square(x); }, -2, 2},
      {"integer_pow(-2)", [](V x) { return pl::integer_pow(x, -2); }, 0.5, 2},
      {"convert", [](V x) { return x.astype(pl::f32).astype(pl::f64) * 0.0 + x.astype(pl::f64); }, -2, 2},
      {"reshape/transpose", [](V x) { return pl::transpose(x.reshape({8, 2})).reshape({2, 8}) * x; }, -2, 2},
      {"squeeze", [](V x) { return pl::squeeze(pl::expand_dims(x, 0), 0) * x; }, -2, 2},
      {"broadcast", [](V x) { return pl::broadcast_to(pl::sum(x, 1, true), {2, 8}) + x; }, -2, 2},
      {"sum", [](V x) { return pl::broadcast_to(pl::sum(x * x, 0), {2, 8}); }, -2, 2},
      {"max", [](V x) { return pl::broadcast_to(pl::max(x, 1, true), {2, 8}) * x; }, -2, 2},
      {"min", [](V x) { return pl::broadcast_to(pl::min(x, 1, true), {2, 8}) * x; }, -2, 2},
      {"prod", [](V x) { return pl::broadcast_to(pl::prod(x, 1, true), {2, 8}); }, 0.5, 1.5},
      {"cumsum", [](V x) { return pl::cumsum(pl::sin(x), 1); }, -2, 2},
      {"where", [](V x) { return pl::where(x > 0.0, x * x, pl::sin(x)); }, -2, 2},
      {"clamp", [](V x) { return pl::clamp(V(-0.5), x, V(0.7)); }, -2, 2},
      {"select_n", [](V x) { return pl::select_n((x > 0.5).astype(pl::i32), {x, x * 3.0}); }, -2, 2},
      {"dot", [](V x) { return pl::dot(pl::dot(x, x.T()), x); }, -2, 2},
  };
  uint64_t seed = 1;
  for (auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_jvp_matches_fd(unary_call(c.f), {U(c.lo, c.hi, seed)}, {N(seed + 100)}, 1e-6);
    ++seed;
  }
}

TEST(TransformsJvp, EveryDifferentiableBinaryOp) {
  struct Case {
    const char* name;
    std::function<V(V, V)> f;
    double lo, hi;
  };
  std::vector<Case> cases = {
      {"add", [](V a, V b) { return a + b; }, -2, 2},
      {"sub", [](V a, V b) { return a - b; }, -2, 2},
      {"mul", [](V a, V b) { return a * b; }, -2, 2},
      {"div", [](V a, V b) { return a / b; }, 0.5, 2},
      {"rem", [](V a, V b) { return (a * 5.0) % b; }, 0.3, 2},
      {"pow", [](V a, V b) { return pl::pow(a, b); }, 0.5, 2},
      {"atan2", [](V a, V b) { return pl::atan2(a, b); }, -2, 2},
      {"maximum", [](V a, V b) { return pl::maximum(a, b); }, -2, 2},
      {"minimum", [](V a, V b) { return pl::minimum(a, b); }, -2, 2},
      {"clamp lo/hi", [](V a, V b) { return pl::clamp(b - 0.5, a, b + 0.5); }, -1, 1},
      {"scalar operand", [](V a, V b) { return a * pl::sum(b) + pl::max(b); }, -2, 2},
      {"dot", [](V a, V b) { return pl::dot(pl::dot(a, b, {.trans_b = true}), b); }, -2, 2},
  };
  uint64_t seed = 50;
  for (auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_jvp_matches_fd(binary_call(c.f), {U(c.lo, c.hi, seed), U(c.lo, c.hi, seed + 1)},
                          {N(seed + 2), N(seed + 3)}, 1e-6);
    seed += 4;
  }
}

TEST(TransformsJvp, NonDifferentiableOpsGiveZeroTangents) {
  std::vector<std::function<V(V)>> fs = {
      [](V x) { return pl::floor(x) + pl::ceil(x) + pl::round(x) + pl::sign(x); },
      [](V x) { return pl::stop_gradient(x) * 2.0; },
      [](V x) { return (x > 0.0).astype(pl::f64) + pl::argmax(x, 1).astype(pl::f64).reshape({2, 1}) * 0.0 + 1.0; },
      [](V x) { return ((x * 10.0).astype(pl::i32) & 7).astype(pl::f64); },
  };
  for (auto& f : fs) {
    auto [outs, tans] = pl::jvp(unary_call(f), {U(-2, 2, 7)}, {N(8)});
    for (double v : tu::vec(tans[0])) EXPECT_EQ(v, 0.0);
  }
  // stop_gradient stops only its own path
  expect_jvp_matches_fd(unary_call([](V x) { return pl::stop_gradient(x) * 0.0 + x * x; }), {U(-2, 2, 9)}, {N(10)});
}

TEST(TransformsJvp, SymbolicZeroTangentsArePruned) {
  auto call = binary_call([](V a, V b) { return pl::sin(a) * b; });
  pl::Array a = U(-2, 2, 1), b = U(-2, 2, 2), da = N(3);
  tu::expect_jvp_matches_fd(call, {a, b}, {da, pl::zero_tangent()});
  const auto& pc = call.state()->get({a.shape_dtype(), b.shape_dtype()});
  auto j = pallas::transforms::jvp_pallas_call(pc, {true, false});
  EXPECT_EQ(j.call.grid.inputs.size(), 3u);  // a, b, da
  EXPECT_EQ(j.call.grid.outputs.size(), 2u);
  // no tangent for b: no cos/mul chain involving b's tangent; one output tangent store
  auto none = pallas::transforms::jvp_pallas_call(pc, {false, false});
  EXPECT_EQ(none.call.grid.inputs.size(), 2u);
  EXPECT_FALSE(tu::contains(none.call.text(), "cos"));
}

TEST(TransformsJvp, IntegerInputsAndOutputs) {
  auto call = pl::pallas_call(
      [](pl::Ref x, pl::Ref n, pl::Ref o, pl::Ref c) {
        o[pl::all] = x[pl::all] * n[pl::all].astype(pl::f64);
        c[pl::all] = n[pl::all] * 2;
      },
      std::vector<pl::ShapeDtype>{kS, pl::ShapeDtype({4, 8}, pl::i32)}, {});
  pl::Array x = U(-1, 1, 3), n = pl::random::randint({4, 8}, pl::i32, 4, -3, 3);
  auto [outs, tans] = pl::jvp(call, {x, n}, {N(5), pl::Array()});
  ASSERT_EQ(tans.size(), 2u);
  EXPECT_EQ(tans[1].dtype(), pl::i32);
  for (int v : tans[1].to_vector<int>()) EXPECT_EQ(v, 0);
  auto xv = tu::vec(N(5)), tv = tu::vec(tans[0]);
  auto nv = n.to_vector<int>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(tv[i], xv[i] * nv[i], 1e-12);
}

TEST(TransformsJvp, ControlFlowCarriesTangents) {
  // fori with a carry, while, cond with operands, a scratch ref and a loop reading a ref.
  auto fori = unary_call([](V x) {
    return pl::fori_loop(0, 3, x, [](V i, V c) { return pl::sin(c) * (i.astype(pl::f64) + 1.0) + c; });
  });
  tu::expect_jvp_matches_fd(fori, {U(-1, 1, 1)}, {N(2)});
  auto wh = unary_call([](V x) {
    auto r = pl::while_loop(std::vector<V>{V::constant(0, pl::i32), x},
                            [](const std::vector<V>& c) { return c[0] < 4; },
                            [](const std::vector<V>& c) { return std::vector<V>{c[0] + 1, c[1] * c[1] * 0.5 + 0.1}; });
    return r[1];
  });
  tu::expect_jvp_matches_fd(wh, {U(-1, 1, 3)}, {N(4)});
  auto cnd = unary_call([](V x) {
    V s = pl::sum(x);
    return pl::cond(
        s > 0.0, [](const std::vector<V>& o) { return pl::exp(o[0]); },
        [](const std::vector<V>& o) { return o[0] * o[0]; }, {x})[0];
  });
  tu::expect_jvp_matches_fd(cnd, {U(-1, 1, 5)}, {N(6)});
  tu::expect_jvp_matches_fd(cnd, {U(0, 1, 5)}, {N(6)});
  // a tangent that enters the carry only inside the body (zero init tangent)
  auto grow = binary_call([](V x, V y) {
    return pl::fori_loop(0, 2, pl::zeros_like(x), [&](V, V c) { return c + x * y; });
  });
  tu::expect_jvp_matches_fd(grow, {U(-1, 1, 7), U(-1, 1, 8)}, {N(9), pl::Array()});
  // refs: a scratch buffer written and read, and a loop over an input ref
  auto scratch = pl::pallas_call(
      [](pl::Ref x, pl::Ref o, pl::Ref s) {
        s[pl::all] = pl::exp(x[pl::all]);
        pl::fori_loop(0, 2, [&](V i) { o(i, pl::all) = s(i, pl::all) * x(i, pl::all); });
      },
      kS,
      {.grid = {2}, .in_specs = {tu::rows(2, 8)}, .out_specs = {tu::rows(2, 8)},
       .scratch_shapes = {pl::ShapeDtype({2, 8}, pl::f64)}});
  tu::expect_jvp_matches_fd(scratch, {U(-1, 1, 10)}, {N(11)});
}

TEST(TransformsJvp, RefOpsSwapAddupdateAtomicsMasks) {
  auto call = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        V v = x[pl::all];
        o[pl::all] = v * v;
        o[pl::all] += pl::sin(v);
        V old = pl::swap(o, {pl::all}, o[pl::all] * 2.0);
        pl::atomic_add(o, {pl::all}, old);
        V prev = pl::atomic_xchg(o, {pl::all}, pl::cos(v) * o[pl::all]);
        o[pl::all] += prev * v;
        V m = pl::iota(pl::i32, {4, 8}, 1) < 5;
        pl::store(o, {pl::all}, pl::load(x, {pl::all}, {.mask = m, .other = 0.0}) * v, {.mask = m});
      },
      kS, {});
  tu::expect_jvp_matches_fd(call, {U(-1, 1, 12)}, {N(13)});
}

// ---- kernels ----
TEST(TransformsJvp, MatmulWithAccumulationOverGrid) {
  const int64_t M = 16, K = 32, N2 = 8, bk = 8;
  auto mm = pl::pallas_call(
      [](pl::Ref a, pl::Ref b, pl::Ref o) {
        pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({8, 8}, pl::f64); });
        o[pl::all] += pl::dot(a[pl::all], b[pl::all]);
      },
      pl::ShapeDtype({M, N2}, pl::f64),
      {.grid = {2, K / bk},
       .in_specs = {pl::BlockSpec({8, bk}, [](V i, V k) { return pl::idx(i, k); }),
                    pl::BlockSpec({bk, N2}, [](V, V k) { return pl::idx(k, 0); })},
       .out_specs = {pl::BlockSpec({8, N2}, [](V i, V) { return pl::idx(i, 0); })},
       .cost_estimate = pl::CostEstimate{100, 0, 10}});
  pl::Array a = pl::random::normal({M, K}, pl::f64, 1), b = pl::random::normal({K, N2}, pl::f64, 2);
  tu::expect_jvp_matches_fd(mm, {a, b}, {pl::random::normal({M, K}, pl::f64, 3), pl::random::normal({K, N2}, pl::f64, 4)});
  const auto& pc = mm.state()->get({a.shape_dtype(), b.shape_dtype()});
  auto j = pallas::transforms::jvp_pallas_call(pc, {true, true});
  EXPECT_EQ(j.call.cost_estimate->flops, 200);
  EXPECT_EQ(j.call.grid.inputs.size(), 4u);
  EXPECT_EQ(j.call.grid.outputs.size(), 2u);
}

TEST(TransformsJvp, SoftmaxAndLayerNorm) {
  auto softmax = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        V v = x[pl::all];
        V e = pl::exp(v - pl::max(v, 1, true));
        o[pl::all] = e / pl::sum(e, 1, true);
      },
      kS, {.grid = {2}, .in_specs = {tu::rows(2, 8)}, .out_specs = {tu::rows(2, 8)}});
  tu::expect_jvp_matches_fd(softmax, {N(1)}, {N(2)});
  auto ln = pl::pallas_call(
      [](pl::Ref x, pl::Ref w, pl::Ref b, pl::Ref o) {
        V v = x[pl::all];
        V mu = pl::sum(v, 1, true) / 8.0;
        V d = v - mu;
        V var = pl::sum(d * d, 1, true) / 8.0;
        o[pl::all] = d * pl::rsqrt(var + 1e-5) * w[pl::all] + b[pl::all];
      },
      kS,
      {.grid = {2},
       .in_specs = {tu::rows(2, 8), pl::BlockSpec({1, 8}, [](V) { return pl::idx(0, 0); }),
                    pl::BlockSpec({1, 8}, [](V) { return pl::idx(0, 0); })},
       .out_specs = {tu::rows(2, 8)}});
  pl::Array w = pl::random::normal({1, 8}, pl::f64, 5), b = pl::random::normal({1, 8}, pl::f64, 6);
  tu::expect_jvp_matches_fd(ln, {N(3), w, b},
                            {N(4), pl::random::normal({1, 8}, pl::f64, 7), pl::random::normal({1, 8}, pl::f64, 8)});
}

TEST(TransformsJvp, FlashAttentionLike) {
  const int64_t S = 16, D = 8, bq = 8, bk = 4;
  auto attn = pl::pallas_call(
      [](pl::Ref q, pl::Ref k, pl::Ref v, pl::Ref o) {
        V qv = q[pl::all];
        auto r = pl::fori_loop(
            0, S / bk,
            std::vector<V>{pl::full({bq, 1}, -1e30, pl::f64), pl::zeros({bq, 1}, pl::f64), pl::zeros({bq, D}, pl::f64)},
            [&](V j, const std::vector<V>& c) {
              V kb = k(pl::ds(j * bk, bk), pl::all), vb = v(pl::ds(j * bk, bk), pl::all);
              V s = pl::dot(qv, kb, {.trans_b = true}) * 0.3;
              V m = pl::maximum(c[0], pl::max(s, 1, true));
              V p = pl::exp(s - m);
              V alpha = pl::exp(c[0] - m);
              return std::vector<V>{m, c[1] * alpha + pl::sum(p, 1, true), c[2] * alpha + pl::dot(p, vb)};
            });
        o[pl::all] = r[2] / r[1];
      },
      pl::ShapeDtype({S, D}, pl::f64),
      {.grid = {S / bq},
       .in_specs = {tu::rows(bq, D), pl::BlockSpec({S, D}, [](V) { return pl::idx(0, 0); }),
                    pl::BlockSpec({S, D}, [](V) { return pl::idx(0, 0); })},
       .out_specs = {tu::rows(bq, D)}});
  auto r = [](uint64_t s) { return pl::random::normal({S, D}, pl::f64, s); };
  tu::expect_jvp_matches_fd(attn, {r(1), r(2), r(3)}, {r(4), r(5), r(6)});
  tu::expect_jvp_matches_fd(attn, {r(1), r(2), r(3)}, {pl::Array(), r(5), pl::Array()});
}

// ---- refused cases ----
TEST(TransformsJvp, RefusedCases) {
  auto dyn = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({8}, pl::f64),
                             {.grid = {pl::dynamic}, .name = "dyn_kernel"});
  pl::Array x = pl::random::normal({8}, pl::f64, 1);
  EXPECT_THROW_MSG(pl::jvp(dyn, {pl::Array::scalar<int32_t>(1), x}, {pl::Array(), x}), "dyn_kernel",
                   "dynamic grid bounds");
  auto pre = pl::pallas_call([](pl::Ref s, pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; },
                             pl::ShapeDtype({8}, pl::f64), {.num_scalar_prefetch = 1, .name = "pre_kernel"});
  EXPECT_THROW_MSG(pl::jvp(pre, {pl::Array::scalar<int32_t>(0), x}, {pl::Array(), x}), "pre_kernel", "scalar prefetch");
  auto ali = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.0; }, pl::ShapeDtype({8}, pl::f64),
                             {.input_output_aliases = {{0, 0}}, .name = "alias_kernel"});
  EXPECT_THROW_MSG(pl::jvp(ali, {x}, {x}), "alias_kernel", "input_output_aliases");
  auto amax = pl::pallas_call([](pl::Ref x, pl::Ref o) {
                                o[pl::all] = pl::zeros({8}, pl::f64);
                                pl::atomic_max(o, {pl::all}, x[pl::all]);
                              },
                              pl::ShapeDtype({8}, pl::f64), {.name = "amax_kernel"});
  EXPECT_THROW_MSG(pl::jvp(amax, {x}, {x}), "amax_kernel", "atomic_max");
  auto one = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({8}, pl::f64),
                             {.name = "k"});
  EXPECT_THROW_MSG(pl::jvp(one, {x}, {}), "one tangent per input");
  EXPECT_THROW_MSG(pl::jvp(one, {x}, {pl::Array::zeros({4}, pl::f64)}), "tangent 0");
}

TEST(TransformsRules, EveryPrimitiveHasAJvpAndABatchRule) {
  const auto& jvp = pallas::transforms::jvp_rules();
  const auto& batch = pallas::transforms::batch_rules();
  int n = 0;
  for (const auto* p : pallas::ir::all_primitives()) {
    EXPECT_TRUE(jvp.has(p->id) || pallas::transforms::jvp_partial().count(p->id)) << "no jvp rule: " << p->name;
    EXPECT_TRUE(batch.has(p->id) || pallas::transforms::unbatchable().count(p->id)) << "no batch rule: " << p->name;
    ++n;
  }
  for (auto& [id, why] : pallas::transforms::jvp_partial()) EXPECT_FALSE(why.empty());
  EXPECT_EQ(n, pallas::ir::kNumPrims);
}
