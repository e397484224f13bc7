// A small kernel library, like jax.experimental.pallas.ops.gpu: each function returns a
// ready pallas_call for the given shapes. Every kernel runs on the interpreter and the GPU.
#pragma once
#include "pallas/pallas.h"

namespace pallas::kernels {

// C[M,N] = A[M,K] @ B[K,N]: one program per (block_m x block_n) tile of C, a fori_loop over K
// accumulating in f32 (f64 for f64 operands).
// The default tile is a tensor-core one that fits any GPU's shared memory (3 stages of 32 KB
// for 16-bit inputs); tuned_matmul also tries 128 x 256, cuBLAS' tile, faster on sm_90.
struct MatmulConfig {
  int64_t block_m = 128, block_n = 128, block_k = 64;
  // > 1: a 1-D grid whose programs walk the output blocks group_m block rows at a time, down
  // each column of the group (Triton's and Pallas' grouped order), so programs that run together
  // share A and B blocks in L2; 0 or 1: a 2-D grid in row-major order.
  int64_t group_m = 8;
  CompilerParams compiler_params = {.num_warps = 8};
  bool interpret = false;
  // A stored K x M (C = A^T B) and/or B stored N x K (C = A B^T, x W^T): the backward's forms.
  bool trans_a = false, trans_b = false;
};
// An operand of another dtype than in_dtype (a cotangent in out_dtype) is converted to in_dtype
// as it is read.
Call matmul(int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype, MatmulConfig cfg = {});
// matmul (A, B) -> C with its two backward matmuls attached: the pullback of dC gives
// dA = dC B^T (M x K) and dB = A^T dC (K x N), in in_dtype, by matmul with trans_b and trans_a
// (cfg's blocks for each, clamped to its shape); A and B reach the backward as residual inputs.
CustomVjp matmul_vjp(int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype, MatmulConfig cfg = {});

// matmul for any A[M,K], B[K,N], its configuration tuned on first use per shape and device
// (pl::autotune, cached on disk): block_m, block_n, block_k, num_warps, num_stages. An empty
// space means 64/128 x 64/128 x 32/64 blocks with 4 or 8 warps, and 128 x 256 x 64 with 8
// warps, all with 3 stages.
Autotuned tuned_matmul(DType out_dtype, std::vector<Config> space = {}, bool interpret = false);

// Row softmax of x[R, N]: block_rows rows per program (1: the row dim is squeezed).
struct RowConfig {
  int64_t block_rows = 1;
  CompilerParams compiler_params = {};
  bool interpret = false;
};
Call softmax(int64_t rows, int64_t cols, DType dtype, RowConfig cfg = {});

// Layer norm of x[R, N] with weight[N], bias[N].
Call layer_norm(int64_t rows, int64_t cols, DType dtype, double eps = 1e-5, RowConfig cfg = {});

// ---- backward kernels and custom_vjp pairs (docs/transforms.md, "custom_vjp") ----
// Each *_vjp returns a pl::CustomVjp: f(x, ...) gives the primal outputs (by the plain
// forward), pl::vjp(f, {x, ...}) the outputs and a pullback from output cotangents to input
// cotangents. f16/bf16/f32 inputs are computed in f32, f64 in f64.

// dx = y * (dy - sum(dy * y, axis=-1)) from y = softmax(x) and dy, all [R, N].
Call softmax_bwd(int64_t rows, int64_t cols, DType dtype, RowConfig cfg = {});
// softmax with softmax_bwd attached; bwd receives the primal output y (not copied).
CustomVjp softmax_vjp(int64_t rows, int64_t cols, DType dtype, RowConfig cfg = {});

// The norm backward's grid: `programs` parallel programs, each walking row blocks of
// block_rows rows in sequence and summing its rows' share of dw (and db) into its own row of
// an f32 [programs, N] output (f64 for f64 inputs); norm_partial_sum then sums those rows.
// programs 0: min(128, row blocks).
struct NormBwdConfig {
  int64_t block_rows = 4;
  int64_t programs = 0;
  CompilerParams compiler_params = {};
  bool interpret = false;
};
// [programs, N] partial sums -> [N] in out_dtype (summed in f32, f64 for f64).
Call norm_partial_sum(int64_t programs, int64_t cols, DType out_dtype, bool interpret = false);

// layer_norm that also returns the residuals: (x, w, b) -> (y, mean[R], rstd[R]) (f32; f64 for f64).
Call layer_norm_fwd(int64_t rows, int64_t cols, DType dtype, double eps = 1e-5, RowConfig cfg = {});
// (x, w, mean, rstd, dy) -> (dx, dw partials [programs, N], db partials [programs, N]).
Call layer_norm_bwd(int64_t rows, int64_t cols, DType dtype, NormBwdConfig cfg = {});
// layer_norm (x, w, b) -> y with its backward attached: the pullback gives {dx, dw, db}
// (layer_norm_bwd, then norm_partial_sum for dw and db). x and w reach bwd as residual inputs.
CustomVjp layer_norm_vjp(int64_t rows, int64_t cols, DType dtype, double eps = 1e-5, RowConfig fwd_cfg = {},
                         NormBwdConfig bwd_cfg = {});

// RMS norm of x[R, N] with weight[N]: y = x * rsqrt(mean(x^2) + eps) * w.
Call rms_norm(int64_t rows, int64_t cols, DType dtype, double eps = 1e-6, RowConfig cfg = {});
// (x, w) -> (y, rstd[R]).
Call rms_norm_fwd(int64_t rows, int64_t cols, DType dtype, double eps = 1e-6, RowConfig cfg = {});
// (x, w, rstd, dy) -> (dx, dw partials [programs, N]).
Call rms_norm_bwd(int64_t rows, int64_t cols, DType dtype, NormBwdConfig cfg = {});
// rms_norm with its backward attached: the pullback gives {dx, dw}.
CustomVjp rms_norm_vjp(int64_t rows, int64_t cols, DType dtype, double eps = 1e-6, RowConfig fwd_cfg = {},
                       NormBwdConfig bwd_cfg = {});

// Flash-attention forward: q, k, v of shape [B, H, S, D]; online softmax over KV blocks.
// block_q / block_k 0: chosen from the head dim (the fastest measured on Hopper, 2026-12-06:
// 128 x 64 for D <= 64, 128 x 128 for D <= 128, 64 x 64 beyond), halved until they divide S;
// with block_q chosen, num_warps 0 means 8 for 128 query rows, else 4. Given blocks must
// divide S.
// kv_heads: grouped-query attention, k and v of shape [B, kv_heads, S, D], query head h reading
// kv head h / (heads / kv_heads); 0 means kv_heads = heads. f16/bf16/f32 compute in f32 (the
// dots round f32 to tf32, Precision::Default), f64 in f64.
struct AttentionConfig {
  int64_t block_q = 0, block_k = 0;
  bool causal = false;
  double sm_scale = 0;  // 0: 1/sqrt(D)
  CompilerParams compiler_params = {};
  bool interpret = false;
  int64_t kv_heads = 0;
  // Packed sequences: the calls take one more input after q, k, v (after the backward's
  // others), segment ids seg [B, S] i32, and query i attends to key j only where
  // seg[b, i] == seg[b, j] (and, causal, j <= i). Every query row must see one key at least
  // (its own, when causal or not).
  bool segment_ids = false;
};
Call flash_attention(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                     AttentionConfig cfg = {});

// ---- cross entropy over a vocabulary (kernels/cross_entropy.cc) ----
// loss[n] = logsumexp(x[n, :]) - x[n, t[n]] for logits x[N, V] and i32 targets t[N], computed
// in f32 (f64 for f64) over chunks of block_v columns: the softmax is never written. A row
// whose target is ignore_index has loss 0 and a zero gradient; a target outside [0, V) that is
// not ignore_index gives a NaN loss and a NaN gradient row (never a plausible number).
// Per-row losses, as torch's reduction='none': the mean is the caller's (its cotangent 1/N).
struct CrossEntropyConfig {
  int64_t block_v = 0;  // columns a step (forward) or a program (backward); 0: 4096, or V when smaller
  int64_t ignore_index = -100;  // must not be a class (negative, as torch's default)
  CompilerParams compiler_params = {};
  bool interpret = false;
};
// (x, t) -> (loss [N], lse [N]), both f32 (f64 for f64); lse is the backward's residual.
Call cross_entropy_fwd(int64_t rows, int64_t vocab, DType dtype, CrossEntropyConfig cfg = {});
// (x, t, lse, dloss [N]) -> dx [N, V] in x's dtype: (softmax(x) - onehot(t)) * dloss.
Call cross_entropy_bwd(int64_t rows, int64_t vocab, DType dtype, CrossEntropyConfig cfg = {});
// (x, t) -> loss with cross_entropy_bwd attached: the pullback gives {dx, (none for t)}; x and
// t reach bwd as residual inputs (not copied), then lse.
CustomVjp cross_entropy_vjp(int64_t rows, int64_t vocab, DType dtype, CrossEntropyConfig cfg = {});

// ---- grouped matmul for mixture-of-experts (kernels/grouped_matmul.cc) ----
// x [M, K] holds the tokens sorted by group (expert): group g takes the next group_sizes[g]
// rows. out[r] = x[r] · w[g(r)] for w [G, K, N] (trans_rhs: w stored [G, N, K], out[r] =
// x[r] · w[g(r)]^T). The sizes are a scalar-prefetch operand (i32 [G]), so one compiled call
// serves every routing; a size below 0 counts as 0 and sizes past M are cut at M (both
// reported under pl::checkify); rows after the last group get zeros. Blocks must divide M, K
// and N (or be larger: then the dimension). Computed in f32 (f64 for f64).
struct GroupedMatmulConfig {
  int64_t block_m = 128, block_n = 128, block_k = 64;
  CompilerParams compiler_params = {.num_warps = 8};
  bool interpret = false;
  bool trans_rhs = false;
};
// (group_sizes, x [M, K], w [G, K, N]) -> out [M, N] in out_dtype.
Call grouped_matmul(int64_t m, int64_t k, int64_t n, int64_t groups, DType in_dtype, DType out_dtype,
                    GroupedMatmulConfig cfg = {});
// The weights' gradient: (group_sizes, x [M, K], dy [M, N]) -> dw [G, K, N], dw[g] = x[rows of
// g]^T · dy[rows of g] (zeros for an empty group). Grid (G, K / block_k, N / block_n).
Call grouped_matmul_dw(int64_t m, int64_t k, int64_t n, int64_t groups, DType in_dtype, DType out_dtype,
                       GroupedMatmulConfig cfg = {});
// grouped_matmul with its backward attached: the pullback gives {dx, dw} (dx = dy · w[g]^T by
// grouped_matmul with trans_rhs, dw by grouped_matmul_dw) and none for the sizes.
CustomVjp grouped_matmul_vjp(int64_t m, int64_t k, int64_t n, int64_t groups, DType in_dtype, DType out_dtype,
                             GroupedMatmulConfig cfg = {});

// ---- scaled matmul of 8-bit floats (kernels/scaled_matmul.cc) ----
// out = (a · b^T) * scales, a [M, K] and b [N, K] of f8e4m3 or f8e5m2 (both K-major, the
// layout the tensor cores read 8-bit operands in, as torch._scaled_mm's b), on the tensor
// cores with f32 accumulation. Scales (f32), as torch._scaled_mm and DeepSeek-V3 take them:
//  - Tensorwise: a_scale [1, 1], b_scale [1, 1], applied once in the epilogue;
//  - Rowwise: a_scale [M, 1], b_scale [1, N] (per row of a, per row of b), in the epilogue;
//  - Blockwise: a_scale [M, K / 128] (1 x 128 blocks of a), b_scale [N / 128, K / 128]
//    (128 x 128 blocks of b); block_k is 128 and each step's product is scaled as it is added.
// Blocks must divide M, N and K (or be larger: then the dimension).
enum class ScaleKind { Tensorwise, Rowwise, Blockwise };
struct ScaledMatmulConfig {
  int64_t block_m = 128, block_n = 128, block_k = 128;
  ScaleKind scales = ScaleKind::Rowwise;
  // false (as torch._scaled_mm's default): each block_k-deep step is added into the f32 carry
  // on the CUDA cores (its dot at Precision::Highest); true: the tensor cores accumulate the
  // whole K loop, faster but with fewer accumulator bits on sm_90 (docs/dtypes.md). Blockwise
  // scales always add step by step.
  bool fast_accumulation = false;
  CompilerParams compiler_params = {.num_warps = 8};
  bool interpret = false;
};
// (a [M, K], b [N, K], a_scale, b_scale) -> out [M, N] in out_dtype (bf16, f16 or f32).
Call scaled_matmul(int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype, ScaledMatmulConfig cfg = {});

// ---- decode and paged attention (kernels/decode_attention.cc) ----
// One query token per sequence against a KV cache, as FlashDecoding: the key axis is split
// over k_splits programs per (sequence, kv head), each running the online softmax over its
// split for the kv head's whole group of query heads at once (GQA/MQA: the cache is read once
// per kv head), then a second call merges the splits' outputs by their logsumexps.
// kv_heads: 0 means heads (MHA); else it must divide heads (query head h reads kv head
// h / (heads / kv_heads)). k_splits 0: chosen (powers of two dividing the key blocks, until
// batch * kv_heads * splits reaches 264 programs). block_k: keys a step (0: 32, halved until it
// divides the keys). f16/bf16/f32 compute in f32, f64 in f64.
struct DecodeAttentionConfig {
  int64_t kv_heads = 0;
  int64_t k_splits = 0;
  int64_t block_k = 0;
  double sm_scale = 0;  // 0: 1/sqrt(D)
  CompilerParams compiler_params = {};
  bool interpret = false;
};
// The two calls. partial: (scalar-prefetch operands, q, k, v) -> (o [B, KVH, splits, G, D],
// lse [B, KVH, splits, G]) in f32 (f64 for f64), each split's output normalised, 0 with lse -inf
// where the split holds no key; merge: (o, lse) -> o [B, H, D] in the dtype (0 for a sequence
// of length 0). operator() runs both.
struct DecodeAttention {
  Call partial, merge;
  std::vector<Array> operator()(const std::vector<Array>& args) const;
};
// (lengths [B] i32 (scalar prefetch), q [B, H, D], k [B, KVH, S, D], v [B, KVH, S, D]) -> o
// [B, H, D]: sequence b attends to its first lengths[b] keys. A length outside [0, S] is
// clamped into it and reported by a pl::check (an error under pl::checkify); no read ever
// leaves the cache.
DecodeAttention decode_attention(int64_t batch, int64_t heads, int64_t keys, int64_t head_dim, DType dtype,
                                 DecodeAttentionConfig cfg = {});
// Paged: (lengths [B] i32, block_tables [B, pages_per_seq] i32 (both scalar prefetch), q [B, H, D],
// k_pages [KVH, total_pages, page_size, D], v_pages likewise) -> o [B, H, D]: sequence b's key t
// is row t % page_size of page block_tables[b, t / page_size]; a step reads one page (block_k
// is page_size), and k_splits must divide pages_per_seq. A block-table entry outside
// [0, total_pages) or a length outside [0, pages_per_seq * page_size] is clamped and reported
// as for decode_attention. Pages past a sequence's length are never read.
DecodeAttention paged_attention(int64_t batch, int64_t heads, int64_t pages_per_seq, int64_t page_size, int64_t total_pages,
                                int64_t head_dim, DType dtype, DecodeAttentionConfig cfg = {});

// ---- flash attention backward (FlashAttention-2), docs/transforms.md "Backward kernels" ----
// (q, k, v) -> (o, lse [B, H, S]): the forward that also writes L = m + log(l), the natural
// logsumexp of each query row's scaled scores (f32; f64 for f64), the backward's residual.
Call flash_attention_fwd(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                         AttentionConfig cfg = {});
// Blocks of the backward kernels (given blocks must divide S; 0: chosen, halved until it divides
// S: 64 x 64 for dK/dV, 128 x 128 for dQ up to head dim 128 and not causal, else 64 x 64; the
// preprocess 64). dK/dV kernel: block_k keys per program, block_q query rows per loop step; dQ
// kernel: block_q query rows per program, block_k keys per loop step; the preprocess: block_q
// rows per program. compiler_params 0s: 8 warps for 128-row programs or head dims past 128,
// else 4; 2 stages.
struct AttentionBwdConfig {
  int64_t block_q = 0, block_k = 0;
  CompilerParams compiler_params = {};
  bool interpret = false;
};
// (o, do) -> delta [B, H, S] = rowsum(o * do) (f32; f64 for f64).
Call flash_attention_bwd_preprocess(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                                    AttentionBwdConfig cfg = {});
// (q, k, v, do, lse, delta[, seg]) -> (dk, dv), k/v-shaped. attn gives causal, sm_scale, kv_heads
// and segment_ids
// (its blocks are the forward's and not used here). Grid (B, kv_heads, S / block_k); each
// program loops over the query blocks of every query head of its group (causal: from the
// diagonal on), summing the group's contributions.
Call flash_attention_bwd_dkdv(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                              AttentionConfig attn = {}, AttentionBwdConfig cfg = {});
// (q, k, v, do, lse, delta[, seg]) -> dq. Grid (B, heads, S / block_q); each program loops over the
// key blocks (causal: up to the diagonal).
Call flash_attention_bwd_dq(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                            AttentionConfig attn = {}, AttentionBwdConfig cfg = {});
// flash_attention (q, k, v[, seg]) -> o with its backward attached: the pullback gives {dq, dk, dv}
// (and none for seg)
// (flash_attention_bwd_preprocess, then the dK/dV and dQ kernels). q, k, v reach bwd as residual
// inputs and o as a residual output (no copies), then lse; f(q, k, v) runs flash_attention.
CustomVjp flash_attention_vjp(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                              AttentionConfig cfg = {}, AttentionBwdConfig bwd_cfg = {});

}  // namespace pallas::kernels
