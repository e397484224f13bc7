// Dtype properties, JAX's promotion lattice, 16-bit float conversions.
#include <array>
#include <cmath>
#include <limits>
#include <cstring>
#include <vector>

#include "pallas/dtype.h"
#include "pallas/error.h"

namespace pallas {

const char* dtype_name(DType t) {
  switch (t) {
#define PALLAS_X(name, type, str) \
  case DType::name: return str;
    PALLAS_DTYPES(PALLAS_X)
#undef PALLAS_X
  }
  return "?";
}

size_t itemsize(DType t) {
  switch (t) {
#define PALLAS_X(name, type, str) \
  case DType::name: return sizeof(type);
    PALLAS_DTYPES(PALLAS_X)
#undef PALLAS_X
  }
  return 0;
}

int bit_width(DType t) { return t == DType::Bool ? 1 : static_cast<int>(itemsize(t) * 8); }
bool is_float8(DType t) { return t == DType::F8E4M3 || t == DType::F8E5M2; }
bool is_float(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64 || is_float8(t); }
bool is_signed_int(DType t) { return t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64; }
bool is_unsigned_int(DType t) { return t == DType::U8 || t == DType::U16 || t == DType::U32 || t == DType::U64; }
bool is_integer(DType t) { return is_signed_int(t) || is_unsigned_int(t); }

namespace {
// Lattice nodes: the dtypes, then the weak int (i*) and weak float (f*) nodes.
constexpr int kWeakInt = kNumDTypes, kWeakFloat = kNumDTypes + 1, kNodes = kNumDTypes + 2;
int node(DType t) { return static_cast<int>(t); }

std::array<std::vector<int>, kNodes> edges() {
  std::array<std::vector<int>, kNodes> e;
  auto add = [&](int a, int b) { e[a].push_back(b); };
  add(node(DType::Bool), kWeakInt);
  add(kWeakInt, node(DType::U8));
  add(kWeakInt, node(DType::I8));
  add(node(DType::U8), node(DType::I16));
  add(node(DType::U8), node(DType::U16));
  add(node(DType::U16), node(DType::I32));
  add(node(DType::U16), node(DType::U32));
  add(node(DType::U32), node(DType::I64));
  add(node(DType::U32), node(DType::U64));
  add(node(DType::U64), kWeakFloat);
  add(node(DType::I8), node(DType::I16));
  add(node(DType::I16), node(DType::I32));
  add(node(DType::I32), node(DType::I64));
  add(node(DType::I64), kWeakFloat);
  add(kWeakFloat, node(DType::BF16));
  add(kWeakFloat, node(DType::F16));
  add(kWeakFloat, node(DType::F8E4M3));  // the 8-bit floats: no edge upward
  add(kWeakFloat, node(DType::F8E5M2));
  add(node(DType::BF16), node(DType::F32));
  add(node(DType::F16), node(DType::F32));
  add(node(DType::F32), node(DType::F64));
  return e;
}

// ub[n] = the set of nodes reachable from n (its upper bounds), as a bitmask.
const std::array<uint32_t, kNodes>& upper_bounds() {
  static const std::array<uint32_t, kNodes> ub = [] {
    auto e = edges();
    std::array<uint32_t, kNodes> r{};
    for (int n = 0; n < kNodes; ++n) {
      std::vector<int> stack{n};
      while (!stack.empty()) {
        int x = stack.back();
        stack.pop_back();
        if (r[n] & (1u << x)) continue;
        r[n] |= 1u << x;
        for (int y : e[x]) stack.push_back(y);
      }
    }
    return r;
  }();
  return ub;
}
}  // namespace

PromotedType promote_types(DType a, bool a_weak, DType b, bool b_weak) {
  auto to_node = [](DType t, bool weak) {
    if (!weak) return node(t);
    return is_float(t) ? kWeakFloat : t == DType::Bool ? node(t) : kWeakInt;
  };
  const auto& ub = upper_bounds();
  int na = to_node(a, a_weak), nb = to_node(b, b_weak);
  uint32_t common = ub[na] & ub[nb];
  for (int n = 0; n < kNodes; ++n)
    if ((common & (1u << n)) && ub[n] == common) {
      if (n == kWeakInt) return {DType::I32, true};
      if (n == kWeakFloat) {
        // f* reached from two strong integer types (u64, i64) is f64; otherwise weak f32
        bool strong_ints = !a_weak && !b_weak;
        return strong_ints ? PromotedType{DType::F64, false} : PromotedType{DType::F32, true};
      }
      return {static_cast<DType>(n), false};
    }
  // no common upper bound: an 8-bit float met another float (or another 8-bit float)
  throw Error(std::string("no implicit promotion between ") + dtype_name(a) + " and " + dtype_name(b) +
              ": the 8-bit floats promote only with themselves; convert one operand explicitly (pl::convert)");
}

float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absx < 0x38800000u) {  // result subnormal or zero
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t e = absx >> 23;
    uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    uint32_t full_shift = 126 - e;  // value = m * 2^(e-150); f16 subnormal unit is 2^-24
    uint32_t q = m >> full_shift;
    uint32_t rem = m & ((1u << full_shift) - 1);
    uint32_t half = 1u << (full_shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t e = (absx >> 23) - 112;
  uint32_t m = absx & 0x7fffffu;
  uint32_t q = (e << 10) | (m >> 13);
  uint32_t rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1))) ++q;
  return static_cast<uint16_t>(sign | q);
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

namespace {
// An 8-bit float with E exponent bits, M mantissa bits and bias B; max_bits is the largest
// finite encoding (sign clear).
template <int E, int M, int B>
uint8_t float_to_f8(float f, uint8_t max_bits) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return 0x7f;              // NaN
  if (absx >= 0x7f800000u) return sign | max_bits;  // inf saturates
  int e = static_cast<int>(absx >> 23) - 127;
  uint32_t m = absx & 0x7fffffu;
  uint32_t q;
  if (e >= 1 - B) {  // normal in the 8-bit format
    if (e > (1 << E) - B) return sign | max_bits;  // far past the largest finite value
    q = static_cast<uint32_t>(e + B) << M | m >> (23 - M);
    uint32_t rem = m & ((1u << (23 - M)) - 1), half = 1u << (22 - M);
    if (rem > half || (rem == half && (q & 1))) ++q;
  } else {  // subnormal (or zero) in the 8-bit format: units of 2^(1-B-M)
    if ((absx >> 23) == 0) return sign;  // f32 subnormals are far below the smallest f8
    m |= 0x800000u;
    int shift = (1 - B - M) - (e - 23);  // value = m * 2^(e-23) = (m >> shift) units
    if (shift > 25) return sign;
    q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  if (q > max_bits) q = max_bits;  // rounding passed the largest finite value
  return static_cast<uint8_t>(sign | q);
}

template <int E, int M, int B>
float f8_to_float(uint8_t b, bool has_inf) {
  uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  uint32_t exp = (b >> M) & ((1u << E) - 1), man = b & ((1u << M) - 1);
  float r;
  if (has_inf && exp == (1u << E) - 1) {
    r = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (!has_inf && (b & 0x7f) == 0x7f) {
    r = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    r = std::ldexp(static_cast<float>(man), 1 - B - M);
  } else {
    r = std::ldexp(static_cast<float>(man | (1u << M)), static_cast<int>(exp) - B - M);
  }
  uint32_t bits;
  std::memcpy(&bits, &r, 4);
  bits |= sign;
  std::memcpy(&r, &bits, 4);
  return r;
}
}  // namespace

float f8e4m3_to_float(uint8_t b) { return f8_to_float<4, 3, 7>(b, false); }
uint8_t float_to_f8e4m3(float f) { return float_to_f8<4, 3, 7>(f, 0x7e); }
float f8e5m2_to_float(uint8_t b) { return f8_to_float<5, 2, 15>(b, true); }
uint8_t float_to_f8e5m2(float f) { return float_to_f8<5, 2, 15>(f, 0x7b); }

}  // namespace pallas
