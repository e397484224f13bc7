// Shared by the flash-attention forward (kernels/attention.cc) and backward
// (kernels/attention_vjp.cc): argument checks and block choice, with messages that name the kernel.
#pragma once
#include <string>

#include "pallas/kernels.h"

namespace pallas::kernels::detail_attention {

// batch, heads, seq, head_dim positive; a float dtype; kv_heads 0 or a divisor of heads.
void check_attention(const char* kernel, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                     int64_t kv_heads);
// A block along seq: `given` (at most seq; it must divide seq), or when 0 `fallback` halved
// until it divides seq. `what` names the option in messages.
int64_t block_size(const char* kernel, const char* what, int64_t given, int64_t fallback, int64_t seq);
// cfg.sm_scale, or 1/sqrt(head_dim) when it is 0.
double softmax_scale(const AttentionConfig& cfg, int64_t head_dim);
// The segment ids' block: batch b's whole row [S] (grids (B, heads, blocks)).
BlockSpec segment_spec(int64_t seq);

}  // namespace pallas::kernels::detail_attention
