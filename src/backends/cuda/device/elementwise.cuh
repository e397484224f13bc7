// Scalar semantics of the elementwise primitives on the GPU, matching the interpreter
// (src/backends/interpret/rules_elementwise.cc): integer ops wrap, x/0 = -1, x%0 = x,
// shifts past the width give 0 or the sign fill, max/min propagate NaN, float->int
// conversions saturate with NaN -> 0. 16-bit floats live in float registers and are rounded
// after every op (pl_round_f16/bf16), as the interpreter does.
#pragma once

namespace pallas_dev {

typedef unsigned short half_bits;
__device__ __forceinline__ float pl_f16_to_f32(half_bits h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ half_bits pl_f32_to_f16(float f) {
  half_bits h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float pl_bf16_to_f32(half_bits h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ half_bits pl_f32_to_bf16(float f) {
  half_bits h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float pl_round_f16(float f) { return pl_f16_to_f32(pl_f32_to_f16(f)); }
__device__ __forceinline__ float pl_round_bf16(float f) { return pl_bf16_to_f32(pl_f32_to_bf16(f)); }

template <class T> struct pl_unsigned { typedef T type; };
template <> struct pl_unsigned<signed char> { typedef unsigned char type; };
template <> struct pl_unsigned<short> { typedef unsigned short type; };
template <> struct pl_unsigned<int> { typedef unsigned type; };
template <> struct pl_unsigned<long long> { typedef unsigned long long type; };
template <class T> struct pl_is_float { static const bool value = false; };
template <> struct pl_is_float<float> { static const bool value = true; };
template <> struct pl_is_float<double> { static const bool value = true; };
template <class T> struct pl_signed_of { typedef T type; };
template <> struct pl_signed_of<unsigned char> { typedef signed char type; };
template <> struct pl_signed_of<unsigned short> { typedef short type; };
template <> struct pl_signed_of<unsigned> { typedef int type; };
template <> struct pl_signed_of<unsigned long long> { typedef long long type; };

#define PL_WRAP(T, expr) ((T)(expr))
template <class T> __device__ __forceinline__ T pl_add(T a, T b) {
  if (pl_is_float<T>::value) return a + b;
  typedef typename pl_unsigned<T>::type U;
  return (T)((U)a + (U)b);
}
__device__ __forceinline__ bool pl_add(bool a, bool b) { return a || b; }
template <class T> __device__ __forceinline__ T pl_sub(T a, T b) {
  if (pl_is_float<T>::value) return a - b;
  typedef typename pl_unsigned<T>::type U;
  return (T)((U)a - (U)b);
}
template <class T> __device__ __forceinline__ T pl_mul(T a, T b) {
  if (pl_is_float<T>::value) return a * b;
  typedef typename pl_unsigned<T>::type U;
  return (T)((unsigned long long)(U)a * (unsigned long long)(U)b);
}
template <class T> __device__ __forceinline__ T pl_div(T a, T b) {
  if (pl_is_float<T>::value) return a / b;
  if (b == (T)0) return (T)-1;
  if ((T)-1 < (T)0 && b == (T)-1) return pl_sub((T)0, a);  // INT_MIN / -1 wraps to INT_MIN
  return a / b;
}
template <class T> __device__ __forceinline__ T pl_rem(T a, T b) {
  if (b == (T)0) return a;
  if ((T)-1 < (T)0 && b == (T)-1) return (T)0;
  return a % b;
}
__device__ __forceinline__ float pl_rem(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double pl_rem(double a, double b) { return fmod(a, b); }
template <class T> __device__ __forceinline__ T pl_max(T a, T b) { return a > b ? a : b; }
template <class T> __device__ __forceinline__ T pl_min(T a, T b) { return a < b ? a : b; }
__device__ __forceinline__ float pl_max(float a, float b) {
  if (isnan(a) || isnan(b)) return __int_as_float(0x7fc00000);
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
__device__ __forceinline__ float pl_min(float a, float b) {
  if (isnan(a) || isnan(b)) return __int_as_float(0x7fc00000);
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
__device__ __forceinline__ double pl_max(double a, double b) {
  if (isnan(a) || isnan(b)) return __longlong_as_double(0x7ff8000000000000ll);
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
__device__ __forceinline__ double pl_min(double a, double b) {
  if (isnan(a) || isnan(b)) return __longlong_as_double(0x7ff8000000000000ll);
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
template <class T> __device__ __forceinline__ T pl_and(T a, T b) { return (T)(a & b); }
template <class T> __device__ __forceinline__ T pl_or(T a, T b) { return (T)(a | b); }
template <class T> __device__ __forceinline__ T pl_xor(T a, T b) { return (T)(a ^ b); }
template <class T> __device__ __forceinline__ T pl_shift_left(T a, T b) {
  typedef typename pl_unsigned<T>::type U;
  if ((U)b >= sizeof(T) * 8) return (T)0;
  return (T)((U)a << (U)b);
}
template <class T> __device__ __forceinline__ T pl_shift_right_logical(T a, T b) {
  typedef typename pl_unsigned<T>::type U;
  if ((U)b >= sizeof(T) * 8) return (T)0;
  return (T)((U)a >> (U)b);
}
template <class T> __device__ __forceinline__ T pl_shift_right_arithmetic(T a, T b) {
  typedef typename pl_unsigned<T>::type U;
  typedef typename pl_signed_of<T>::type S;
  if ((U)b >= sizeof(T) * 8) return (T)((S)a < 0 ? (S)-1 : (S)0);
  return (T)((S)a >> (U)b);
}
template <class T> __device__ __forceinline__ T pl_neg(T a) { return pl_sub((T)0, a); }
__device__ __forceinline__ float pl_neg(float a) { return -a; }
__device__ __forceinline__ double pl_neg(double a) { return -a; }
template <class T> __device__ __forceinline__ T pl_abs(T a) { return a < (T)0 ? pl_neg(a) : a; }
__device__ __forceinline__ float pl_abs(float a) { return fabsf(a); }
__device__ __forceinline__ double pl_abs(double a) { return fabs(a); }
template <class T> __device__ __forceinline__ T pl_sign(T a) { return (T)((a > (T)0) - (a < (T)0)); }
__device__ __forceinline__ float pl_sign(float a) { return isnan(a) ? a : a > 0 ? 1.f : a < 0 ? -1.f : a; }
__device__ __forceinline__ double pl_sign(double a) { return isnan(a) ? a : a > 0 ? 1.0 : a < 0 ? -1.0 : a; }
template <class T> __device__ __forceinline__ T pl_not(T a) { return (T)~a; }
__device__ __forceinline__ bool pl_not(bool a) { return !a; }
template <class T> __device__ __forceinline__ T pl_population_count(T a) {
  return (T)(sizeof(T) == 8 ? __popcll((unsigned long long)a) : __popc((unsigned)(typename pl_unsigned<T>::type)a));
}
template <class T> __device__ __forceinline__ T pl_clz(T a) {
  if (sizeof(T) == 8) return (T)__clzll((long long)a);
  return (T)(__clz((int)(unsigned)(typename pl_unsigned<T>::type)a) - (int)(32 - sizeof(T) * 8));
}
#define PL_FLOAT1(name, f32, f64)                                             \
  __device__ __forceinline__ float pl_##name(float x) { return f32; }         \
  __device__ __forceinline__ double pl_##name(double x) { return f64; }
PL_FLOAT1(ceil, ceilf(x), ceil(x))
PL_FLOAT1(floor, floorf(x), floor(x))
PL_FLOAT1(round, roundf(x), round(x))
PL_FLOAT1(exp, expf(x), exp(x))
PL_FLOAT1(exp2, exp2f(x), exp2(x))
PL_FLOAT1(expm1, expm1f(x), expm1(x))
PL_FLOAT1(log, logf(x), log(x))
PL_FLOAT1(log1p, log1pf(x), log1p(x))
PL_FLOAT1(sqrt, sqrtf(x), sqrt(x))
PL_FLOAT1(cbrt, cbrtf(x), cbrt(x))
PL_FLOAT1(rsqrt, 1.f / sqrtf(x), 1.0 / sqrt(x))
PL_FLOAT1(sin, sinf(x), sin(x))
PL_FLOAT1(cos, cosf(x), cos(x))
PL_FLOAT1(tan, tanf(x), tan(x))
PL_FLOAT1(asin, asinf(x), asin(x))
PL_FLOAT1(acos, acosf(x), acos(x))
PL_FLOAT1(atan, atanf(x), atan(x))
PL_FLOAT1(sinh, sinhf(x), sinh(x))
PL_FLOAT1(cosh, coshf(x), cosh(x))
PL_FLOAT1(tanh, tanhf(x), tanh(x))
PL_FLOAT1(asinh, asinhf(x), asinh(x))
PL_FLOAT1(acosh, acoshf(x), acosh(x))
PL_FLOAT1(atanh, atanhf(x), atanh(x))
PL_FLOAT1(logistic, 1.f / (1.f + expf(-x)), 1.0 / (1.0 + exp(-x)))
PL_FLOAT1(erf, erff(x), erf(x))
PL_FLOAT1(erf_inv, erfinvf(x), erfinv(x))
__device__ __forceinline__ bool pl_is_finite(float x) { return isfinite(x); }
__device__ __forceinline__ bool pl_is_finite(double x) { return isfinite(x); }
__device__ __forceinline__ float pl_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double pl_pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float pl_atan2(float a, float b) { return atan2f(a, b); }
__device__ __forceinline__ double pl_atan2(double a, double b) { return atan2(a, b); }
__device__ __forceinline__ float pl_nextafter(float a, float b) { return nextafterf(a, b); }
__device__ __forceinline__ double pl_nextafter(double a, double b) { return nextafter(a, b); }
template <class T> __device__ __forceinline__ T pl_integer_pow(T x, long long y) {
  T acc = (T)1, base = x;
  unsigned long long e = y < 0 ? (unsigned long long)(-y) : (unsigned long long)y;
  for (; e; e >>= 1) {
    if (e & 1) acc = pl_mul(acc, base);
    base = pl_mul(base, base);
  }
  if (pl_is_float<T>::value && y < 0) acc = (T)1 / acc;
  return acc;
}
template <class T> __device__ __forceinline__ T pl_clamp(T lo, T x, T hi) { return pl_min(pl_max(x, lo), hi); }

// Conversions: float -> int saturates, NaN -> 0 (what cvt.rzi does); others as C++.
template <class To, class From> __device__ __forceinline__ To pl_convert(From v) { return (To)v; }
#define PL_F2I(To, lo, hi)                                                          \
  template <> __device__ __forceinline__ To pl_convert<To, float>(float v) {        \
    return isnan(v) ? (To)0 : v <= (float)(lo) ? (To)(lo) : v >= (float)(hi) ? (To)(hi) : (To)v; \
  }                                                                                 \
  template <> __device__ __forceinline__ To pl_convert<To, double>(double v) {      \
    return isnan(v) ? (To)0 : v <= (double)(lo) ? (To)(lo) : v >= (double)(hi) ? (To)(hi) : (To)v; \
  }
PL_F2I(signed char, -128, 127)
PL_F2I(short, -32768, 32767)
PL_F2I(int, -2147483647 - 1, 2147483647)
PL_F2I(long long, -9223372036854775807ll - 1, 9223372036854775807ll)
PL_F2I(unsigned char, 0, 255)
PL_F2I(unsigned short, 0, 65535)
PL_F2I(unsigned, 0, 4294967295u)
PL_F2I(unsigned long long, 0, 18446744073709551615ull)
template <> __device__ __forceinline__ bool pl_convert<bool, float>(float v) { return v != 0.f; }
template <> __device__ __forceinline__ bool pl_convert<bool, double>(double v) { return v != 0.0; }

}  // namespace pallas_dev
