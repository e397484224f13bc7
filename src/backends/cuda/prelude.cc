// The device-side prelude every generated kernel starts with: storage types for 16-bit
// floats, conversions, and the elementwise helpers whose semantics must match the
// interpreter (integer div/rem by 0, shifts by >= width, NaN-propagating max/min).
// Kept small and template-only, so NVRTC parses little and instantiates what is used.
#include "src/backends/cuda/lower.h"

namespace pallas::cuda {

const char* prelude() {
  return R"PRELUDE(
typedef signed char i8; typedef short i16; typedef int i32; typedef long long i64;
typedef unsigned char u8; typedef unsigned short u16; typedef unsigned int u32; typedef unsigned long long u64;
template <class A, class B> constexpr bool same_v = false;
template <class A> constexpr bool same_v<A, A> = true;
struct f16 { u16 b; }; struct bf16 { u16 b; };
// The 8-bit floats (OCP FP8: e4m3 "fn", e5m2), stored as their bits like the 16-bit floats.
struct f8e4m3 { u8 b; }; struct f8e5m2 { u8 b; };
// The float formats kept as bit patterns and computed in float.
template <class T> constexpr bool pk_v = same_v<T, f16> || same_v<T, bf16> || same_v<T, f8e4m3> || same_v<T, f8e5m2>;
template <class T> struct CT { typedef T t; };
// Whether a compute type is floating (bool is not: C(0.5) != C(0) holds for bool too).
template <class C> constexpr bool isf_v = same_v<C, float> || same_v<C, double>;
template <> struct CT<f16> { typedef float t; };
template <> struct CT<bf16> { typedef float t; };
template <> struct CT<f8e4m3> { typedef float t; };
template <> struct CT<f8e5m2> { typedef float t; };
__device__ __forceinline__ float tof(f16 x) { float r; asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(x.b)); return r; }
__device__ __forceinline__ float tof(bf16 x) { return __int_as_float(((u32)x.b) << 16); }
// 8-bit floats widen exactly through f16: e5m2 is f16's top byte; e4m3's bits placed in f16's
// exponent and mantissa read 2^8 too small (bias 7 against 15), and 0x7f/0xff are its NaNs.
__device__ __forceinline__ float tof(f8e5m2 x) { return tof(f16{(u16)((u16)x.b << 8)}); }
__device__ __forceinline__ float tof(f8e4m3 x) {
  if ((x.b & 0x7f) == 0x7f) return __int_as_float(0x7fc00000);
  return tof(f16{(u16)(((u16)(x.b & 0x80) << 8) | ((u16)(x.b & 0x7f) << 7))}) * 256.f;
}
template <class T> __device__ __forceinline__ typename CT<T>::t ld(T x) { return x; }
template <> __device__ __forceinline__ float ld<f16>(f16 x) { return tof(x); }
template <> __device__ __forceinline__ float ld<bf16>(bf16 x) { return tof(x); }
template <> __device__ __forceinline__ float ld<f8e4m3>(f8e4m3 x) { return tof(x); }
template <> __device__ __forceinline__ float ld<f8e5m2>(f8e5m2 x) { return tof(x); }
// Two 16-bit values in one register, the first in the low half (MMA operand fragments).
template <class T> __device__ __forceinline__ u32 pk2(T lo, T hi) { return (u32)lo.b | ((u32)hi.b << 16); }
// cv<To>(x): convert a compute value to storage type To (float->int saturates, NaN -> 0).
template <class T> __device__ __forceinline__ T lim_lo() { return T(-1) < T(0) ? (T)(1ull << (sizeof(T) * 8 - 1)) : T(0); }
template <class To, class C> __device__ __forceinline__ To cv(C x);
// double -> float rounding to odd (toward zero, last bit set when inexact): a later
// round-to-nearest to a format of at most 22 significant bits then rounds as if directly from
// the double (the interpreter's conversions do the same).
__device__ __forceinline__ float f_odd(double x) {
  float f = __double2float_rz(x);
  if ((double)f != x && f == f) f = __int_as_float(__float_as_int(f) | 1);
  return f;
}
// float -> 8-bit float: round to nearest even, saturate to the largest finite value (+-inf too),
// NaN -> 0x7f: PTX's cvt.rn.satfinite on sm_89 and later, the same rule in software before.
template <int E, int M, int B> __device__ __forceinline__ u8 f8_bits(float f, u8 max_bits) {
  u32 x = __float_as_uint(f), absx = x & 0x7fffffffu; u8 sign = (u8)((x >> 24) & 0x80u);
  if (absx > 0x7f800000u) return 0x7f;
  if (absx >= 0x7f800000u) return sign | max_bits;
  int e = (int)(absx >> 23) - 127; u32 m = absx & 0x7fffffu, q;
  if (e >= 1 - B) {
    if (e > (1 << E) - B) return sign | max_bits;
    q = ((u32)(e + B) << M) | (m >> (23 - M));
    u32 rem = m & ((1u << (23 - M)) - 1), half = 1u << (22 - M);
    if (rem > half || (rem == half && (q & 1))) ++q;
  } else {
    if ((absx >> 23) == 0) return sign;
    m |= 0x800000u; int sh = (1 - B - M) - (e - 23);
    if (sh > 25) return sign;
    q = m >> sh; u32 rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  return (u8)(sign | (q > max_bits ? max_bits : q));
}
template <class To, class C> __device__ __forceinline__ To cv(C x) {
  if constexpr (pk_v<To>) {
    if constexpr (same_v<C, double>) return cv<To, float>(f_odd(x));
    else return cv<To, float>((float)x);
  } else if constexpr (isf_v<C> && To(0.5) == To(0) && !same_v<To, bool>) {
    if (x != x) return To(0);
    if (x <= (C)lim_lo<To>()) return lim_lo<To>();
    if (x >= (C)(To)~lim_lo<To>()) return (To)~lim_lo<To>();
    return (To)x;
  } else {
    return (To)x;
  }
}
template <> __device__ __forceinline__ f16 cv<f16, float>(float x) { f16 r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.b) : "f"(x)); return r; }
template <> __device__ __forceinline__ bf16 cv<bf16, float>(float x) { bf16 r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.b) : "f"(x)); return r; }
template <> __device__ __forceinline__ f16 cv<f16, double>(double x) { f16 r; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(r.b) : "d"(x)); return r; }
template <> __device__ __forceinline__ bf16 cv<bf16, double>(double x) { return cv<bf16, float>(f_odd(x)); }
// float -> the 8-bit float <E, M, B>'s bits: cvt.rn.satfinite on sm_89 and later (its NaN
// pattern made 0x7f, as the interpreter's), f8_bits' same rule in software before.
template <int E, int M, int B> __device__ __forceinline__ u8 f8_from_float(float x, u8 max_bits) {
#if __CUDA_ARCH__ >= 890
  u16 r;
  if constexpr (E == 4) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.f), "f"(x));
  else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.f), "f"(x));
  return (x != x) ? (u8)0x7f : (u8)(r & 0xff);
#else
  return f8_bits<E, M, B>(x, max_bits);
#endif
}
template <> __device__ __forceinline__ f8e4m3 cv<f8e4m3, float>(float x) { return f8e4m3{f8_from_float<4, 3, 7>(x, 0x7e)}; }
template <> __device__ __forceinline__ f8e5m2 cv<f8e5m2, float>(float x) { return f8e5m2{f8_from_float<5, 2, 15>(x, 0x7b)}; }
template <class To, class From> __device__ __forceinline__ To conv(From x) {
  if constexpr (same_v<To, bool>) return ld(x) != 0; else return cv<To>(ld(x));
}
// nextafter in storage format S (16- and 8-bit floats step in their own format, not float's).
template <class S, class C> __device__ __forceinline__ C p_nextafter(C a, C b) {
  if constexpr (pk_v<S>) {
    typedef decltype(S::b) W;
    if (a != a || b != b) return (C)__int_as_float(0x7fc00000);
    if (a == b) return b;
    W bits = cv<S>(a).b;
    if (a == 0) bits = (W)(b > 0 ? 1 : (1 | (1u << (sizeof(W) * 8 - 1))));
    else if ((a < b) == (a > 0)) ++bits;
    else --bits;
    return (C)tof(S{bits});
  } else {
    return nextafter(a, b);
  }
}
// debug_print's 64-bit print slot of one element (src/core/print_format.h).
template <class T> __device__ __forceinline__ unsigned long long p_slot(T x) {
  if constexpr (same_v<T, bool>) return x ? 1ull : 0ull;
  else if constexpr (isf_v<typename CT<T>::t>) return (unsigned long long)__double_as_longlong((double)ld(x));
  else if constexpr (T(-1) < T(0)) return (unsigned long long)(long long)x;
  else return (unsigned long long)x;
}
// W elements moved by one vector access (the layout pass makes sure the address is aligned).
template <class T, int W> struct alignas(sizeof(T) * W) Vec { T v[W]; };
// Stores a Vec of 8- or 16-bit elements as one access of its size, from 32-bit words packed
// here: assigning the struct, NVVM stored such elements one or two at a time where it could not
// prove the address 16-byte aligned (a bf16 row's 16-byte store became four st.v2.u16 in an
// rms norm; even a uint4 built from the words became four st.u32), so the store is one generic
// st.v4/v2 of words. Vecs of 4- and 8-byte elements are stored as they are (already whole).
template <class T> __device__ __forceinline__ u32 word_bits(T x) {
  if constexpr (pk_v<T>) return x.b;
  else if constexpr (sizeof(T) == 1) return (u32)(unsigned char)x;
  else return (u32)(u16)x;
}
template <class T, int W> __device__ __forceinline__ void st_vec(void* p, const Vec<T, W>& v) {
  constexpr int B = sizeof(T) * W, N = B / 4, per = sizeof(T) < 4 ? 4 / sizeof(T) : 1;
  if constexpr (sizeof(T) >= 4 || B < 8) {
    *(Vec<T, W>*)p = v;
  } else {
    u32 w[N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
      w[j] = 0;
#pragma unroll
      for (int i = 0; i < per; ++i) w[j] |= word_bits(v.v[j * per + i]) << (i * 8 * sizeof(T));
    }
    if constexpr (N == 4) asm volatile("st.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
    else asm volatile("st.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
  }
}
template <class T> __device__ __forceinline__ T poison() {
  if constexpr (same_v<T, float>) return __int_as_float(0x7fc00000);
  else if constexpr (same_v<T, double>) return __longlong_as_double(0x7ff8000000000000ll);
  else if constexpr (same_v<T, f16>) return f16{0x7e00};
  else if constexpr (same_v<T, bf16>) return bf16{0x7fc0};
  else if constexpr (same_v<T, f8e4m3>) return f8e4m3{0x7f};
  else if constexpr (same_v<T, f8e5m2>) return f8e5m2{0x7f};
  else if constexpr (same_v<T, bool>) return true;
  else if constexpr (T(-1) < T(0)) return (T)(1ull << (sizeof(T) * 8 - 1));
  else return (T)~0ull;
}
template <class C> struct UT { typedef C t; };
template <> struct UT<i8> { typedef u8 t; }; template <> struct UT<i16> { typedef u16 t; };
template <> struct UT<i32> { typedef u32 t; }; template <> struct UT<i64> { typedef u64 t; };
template <class C> __device__ __forceinline__ bool isflt() { return isf_v<C>; }
template <class C> __device__ __forceinline__ C p_add(C a, C b) { if constexpr (isf_v<C> || same_v<C, bool>) return a + b; else return (C)((typename UT<C>::t)a + (typename UT<C>::t)b); }
template <class C> __device__ __forceinline__ C p_sub(C a, C b) { if constexpr (isf_v<C>) return a - b; else return (C)((typename UT<C>::t)a - (typename UT<C>::t)b); }
template <class C> __device__ __forceinline__ C p_mul(C a, C b) { if constexpr (isf_v<C> || same_v<C, bool>) return a * b; else return (C)((u64)(typename UT<C>::t)a * (u64)(typename UT<C>::t)b); }
template <class C> __device__ __forceinline__ C p_neg(C a) { if constexpr (isf_v<C>) return -a; else return (C)(0 - (typename UT<C>::t)a); }
template <class C> __device__ __forceinline__ C p_div(C a, C b) {
  if constexpr (isf_v<C>) return a / b;
  else { if (b == 0) return (C)-1; if (C(-1) < C(0) && b == (C)-1) return p_neg(a); return a / b; }
}
template <class C> __device__ __forceinline__ C p_rem(C a, C b) {
  if constexpr (isf_v<C>) { if constexpr (sizeof(C) == 8) return fmod(a, b); else return fmodf(a, b); }
  else { if (b == 0) return a; if (C(-1) < C(0) && b == (C)-1) return 0; return a % b; }
}
// max/min as the interpreter: a NaN operand gives a NaN, +0 > -0. f32 on sm_80+ is one
// instruction (max.NaN orders -0 below +0 and propagates NaN, as IEEE 754-2019 maximum;
// the NaN is the canonical one, not an operand's payload); elsewhere selects, without
// branches, as they run per element of every row reduction.
template <class C> __device__ __forceinline__ C p_max(C a, C b) {
#if __CUDA_ARCH__ >= 800
  if constexpr (same_v<C, float>) { float m; asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b)); return m; }
#endif
  if constexpr (same_v<C, float>) {
    float m = a == b ? __int_as_float(__float_as_int(a) & __float_as_int(b)) : fmaxf(a, b);  // (+0, -0) -> +0
    return (a != a || b != b) ? a + b : m;  // a + b: the NaN operand's payload (a's when both)
  } else if constexpr (same_v<C, double>) {
    double m = a == b ? __longlong_as_double(__double_as_longlong(a) & __double_as_longlong(b)) : fmax(a, b);
    return (a != a || b != b) ? a + b : m;
  } else return a > b ? a : b;
}
// argmax / argmin of a row folded in any order: candidate (bv, bi) beats (av, ai) if it is the
// first NaN, else the larger (smaller) value, ties to the lower index; index -1 is empty.
template <bool MX, class C> __device__ __forceinline__ bool p_arg_wins(C bv, int bi, C av, int ai) {
  if (bi < 0) return false;
  if (ai < 0) return true;
  bool bn = bv != bv, an = av != av;
  if (bn || an) return bn && (!an || bi < ai);
  return (MX ? bv > av : bv < av) || (bv == av && bi < ai);
}
// b comes after every element in (av, ai) (a higher index): it wins only by a strictly better
// value, or as the first NaN; ai < 0 is the empty accumulator.
template <bool MX, class C> __device__ __forceinline__ bool p_arg_later(C bv, C av, int ai) {
  return ai < 0 || (MX ? bv > av : bv < av) || (bv != bv && av == av);
}
template <class C> __device__ __forceinline__ C p_min(C a, C b) {
#if __CUDA_ARCH__ >= 800
  if constexpr (same_v<C, float>) { float m; asm("min.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b)); return m; }
#endif
  if constexpr (same_v<C, float>) {
    float m = a == b ? __int_as_float(__float_as_int(a) | __float_as_int(b)) : fminf(a, b);  // (+0, -0) -> -0
    return (a != a || b != b) ? a + b : m;
  } else if constexpr (same_v<C, double>) {
    double m = a == b ? __longlong_as_double(__double_as_longlong(a) | __double_as_longlong(b)) : fmin(a, b);
    return (a != a || b != b) ? a + b : m;
  } else return a < b ? a : b;
}
template <class C> __device__ __forceinline__ C p_shl(C a, C b) { return ((u64)b >= sizeof(C) * 8) ? C(0) : (C)((typename UT<C>::t)a << b); }
template <class C> struct ST { typedef C t; };
template <> struct ST<u8> { typedef i8 t; }; template <> struct ST<u16> { typedef i16 t; };
template <> struct ST<u32> { typedef i32 t; }; template <> struct ST<u64> { typedef i64 t; };
// Arithmetic shift on the bits as signed, also for unsigned types (XLA's semantics).
template <class C> __device__ __forceinline__ C p_shra(C a, C b) {
  typedef typename ST<C>::t S; S sa = (S)a;
  return ((typename UT<C>::t)b >= sizeof(C) * 8) ? (C)(sa < 0 ? S(-1) : S(0)) : (C)(S)(sa >> b);
}
template <class C> __device__ __forceinline__ C p_shrl(C a, C b) { return ((u64)b >= sizeof(C) * 8) ? C(0) : (C)((typename UT<C>::t)a >> b); }
template <class C> __device__ __forceinline__ C p_sign(C a) {
  if constexpr (isf_v<C>) return a != a ? a : (a > 0 ? C(1) : a < 0 ? C(-1) : a);
  else if constexpr (C(-1) < C(0)) return a > 0 ? C(1) : a < 0 ? C(-1) : C(0);
  else return a > 0 ? C(1) : C(0);
}
template <class C> __device__ __forceinline__ C p_abs(C a) { if constexpr (isf_v<C>) return fabs(a); else if constexpr (C(-1) < C(0)) return a < 0 ? p_neg(a) : a; else return a; }
template <class C> __device__ __forceinline__ C p_ipow(C x, long long y) {
  if (y < 0) return C(1) / p_ipow(x, -y);
  C r = C(1); while (y) { if (y & 1) r = p_mul(r, x); x = p_mul(x, x); y >>= 1; } return r;
}
template <class C> __device__ __forceinline__ C p_popc(C a) { if constexpr (sizeof(C) == 8) return __popcll((u64)a); else return __popc((u32)(typename UT<C>::t)a); }
template <class C> __device__ __forceinline__ C p_clz(C a) { if constexpr (sizeof(C) == 8) return __clzll((i64)a); else return __clz((i32)(u32)(typename UT<C>::t)a) - (32 - sizeof(C) * 8); }
template <class C> __device__ __forceinline__ C p_not(C a) { if constexpr (same_v<C, bool>) return !a; else return ~a; }
template <class C> __device__ __forceinline__ C p_logistic(C x) { return C(1) / (C(1) + exp(-x)); }
template <class C> __device__ __forceinline__ C p_round(C x) { return round(x); }
// 2^x for f32 as (2^(x/2))^2: x/2 is exact and never reaches the subnormal results that
// ex2.approx.ftz would flush, and the square rounds a subnormal 2^x correctly — within 5 ulps,
// in three instructions with no predicate. (exp2f handles x < -126 by a predicated halving and
// squaring; ptxas gives every element of an unrolled softmax the same predicate register and
// so serialises them, each waiting out the MUFU latency: measured on the H200, docs/benchmarks.md.)
__device__ __forceinline__ float p_exp2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 0.5f)); return y * y; }
__device__ __forceinline__ double p_exp2(double x) { return exp2(x); }
template <class C> __device__ __forceinline__ C p_rsqrt(C x) { return C(1) / sqrt(x); }
template <class C> __device__ __forceinline__ bool p_isfinite(C x) { return isfinite(x); }
template <class C> __device__ __forceinline__ C p_erfinv(C x) { return erfinv(x); }
// wgmma (sm_90a): a shared-memory matrix descriptor for the 128-byte swizzle (start address,
// leading and stride byte offsets), and the proxy fence that makes st.shared writes visible to
// the tensor cores' async proxy.
__device__ __forceinline__ u64 wg_desc(const void* p, u32 lbo, u32 sbo) {
  u32 a = (u32)__cvta_generic_to_shared(p);
  return (u64)((a & 0x3FFFF) >> 4) | ((u64)((lbo & 0x3FFFF) >> 4) << 16) | ((u64)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}
// cp.async (sm_80+): B bytes global -> shared, zero-filled when !ok (src is then not read).
template <int B> __device__ __forceinline__ void cp_async(void* dst, const void* src, bool ok) {
  u32 d = (u32)__cvta_generic_to_shared(dst);
  if constexpr (B == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0) : "memory");
  else asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(d), "l"(src), "n"(B), "r"(ok ? B : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
// One lane's arrival at a shared counter; the count before it. acq_rel at CTA scope: what the
// warp read before it happens before what the last warp to arrive does after it (in place of
// atomicAdd between two __threadfence_block).
__device__ __forceinline__ u32 count_arrival(u32* p) {
  u32 r; asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], 1;" : "=r"(r) : "r"((u32)__cvta_generic_to_shared(p)) : "memory"); return r;
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ float tf32(float x) { u32 r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return __uint_as_float(r); }
// Rounds N (1, 2 or 4) f32 words of shared memory to tf32 in place, in one access each way.
template <int N> __device__ __forceinline__ void tf32_round_shared(unsigned char* p) {
  if constexpr (N == 4) { float4 v = *(float4*)p; v.x = tf32(v.x), v.y = tf32(v.y), v.z = tf32(v.z), v.w = tf32(v.w); *(float4*)p = v; }
  else if constexpr (N == 2) { float2 v = *(float2*)p; v.x = tf32(v.x), v.y = tf32(v.y); *(float2*)p = v; }
  else *(float*)p = tf32(*(float*)p);
}
template <class T> __device__ __forceinline__ u32 ordkey(T v) { return 0; }
template <class T> __device__ __forceinline__ T atom_apply(int op, T cur, T v) {
  typedef typename CT<T>::t C;
  C a = ld(cur), b = ld(v);
  switch (op) {
    case 0: return cv<T>(p_add(a, b));
    case 1: return cv<T>(p_max<C>(a, b));  // NaN sticks: the result does not depend on the order
    case 2: return cv<T>(p_min<C>(a, b));
    case 6: return v;
  }
  if constexpr (!isf_v<C>) {
    if (op == 3) return (T)(a & b); if (op == 4) return (T)(a | b); if (op == 5) return (T)(a ^ b);
  }
  return v;
}
// Atomic read-modify-write of any 1/2/4/8-byte type by a CAS loop on the aligned word.
template <class T> __device__ __forceinline__ T atom_rmw(int op, T* p, T v) {
  if constexpr (sizeof(T) == 8) {
    u64* w = (u64*)p; u64 old = *(volatile u64*)w, as;
    do { as = old; T cur; memcpy(&cur, &as, 8); T nv = atom_apply(op, cur, v); u64 n; memcpy(&n, &nv, 8); old = atomicCAS(w, as, n); } while (old != as);
    T r; memcpy(&r, &old, 8); return r;
  } else {
    u64 a = (u64)p; u32* w = (u32*)(a & ~(u64)3); int sh = (int)(a & 3) * 8;
    u32 mask = sizeof(T) == 4 ? ~0u : ((1u << (sizeof(T) * 8)) - 1) << sh;
    u32 old = *(volatile u32*)w, as;
    do {
      as = old; u32 bits = (as & mask) >> sh; T cur; memcpy(&cur, &bits, sizeof(T));
      T nv = atom_apply(op, cur, v); u32 nb = 0; memcpy(&nb, &nv, sizeof(T));
      old = atomicCAS(w, as, (as & ~mask) | ((nb << sh) & mask));
    } while (old != as);
    u32 bits = (old & mask) >> sh; T r; memcpy(&r, &bits, sizeof(T)); return r;
  }
}
template <class T> __device__ __forceinline__ T atom_cas(T* p, T cmp, T v) {
  if constexpr (sizeof(T) == 8) { u64 c, n; memcpy(&c, &cmp, 8); memcpy(&n, &v, 8); u64 o = atomicCAS((u64*)p, c, n); T r; memcpy(&r, &o, 8); return r; }
  else if constexpr (sizeof(T) == 4) { u32 c, n; memcpy(&c, &cmp, 4); memcpy(&n, &v, 4); u32 o = atomicCAS((u32*)p, c, n); T r; memcpy(&r, &o, 4); return r; }
  else {
    u64 a = (u64)p; u32* w = (u32*)(a & ~(u64)3); int sh = (int)(a & 3) * 8;
    u32 mask = ((1u << (sizeof(T) * 8)) - 1) << sh; u32 cb = 0, nb = 0; memcpy(&cb, &cmp, sizeof(T)); memcpy(&nb, &v, sizeof(T));
    u32 old = *(volatile u32*)w, as;
    do { as = old; if (((as & mask) >> sh) != cb) break; old = atomicCAS(w, as, (as & ~mask) | (nb << sh)); } while (old != as);
    u32 bits = (old & mask) >> sh; T r; memcpy(&r, &bits, sizeof(T)); return r;
  }
}
)PRELUDE";
}

}  // namespace pallas::cuda
