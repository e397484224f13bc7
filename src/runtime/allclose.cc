// pl::testing::allclose (include/pallas/testing.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "pallas/testing.h"
#include "src/runtime/host_values.h"

namespace pallas::testing {

namespace {

// The worst elements listed in a report.
constexpr size_t kListed = 5;
// Digits of the listed values: enough to tell any two doubles apart.
constexpr int kExactDigits = 17;

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

AllcloseResult failed(std::string report, int64_t mismatches) {
  AllcloseResult r;
  r.report = "allclose: " + std::move(report) + "\n";
  r.mismatches = mismatches;
  return r;
}

struct Listed {
  double excess;  // how far past the tolerance (inf for NaN against a number, or inf against finite)
  int64_t k;
};

// Rows of columns, each column left-aligned to its widest cell.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) {
      if (w.size() <= c) w.push_back(0);
      w[c] = std::max(w[c], r[c].size());
    }
  std::string s;
  for (auto& r : rows) {
    std::string line = "    ";
    for (size_t c = 0; c < r.size(); ++c) line += r[c] + (c + 1 < r.size() ? std::string(w[c] - r[c].size() + 2, ' ') : "");
    s += line + "\n";
  }
  return s;
}

}  // namespace

Tolerance default_tolerance(DType t) {
  switch (t) {
    case DType::F16: return {1e-3, 1e-5};
    case DType::BF16: return {1.6e-2, 1e-5};
    case DType::F32: return {1.3e-6, 1e-5};
    case DType::F64: return {1e-7, 1e-7};
    default: return {0, 0};  // integers and bools: exact
  }
}

namespace detail {
AllcloseResult values_mismatch(const Array& actual, size_t expected_values) {
  if (!actual.defined()) return failed("actual is an empty Array (never assigned)", static_cast<int64_t>(expected_values));
  return failed("the expected values number " + std::to_string(expected_values) + " but actual " + actual.shape_dtype().str() +
                    " has " + std::to_string(actual.size()) + " elements",
                std::max<int64_t>(actual.size(), static_cast<int64_t>(expected_values)));
}
}  // namespace detail

AllcloseResult allclose(const Array& actual, const Array& expected, AllcloseOptions opts) {
  if (!actual.defined() || !expected.defined())
    return failed(std::string(actual.defined() ? "expected" : "actual") + " is an empty Array (never assigned)",
                  std::max(actual.defined() ? actual.size() : 0, expected.defined() ? expected.size() : 0));
  const std::string what = actual.shape_dtype().str();
  if (actual.shape() != expected.shape())
    return failed("shapes differ: actual is " + what + ", expected is " + expected.shape_dtype().str(),
                  std::max(actual.size(), expected.size()));
  if (opts.check_dtype && actual.dtype() != expected.dtype())
    return failed("dtypes differ: actual is " + what + ", expected is " + expected.shape_dtype().str() +
                      "; convert one (Array::astype) or pass .check_dtype = false to compare the values",
                  actual.size());
  Tolerance da = default_tolerance(actual.dtype()), de = default_tolerance(expected.dtype());
  const double rtol = opts.rtol.value_or(std::max(da.rtol, de.rtol)), atol = opts.atol.value_or(std::max(da.atol, de.atol));
  if (!(rtol >= 0) || !(atol >= 0))
    throw Error("pl::testing::allclose: rtol=" + num(rtol) + " and atol=" + num(atol) + "; tolerances must be >= 0");

  runtime::HostValues a(actual), e(expected);
  AllcloseResult r;
  int64_t worst_abs_at = -1, worst_rel_at = -1;
  std::vector<Listed> worst;  // the kListed largest excesses, the earliest element first among equals
  for (int64_t k = 0, n = actual.size(); k < n; ++k) {
    long double x = a.exact(k), y = e.exact(k);
    bool xnan = std::isnan(x), ynan = std::isnan(y);
    if (x == y || (xnan && ynan && opts.equal_nan)) continue;  // equal infinities are equal too
    double excess = INFINITY;
    if (!xnan && !ynan) {
      double diff = static_cast<double>(std::fabs(x - y));
      double rel = y != 0 ? static_cast<double>(std::fabs(x - y) / std::fabs(y)) : INFINITY;
      if (worst_abs_at < 0 || diff > r.max_abs_error) r.max_abs_error = diff, worst_abs_at = k;
      if (worst_rel_at < 0 || rel > r.max_rel_error) r.max_rel_error = rel, worst_rel_at = k;
      if (std::isfinite(diff)) {
        long double tol = atol + rtol * std::fabs(y);
        if (std::fabs(x - y) <= tol) continue;
        excess = static_cast<double>(std::fabs(x - y) - tol);
      }
    }
    ++r.mismatches;
    auto later = std::find_if(worst.begin(), worst.end(), [&](const Listed& l) { return excess > l.excess; });
    if (static_cast<size_t>(later - worst.begin()) < kListed) {
      worst.insert(later, {excess, k});
      if (worst.size() > kListed) worst.pop_back();
    }
  }

  std::string tol_text = "atol=" + num(atol) + ", rtol=" + num(rtol);
  std::string errors = "max abs error " + num(r.max_abs_error) + ", max rel error " + num(r.max_rel_error);
  if (r.mismatches == 0) {
    r.ok = true;
    r.report = "allclose: all " + std::to_string(actual.size()) + " elements of " + what + " match (" + tol_text + "); " +
               errors + "\n";
    return r;
  }
  const Shape& s = actual.shape();
  std::string where = worst_abs_at < 0 ? "" : "max abs error " + num(r.max_abs_error) + " at " + runtime::index_str(s, worst_abs_at) +
                                                  ", max rel error " + num(r.max_rel_error) + " at " +
                                                  runtime::index_str(s, worst_rel_at);
  std::vector<std::vector<std::string>> rows{{"index", "actual", "expected", "abs error"}};
  for (const Listed& l : worst) {
    double diff = static_cast<double>(std::fabs(a.exact(l.k) - e.exact(l.k)));
    rows.push_back({runtime::index_str(s, l.k), a.text(l.k, kExactDigits), e.text(l.k, kExactDigits), num(diff)});
  }
  r.report = "allclose: " + std::to_string(r.mismatches) + " of " + std::to_string(actual.size()) + " elements of " + what +
             " differ beyond atol + rtol * |expected| (" + tol_text + ")\n" + (where.empty() ? "" : "  " + where + "\n") +
             "  worst " + (worst.size() == 1 ? std::string("element") : std::to_string(worst.size()) + " elements") + ":\n" +
             table(rows);
  return r;
}

}  // namespace pallas::testing
