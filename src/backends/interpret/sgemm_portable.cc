// The f32 GEMM compiled for the build's target (any x86-64 unless PALLAS_NATIVE_ARCH), and
// the choice between it and the AVX-512 one (sgemm.h).
#include <cstdlib>
#include <cstring>
#include <string>

#include "src/backends/interpret/sgemm.h"

#define SGEMM_NS portable
#include "src/backends/interpret/sgemm.inc"
#undef SGEMM_NS

namespace pallas::interp {

#if defined(PALLAS_SGEMM_AVX512)
namespace avx512 {
void sgemm_segments(const GemmSegment* segs, size_t n, bool tf32, float* C, int64_t ldc, bool accumulate, Ctx& ctx);
}
#endif
#if defined(PALLAS_SGEMM_AVX2)
namespace avx2 {
void sgemm_segments(const GemmSegment* segs, size_t n, bool tf32, float* C, int64_t ldc, bool accumulate, Ctx& ctx);
}
#endif

namespace {
enum class Isa { Portable, Avx2, Avx512 };
// The best kernel this CPU runs; PALLAS_INTERPRET_ISA=portable|avx2 caps it.
Isa isa() {
  static const Isa chosen = [] {
    const char* f = std::getenv("PALLAS_INTERPRET_ISA");
    std::string cap = f ? f : "";
    if (!cap.empty() && cap != "portable" && cap != "avx2" && cap != "avx512")
      throw Error("PALLAS_INTERPRET_ISA='" + cap + "': use portable, avx2 or avx512");
#if defined(__x86_64__) || defined(__i386__)
#if defined(PALLAS_SGEMM_AVX512)
    if ((cap.empty() || cap == "avx512") && __builtin_cpu_supports("avx512f")) return Isa::Avx512;
#endif
#if defined(PALLAS_SGEMM_AVX2)
    if (cap != "portable" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
#endif
    return Isa::Portable;
  }();
  return chosen;
}
}  // namespace

void sgemm_segments(const GemmSegment* segs, size_t n, bool tf32, float* C, int64_t ldc, bool accumulate, Ctx& ctx) {
  switch (isa()) {
#if defined(PALLAS_SGEMM_AVX512)
    case Isa::Avx512: return avx512::sgemm_segments(segs, n, tf32, C, ldc, accumulate, ctx);
#endif
#if defined(PALLAS_SGEMM_AVX2)
    case Isa::Avx2: return avx2::sgemm_segments(segs, n, tf32, C, ldc, accumulate, ctx);
#endif
    default: return portable::sgemm_segments(segs, n, tf32, C, ldc, accumulate, ctx);
  }
}

const char* sgemm_isa() {
  switch (isa()) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "portable";
  }
}

}  // namespace pallas::interp
