// Element types, their properties and JAX-style type promotion.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

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
  X(F64, double, "f64")

// 16-bit floats are stored as their bit patterns; arithmetic goes through float.
struct f16_t {
  uint16_t bits;
};
struct bf16_t {
  uint16_t bits;
};

enum class DType : uint8_t {
#define PALLAS_X(name, type, str) name,
  PALLAS_DTYPES(PALLAS_X)
#undef PALLAS_X
};
inline constexpr int kNumDTypes = 13;

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

const char* dtype_name(DType t);
size_t itemsize(DType t);
int bit_width(DType t);
bool is_float(DType t);
bool is_integer(DType t);  // signed or unsigned, not bool
bool is_signed_int(DType t);
bool is_unsigned_int(DType t);
inline bool is_bool(DType t) { return t == DType::Bool; }

// JAX's promotion lattice (jax._src.dtypes), with weak types for C++ scalars: a weak int
// or float takes the other operand's dtype when that one is of the same kind or higher.
// Documented in docs/dtypes.md.
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

template <class T>
constexpr DType dtype_of();
#define PALLAS_X(name, type, str) \
  template <>                     \
  constexpr DType dtype_of<type>() { return DType::name; }
PALLAS_DTYPES(PALLAS_X)
#undef PALLAS_X

}  // namespace pallas
