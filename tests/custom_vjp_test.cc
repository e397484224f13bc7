// custom_vjp (a forward call paired with a hand-written backward) and the library's backward
// kernels (softmax, layer norm, rms norm): gradients against central finite differences in
// f64 and against plain C++ references of the analytic vjp; every error the API raises.
#include <cmath>
#include <functional>

#include <pallas/kernels.h>

#include "tests/test_util.h"
#include "tests/transforms_util.h"

namespace pl = pallas;
using tu::expect_vjp_matches_fd;
using tu::rel_err;
using tu::vec;

namespace {

pl::Array N(pl::Shape s, uint64_t seed, pl::DType t = pl::f64) { return pl::random::normal(s, t, seed); }
pl::Array from(const std::vector<double>& v, pl::Shape s, pl::DType t = pl::f64) {
  return pl::Array::from_vector(v, std::move(s)).astype(t);
}
// ---- a user's pair: y = sin(x) * w * n, with n an integer input ----
const pl::Shape kX{8, 16};

pl::Call user_fwd() {
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref w, pl::Ref n, pl::Ref y, pl::Ref r) {
        pl::Value nf = n[pl::all].astype(pl::f64);
        y[pl::all] = pl::sin(x[pl::all]) * w[pl::all] * nf;
        r[pl::all] = pl::cos(x[pl::all]) * nf;  // a residual
      },
      std::vector<pl::ShapeDtype>{{kX, pl::f64}, {kX, pl::f64}}, {.name = "user_fwd"});
}
// (x, w, n residual inputs; r; dy) -> (dx, dw)
pl::Call user_bwd() {
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref w, pl::Ref n, pl::Ref r, pl::Ref dy, pl::Ref dx, pl::Ref dw) {
        pl::Value g = dy[pl::all];
        dx[pl::all] = g * r[pl::all] * w[pl::all];
        dw[pl::all] = pl::sum(g * pl::sin(x[pl::all]) * n[pl::all].astype(pl::f64), 0);
      },
      std::vector<pl::ShapeDtype>{{kX, pl::f64}, {{16}, pl::f64}}, {.name = "user_bwd"});
}
pl::CustomVjp user_pair() { return pl::custom_vjp(user_fwd(), user_bwd(), 1, {.residual_inputs = {0, 1, 2}}); }

struct UserArgs {
  pl::Array x = pl::random::uniform(kX, pl::f64, 1, -2, 2);
  pl::Array w = pl::random::uniform({16}, pl::f64, 2, 0.5, 1.5);
  pl::Array n = pl::random::randint(kX, pl::i32, 3, -3, 4);
  std::vector<pl::Array> all() const { return {x, w, n}; }
};

}  // namespace

TEST(CustomVjp, UserPairMatchesFiniteDifferencesAndReference) {
  UserArgs a;
  pl::CustomVjp f = user_pair();
  pl::Array dy = N(kX, 4);
  expect_vjp_matches_fd(f, a.all(), {dy});

  auto [outs, pullback] = pl::vjp(f, a.all());
  ASSERT_EQ(outs.size(), 1u);  // the residual r is not an output
  EXPECT_LT(rel_err(vec(outs[0]), vec(user_fwd()(a.all())[0])), 1e-15);
  EXPECT_LT(rel_err(vec(f(a.x, a.w, a.n)), vec(outs[0])), 1e-15);  // the call form: primal outputs only
  // residuals: x, w, n handed over as they are (no copy), then r
  const auto& res = pullback.residuals();
  ASSERT_EQ(res.size(), 4u);
  EXPECT_EQ(res[0].raw_data(), a.x.raw_data());
  EXPECT_EQ(res[1].raw_data(), a.w.raw_data());
  EXPECT_EQ(res[2].raw_data(), a.n.raw_data());

  std::vector<pl::Array> g = pullback(dy);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_FALSE(g[2].defined());  // n is an integer input: no cotangent
  auto x = vec(a.x), w = vec(a.w), n = vec(a.n), d = vec(dy);
  std::vector<double> dx(x.size()), dw(16, 0.0);
  for (size_t i = 0; i < 8; ++i)
    for (size_t j = 0; j < 16; ++j) {
      size_t e = i * 16 + j;
      dx[e] = d[e] * std::cos(x[e]) * n[e] * w[j];
      dw[j] += d[e] * std::sin(x[e]) * n[e];
    }
  EXPECT_LT(rel_err(vec(g[0]), dx), 1e-14);
  EXPECT_LT(rel_err(vec(g[1]), dw), 1e-14);
  // a pullback can be called again, with other cotangents
  std::vector<pl::Array> g2 = pullback(N(kX, 5));
  EXPECT_GT(rel_err(vec(g2[0]), dx), 1e-3);
}

TEST(CustomVjp, ResidualOutputsZeroCotangentsAndIntegerOutputs) {
  // Two primal outputs, one of them integer: y = exp(x) (also bwd's residual), c = x > 0 count.
  auto fwd = pl::pallas_call(
      [](pl::Ref x, pl::Ref y, pl::Ref c) {
        y[pl::all] = pl::exp(x[pl::all]);
        c[pl::all] = (x[pl::all] > 0.0).astype(pl::i32);
      },
      std::vector<pl::ShapeDtype>{{{4, 8}, pl::f64}, {{4, 8}, pl::i32}}, {.name = "exp_fwd"});
  // (y; dy) -> dx: only floating outputs get a cotangent argument
  auto bwd = pl::pallas_call([](pl::Ref y, pl::Ref dy, pl::Ref dx) { dx[pl::all] = y[pl::all] * dy[pl::all]; },
                             pl::ShapeDtype({4, 8}, pl::f64), {.name = "exp_bwd"});
  pl::CustomVjp f = pl::custom_vjp(fwd, bwd, 2, {.residual_outputs = {0}});
  pl::Array x = N({4, 8}, 7);
  pl::Array dy = N({4, 8}, 8);
  expect_vjp_matches_fd(f, {x}, {dy, pl::zero_tangent()});
  auto [outs, pullback] = pl::vjp(f, {x});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(pullback.residuals().at(0).raw_data(), outs[0].raw_data());  // y itself, not a copy
  auto g = pullback(pl::zero_tangent(), pl::zero_tangent());
  for (double v : vec(g[0])) EXPECT_EQ(v, 0.0);
  auto xs = vec(x), d = vec(dy), gx = vec(pullback(dy, pl::zero_tangent())[0]);
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(gx[i], std::exp(xs[i]) * d[i], 1e-13 * std::exp(xs[i]) * 4);
  EXPECT_THROW_MSG(pullback(dy, pl::Array::zeros({4, 8}, pl::i32)), "custom_vjp of kernel 'exp_fwd'",
                   "with backward kernel 'exp_bwd'", "output 1 is i32[4,8], which has no cotangent",
                   "pl::zero_tangent()");
  EXPECT_THROW_MSG(f(x), "2 primal outputs", "use the vector form");
  EXPECT_EQ(f({x}).size(), 2u);
}

TEST(CustomVjp, NondiffInputsAndPrimalCall) {
  // y = x * s: s floating but declared non-differentiable.
  auto fwd = pl::pallas_call([](pl::Ref x, pl::Ref s, pl::Ref y) { y[pl::all] = x[pl::all] * s[pl::all]; },
                             pl::ShapeDtype({4, 8}, pl::f64), {.name = "scale"});
  auto bwd = pl::pallas_call([](pl::Ref s, pl::Ref dy, pl::Ref dx) { dx[pl::all] = dy[pl::all] * s[pl::all]; },
                             pl::ShapeDtype({4, 8}, pl::f64), {.name = "scale_bwd"});
  auto primal = pl::pallas_call([](pl::Ref x, pl::Ref s, pl::Ref y) { y[pl::all] = s[pl::all] * x[pl::all]; },
                                pl::ShapeDtype({4, 8}, pl::f64), {.name = "scale_primal"});
  pl::CustomVjp f = pl::custom_vjp(fwd, bwd, 1, {.residual_inputs = {1}, .nondiff_inputs = {1}, .primal = primal});
  pl::Array x = N({4, 8}, 1), s = N({4, 8}, 2), dy = N({4, 8}, 3);
  auto [outs, pullback] = pl::vjp(f, {x, s});
  auto g = pullback(dy);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_FALSE(g[1].defined());
  auto gs = vec(g[0]), ss = vec(s), d = vec(dy);
  for (size_t i = 0; i < gs.size(); ++i) EXPECT_DOUBLE_EQ(gs[i], d[i] * ss[i]);
  EXPECT_LT(rel_err(vec(f(x, s)), vec(outs[0])), 1e-15);
  // A primal call whose output differs from the forward's primal output is refused.
  auto wrong = pl::pallas_call([](pl::Ref x, pl::Ref s, pl::Ref y) { y[pl::all] = x[pl::all].astype(pl::f32); },
                               pl::ShapeDtype({4, 8}, pl::f32), {.name = "wrong_primal"});
  pl::CustomVjp h = pl::custom_vjp(fwd, bwd, 1, {.residual_inputs = {1}, .nondiff_inputs = {1}, .primal = wrong});
  EXPECT_THROW_MSG(h(x, s), "custom_vjp of kernel 'scale'", "the primal call's output 0 is f32[4,8]",
                   "the forward's is f64[4,8]");
}

TEST(CustomVjp, ErrorsNameBothCallsAndTheFix) {
  UserArgs a;
  pl::Call fwd = user_fwd(), bwd = user_bwd();
  pl::Array dy = N(kX, 4);
  // counts and indices, at custom_vjp
  EXPECT_THROW_MSG(pl::custom_vjp(fwd, bwd, 0), "custom_vjp of kernel 'user_fwd'", "with backward kernel 'user_bwd'",
                   "num_outputs is 0 but the forward call has 2 outputs", "(1 to 2)");
  EXPECT_THROW_MSG(pl::custom_vjp(fwd, bwd, 3), "num_outputs is 3");
  EXPECT_THROW_MSG(pl::custom_vjp(fwd, bwd, 1, {.residual_outputs = {1}}), "residual_outputs holds 1",
                   "the primal outputs are 0 to 0");
  EXPECT_THROW_MSG(pl::custom_vjp(fwd, bwd, 1, {.residual_inputs = {-1}}), "residual_inputs holds -1");
  EXPECT_THROW_MSG(pl::custom_vjp(fwd, pl::Call(), 1), "the backward Call is empty");
  EXPECT_THROW_MSG(pl::custom_vjp(fwd, pl::BwdFn(), 1), "the backward function is empty");
  auto dyn = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({8}, pl::f64),
                             {.grid = {pl::dynamic}, .name = "dyn"});
  EXPECT_THROW_MSG(pl::custom_vjp(dyn, bwd, 1), "kernel 'dyn'", "dynamic grid bounds", "give every axis a size");
  EXPECT_THROW_MSG(pl::custom_vjp(fwd, bwd, 1, {.primal = dyn}), "primal call kernel 'dyn'", "dynamic grid bounds");
  auto two = pl::pallas_call([](pl::Ref x, pl::Ref o, pl::Ref p) { o[pl::all] = x[pl::all]; p[pl::all] = x[pl::all]; },
                             std::vector<pl::ShapeDtype>{{kX, pl::f64}, {kX, pl::f64}}, {.name = "two"});
  EXPECT_THROW_MSG(pl::custom_vjp(fwd, bwd, 1, {.primal = two}), "the primal call kernel 'two'", "has 2 outputs",
                   "num_outputs is 1");
  // indices checked against the inputs, at vjp
  EXPECT_THROW_MSG(pl::vjp(pl::custom_vjp(fwd, bwd, 1, {.residual_inputs = {0, 3}}), a.all()),
                   "residual_inputs holds 3 but the call was given 3 inputs");
  EXPECT_THROW_MSG(pl::vjp(pl::custom_vjp(fwd, bwd, 1, {.nondiff_inputs = {5}}), a.all()), "nondiff_inputs holds 5");
  // cotangents
  auto [outs, pullback] = pl::vjp(user_pair(), a.all());
  EXPECT_THROW_MSG(pullback(dy, dy), "the pullback got 2 cotangents but the call has 1 primal output");
  EXPECT_THROW_MSG(pullback(N({8, 8}, 1)), "the cotangent of output 0 is f64[8,8] but the output is f64[8,16]");
  EXPECT_THROW_MSG(pullback(dy.astype(pl::f32)), "the cotangent of output 0 is f32[8,16]");
  // bwd that does not take what it is given: the residual inputs were forgotten
  EXPECT_THROW_MSG(pl::vjp(pl::custom_vjp(fwd, bwd, 1), a.all()).second(dy), "custom_vjp of kernel 'user_fwd'",
                   "the backward call does not take the arrays it is given",
                   "2 arrays: residual 0 (forward output 1) f64[8,16], cotangent of output 0 f64[8,16]",
                   "kernel 'user_bwd'");
  // bwd returning the wrong number of cotangents: w declared non-differentiable
  EXPECT_THROW_MSG(pl::vjp(pl::custom_vjp(fwd, bwd, 1, {.residual_inputs = {0, 1, 2}, .nondiff_inputs = {1}}), a.all())
                       .second(dy),
                   "the backward call returns 2 arrays but 1 input take a cotangent",
                   "f64[8,16] (input 0)", "integer and bool inputs get none");
  // bwd returning a cotangent of the wrong shape and of the wrong dtype
  auto bad_shape = pl::pallas_call(
      [](pl::Ref x, pl::Ref w, pl::Ref n, pl::Ref r, pl::Ref dy, pl::Ref dx, pl::Ref dw) {
        dx[pl::all] = dy[pl::all];
        dw[pl::all] = pl::sum(dy[pl::all], 1);
      },
      std::vector<pl::ShapeDtype>{{kX, pl::f64}, {{8}, pl::f64}}, {.name = "bad_shape"});
  EXPECT_THROW_MSG(pl::vjp(pl::custom_vjp(fwd, bad_shape, 1, {.residual_inputs = {0, 1, 2}}), a.all()).second(dy),
                   "with backward kernel 'bad_shape'", "the backward call's output 1 is f64[8]",
                   "the cotangent of input 1, which is f64[16]");
  auto bad_dtype = pl::pallas_call(
      [](pl::Ref x, pl::Ref w, pl::Ref n, pl::Ref r, pl::Ref dy, pl::Ref dx, pl::Ref dw) {
        dx[pl::all] = dy[pl::all].astype(pl::f32);
        dw[pl::all] = pl::sum(dy[pl::all], 0);
      },
      std::vector<pl::ShapeDtype>{{kX, pl::f32}, {{16}, pl::f64}}, {.name = "bad_dtype"});
  EXPECT_THROW_MSG(pl::vjp(pl::custom_vjp(fwd, bad_dtype, 1, {.residual_inputs = {0, 1, 2}}), a.all()).second(dy),
                   "the backward call's output 0 is f32[8,16]", "the cotangent of input 0, which is f64[8,16]");
  // a backward function is checked after it returns
  pl::BwdFn short_fn = [bwd](const std::vector<pl::Array>& r) { return std::vector<pl::Array>{bwd(r)[0]}; };
  EXPECT_THROW_MSG(pl::vjp(pl::custom_vjp(fwd, short_fn, 1, {.residual_inputs = {0, 1, 2}}, "mine"), a.all()).second(dy),
                   "with backward function 'mine'", "the backward function returns 1 array but 2 inputs take a cotangent");
  pl::BwdFn empty_fn = [bwd](const std::vector<pl::Array>& r) { return std::vector<pl::Array>{bwd(r)[0], pl::Array()}; };
  EXPECT_THROW_MSG(pl::vjp(pl::custom_vjp(fwd, empty_fn, 1, {.residual_inputs = {0, 1, 2}}), a.all()).second(dy),
                   "the backward function's result 1 is an empty Array");
  // empty objects
  EXPECT_THROW_MSG(pl::CustomVjp()(a.all()), "an empty CustomVjp");
  EXPECT_THROW_MSG(pl::VjpFn()(dy), "pl::VjpFn: empty");
  EXPECT_THROW_MSG(pl::vjp(user_pair(), {a.x, pl::Array(), a.n}), "vjp: primal 1 is an empty Array");
}

// ---- the library's backward kernels ----
namespace {

struct Rows {
  int64_t r, c;
};

std::vector<double> softmax_ref(const std::vector<double>& x, Rows s) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < s.r; ++i) {
    double m = -INFINITY, z = 0;
    for (int64_t j = 0; j < s.c; ++j) m = std::max(m, x[i * s.c + j]);
    for (int64_t j = 0; j < s.c; ++j) z += std::exp(x[i * s.c + j] - m);
    for (int64_t j = 0; j < s.c; ++j) y[i * s.c + j] = std::exp(x[i * s.c + j] - m) / z;
  }
  return y;
}
std::vector<double> softmax_vjp_ref(const std::vector<double>& x, const std::vector<double>& dy, Rows s) {
  auto y = softmax_ref(x, s);
  std::vector<double> dx(x.size());
  for (int64_t i = 0; i < s.r; ++i) {
    double t = 0;
    for (int64_t j = 0; j < s.c; ++j) t += dy[i * s.c + j] * y[i * s.c + j];
    for (int64_t j = 0; j < s.c; ++j) dx[i * s.c + j] = y[i * s.c + j] * (dy[i * s.c + j] - t);
  }
  return dx;
}

// Layer norm (centered) or rms norm: {y, dx, dw, db, mean, rstd} in f64.
struct NormRef {
  std::vector<double> y, dx, dw, db, mean, rstd;
};
NormRef norm_ref(bool centered, const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& b, const std::vector<double>& dy, Rows s, double eps) {
  NormRef r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dw.assign(static_cast<size_t>(s.c), 0.0);
  r.db.assign(static_cast<size_t>(s.c), 0.0);
  double n = static_cast<double>(s.c);
  for (int64_t i = 0; i < s.r; ++i) {
    const double* xi = &x[static_cast<size_t>(i * s.c)];
    const double* gi = &dy[static_cast<size_t>(i * s.c)];
    double mean = 0, var = 0;
    if (centered) {
      for (int64_t j = 0; j < s.c; ++j) mean += xi[j];
      mean /= n;
    }
    for (int64_t j = 0; j < s.c; ++j) var += (xi[j] - mean) * (xi[j] - mean);
    double rstd = 1 / std::sqrt(var / n + eps);
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
    double m1 = 0, m2 = 0;  // mean(dy*w*xhat), mean(dy*w)
    for (int64_t j = 0; j < s.c; ++j) {
      double xh = (xi[j] - mean) * rstd;
      r.y[i * s.c + j] = xh * w[j] + (centered ? b[j] : 0.0);
      m1 += gi[j] * w[j] * xh / n;
      m2 += gi[j] * w[j] / n;
      r.dw[j] += gi[j] * xh;
      r.db[j] += gi[j];
    }
    for (int64_t j = 0; j < s.c; ++j) {
      double xh = (xi[j] - mean) * rstd;
      r.dx[i * s.c + j] = rstd * (gi[j] * w[j] - xh * m1 - (centered ? m2 : 0.0));
    }
  }
  return r;
}

struct NormCase {
  Rows s;
  pl::kernels::RowConfig fwd;
  pl::kernels::NormBwdConfig bwd;
};
// Row counts that do not divide the blocks (edge padding in the dw/db sums), a grid whose last
// program repeats the last block (10 rows in blocks of 4 over 2 programs: 3 blocks, 2 steps),
// one-row blocks, one program, the default configuration.
std::vector<NormCase> norm_cases() {
  return {{{10, 24}, {.block_rows = 1}, {.block_rows = 4, .programs = 2}},
          {{7, 16}, {.block_rows = 3}, {.block_rows = 1, .programs = 3}},
          {{9, 40}, {.block_rows = 2}, {.block_rows = 2, .programs = 1}},
          {{33, 8}, {}, {}}};
}

}  // namespace

TEST(CustomVjpKernels, SoftmaxF64MatchesFiniteDifferencesAndReference) {
  for (auto [s, br] : std::vector<std::pair<Rows, int64_t>>{{{6, 16}, 1}, {{7, 24}, 3}, {{5, 8}, 8}}) {
    SCOPED_TRACE(std::to_string(s.r) + "x" + std::to_string(s.c) + " block_rows " + std::to_string(br));
    pl::CustomVjp f = pl::kernels::softmax_vjp(s.r, s.c, pl::f64, {.block_rows = br});
    pl::Array x = N({s.r, s.c}, 11), dy = N({s.r, s.c}, 12);
    expect_vjp_matches_fd(f, {x}, {dy});
    auto [outs, pullback] = pl::vjp(f, {x});
    EXPECT_LT(rel_err(vec(outs[0]), softmax_ref(vec(x), s)), 1e-14);
    EXPECT_EQ(pullback.residuals().at(0).raw_data(), outs[0].raw_data());  // y handed over, not copied
    EXPECT_LT(rel_err(vec(pullback(dy)[0]), softmax_vjp_ref(vec(x), vec(dy), s)), 1e-13);
  }
}

TEST(CustomVjpKernels, SoftmaxLowPrecisionAgainstF64Reference) {
  Rows s{12, 64};
  for (auto [t, tol] : std::vector<std::pair<pl::DType, double>>{{pl::f32, 1e-5}, {pl::bf16, 3e-2}, {pl::f16, 4e-3}}) {
    SCOPED_TRACE(pl::dtype_name(t));
    pl::Array x = N({s.r, s.c}, 21, t), dy = N({s.r, s.c}, 22, t);
    auto [outs, pullback] = pl::vjp(pl::kernels::softmax_vjp(s.r, s.c, t, {.block_rows = 4}), {x});
    pl::Array dx = pullback(dy)[0];
    EXPECT_EQ(dx.dtype(), t);
    // the reference from the inputs as stored, in f64
    EXPECT_LT(rel_err(vec(dx), softmax_vjp_ref(vec(x), vec(dy), s)), tol);
  }
}

TEST(CustomVjpKernels, LayerNormAndRmsNormF64MatchFiniteDifferencesAndReference) {
  for (bool centered : {true, false}) {
    for (const NormCase& c : norm_cases()) {
      Rows s = c.s;
      SCOPED_TRACE(std::string(centered ? "layer_norm " : "rms_norm ") + std::to_string(s.r) + "x" + std::to_string(s.c) +
                   " fwd block_rows " + std::to_string(c.fwd.block_rows) + " bwd block_rows " +
                   std::to_string(c.bwd.block_rows) + " programs " + std::to_string(c.bwd.programs));
      double eps = 1e-5;
      pl::Array x = N({s.r, s.c}, 31), dy = N({s.r, s.c}, 34);
      pl::Array w = pl::random::uniform({s.c}, pl::f64, 32, 0.5, 1.5), b = N({s.c}, 33);
      pl::CustomVjp f = centered ? pl::kernels::layer_norm_vjp(s.r, s.c, pl::f64, eps, c.fwd, c.bwd)
                                 : pl::kernels::rms_norm_vjp(s.r, s.c, pl::f64, eps, c.fwd, c.bwd);
      std::vector<pl::Array> in = centered ? std::vector<pl::Array>{x, w, b} : std::vector<pl::Array>{x, w};
      expect_vjp_matches_fd(f, in, {dy});
      NormRef r = norm_ref(centered, vec(x), vec(w), vec(b), vec(dy), s, eps);
      auto [outs, pullback] = pl::vjp(f, in);
      EXPECT_LT(rel_err(vec(outs[0]), r.y), 1e-13);
      EXPECT_LT(rel_err(vec(f(in)[0]), r.y), 1e-13);  // by the plain forward (the primal call)
      // residuals: x, w (the inputs themselves), then mean (layer norm), rstd
      const auto& res = pullback.residuals();
      ASSERT_EQ(res.size(), centered ? 4u : 3u);
      EXPECT_EQ(res[0].raw_data(), x.raw_data());
      if (centered) EXPECT_LT(rel_err(vec(res[2]), r.mean), 1e-13);
      EXPECT_LT(rel_err(vec(res.back()), r.rstd), 1e-13);
      auto g = pullback(dy);
      ASSERT_EQ(g.size(), in.size());
      EXPECT_LT(rel_err(vec(g[0]), r.dx), 1e-12) << "dx";
      EXPECT_LT(rel_err(vec(g[1]), r.dw), 1e-12) << "dw";
      if (centered) EXPECT_LT(rel_err(vec(g[2]), r.db), 1e-12) << "db";
    }
  }
}

TEST(CustomVjpKernels, NormsLowPrecisionAgainstF64Reference) {
  Rows s{20, 48};
  for (bool centered : {true, false})
    for (auto [t, tol] : std::vector<std::pair<pl::DType, double>>{{pl::f32, 2e-5}, {pl::bf16, 3e-2}}) {
      SCOPED_TRACE(std::string(centered ? "layer_norm " : "rms_norm ") + pl::dtype_name(t));
      double eps = 1e-5;
      pl::Array x = N({s.r, s.c}, 41, t), dy = N({s.r, s.c}, 44, t);
      pl::Array w = pl::random::uniform({s.c}, t, 42, 0.5, 1.5), b = N({s.c}, 43, t);
      pl::kernels::NormBwdConfig bc{.block_rows = 4, .programs = 3};
      pl::CustomVjp f = centered ? pl::kernels::layer_norm_vjp(s.r, s.c, t, eps, {.block_rows = 2}, bc)
                                 : pl::kernels::rms_norm_vjp(s.r, s.c, t, eps, {.block_rows = 2}, bc);
      std::vector<pl::Array> in = centered ? std::vector<pl::Array>{x, w, b} : std::vector<pl::Array>{x, w};
      auto [outs, pullback] = pl::vjp(f, in);
      auto g = pullback(dy);
      NormRef r = norm_ref(centered, vec(x), vec(w), vec(b), vec(dy), s, eps);
      EXPECT_EQ(g[0].dtype(), t);
      EXPECT_EQ(g[1].dtype(), t);
      EXPECT_LT(rel_err(vec(outs[0]), r.y), tol);
      EXPECT_LT(rel_err(vec(g[0]), r.dx), tol) << "dx";
      EXPECT_LT(rel_err(vec(g[1]), r.dw), tol) << "dw";
      if (centered) EXPECT_LT(rel_err(vec(g[2]), r.db), tol) << "db";
    }
}

// matmul's two backward matmuls (dC B^T and A^T dC, by matmul with trans_b and trans_a):
// small integers, so every product and sum is exact in bf16 and tf32 and the gradients equal
// the reference rounded once; a cotangent in f32 for bf16 inputs is converted as it is read; sizes
// whose backward reductions do not divide block_k; f64 operands (accumulated in f64).
TEST(CustomVjpKernels, MatmulBackwardMatmulsAreExact) {
  auto ints = [](pl::Shape s, uint64_t seed, pl::DType t) { return pl::random::randint(s, pl::i32, seed, -4, 5).astype(t); };
  for (auto [in, out] : std::vector<std::pair<pl::DType, pl::DType>>{
           {pl::bf16, pl::bf16}, {pl::bf16, pl::f32}, {pl::f32, pl::f32}, {pl::f64, pl::f64}}) {  // f64 accumulates in f64
    for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{64, 48, 32}, {40, 24, 64}}) {
      SCOPED_TRACE(std::string(pl::dtype_name(in)) + "->" + pl::dtype_name(out) + " " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                   std::to_string(k));
      pl::CustomVjp f = pl::kernels::matmul_vjp(m, n, k, in, out, {.block_m = 32, .block_n = 16, .block_k = 16, .compiler_params = {.num_warps = 4}});
      pl::Array a = ints({m, k}, 1, in), b = ints({k, n}, 2, in), dc = ints({m, n}, 3, out);
      auto [outs, pullback] = pl::vjp(f, {a, b});
      std::vector<pl::Array> g = pullback(dc);
      ASSERT_EQ(g.size(), 2u);
      EXPECT_EQ(g[0].shape_dtype(), a.shape_dtype());
      EXPECT_EQ(g[1].shape_dtype(), b.shape_dtype());
      auto av = vec(a), bv = vec(b), cv = vec(dc);
      std::vector<double> c(static_cast<size_t>(m * n)), da(static_cast<size_t>(m * k)), db(static_cast<size_t>(k * n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t p = 0; p < k; ++p) {
            c[i * n + j] += av[i * k + p] * bv[p * n + j];
            da[i * k + p] += cv[i * n + j] * bv[p * n + j];
            db[p * n + j] += av[i * k + p] * cv[i * n + j];
          }
      // (exact sums in f32, rounded once to the result's dtype, as both backends do)
      for (double& x : c) x = pt::round_to(x, out);
      for (double& x : da) x = pt::round_to(x, in);
      for (double& x : db) x = pt::round_to(x, in);
      EXPECT_EQ(vec(outs[0]), c);
      EXPECT_EQ(vec(g[0]), da);
      EXPECT_EQ(vec(g[1]), db);
    }
  }
}

TEST(CustomVjpKernels, BadArgumentsNameTheKernel) {
  EXPECT_THROW_MSG(pl::kernels::softmax_bwd(4, 8, pl::i32), "pl::kernels::softmax_bwd: dtype is i32");
  EXPECT_THROW_MSG(pl::kernels::layer_norm_bwd(0, 8, pl::f32), "pl::kernels::layer_norm_bwd: rows and cols must be at least 1");
  EXPECT_THROW_MSG(pl::kernels::rms_norm_bwd(4, 8, pl::f32, {.block_rows = 0}), "pl::kernels::rms_norm_bwd: block_rows is 0");
  EXPECT_THROW_MSG(pl::kernels::layer_norm_bwd(4, 8, pl::f32, {.programs = -2}), "pl::kernels::layer_norm_bwd: programs is -2");
  EXPECT_THROW_MSG(pl::kernels::rms_norm(4, 8, pl::f32, 0.0), "pl::kernels::rms_norm: eps is 0");
  EXPECT_THROW_MSG(pl::kernels::layer_norm_fwd(4, 8, pl::f32, -1.0), "pl::kernels::layer_norm_fwd: eps is -1");
  EXPECT_THROW_MSG(pl::kernels::norm_partial_sum(4, 8, pl::i32), "pl::kernels::norm_partial_sum: out_dtype is i32");
  // a pullback given a cotangent of another shape names the pair and the kernels
  pl::CustomVjp f = pl::kernels::layer_norm_vjp(4, 8, pl::f32);
  pl::Array x = N({4, 8}, 1, pl::f32), w = N({8}, 2, pl::f32), b = N({8}, 3, pl::f32);
  auto [outs, pullback] = pl::vjp(f, {x, w, b});
  EXPECT_THROW_MSG(pullback(N({4, 8}, 4)), "custom_vjp of kernel 'layer_norm_fwd'",
                   "backward function 'layer_norm_bwd + norm_partial_sum'", "the cotangent of output 0 is f64[4,8]",
                   "the output is f32[4,8]");
}
