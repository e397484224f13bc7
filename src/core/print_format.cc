#include "src/core/print_format.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace pallas::core {

namespace {
template <class T> T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
double as_double(uint64_t s) {
  double d;
  std::memcpy(&d, &s, sizeof d);
  return d;
}
uint64_t bits(double d) {
  uint64_t s;
  std::memcpy(&s, &d, sizeof s);
  return s;
}
// 16-bit floats, exactly (both are subsets of double).
double half_to_double(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(m + 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}
double bf16_to_double(uint16_t b) {
  uint32_t f = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}
}  // namespace

uint64_t print_slot(DType t, const void* p) {
  switch (t) {
    case DType::F16: return bits(half_to_double(load<uint16_t>(p)));
    case DType::BF16: return bits(bf16_to_double(load<uint16_t>(p)));
    case DType::F8E4M3: return bits(f8e4m3_to_float(load<uint8_t>(p)));
    case DType::F8E5M2: return bits(f8e5m2_to_float(load<uint8_t>(p)));
    case DType::F32: return bits(load<float>(p));
    case DType::F64: return bits(load<double>(p));
    case DType::Bool: return load<bool>(p) ? 1 : 0;
    case DType::I8: return static_cast<uint64_t>(static_cast<int64_t>(load<int8_t>(p)));
    case DType::I16: return static_cast<uint64_t>(static_cast<int64_t>(load<int16_t>(p)));
    case DType::I32: return static_cast<uint64_t>(static_cast<int64_t>(load<int32_t>(p)));
    case DType::I64: return static_cast<uint64_t>(load<int64_t>(p));
    case DType::U8: return load<uint8_t>(p);
    case DType::U16: return load<uint16_t>(p);
    case DType::U32: return load<uint32_t>(p);
    case DType::U64: return load<uint64_t>(p);
  }
  return 0;
}

std::string format_print_value(DType t, const Shape& shape, const uint64_t* slots) {
  std::string os;
  char buf[64];
  auto one = [&](int64_t i) {
    uint64_t s = slots[i];
    if (is_float(t)) std::snprintf(buf, sizeof buf, "%g", as_double(s));
    else if (t == DType::Bool) std::snprintf(buf, sizeof buf, "%s", s ? "True" : "False");
    else if (t == DType::U64 || t == DType::U32 || t == DType::U16 || t == DType::U8)
      std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(s));
    else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(static_cast<int64_t>(s)));
    os += buf;
  };
  if (shape.empty()) {
    one(0);
    return os;
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  os += dtype_name(t);
  os += "[";
  for (size_t k = 0; k < shape.size(); ++k) os += (k ? "," : "") + std::to_string(shape[k]);
  os += "] ";
  size_t rank = shape.size();
  std::vector<int64_t> idx(rank, 0);
  os += std::string(rank, '[');
  if (n == 0) return os + std::string(rank, ']');
  for (int64_t i = 0; i < n; ++i) {
    one(i);
    size_t closed = 0;  // innermost dims that end here
    for (size_t k = rank; k-- > 0;) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
      ++closed;
    }
    os += std::string(closed, ']');
    if (i + 1 < n) os += " " + std::string(closed, '[');
  }
  return os;
}

std::string fill_print_format(const std::string& fmt, const std::vector<std::string>& vals) {
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] == '{' && i + 1 < fmt.size() && fmt[i + 1] == '}' && k < vals.size()) {
      out += vals[k++];
      ++i;
    } else {
      out += fmt[i];
    }
  }
  return out;
}

std::string check_failure_text(const ir::SourceLoc& loc, const std::string& message) {
  return loc.file ? "at " + loc.str() + ": " + message : message;
}

}  // namespace pallas::core
