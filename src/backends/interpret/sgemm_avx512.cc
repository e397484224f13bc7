// The f32 GEMM compiled for AVX-512 (this file gets -mavx512f -mfma; sgemm.h). Empty where
// the compiler or the target cannot.
#if defined(PALLAS_SGEMM_AVX512)
#include <cstring>

#include "src/backends/interpret/sgemm.h"

#define SGEMM_NS avx512
#include "src/backends/interpret/sgemm.inc"
#undef SGEMM_NS
#endif
