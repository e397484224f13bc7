// The interpreter's f32 GEMM (sgemm.inc): packed operands and a register-tiled micro-kernel,
// compiled three times, for AVX-512, for AVX2 + FMA and for any x86-64 (or the build's own
// target elsewhere), and chosen when the process starts, so that the library is portable and
// still fast where the CPU allows (PALLAS_NATIVE_ARCH=ON compiles everything for the build
// machine instead).
#pragma once
#include <cstdint>

#include "src/backends/interpret/value.h"

namespace pallas::interp {

// One operand as the GEMM sees it: element (r, c) of op(x) at data + r * rs + c * cs.
struct Operand2 {
  const void* data;
  DType t;
  int64_t rows, cols, rs, cs;
};

struct GemmSegment {
  Operand2 A, B;
};

inline Operand2 operand(const Val& x, bool trans) {
  int64_t s0 = x.strides.n ? x.strides[0] : x.shape[1], s1 = x.strides.n ? x.strides[1] : 1;
  Operand2 o{x.data, x.dtype, x.shape[0], x.shape[1], s0, s1};
  if (trans) std::swap(o.rows, o.cols), std::swap(o.rs, o.cs);
  return o;
}


// C (+)= sum over segments of A_s @ B_s (f32 out; f32, f16 or bf16 in; tf32 rounding if asked).
void sgemm_segments(const GemmSegment* segs, size_t n, bool tf32, float* C, int64_t ldc, bool accumulate, Ctx& ctx);
inline void sgemm(const Operand2& A, const Operand2& B, bool tf32, float* C, int64_t ldc, bool accumulate, Ctx& ctx) {
  GemmSegment s{A, B};
  sgemm_segments(&s, 1, tf32, C, ldc, accumulate, ctx);
}
// Elements of K per packed block (callers batch deferred dots up to it).
constexpr int64_t kGemmKC = 512;
// Which micro-kernel runs: "avx512", "avx2" or "portable" (PALLAS_INTERPRET_ISA caps it).
const char* sgemm_isa();

}  // namespace pallas::interp
