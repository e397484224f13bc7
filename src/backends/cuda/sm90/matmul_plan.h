// The Hopper fast path for matmul loops: a pallas_call whose kernel is the matmul pattern
//   acc = fori_loop(0, K/bk, zeros, acc + dot(a[:, ds(k*bk, bk)], b[ds(k*bk, bk), :])); o[...] = acc.astype(t)
// with blocks A (bm, K) at (i, 0), B (K, bn) at (0, j), C (bm, bn) at (i, j) computes C = A @ B,
// whatever the block sizes. On sm_90a it is lowered to the warp-specialised wgmma/TMA mainloop
// (device/gemm_sm90.cuh) with its own tiling (128 x BN x 64, BN = 256 or 128).
#pragma once
#include <optional>
#include <string>

#include "src/core/pallas_call.h"

namespace pallas::cuda::sm90 {

struct MatmulPlan {
  int64_t m = 0, n = 0, k = 0;
  DType in = DType::BF16, out = DType::F32;
  int bn = 256, stages = 4;
  int threads = 384;
  int smem_bytes = 0;     // dynamic shared memory
  int64_t grid = 0;       // linear grid of 128 x bn tiles
  std::string entry;      // kernel symbol
  std::string source;     // CUDA C++ for NVRTC (device sources included)
  // Tensor maps the launcher encodes (2-D, bf16/f16, 128-byte swizzle):
  //   A: dims {K, M}, box {64, 128};  B: dims {N, K}, box {64, 64}.
  // Kernel parameters: (TensorMap a, TensorMap b, out* c, int M, int N, int K).
};

// Why the call does not match (empty when it does), for the debug log.
std::optional<MatmulPlan> plan_matmul(const core::PallasCall& call, std::string* why_not = nullptr);

// hopper.cuh + wgmma_ops.inc + gemm_sm90.cuh, embedded at build time.
const std::string& device_sources();

}  // namespace pallas::cuda::sm90
