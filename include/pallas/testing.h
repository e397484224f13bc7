// pl::testing::allclose: compare a kernel's output with a reference, with a report a person
// can act on (NumPy's assert_allclose, torch.testing.assert_close).
//
//   auto r = pl::testing::allclose(out, expected);                 // tolerances of out's dtype
//   auto r = pl::testing::allclose(out, ref_vector, {.rtol = 1e-3, .atol = 1e-3});
//   EXPECT_TRUE(r) << r.report;                                    // in a GoogleTest
//   if (!r) { std::cerr << r.report; return 1; }                   // in a program
//
// Not included by pallas.h: a `pallas::testing` namespace would make GoogleTest's `testing::`
// ambiguous in code that says `using namespace pallas;`. Include this header where you compare.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "pallas/array.h"

namespace pallas::testing {

struct Tolerance {
  double rtol = 0;
  double atol = 0;
};
// torch.testing's defaults: f16 rtol 1e-3 atol 1e-5, bf16 1.6e-2 / 1e-5, f32 1.3e-6 / 1e-5,
// f64 1e-7 / 1e-7; integers and bools compare exactly (0 / 0).
Tolerance default_tolerance(DType t);

struct AllcloseOptions {
  // Element k matches when |actual - expected| <= atol + rtol * |expected|. Unset: the
  // default_tolerance of the compared dtype (the looser of the two when they differ).
  std::optional<double> rtol;
  std::optional<double> atol;
  bool equal_nan = true;    // NaN in both at the same position matches (as NumPy's allclose)
  bool check_dtype = true;  // different dtypes are a mismatch unless this is false
};

struct AllcloseResult {
  bool ok = false;
  // Shapes or dtypes that differ, stated plainly; otherwise how many elements differ, the
  // largest absolute and relative errors, and the worst elements with their index, actual and
  // expected values. On a match, one line with the largest errors. Ends with a newline.
  std::string report;
  int64_t mismatches = 0;      // elements outside the tolerance (all of them when shapes differ)
  double max_abs_error = 0;    // over elements that are not both NaN or both the same infinity
  double max_rel_error = 0;    // |actual - expected| / |expected| (inf where expected is 0)
  explicit operator bool() const { return ok; }
};

// Arrays of any dtypes, on any device (copied to the host); values are compared exactly as
// stored (in double, and integers as 64-bit integers).
AllcloseResult allclose(const Array& actual, const Array& expected, AllcloseOptions opts = {});

// Whether calls left to Backend::Auto can run here: false only where PALLAS_BACKEND=cuda asks
// for a GPU this machine does not have. A program run by a test driver (the tutorials under
// CTest) then exits with code 77, which CTest and automake report as skipped.
bool backend_available();

namespace detail {
AllcloseResult values_mismatch(const Array& actual, size_t expected_values);
}

// A reference computed on the host, in actual's shape (row-major). Its element type does not
// take part: tolerances default to actual's dtype and no dtype check is made.
template <class T>
AllcloseResult allclose(const Array& actual, const std::vector<T>& expected, AllcloseOptions opts = {}) {
  if (!actual.defined() || static_cast<int64_t>(expected.size()) != actual.size())
    return detail::values_mismatch(actual, expected.size());
  Tolerance d = default_tolerance(actual.dtype());
  opts.rtol = opts.rtol.value_or(d.rtol);
  opts.atol = opts.atol.value_or(d.atol);
  opts.check_dtype = false;
  return allclose(actual, Array::from_vector(expected, actual.shape()), opts);
}

}  // namespace pallas::testing
