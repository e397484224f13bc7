#include "src/runtime/host_values.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pallas::runtime {

HostValues::HostValues(const Array& a) : dtype_(a.dtype()) {
  if (is_float(dtype_)) floats_ = a.to_vector<double>();
  else if (is_unsigned_int(dtype_)) unsigned_ = a.to_vector<uint64_t>();
  else signed_ = a.to_vector<int64_t>();  // signed integers and bools
}

long double HostValues::exact(int64_t k) const {
  size_t i = static_cast<size_t>(k);
  if (is_float(dtype_)) return floats_[i];
  if (is_unsigned_int(dtype_)) return static_cast<long double>(unsigned_[i]);
  return static_cast<long double>(signed_[i]);
}

double HostValues::value(int64_t k) const { return static_cast<double>(exact(k)); }

std::string HostValues::text(int64_t k, int max_digits) const {
  size_t i = static_cast<size_t>(k);
  if (is_float(dtype_)) return format_float(floats_[i], dtype_, max_digits);
  if (dtype_ == DType::Bool) return signed_[i] ? "True" : "False";
  if (is_unsigned_int(dtype_)) return std::to_string(unsigned_[i]);
  return std::to_string(signed_[i]);
}

namespace {
// v rounded to dtype t and back: what a printed digit string must reproduce.
double round_to(double v, DType t) {
  double out = 0;
  switch (t) {
    case DType::F64: return v;
    case DType::F32: return static_cast<double>(static_cast<float>(v));
    default: {
      uint16_t bits = 0;  // f16 or bf16
      convert_elements(DType::F64, &v, t, &bits, 1);
      convert_elements(t, &bits, DType::F64, &out, 1);
      return out;
    }
  }
}
}  // namespace

std::string format_float(double v, DType t, int max_digits) {
  max_digits = std::clamp(max_digits, 1, 17);  // 17 digits tell any two doubles apart
  char buf[40];
  if (!std::isfinite(v)) {
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  int p = 1;
  for (; p < max_digits; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (round_to(std::strtod(buf, nullptr), t) == v) break;
  }
  // %g goes to an exponent when the exponent reaches the precision: 10 at one digit is
  // "1e+01". Allowing more digits, within the limit, keeps it plain ("10"), the same value.
  for (int q = p; q <= max_digits; ++q) {
    std::snprintf(buf, sizeof buf, "%.*g", q, v);
    if (!std::strchr(buf, 'e')) return buf;
  }
  std::snprintf(buf, sizeof buf, "%.*g", p, v);
  return buf;
}

std::string index_str(const Shape& s, int64_t k) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = s[d] ? k % s[d] : 0;
    k = s[d] ? k / s[d] : 0;
  }
  std::string r = "[";
  for (size_t d = 0; d < idx.size(); ++d) r += (d ? ", " : "") + std::to_string(idx[d]);
  return r + "]";
}

}  // namespace pallas::runtime
