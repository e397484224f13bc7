// The Hopper fast path for flash attention: a pallas_call structurally equal to the kernel
// library's flash_attention (kernels/attention.cc, after Pallas' ops/gpu/attention.py) for
// some (batch, heads, seq, head_dim, causal, scale) is lowered to the FA3-style mainloop of
// device/attention_sm90.cuh with its own tiling (128 query rows, 128 keys per block).
#pragma once
#include <optional>
#include <string>

#include "src/core/pallas_call.h"

namespace pallas::cuda::sm90 {

struct AttentionPlan {
  int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  DType dtype = DType::BF16;
  bool causal = false;
  double scale = 0;
  int threads = 384;
  int smem_bytes = 0;
  int64_t grid_x = 0, grid_y = 0;  // (seq / 128 query blocks, batch * heads)
  std::string entry, source;
  // Tensor maps: q, k, v as 2-D [B*H*S, 128], box {64, 128}, 128B swizzle.
  // Kernel parameters: (TensorMap q, TensorMap k, TensorMap v, T* out, int seq, float scale_log2).
};

std::optional<AttentionPlan> plan_attention(const core::PallasCall& call, std::string* why_not = nullptr);

}  // namespace pallas::cuda::sm90
