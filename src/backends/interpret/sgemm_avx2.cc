// The f32 GEMM compiled for AVX2 + FMA (this file gets -mavx2 -mfma; sgemm.h). Empty where the
// compiler or the target cannot.
#if defined(PALLAS_SGEMM_AVX2)
#include <cstring>

#include "src/backends/interpret/sgemm.h"

#define SGEMM_NS avx2
#include "src/backends/interpret/sgemm.inc"
#undef SGEMM_NS
#endif
