// An Array's elements read onto the host exactly, for printing (Array::str) and comparing
// (pl::testing::allclose): floats as double (every dtype's values are doubles), signed
// integers and bools as int64, unsigned integers as uint64 — a double would round 64-bit
// integers above 2^53.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "pallas/array.h"

namespace pallas::runtime {

class HostValues {
 public:
  explicit HostValues(const Array& a);
  DType dtype() const { return dtype_; }
  // Exact for every dtype (long double holds every int64 and uint64).
  long double exact(int64_t k) const;
  double value(int64_t k) const;
  // The element as text: integers in decimal, bools True / False, floats by format_float.
  std::string text(int64_t k, int max_digits) const;

 private:
  DType dtype_;
  std::vector<double> floats_;
  std::vector<int64_t> signed_;
  std::vector<uint64_t> unsigned_;
};

// The shortest %g text (at most max_digits significant digits) that reads back as the same
// value of dtype t, so a bf16 0.1 prints "0.1" rather than its double expansion 0.100098.
std::string format_float(double v, DType t, int max_digits);

// "[2, 7]": the multi-index of flat (row-major) element k of shape s.
std::string index_str(const Shape& s, int64_t k);

}  // namespace pallas::runtime
