// Helpers shared by the transformation tests.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <pallas/pallas.h>
#include <string>
#include <vector>

namespace tu {
namespace pl = pallas;

inline std::vector<double> vec(const pl::Array& a) { return a.to_vector<double>(); }

inline pl::Array axpy(const pl::Array& x, double e, const pl::Array& t) {
  auto xv = vec(x), tv = vec(t);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] += e * tv[i];
  return pl::Array::from_vector(xv, x.shape()).astype(x.dtype());
}

inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// Central finite differences of call along tangents (empty Arrays: zero), per output.
inline std::vector<std::vector<double>> fd(const pl::Call& call, const std::vector<pl::Array>& x,
                                           const std::vector<pl::Array>& t, double eps = 1e-6) {
  std::vector<pl::Array> xp, xm;
  for (size_t k = 0; k < x.size(); ++k) {
    xp.push_back(t[k].defined() ? axpy(x[k], eps, t[k]) : x[k]);
    xm.push_back(t[k].defined() ? axpy(x[k], -eps, t[k]) : x[k]);
  }
  auto op = call(xp), om = call(xm);
  std::vector<std::vector<double>> r;
  for (size_t o = 0; o < op.size(); ++o) {
    auto a = vec(op[o]), b = vec(om[o]);
    for (size_t i = 0; i < a.size(); ++i) a[i] = (a[i] - b[i]) / (2 * eps);
    r.push_back(a);
  }
  return r;
}

// jvp of call matches finite differences (and its outputs match the plain call).
inline void expect_jvp_matches_fd(const pl::Call& call, const std::vector<pl::Array>& x,
                                  const std::vector<pl::Array>& t, double tol = 1e-6, double eps = 1e-6) {
  auto [outs, tans] = pl::jvp(call, x, t);
  auto plain = call(x);
  auto want = fd(call, x, t, eps);
  ASSERT_EQ(outs.size(), plain.size());
  ASSERT_EQ(tans.size(), plain.size());
  for (size_t o = 0; o < outs.size(); ++o) {
    EXPECT_LT(rel_err(vec(outs[o]), vec(plain[o])), 1e-12) << "output " << o;
    double norm = 0;
    for (double v : want[o]) norm += v * v;
    if (norm == 0) {
      for (double v : vec(tans[o])) EXPECT_NEAR(v, 0.0, 1e-9) << "output " << o;
    } else {
      EXPECT_LT(rel_err(vec(tans[o]), want[o]), tol) << "output tangent " << o;
    }
  }
}

inline double vdot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// For every input k with a cotangent: <grad_k, v> equals sum_o <ct_o, d out_o along v> by
// central differences of the primal function f(...), for a random direction v (f64 normal,
// seed 1000 + k) on input k alone. (custom_vjp_test.cc, attention_vjp_test.cc)
inline void expect_vjp_matches_fd(const pl::CustomVjp& f, const std::vector<pl::Array>& x,
                                  const std::vector<pl::Array>& ct, double tol = 1e-6, double eps = 1e-6) {
  auto [outs, pullback] = pl::vjp(f, x);
  std::vector<pl::Array> grads = pullback(ct);
  ASSERT_EQ(grads.size(), x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    if (!grads[k].defined()) continue;
    SCOPED_TRACE("input " + std::to_string(k));
    ASSERT_EQ(grads[k].shape_dtype(), x[k].shape_dtype());
    pl::Array v = pl::random::normal(x[k].shape(), pl::f64, 1000 + k);
    std::vector<pl::Array> xp = x, xm = x;
    xp[k] = axpy(x[k], eps, v);
    xm[k] = axpy(x[k], -eps, v);
    auto op = f(xp), om = f(xm);
    double want = 0;
    for (size_t o = 0; o < op.size(); ++o) {
      if (!ct[o].defined()) continue;
      auto a = vec(op[o]), b = vec(om[o]);
      for (size_t i = 0; i < a.size(); ++i) a[i] = (a[i] - b[i]) / (2 * eps);
      want += vdot(vec(ct[o]), a);
    }
    double got = vdot(vec(grads[k]), vec(v));
    EXPECT_NEAR(got, want, tol * std::max(1.0, std::fabs(want))) << "directional derivative of input " << k;
  }
}

inline pl::BlockSpec rows(int64_t br, int64_t cols) {
  return pl::BlockSpec({br, cols}, [](pl::Value i) { return pl::idx(i, 0); });
}

inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

#define EXPECT_THROW_MSG(stmt, ...)                                                  \
  do {                                                                               \
    bool thrown_ = false;                                                            \
    try {                                                                            \
      stmt;                                                                          \
    } catch (const pl::Error& e_) {                                                  \
      thrown_ = true;                                                                \
      for (const char* s_ : {__VA_ARGS__})                                           \
        EXPECT_TRUE(tu::contains(e_.what(), s_)) << "message: " << e_.what() << "\nmissing: " << s_; \
    }                                                                                \
    EXPECT_TRUE(thrown_) << "expected a pl::Error";                                  \
  } while (0)

}  // namespace tu
