// Element types, their properties and JAX-style type promotion.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace pallas {

// One list drives the enum, the names and the sizes (X-macro: name, C++ storage type, short name).
#define PALLAS_DTYPES(X)            \
  X(Bool, bool, "bool")             \
  X(I8, int8_t, "i8")               \
  X(I16, int16_t, "i16")            \
  X(I32, int32_t, "i32")            \
  X(I64, int64_t, "i64")            \
  X(U8, uint8_t, "u8")              \
  X(U16, uint16_t, "u16")           \
  X(U32, uint32_t, "u32")           \
  X(U64, uint64_t, "u64")           \
  X(F16, ::pallas::f16_t, "f16")    \
  X(BF16, ::pallas::bf16_t, "bf16") \
  X(F32, float, "f32")              \
  X(F64, double, "f64")              \
  X(F8E4M3, ::pallas::f8e4m3_t, "f8e4m3") \
  X(F8E5M2, ::pallas::f8e5m2_t, "f8e5m2")

// 16-bit floats are stored as their bit patterns; arithmetic goes through float.
struct f16_t {
  uint16_t bits;
};
struct bf16_t {
  uint16_t bits;
};
// 8-bit floats (OCP FP8): e4m3 is the "fn" variant (bias 7, no infinities, 0x7f/0xff are NaN,
// largest finite 448); e5m2 is IEEE-like (bias 15, infinities, largest finite 57344).
struct f8e4m3_t {
  uint8_t bits;
};
struct f8e5m2_t {
  uint8_t bits;
};

enum class DType : uint8_t {
#define PALLAS_X(name, type, str) name,
  PALLAS_DTYPES(PALLAS_X)
#undef PALLAS_X
};
inline constexpr int kNumDTypes = 15;

inline constexpr DType bool_ = DType::Bool;
inline constexpr DType i8 = DType::I8;
inline constexpr DType i16 = DType::I16;
inline constexpr DType i32 = DType::I32;
inline constexpr DType i64 = DType::I64;
inline constexpr DType u8 = DType::U8;
inline constexpr DType u16 = DType::U16;
inline constexpr DType u32 = DType::U32;
inline constexpr DType u64 = DType::U64;
inline constexpr DType f16 = DType::F16;
inline constexpr DType bf16 = DType::BF16;
inline constexpr DType f32 = DType::F32;
inline constexpr DType f64 = DType::F64;
inline constexpr DType f8e4m3 = DType::F8E4M3;
inline constexpr DType f8e5m2 = DType::F8E5M2;

const char* dtype_name(DType t);
size_t itemsize(DType t);
int bit_width(DType t);
bool is_float(DType t);
bool is_float8(DType t);  // f8e4m3, f8e5m2
bool is_integer(DType t);  // signed or unsigned, not bool
bool is_signed_int(DType t);
bool is_unsigned_int(DType t);
inline bool is_bool(DType t) { return t == DType::Bool; }

// JAX's promotion lattice (jax._src.dtypes), with weak types for C++ scalars: a weak int
// or float takes the other operand's dtype when that one is of the same kind or higher.
// The 8-bit floats promote with nothing but themselves and weak scalars (as in JAX): mixing
// one with another float is a pl::Error asking for an explicit convert. Documented in
// docs/dtypes.md.
struct PromotedType {
  DType dtype;
  bool weak;
};
PromotedType promote_types(DType a, bool a_weak, DType b, bool b_weak);
inline DType promote_types(DType a, DType b) { return promote_types(a, false, b, false).dtype; }

// Conversions for the 16-bit floats (round to nearest even).
float f16_to_float(uint16_t bits);
uint16_t float_to_f16(float f);
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float f);
// Conversions for the 8-bit floats: exact widening; narrowing rounds to nearest even and
// saturates to the largest finite value (PTX's cvt.rn.satfinite, which the GPU uses: so +-inf
// becomes +-448 / +-57344), NaN stays NaN (0x7f).
float f8e4m3_to_float(uint8_t bits);
uint8_t float_to_f8e4m3(float f);
float f8e5m2_to_float(uint8_t bits);
uint8_t float_to_f8e5m2(float f);

// The float formats stored as bit patterns and computed in float (f16, bf16, the 8-bit floats):
// is_packed_float_v<T>, packed_to_float(v), float_to_packed<T>(f).
template <class T>
inline constexpr bool is_packed_float_v = std::is_same_v<T, f16_t> || std::is_same_v<T, bf16_t> ||
                                          std::is_same_v<T, f8e4m3_t> || std::is_same_v<T, f8e5m2_t>;
inline float packed_to_float(f16_t v) { return f16_to_float(v.bits); }
inline float packed_to_float(bf16_t v) { return bf16_to_float(v.bits); }
inline float packed_to_float(f8e4m3_t v) { return f8e4m3_to_float(v.bits); }
inline float packed_to_float(f8e5m2_t v) { return f8e5m2_to_float(v.bits); }
template <class T>
T float_to_packed(float f) {
  if constexpr (std::is_same_v<T, f16_t>) return T{float_to_f16(f)};
  else if constexpr (std::is_same_v<T, bf16_t>) return T{float_to_bf16(f)};
  else if constexpr (std::is_same_v<T, f8e4m3_t>) return T{float_to_f8e4m3(f)};
  else return T{float_to_f8e5m2(f)};
}

template <class T>
constexpr DType dtype_of();
#define PALLAS_X(name, type, str) \
  template <>                     \
  constexpr DType dtype_of<type>() { return DType::name; }
PALLAS_DTYPES(PALLAS_X)
#undef PALLAS_X

}  // namespace pallas
