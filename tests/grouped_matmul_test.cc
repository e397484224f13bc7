// The library's grouped matmul for mixture-of-experts (kernels/grouped_matmul.cc): the forward
// (and with w transposed) and the weights' gradient against a plain f64 reference for every
// float dtype, with empty groups, groups that straddle row blocks, rows after the last group;
// the vjp in f64 against finite differences; and the errors (bad shapes and blocks at
// construction, negative sizes and sizes past the rows under pl::checkify).
#include <cmath>

#include <pallas/kernels.h>

#include "tests/test_util.h"
#include "tests/transforms_util.h"

namespace pl = pallas;
using tu::expect_vjp_matches_fd;
using tu::rel_err;
using tu::vec;

namespace {

// out[r] = x[r] · w[g(r)] (w [G, K, N], or [G, N, K] when tw), zeros after the last group.
std::vector<double> gmm_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<int32_t>& sizes, int64_t M,
                            int64_t K, int64_t N, bool tw = false) {
  std::vector<double> o(static_cast<size_t>(M * N), 0.0);
  int64_t r = 0;
  for (size_t g = 0; g < sizes.size(); ++g)
    for (int64_t i = 0; i < sizes[g] && r < M; ++i, ++r)
      for (int64_t n = 0; n < N; ++n) {
        double a = 0;
        for (int64_t k = 0; k < K; ++k)
          a += x[r * K + k] * w[static_cast<int64_t>(g) * K * N + (tw ? n * K + k : k * N + n)];
        o[r * N + n] = a;
      }
  return o;
}

// dw[g] = x[rows of g]^T · dy[rows of g].
std::vector<double> dw_ref(const std::vector<double>& x, const std::vector<double>& dy, const std::vector<int32_t>& sizes, int64_t M,
                           int64_t K, int64_t N) {
  std::vector<double> dw(sizes.size() * static_cast<size_t>(K * N), 0.0);
  int64_t r = 0;
  for (size_t g = 0; g < sizes.size(); ++g)
    for (int64_t i = 0; i < sizes[g] && r < M; ++i, ++r)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) dw[g * K * N + k * N + n] += x[r * K + k] * dy[r * N + n];
  return dw;
}

double tolerance(pl::DType t) { return t == pl::f64 ? 1e-12 : t == pl::f32 ? 2e-3 : t == pl::bf16 ? 2e-2 : 5e-3; }

pl::Array sizes_array(const std::vector<int32_t>& s) { return pl::Array::from_vector(s, {static_cast<int64_t>(s.size())}); }

}  // namespace

TEST(GroupedMatmul, AgainstReferenceEveryDtype) {
  const int64_t M = 96, K = 64, N = 48, G = 5;
  // an empty group, groups inside a 32-row block and across several, 7 rows after the last
  std::vector<int32_t> sizes = {20, 0, 45, 3, 21};
  for (pl::DType t : {pl::f32, pl::bf16, pl::f16, pl::f64}) {
    for (bool tw : {false, true}) {
      SCOPED_TRACE(std::string(pl::dtype_name(t)) + (tw ? " w transposed" : ""));
      pl::Array x = pl::random::normal({M, K}, t, 1);
      pl::Array w = pl::random::normal(tw ? pl::Shape{G, N, K} : pl::Shape{G, K, N}, t, 2);
      pl::Call f = pl::kernels::grouped_matmul(M, K, N, G, t, t, {.block_m = 32, .block_n = 16, .block_k = 32, .trans_rhs = tw});
      pl::Array o = f({sizes_array(sizes), x, w})[0];
      EXPECT_EQ(o.dtype(), t);
      auto got = vec(o), want = gmm_ref(vec(x), vec(w), sizes, M, K, N, tw);
      EXPECT_LT(rel_err(got, want), tolerance(t));
      for (int64_t r = 89; r < M; ++r)
        for (int64_t n = 0; n < N; ++n) ASSERT_EQ(got[r * N + n], 0.0) << "row " << r << " is after the last group";
    }
  }
}

TEST(GroupedMatmul, WeightGradientAgainstReference) {
  const int64_t M = 64, K = 32, N = 48, G = 4;
  std::vector<int32_t> sizes = {0, 33, 17, 10};  // an empty group first; 4 rows after the last
  for (pl::DType t : {pl::f32, pl::bf16, pl::f64}) {
    SCOPED_TRACE(pl::dtype_name(t));
    pl::Array x = pl::random::normal({M, K}, t, 3), dy = pl::random::normal({M, N}, t, 4);
    pl::Call f = pl::kernels::grouped_matmul_dw(M, K, N, G, t, t, {.block_m = 16, .block_n = 16, .block_k = 16});
    pl::Array dw = f({sizes_array(sizes), x, dy})[0];
    EXPECT_EQ(dw.shape(), (pl::Shape{G, K, N}));
    auto got = vec(dw), want = dw_ref(vec(x), vec(dy), sizes, M, K, N);
    EXPECT_LT(rel_err(got, want), tolerance(t));
    for (int64_t i = 0; i < K * N; ++i) ASSERT_EQ(got[i], 0.0) << "the empty group's gradient";
  }
}

TEST(GroupedMatmul, VjpF64MatchesFiniteDifferencesAndReference) {
  const int64_t M = 32, K = 16, N = 24, G = 3;
  std::vector<int32_t> sizes = {9, 0, 19};
  pl::Array x = pl::random::normal({M, K}, pl::f64, 5), w = pl::random::normal({G, K, N}, pl::f64, 6);
  pl::Array dy = pl::random::normal({M, N}, pl::f64, 7);
  pl::CustomVjp f = pl::kernels::grouped_matmul_vjp(M, K, N, G, pl::f64, pl::f64, {.block_m = 8, .block_n = 8, .block_k = 8});
  expect_vjp_matches_fd(f, {sizes_array(sizes), x, w}, {dy});
  auto [outs, pullback] = pl::vjp(f, {sizes_array(sizes), x, w});
  EXPECT_LT(rel_err(vec(outs[0]), gmm_ref(vec(x), vec(w), sizes, M, K, N)), 1e-13);
  std::vector<pl::Array> g = pullback(dy);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_FALSE(g[0].defined());  // the sizes: integers
  EXPECT_LT(rel_err(vec(g[2]), dw_ref(vec(x), vec(dy), sizes, M, K, N)), 1e-13);
  // dx[r] = dy[r] · w[g(r)]^T
  std::vector<double> wt(static_cast<size_t>(G * N * K));
  auto wv = vec(w);
  for (int64_t gg = 0; gg < G; ++gg)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) wt[(gg * N + n) * K + k] = wv[(gg * K + k) * N + n];
  EXPECT_LT(rel_err(vec(g[1]), gmm_ref(vec(dy), wt, sizes, M, N, K)), 1e-13);
}

TEST(GroupedMatmul, BadSizesAreReportedUnderCheckify) {
  const int64_t M = 32, K = 16, N = 16, G = 3;
  pl::Array x = pl::random::normal({M, K}, pl::f32, 8), w = pl::random::normal({G, K, N}, pl::f32, 9);
  pl::Call f = pl::kernels::grouped_matmul(M, K, N, G, pl::f32, pl::f32, {.block_m = 16, .block_n = 16, .block_k = 16});
  auto neg = pl::checkify(f)({sizes_array({4, -2, 5}), x, w});
  ASSERT_FALSE(neg.error.ok());
  EXPECT_NE(neg.error.message().find("grouped_matmul: group_sizes[1] is -2; a group size must be at least 0"), std::string::npos)
      << neg.error.message();
  auto past = pl::checkify(f)({sizes_array({20, 10, 5}), x, w});
  ASSERT_FALSE(past.error.ok());
  EXPECT_NE(past.error.message().find("the group sizes sum to 35, past the 32 rows of x"), std::string::npos) << past.error.message();
  // without checkify: a negative size counts as 0, and the rows end at M
  auto clamped = vec(f({sizes_array({20, 10, 5}), x, w})[0]);
  EXPECT_LT(rel_err(clamped, gmm_ref(vec(x), vec(w), {20, 10, 2}, M, K, N)), 2e-3);
  auto as_zero = vec(f({sizes_array({4, -2, 5}), x, w})[0]);
  EXPECT_LT(rel_err(as_zero, gmm_ref(vec(x), vec(w), {4, 0, 5}, M, K, N)), 2e-3);
  pl::Call dwf = pl::kernels::grouped_matmul_dw(M, K, N, G, pl::f32, pl::f32, {.block_m = 16, .block_n = 16, .block_k = 16});
  auto dneg = pl::checkify(dwf)({sizes_array({4, -2, 5}), x, pl::random::normal({M, N}, pl::f32, 10)});
  ASSERT_FALSE(dneg.error.ok());
  EXPECT_NE(dneg.error.message().find("grouped_matmul_dw: group_sizes[1] is -2"), std::string::npos) << dneg.error.message();
}

TEST(GroupedMatmul, BadArgumentsNameTheKernel) {
  EXPECT_THROW_MSG(pl::kernels::grouped_matmul(0, 16, 16, 2, pl::f32, pl::f32), "pl::kernels::grouped_matmul: m, k, n and groups must be positive");
  EXPECT_THROW_MSG(pl::kernels::grouped_matmul(32, 16, 16, 2, pl::i32, pl::f32), "pl::kernels::grouped_matmul: dtypes are i32 -> f32");
  EXPECT_THROW_MSG(pl::kernels::grouped_matmul(48, 16, 16, 2, pl::f32, pl::f32, {.block_m = 32}), "m=48 is not a multiple of block_m=32");
  EXPECT_THROW_MSG(pl::kernels::grouped_matmul_dw(32, 24, 16, 2, pl::f32, pl::f32, {.block_k = 16}),
                   "pl::kernels::grouped_matmul_dw: k=24 is not a multiple of block_k=16");
  EXPECT_THROW_MSG(pl::kernels::grouped_matmul_vjp(32, 16, 16, 2, pl::f32, pl::f32, {.trans_rhs = true}), "trans_rhs is set");
  // weights of another group count: the call names the kernel and the input
  pl::CustomVjp f = pl::kernels::grouped_matmul_vjp(32, 16, 16, 2, pl::f32, pl::f32);
  EXPECT_THROW_MSG(pl::vjp(f, {sizes_array({16, 16}), pl::random::normal({32, 16}, pl::f32, 1), pl::random::normal({3, 16, 16}, pl::f32, 2)}),
                   "grouped_matmul");
}
