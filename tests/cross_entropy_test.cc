// The library's cross entropy (kernels/cross_entropy.cc): per-row losses and the backward
// against a plain f64 reference on random logits of each float dtype, gradients against
// central finite differences in f64 through custom_vjp, ignored rows, targets outside the
// vocabulary (NaN, never a plausible number), vocabularies that do not divide the chunk, and
// the errors.
#include <cmath>

#include <pallas/kernels.h>

#include "tests/test_util.h"
#include "tests/transforms_util.h"

namespace pl = pallas;
using tu::expect_vjp_matches_fd;
using tu::rel_err;
using tu::vec;

namespace {

struct CeRef {
  std::vector<double> loss, lse, dx;
};
// Per-row loss, lse and dx = (softmax(x) - onehot(t)) * dloss in f64; ignored rows 0, other
// targets outside [0, V) NaN.
CeRef ce_ref(const std::vector<double>& x, const std::vector<int32_t>& t, const std::vector<double>& dloss, int64_t R, int64_t V,
             int64_t ignore = -100) {
  CeRef r;
  r.dx.assign(x.size(), 0.0);
  for (int64_t i = 0; i < R; ++i) {
    const double* xi = &x[static_cast<size_t>(i * V)];
    double m = -INFINITY, l = 0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, xi[j]);
    for (int64_t j = 0; j < V; ++j) l += std::exp(xi[j] - m);
    double lse = m + std::log(l);
    r.lse.push_back(lse);
    bool ignored = t[i] == ignore, valid = t[i] >= 0 && t[i] < V;
    r.loss.push_back(ignored ? 0.0 : valid ? lse - xi[t[i]] : NAN);
    for (int64_t j = 0; j < V; ++j)
      r.dx[i * V + j] = ignored ? 0.0 : valid ? (std::exp(xi[j] - lse) - (j == t[i] ? 1.0 : 0.0)) * dloss[i] : NAN;
  }
  return r;
}

std::vector<int32_t> targets(int64_t R, int64_t V, uint64_t seed) {
  auto u = pl::random::randint({R}, pl::i32, seed, 0, static_cast<int32_t>(V)).to_vector<int32_t>();
  return u;
}

}  // namespace

// f64: the per-row losses and lse against the reference, and the gradient against finite
// differences and the reference; vocabularies shorter than a chunk, a multiple of it and with
// a tail chunk.
TEST(CrossEntropy, F64MatchesFiniteDifferencesAndReference) {
  for (auto [R, V, bv] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{5, 24, 0}, {4, 64, 16}, {6, 100, 32}}) {
    SCOPED_TRACE(std::to_string(R) + "x" + std::to_string(V) + " block_v " + std::to_string(bv));
    pl::Array x = pl::random::normal({R, V}, pl::f64, 11);
    std::vector<int32_t> tv = targets(R, V, 12);
    pl::Array t = pl::Array::from_vector(tv, {R});
    pl::Array dloss = pl::random::normal({R}, pl::f64, 13);
    pl::CustomVjp f = pl::kernels::cross_entropy_vjp(R, V, pl::f64, {.block_v = bv});
    expect_vjp_matches_fd(f, {x, t}, {dloss});
    auto [outs, pullback] = pl::vjp(f, {x, t});
    CeRef want = ce_ref(vec(x), tv, vec(dloss), R, V);
    EXPECT_LT(rel_err(vec(outs[0]), want.loss), 1e-13);
    EXPECT_LT(rel_err(vec(pullback.residuals().at(2)), want.lse), 1e-13);  // x, t, then lse
    std::vector<pl::Array> g = pullback(dloss);
    ASSERT_EQ(g.size(), 2u);
    EXPECT_FALSE(g[1].defined());  // an integer input: no cotangent
    EXPECT_LT(rel_err(vec(g[0]), want.dx), 1e-13);
  }
}

// f32, bf16, f16 logits (computed in f32) against the f64 reference from the logits as stored;
// dx comes back in the logits' dtype.
TEST(CrossEntropy, LowPrecisionAgainstF64Reference) {
  const int64_t R = 8, V = 300;
  for (auto [t, tol] : std::vector<std::pair<pl::DType, double>>{{pl::f32, 1e-5}, {pl::bf16, 2e-2}, {pl::f16, 4e-3}}) {
    SCOPED_TRACE(pl::dtype_name(t));
    pl::Array x = pl::random::normal({R, V}, t, 21);
    std::vector<int32_t> tv = targets(R, V, 22);
    pl::Array dloss = pl::random::uniform({R}, pl::f32, 23, 0.5, 1.5);
    auto [outs, pullback] = pl::vjp(pl::kernels::cross_entropy_vjp(R, V, t, {.block_v = 128}), {x, pl::Array::from_vector(tv, {R})});
    CeRef want = ce_ref(vec(x), tv, vec(dloss), R, V);
    EXPECT_EQ(outs[0].dtype(), pl::f32);
    EXPECT_LT(rel_err(vec(outs[0]), want.loss), 1e-5);
    pl::Array dx = pullback(dloss)[0];
    EXPECT_EQ(dx.dtype(), t);
    EXPECT_LT(rel_err(vec(dx), want.dx), tol);
  }
}

// A row whose target is ignore_index: loss 0, zero gradient. A target past the vocabulary or
// negative (not the ignore_index): NaN loss and NaN gradient row; the other rows are unaffected.
TEST(CrossEntropy, IgnoredRowsAndTargetsOutsideTheVocabulary) {
  const int64_t R = 5, V = 40;
  pl::Array x = pl::random::normal({R, V}, pl::f32, 31);
  std::vector<int32_t> tv = {3, -100, 40, -7, 39};
  pl::Array dloss = pl::Array::full({R}, 1.0, pl::f32);
  auto [outs, pullback] = pl::vjp(pl::kernels::cross_entropy_vjp(R, V, pl::f32, {.block_v = 16}), {x, pl::Array::from_vector(tv, {R})});
  CeRef want = ce_ref(vec(x), tv, vec(dloss), R, V);
  auto loss = vec(outs[0]);
  EXPECT_NEAR(loss[0], want.loss[0], 1e-5);
  EXPECT_EQ(loss[1], 0.0);
  EXPECT_TRUE(std::isnan(loss[2]));
  EXPECT_TRUE(std::isnan(loss[3]));
  EXPECT_NEAR(loss[4], want.loss[4], 1e-5);
  auto dx = vec(pullback(dloss)[0]);
  for (int64_t j = 0; j < V; ++j) {
    EXPECT_NEAR(dx[0 * V + j], want.dx[0 * V + j], 1e-6);
    EXPECT_EQ(dx[1 * V + j], 0.0);
    EXPECT_TRUE(std::isnan(dx[2 * V + j]));
    EXPECT_TRUE(std::isnan(dx[3 * V + j]));
    EXPECT_NEAR(dx[4 * V + j], want.dx[4 * V + j], 1e-6);
  }
  // another ignore_index
  auto [o2, p2] = pl::vjp(pl::kernels::cross_entropy_vjp(R, V, pl::f32, {.ignore_index = -7}), {x, pl::Array::from_vector(tv, {R})});
  EXPECT_EQ(vec(o2[0])[3], 0.0);
  EXPECT_TRUE(std::isnan(vec(o2[0])[1]));  // -100 is now outside the vocabulary
}

TEST(CrossEntropy, BadArgumentsNameTheKernel) {
  EXPECT_THROW_MSG(pl::kernels::cross_entropy_fwd(4, 8, pl::i32), "pl::kernels::cross_entropy_fwd: dtype is i32");
  EXPECT_THROW_MSG(pl::kernels::cross_entropy_bwd(0, 8, pl::f32), "pl::kernels::cross_entropy_bwd: rows and vocab must be at least 1");
  EXPECT_THROW_MSG(pl::kernels::cross_entropy_fwd(4, 8, pl::f32, {.block_v = -1}), "pl::kernels::cross_entropy_fwd: block_v is -1");
  EXPECT_THROW_MSG(pl::kernels::cross_entropy_vjp(4, 8, pl::f32, {.ignore_index = 3}),
                   "pl::kernels::cross_entropy_fwd: ignore_index 3 is a class of the vocabulary [0, 8)");
  // targets of another dtype: the call names the kernel, the input and what it takes
  pl::CustomVjp f = pl::kernels::cross_entropy_vjp(4, 8, pl::f32);
  EXPECT_THROW_MSG(pl::vjp(f, {pl::random::normal({4, 8}, pl::f32, 1), pl::random::normal({4}, pl::f32, 2)}), "kernel 'cross_entropy_fwd'",
                   "input 1 is f32[4]", "i32[4]");
}
