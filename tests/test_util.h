// Shared helpers of the test suite: random inputs with edge values, host references in
// double precision, comparison by relative error norm, and error-message assertions.
//
// Tolerances (tol_for): the interpreter computes 16-bit floats in f32 and rounds once per
// op, f32 in f32 and f64 in f64; the references are computed in double and rounded to the
// output dtype, so an element may differ by the op's own error plus one rounding of the
// output format. Per element that is about 1 ulp of the format (2^-11 f16, 2^-8 bf16) or a
// few ulps of libm's float/double functions (2^-24 / 2^-53 each); the norm-wise bound is
// the same order, and the tolerances below give each a small factor of margin.
#pragma once
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <pallas/pallas.h>

namespace pt {
namespace pl = pallas;
using ::testing::HasSubstr;

inline const std::vector<pl::DType>& float_dtypes() {
  static const std::vector<pl::DType> v{pl::f16, pl::bf16, pl::f32, pl::f64};
  return v;
}
inline const std::vector<pl::DType>& int_dtypes() {
  static const std::vector<pl::DType> v{pl::i8, pl::i16, pl::i32, pl::i64, pl::u8, pl::u16, pl::u32, pl::u64};
  return v;
}

// Relative error tolerance for a result of dtype t (see the comment at the top).
inline double tol_for(pl::DType t) {
  switch (t) {
    case pl::DType::F16: return 2e-3;   // 2 * 2^-10
    case pl::DType::BF16: return 1.6e-2;  // 2 * 2^-7
    case pl::DType::F32: return 1e-6;   // ~8 ulps of 2^-24 for float libm
    case pl::DType::F64: return 1e-14;  // ~45 ulps of 2^-53
    case pl::DType::F8E4M3: return 0.125;  // 2 * 2^-4
    case pl::DType::F8E5M2: return 0.25;   // 2 * 2^-3
    default: return 0.0;
  }
}

// ---- host data ----
inline std::vector<double> uniform(size_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 g(seed * 7919 + 17);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
inline std::vector<double> normal(size_t n, uint64_t seed, double mean = 0.0, double stddev = 1.0) {
  std::mt19937_64 g(seed * 104729 + 3);
  std::normal_distribution<double> d(mean, stddev);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Largest finite value and smallest positive normal of a float dtype.
inline double float_max(pl::DType t) {
  switch (t) {
    case pl::DType::F16: return 65504.0;
    case pl::DType::BF16: return 3.3895313892515355e38;
    case pl::DType::F32: return std::numeric_limits<float>::max();
    case pl::DType::F8E4M3: return 448.0;
    case pl::DType::F8E5M2: return 57344.0;
    default: return std::numeric_limits<double>::max();
  }
}
inline double float_min_normal(pl::DType t) {
  switch (t) {
    case pl::DType::F16: return std::ldexp(1.0, -14);
    case pl::DType::BF16: return std::ldexp(1.0, -126);
    case pl::DType::F32: return std::ldexp(1.0, -126);
    case pl::DType::F8E4M3: return std::ldexp(1.0, -6);
    case pl::DType::F8E5M2: return std::ldexp(1.0, -14);
    default: return std::numeric_limits<double>::min();
  }
}
inline int float_precision(pl::DType t) {  // significand bits, implicit bit included
  switch (t) {
    case pl::DType::F16: return 11;
    case pl::DType::BF16: return 8;
    case pl::DType::F32: return 24;
    case pl::DType::F8E4M3: return 4;
    case pl::DType::F8E5M2: return 3;
    default: return 53;
  }
}

// Round a double to the nearest value of float dtype t, ties to even (an independent
// reference for the library's conversions; subnormals and overflow to inf included).
inline double round_to(double x, pl::DType t) {
  // the 8-bit floats saturate: +-inf and values past the largest finite one become +-max
  if (pl::is_float8(t) && std::isinf(x)) return std::copysign(float_max(t), x);
  if (t == pl::DType::F64 || std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  int p = float_precision(t);
  int emin = std::ilogb(float_min_normal(t));
  int e = std::max(std::ilogb(x), emin);
  double scale = std::ldexp(1.0, e - (p - 1));
  double r = std::nearbyint(x / scale) * scale;  // default rounding mode: half to even
  double mx = float_max(t);
  if (std::fabs(r) > mx) return std::copysign(pl::is_float8(t) ? mx : std::numeric_limits<double>::infinity(), x);
  if (r == 0.0) return std::copysign(0.0, x);
  return r;
}

// Edge values of a float dtype: NaN, infinities, signed zeros, extremes, subnormal.
inline std::vector<double> float_edges(pl::DType t) {
  double inf = std::numeric_limits<double>::infinity();
  return {std::numeric_limits<double>::quiet_NaN(), inf, -inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5,
          float_max(t), -float_max(t), float_min_normal(t), float_min_normal(t) / 4, 3.0, 1e-3};
}

// Values with edges first, then random ones, converted to (and rounded in) dtype t.
inline std::vector<double> with_edges(std::vector<double> random, pl::DType t, bool edges = true) {
  std::vector<double> v;
  if (edges) v = float_edges(t);
  for (size_t k = 0; v.size() < random.size(); ++k) v.push_back(random[k]);
  v.resize(random.size());
  for (auto& x : v) x = round_to(x, t);
  return v;
}

// An array of dtype t from doubles (converted by the library: ints saturate/truncate).
inline pl::Array make_array(const std::vector<double>& v, pl::Shape shape, pl::DType t) {
  return pl::Array::from_vector(v, std::move(shape)).astype(t);
}
inline std::vector<double> to_doubles(const pl::Array& a) { return a.to_vector<double>(); }
// Whole numbers in [-8, 8) of dtype t: sums and products of a few stay exact in any order, so
// kernels that reduce in another order on each backend still agree bit for bit.
inline pl::Array small_ints(pl::Shape shape, uint64_t seed, pl::DType t = pl::f32) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  auto r = uniform(static_cast<size_t>(n), seed, -8, 8);
  for (double& x : r) x = std::floor(x);
  return make_array(r, std::move(shape), t);
}

template <class T>
std::vector<T> random_ints(size_t n, uint64_t seed, bool edges = true) {
  std::mt19937_64 g(seed * 31337 + 5);
  std::vector<T> v;
  if (edges) {
    using L = std::numeric_limits<T>;
    for (T e : {L::min(), L::max(), T(0), T(1), T(L::min() + 1), T(L::max() - 1), T(-1), T(2)}) v.push_back(e);
  }
  while (v.size() < n) {
    uint64_t r = g();
    T x;
    std::memcpy(&x, &r, sizeof(T));
    // mix small magnitudes in as well, so that shifts, divisions and wraps see both
    if (v.size() % 3 == 0) x = static_cast<T>(static_cast<int64_t>(r % 37) - 18);
    v.push_back(x);
  }
  v.resize(n);
  return v;
}

// ---- comparisons ----
// Compares got with want (both already in the output dtype): NaN where want is NaN, the
// same infinities, the same sign of exact zeros (when check_zero_sign), and
// ||got - want|| / ||want|| <= tol over the finite entries.
inline ::testing::AssertionResult close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                                        bool check_zero_sign = true) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    if (std::isnan(w) || std::isnan(g)) {
      if (std::isnan(w) != std::isnan(g))
        return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", want " << w;
      continue;
    }
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w) return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", want " << w;
      continue;
    }
    if (check_zero_sign && g == 0 && w == 0 && std::signbit(g) != std::signbit(w))
      return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", want " << w << " (sign of zero)";
    num += (g - w) * (g - w);
    den += w * w;
  }
  double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (!(err <= tol)) {
    size_t worst = 0;
    double wd = -1;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::isfinite(want[i]) && std::fabs(got[i] - want[i]) > wd) wd = std::fabs(got[i] - want[i]), worst = i;
    return ::testing::AssertionFailure() << "relative error " << err << " > " << tol << "; worst element " << worst
                                         << ": got " << got[worst] << ", want " << want[worst];
  }
  return ::testing::AssertionSuccess();
}

template <class T>
::testing::AssertionResult equal(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      using P = std::conditional_t<std::is_floating_point_v<T>, double,
                                   std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>>;
      return ::testing::AssertionFailure() << "element " << i << ": got " << static_cast<P>(got[i]) << ", want "
                                           << static_cast<P>(want[i]);
    }
  return ::testing::AssertionSuccess();
}

// ---- errors ----
// Runs f, which must throw pl::Error whose message contains every one of parts.
inline ::testing::AssertionResult throws_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const pl::Error& e) {
    std::string m = e.what();
    for (auto& p : parts)
      if (m.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << m;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-pl::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// The message of the pl::Error f throws ("" when it does not throw one).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const pl::Error& e) {
    return e.what();
  }
  return "";
}

// For tests of what out-of-bounds accesses do (poison reads, dropped writes, padded edge
// blocks): the interpreter's out-of-bounds check, on under PALLAS_INTERPRET_CHECKS, would
// report those accesses instead.
inline const pl::InterpretParams kNoBoundsCheck{.detect_out_of_bounds = false};

// ---- running one kernel ----
// A whole-array call in interpret mode.
template <class K>
pl::Call interp_call(K kernel, std::vector<pl::ShapeDtype> outs, std::string name = "test",
                     pl::InterpretParams checks = {}) {
  return pl::pallas_call(std::move(kernel), std::move(outs), pl::CallOptions{.name = std::move(name), .interpret_params = checks});
}

// o = f(x) over a [rows, cols] array in row blocks (grid of 2), so blocks are views.
template <class F>
pl::Array run_unary(F f, const pl::Array& x, pl::DType out) {
  int64_t rows = x.shape()[0], cols = x.shape()[1];
  auto call = pl::pallas_call(
      [f](pl::Ref xr, pl::Ref o) {
        pl::Value v = xr[pl::all];
        o[pl::all] = f(v);
      },
      pl::ShapeDtype(x.shape(), out),
      {.grid = {2},
       .in_specs = {pl::BlockSpec({rows / 2, cols}, [](pl::Value i) { return pl::idx(i, 0); })},
       .out_specs = {pl::BlockSpec({rows / 2, cols}, [](pl::Value i) { return pl::idx(i, 0); })},
       .name = "unary"});
  return call(x);
}

template <class F>
pl::Array run_binary(F f, const pl::Array& x, const pl::Array& y, pl::DType out) {
  int64_t rows = x.shape()[0], cols = x.shape()[1];
  auto spec = [&] { return pl::BlockSpec({rows / 2, cols}, [](pl::Value i) { return pl::idx(i, 0); }); };
  auto call = pl::pallas_call(
      [f](pl::Ref xr, pl::Ref yr, pl::Ref o) {
        pl::Value a = xr[pl::all], b = yr[pl::all];
        o[pl::all] = f(a, b);
      },
      pl::ShapeDtype(x.shape(), out),
      {.grid = {2}, .in_specs = {spec(), spec()}, .out_specs = {spec()}, .name = "binary"});
  return call(x, y);
}

}  // namespace pt
