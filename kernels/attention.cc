// Flash-attention forward (online softmax over KV blocks), as Pallas' ops/gpu/attention.py.
#include <cmath>

#include "pallas/kernels.h"

namespace pallas::kernels {

Call flash_attention(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype, AttentionConfig cfg) {
  if (seq <= 0 || head_dim <= 0 || cfg.block_q < 0 || cfg.block_k < 0)
    throw Error("kernels::flash_attention: seq, head_dim and the blocks must be positive (seq=" + std::to_string(seq) +
                ", head_dim=" + std::to_string(head_dim) + ")");
  // Unset blocks: per head dim, the configuration measured fastest on Hopper (docs/benchmarks.md,
  // fourteenth session), halved until it divides seq.
  auto chosen = [seq](int64_t b) {
    b = std::min(b, seq);
    while (seq % b) b /= 2;
    return b;
  };
  int64_t bq = cfg.block_q ? std::min(cfg.block_q, seq) : chosen(head_dim <= 128 ? 128 : 64);
  int64_t bk = cfg.block_k ? std::min(cfg.block_k, seq) : chosen(head_dim > 64 && head_dim <= 128 ? 128 : 64);
  if (seq % bq || seq % bk)
    throw Error("kernels::flash_attention: seq=" + std::to_string(seq) + " must be a multiple of block_q and block_k");
  CompilerParams params = cfg.compiler_params;
  if (!params.num_warps && !cfg.block_q) params.num_warps = bq >= 128 ? 8 : 4;  // a warpgroup per 64 query rows
  double scale = cfg.sm_scale > 0 ? cfg.sm_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  double scale_log2 = scale * 1.4426950408889634;  // log2(e)
  bool causal = cfg.causal;
  auto kernel = [=](Ref q_ref, Ref k_ref, Ref v_ref, Ref o_ref) {
    Value qi = program_id(2);
    Value q = q_ref[all];
    Value m0 = full({bq}, -INFINITY), l0 = zeros({bq}), acc0 = zeros({bq, head_dim});
    // Causal: KV blocks past the diagonal are skipped by the loop bound.
    Value hi = causal ? Value((qi + 1) * bq + bk - 1) / bk : Value(seq / bk);
    auto outs = fori_loop(0, hi, std::vector<Value>{m0, l0, acc0}, [&](Value j, std::vector<Value> c) {
      Value kb = k_ref(ds(j * bk, bk), all);
      Value vb = v_ref(ds(j * bk, bk), all);
      Value s = dot(q, kb, {.trans_b = true});
      if (causal) {
        Value rows = qi * bq + iota(DType::I32, {bq, bk}, 0);
        Value cols = j * bk + iota(DType::I32, {bq, bk}, 1);
        s = where(rows >= cols, s, -INFINITY);
      }
      // In base 2, as Triton's fused-attention tutorial: m is the running row maximum of
      // s * scale * log2(e) (max(s) * c is max(s * c) exactly for c > 0), and p = 2^(s*c - m)
      // is the same softmax numerator as e^(s*scale - m'), one multiply-add and an exp2 an
      // element instead of a multiply, a subtract and an exp.
      Value m_new = maximum(c[0], max(s, 1) * scale_log2);
      Value alpha = exp2(c[0] - m_new);
      Value p = exp2(s * scale_log2 - expand_dims(m_new, 1));
      Value l_new = c[1] * alpha + sum(p, 1);
      Value acc = c[2] * expand_dims(alpha, 1) + dot(p.astype(dtype), vb);
      return std::vector<Value>{m_new, l_new, acc};
    });
    o_ref[all] = (outs[2] / expand_dims(outs[1], 1)).astype(dtype);
  };
  BlockSpec qspec({squeezed, squeezed, bq, head_dim}, [](Value b, Value h, Value i) { return idx(b, h, i, 0); });
  BlockSpec kvspec({squeezed, squeezed, seq, head_dim}, [](Value b, Value h, Value) { return idx(b, h, 0, 0); });
  int64_t flops = 4 * batch * heads * seq * seq * head_dim / (causal ? 2 : 1);
  return pallas_call(kernel, ShapeDtype({batch, heads, seq, head_dim}, dtype),
                     {.grid = {batch, heads, seq / bq},
                      .in_specs = {qspec, kvspec, kvspec},
                      .out_specs = {qspec},
                      .interpret = cfg.interpret,
                      .name = causal ? "flash_attention_causal" : "flash_attention",
                      .compiler_params = params,
                      .cost_estimate = CostEstimate{flops, batch * heads * seq * seq, 0}});
}

}  // namespace pallas::kernels
