// Flash-attention forward (online softmax over KV blocks), as Pallas' ops/gpu/attention.py, and
// the forward that also writes the logsumexp residual its backward needs (kernels/attention_vjp.cc).
#include <cmath>

#include "kernels/attention_common.h"
#include "pallas/kernels.h"

namespace pallas::kernels {

namespace detail_attention {

void check_attention(const char* kernel, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                     int64_t kv_heads) {
  auto name = std::string("pl::kernels::") + kernel;
  if (batch <= 0 || heads <= 0 || seq <= 0 || head_dim <= 0)
    throw Error(name + ": batch, heads, seq and head_dim must be positive (batch=" + std::to_string(batch) +
                ", heads=" + std::to_string(heads) + ", seq=" + std::to_string(seq) +
                ", head_dim=" + std::to_string(head_dim) + ")");
  if (!is_float(dtype)) throw Error(name + ": dtype is " + dtype_name(dtype) + "; the kernel takes f16, bf16, f32 or f64");
  if (kv_heads < 0 || (kv_heads > 0 && heads % kv_heads))
    throw Error(name + ": kv_heads is " + std::to_string(kv_heads) + "; it must divide heads (" + std::to_string(heads) +
                "), or be 0 for kv_heads = heads");
}

int64_t block_size(const char* kernel, const char* what, int64_t given, int64_t fallback, int64_t seq) {
  if (given < 0)
    throw Error(std::string("pl::kernels::") + kernel + ": " + what + " is " + std::to_string(given) +
                "; give a positive block, or 0 to choose one");
  if (!given) {
    int64_t b = std::min(fallback, seq);
    while (seq % b) b /= 2;
    return b;
  }
  int64_t b = std::min(given, seq);
  if (seq % b)
    throw Error(std::string("pl::kernels::") + kernel + ": seq=" + std::to_string(seq) + " must be a multiple of " + what +
                " (" + std::to_string(b) + ")");
  return b;
}

double softmax_scale(const AttentionConfig& cfg, int64_t head_dim) {
  return cfg.sm_scale > 0 ? cfg.sm_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

BlockSpec segment_spec(int64_t seq) {
  return BlockSpec({squeezed, seq}, [](Value b, Value, Value) { return idx(b, 0); });
}

}  // namespace detail_attention

namespace {
using namespace detail_attention;

// The forward; with_lse: also write L = m + log(l) per query row (natural log, in the compute
// dtype: f32, f64 for f64) as a second output.
Call attention_forward(const char* kname, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                       AttentionConfig cfg, bool with_lse) {
  check_attention(kname, batch, heads, seq, head_dim, dtype, cfg.kv_heads);
  // Unset blocks: per head dim, the configuration measured fastest on Hopper (docs/benchmarks.md,
  // fourteenth session), halved until it divides seq.
  int64_t bq = block_size(kname, "block_q", cfg.block_q, head_dim <= 128 ? 128 : 64, seq);
  int64_t bk = block_size(kname, "block_k", cfg.block_k, head_dim > 64 && head_dim <= 128 ? 128 : 64, seq);
  CompilerParams params = cfg.compiler_params;
  if (!params.num_warps && !cfg.block_q) params.num_warps = bq >= 128 ? 8 : 4;  // a warpgroup per 64 query rows
  double scale = softmax_scale(cfg, head_dim);
  double scale_log2 = scale * 1.4426950408889634;  // log2(e)
  bool causal = cfg.causal;
  int64_t kv_heads = cfg.kv_heads ? cfg.kv_heads : heads;
  int64_t group = heads / kv_heads;
  DType acc_t = dtype == DType::F64 ? DType::F64 : DType::F32;
  const bool segments = cfg.segment_ids;
  auto kernel = [=](std::vector<Ref> r) {
    // inputs q, k, v[, seg], then o[, lse]
    const size_t o = segments ? 4 : 3;
    const Ref &q_ref = r[0], &k_ref = r[1], &v_ref = r[2], &o_ref = r[o];
    Value qi = program_id(2);
    Value q = q_ref[all];
    Value m0 = full({bq}, -INFINITY, acc_t), l0 = zeros({bq}, acc_t), acc0 = zeros({bq, head_dim}, acc_t);
    // Causal: KV blocks past the diagonal are skipped by the loop bound.
    Value hi = causal ? Value((qi + 1) * bq + bk - 1) / bk : Value(seq / bk);
    Value seg_q = segments ? r[3](ds(qi * bq, bq)) : Value();
    auto outs = fori_loop(0, hi, std::vector<Value>{m0, l0, acc0}, [&](Value j, std::vector<Value> c) {
      Value kb = k_ref(ds(j * bk, bk), all);
      Value vb = v_ref(ds(j * bk, bk), all);
      Value s = dot(q, kb, {.trans_b = true});
      if (causal) {
        Value rows = qi * bq + iota(DType::I32, {bq, bk}, 0);
        Value cols = j * bk + iota(DType::I32, {bq, bk}, 1);
        s = where(rows >= cols, s, -INFINITY);
      }
      if (segments) {
        Value seg_k = r[3](ds(j * bk, bk));
        s = where(expand_dims(seg_q, 1) == expand_dims(seg_k, 0), s, -INFINITY);
      }
      // In base 2, as Triton's fused-attention tutorial: m is the running row maximum of
      // s * scale * log2(e) (max(s) * c is max(s * c) exactly for c > 0), and p = 2^(s*c - m)
      // is the same softmax numerator as e^(s*scale - m'), one multiply-add and an exp2 an
      // element instead of a multiply, a subtract and an exp.
      // (The running max only keeps exp2 in range, o and lse do not depend on it: no gradient,
      // so pl::vjp of this kernel skips its paths.)
      Value m_new = stop_gradient(maximum(c[0], max(s, 1) * scale_log2));
      // With segments a block may hide every key of a row (an earlier segment's): its maximum
      // stays -inf, and 2^(-inf - -inf) would be NaN, so such rows subtract 0 instead (their p
      // is 2^-inf = 0, and their alpha too). (A finite mask value, JAX's DEFAULT_MASK_VALUE,
      // breaks on the GPU: s * c - m contracts into one fma whose unrounded product minus the
      // rounded m is off by up to 2^72 for |s| near 1e38, so p is 2^(+huge) = inf.)
      Value m_sub = segments ? where(m_new == -INFINITY, zeros_like(m_new), m_new) : m_new;
      Value alpha = exp2(c[0] - m_sub);
      Value p = exp2(s * scale_log2 - expand_dims(m_sub, 1));
      Value l_new = c[1] * alpha + sum(p, 1);
      Value acc = c[2] * expand_dims(alpha, 1) + dot(p.astype(dtype), vb);
      return std::vector<Value>{m_new, l_new, acc};
    });
    o_ref[all] = (outs[2] / expand_dims(outs[1], 1)).astype(dtype);
    // m is in base-2 units: the natural logsumexp of s * scale is m * ln(2) + log(l).
    if (with_lse) r[o + 1][all] = outs[0] * 0.6931471805599453 + log(outs[1]);
  };
  BlockSpec qspec({squeezed, squeezed, bq, head_dim}, [](Value b, Value h, Value i) { return idx(b, h, i, 0); });
  BlockSpec kvspec =
      group == 1 ? BlockSpec({squeezed, squeezed, seq, head_dim}, [](Value b, Value h, Value) { return idx(b, h, 0, 0); })
                 : BlockSpec({squeezed, squeezed, seq, head_dim},
                             [group](Value b, Value h, Value) { return idx(b, h / group, 0, 0); });
  int64_t flops = 4 * batch * heads * seq * seq * head_dim / (causal ? 2 : 1);
  std::vector<ShapeDtype> outs = {ShapeDtype({batch, heads, seq, head_dim}, dtype)};
  std::vector<BlockSpec> out_specs = {qspec};
  if (with_lse) {
    outs.push_back(ShapeDtype({batch, heads, seq}, acc_t));
    out_specs.push_back(BlockSpec({squeezed, squeezed, bq}, [](Value b, Value h, Value i) { return idx(b, h, i); }));
  }
  std::string name = std::string(kname) + (causal ? "_causal" : "") + (segments ? "_segments" : "");
  std::vector<BlockSpec> in_specs = {qspec, kvspec, kvspec};
  if (segments) in_specs.push_back(segment_spec(seq));
  return pallas_call(kernel, outs,
                     {.grid = {batch, heads, seq / bq},
                      .in_specs = in_specs,
                      .out_specs = out_specs,
                      .interpret = cfg.interpret,
                      .name = name,
                      .compiler_params = params,
                      .cost_estimate = CostEstimate{flops, batch * heads * seq * seq, 0}});
}

}  // namespace

Call flash_attention(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype, AttentionConfig cfg) {
  return attention_forward("flash_attention", batch, heads, seq, head_dim, dtype, cfg, false);
}

Call flash_attention_fwd(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype, AttentionConfig cfg) {
  return attention_forward("flash_attention_fwd", batch, heads, seq, head_dim, dtype, cfg, true);
}

}  // namespace pallas::kernels
