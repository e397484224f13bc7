// Flash-attention backward (FlashAttention-2, Dao 2023, Algorithm 2), written in the kernel
// language as a user writes it from the paper, and the custom_vjp pair that attaches it to
// flash_attention.
//
// The forward keeps L = m + log(l) per query row (flash_attention_fwd). The backward then never
// holds a softmax row: it recomputes P = exp(Q K^T * scale - L) block by block.
//   1. preprocess: delta = rowsum(O * dO) per query row;
//   2. dK/dV: one program per key block (of each kv head), looping over the query blocks (of
//      every query head in its group): S = Q K^T * scale, P = exp(S - L), dV += P^T dO,
//      dP = dO V^T, dS = P * (dP - delta), dK += dS^T Q (scaled once at the end) — computed as
//      the transposes S^T = K Q^T, P^T, dP^T = V dO^T and dS^T, whose rows are the program's
//      keys, so P^T and dS^T feed the next dots from registers;
//   3. dQ: one program per query block, looping over the key blocks: the same S, P, dP, dS,
//      then dQ += dS K (scaled once at the end).
// Causal: loops start (dK/dV) or stop (dQ) at the diagonal, and the blocks are masked as the
// forward masks them. f16/bf16/f32 compute in f32, f64 in f64.
#include <cmath>

#include "kernels/attention_common.h"
#include "pallas/kernels.h"

namespace pallas::kernels {

namespace {
using namespace detail_attention;

DType acc_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

struct BwdShape {
  int64_t bq, bk, kv_heads, group;
  double scale;
  CompilerParams params;
};

// Unset blocks and params: measured fastest on an H100 (docs/benchmarks.md, 2026-12-07, D128):
// dK/dV 64 x 64 on 4 warps; dQ 128 x 128 on 8 warps, 64 x 64 causal (its diagonal blocks waste
// more of a larger block); past head dim 128, 8 warps for dK/dV (below); 2 stages: the loop then leaves room for two CUDA blocks an SM, worth more
// than a third stage (dK/dV 480 TFLOP/s at 2 stages, 304 at 3).
BwdShape bwd_shape(const char* kname, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                   const AttentionConfig& attn, const AttentionBwdConfig& cfg, bool dq) {
  check_attention(kname, batch, heads, seq, head_dim, dtype, attn.kv_heads);
  BwdShape s;
  int64_t wide = dq && !attn.causal && head_dim <= 128 ? 128 : 64;
  s.bq = block_size(kname, "block_q", cfg.block_q, wide, seq);
  s.bk = block_size(kname, "block_k", cfg.block_k, wide, seq);
  s.params = cfg.compiler_params;
  // Past head dim 128: dK/dV on 8 warps (its two [64, D] f32 accumulators split over two
  // warpgroups), dQ on 4 (one accumulator, 246 registers, no spills): H100, D256 sweep,
  // 2026-12-07 twentieth session: dK/dV w4 167 / w8 335 / w16 289 TFLOP/s; dQ w4 456 / w8 351.
  if (!s.params.num_warps) s.params.num_warps = (dq ? s.bq : s.bk) >= 128 || (head_dim > 128 && !dq) ? 8 : 4;
  if (!s.params.num_stages) s.params.num_stages = 2;
  s.kv_heads = attn.kv_heads ? attn.kv_heads : heads;
  s.group = heads / s.kv_heads;
  s.scale = softmax_scale(attn, head_dim);
  return s;
}

std::string with_causal(const char* name, const AttentionConfig& attn) {
  return std::string(name) + (attn.causal ? "_causal" : "") + (attn.segment_ids ? "_segments" : "");
}

}  // namespace

Call flash_attention_bwd_preprocess(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                                    AttentionBwdConfig cfg) {
  const char* kname = "flash_attention_bwd_preprocess";
  check_attention(kname, batch, heads, seq, head_dim, dtype, 0);
  int64_t bq = block_size(kname, "block_q", cfg.block_q, 64, seq);
  DType acc = acc_dtype(dtype);
  auto kernel = [=](Ref o, Ref d_o, Ref delta) { delta[all] = sum(o[all].astype(acc) * d_o[all].astype(acc), 1); };
  BlockSpec rows({squeezed, squeezed, bq, head_dim}, [](Value b, Value h, Value i) { return idx(b, h, i, 0); });
  BlockSpec stat({squeezed, squeezed, bq}, [](Value b, Value h, Value i) { return idx(b, h, i); });
  return pallas_call(kernel, ShapeDtype({batch, heads, seq}, acc),
                     {.grid = {batch, heads, seq / bq},
                      .in_specs = {rows, rows},
                      .out_specs = {stat},
                      .interpret = cfg.interpret,
                      .name = kname,
                      .compiler_params = cfg.compiler_params});
}

Call flash_attention_bwd_dkdv(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                              AttentionConfig attn, AttentionBwdConfig cfg) {
  const char* kname = "flash_attention_bwd_dkdv";
  BwdShape sh = bwd_shape(kname, batch, heads, seq, head_dim, dtype, attn, cfg, false);
  const int64_t bq = sh.bq, bk = sh.bk, group = sh.group, nq = seq / bq;
  const double scale = sh.scale;
  const bool causal = attn.causal;
  DType acc = acc_dtype(dtype);
  const bool segments = attn.segment_ids;
  auto kernel = [=](std::vector<Ref> r) {
    const Ref &q_ref = r[0], &k_ref = r[1], &v_ref = r[2], &do_ref = r[3], &lse_ref = r[4], &delta_ref = r[5];
    const size_t out = segments ? 7 : 6;  // after the inputs (and the segment ids)
    const Ref &dk_ref = r[out], &dv_ref = r[out + 1];
    Value j = program_id(2);
    Value k = k_ref[all];
    Value v = v_ref[all];
    Value seg_k = segments ? r[6](ds(j * bk, bk)) : Value();
    // Causal: query blocks that end before this key block starts see none of it.
    Value i0 = causal ? Value(j * bk / bq) : Value(0);
    Value count = nq - i0;  // query blocks per query head
    // One step per (query head of the group, query block). Without grouping the q, do, lse and
    // delta blocks hold one head (squeezed); with it, the group's heads, indexed by g.
    auto body = [&](Value t, std::vector<Value> c) {
      Value i = group == 1 ? i0 + t : i0 + t % count;
      Value g = group == 1 ? Value(0) : t / count;
      auto rows = [&](const Ref& r) { return group == 1 ? r(ds(i * bq, bq), all) : r(g, ds(i * bq, bq), all); };
      auto stat = [&](const Ref& r) { return group == 1 ? r(ds(i * bq, bq)) : r(g, ds(i * bq, bq)); };
      Value q = rows(q_ref);
      Value d_o = rows(do_ref);
      Value l = stat(lse_ref);
      Value dl = stat(delta_ref);
      // Transposed blocks, rows the program's keys: S^T = K Q^T, so that P^T and dS^T are the
      // first operands of dV += P^T dO and dK += dS^T Q as they stand (a tensor-core dot takes
      // them from its registers, no transpose through shared memory).
      Value st = dot(k, q, {.trans_b = true}) * scale;  // S^T: [bk, bq]
      if (causal) {
        Value key = j * bk + iota(DType::I32, {bk, bq}, 0);
        Value query = i * bq + iota(DType::I32, {bk, bq}, 1);
        st = where(query >= key, st, -INFINITY);
      }
      if (segments) st = where(expand_dims(seg_k, 1) == expand_dims(r[6](ds(i * bq, bq)), 0), st, full_like(st, -INFINITY));
      Value pt = exp(st - expand_dims(l, 0));                // P^T
      Value dv = c[1] + dot(pt.astype(dtype), d_o);          // P^T dO: [bk, D]
      Value dpt = dot(v, d_o, {.trans_b = true});            // dP^T = V dO^T: [bk, bq]
      Value dst = pt * (dpt - expand_dims(dl, 0));           // dS^T
      Value dk = c[0] + dot(dst.astype(dtype), q);           // dS^T Q: [bk, D]
      return std::vector<Value>{dk, dv};
    };
    auto outs = fori_loop(0, count * group, std::vector<Value>{zeros({bk, head_dim}, acc), zeros({bk, head_dim}, acc)},
                          body);
    dk_ref[all] = (outs[0] * scale).astype(dtype);
    dv_ref[all] = outs[1].astype(dtype);
  };
  BlockSpec kv({squeezed, squeezed, bk, head_dim}, [](Value b, Value h, Value j) { return idx(b, h, j, 0); });
  BlockSpec rows = group == 1 ? BlockSpec({squeezed, squeezed, seq, head_dim},
                                          [](Value b, Value h, Value) { return idx(b, h, 0, 0); })
                              : BlockSpec({squeezed, group, seq, head_dim},
                                          [](Value b, Value h, Value) { return idx(b, h, 0, 0); });
  BlockSpec stat = group == 1
                       ? BlockSpec({squeezed, squeezed, seq}, [](Value b, Value h, Value) { return idx(b, h, 0); })
                       : BlockSpec({squeezed, group, seq}, [](Value b, Value h, Value) { return idx(b, h, 0); });
  ShapeDtype kv_shape({batch, sh.kv_heads, seq, head_dim}, dtype);
  int64_t flops = 8 * batch * heads * seq * seq * head_dim / (causal ? 2 : 1);
  std::vector<BlockSpec> in_specs = {rows, kv, kv, rows, stat, stat};
  if (segments) in_specs.push_back(segment_spec(seq));
  return pallas_call(kernel, std::vector<ShapeDtype>{kv_shape, kv_shape},
                     {.grid = {batch, sh.kv_heads, seq / bk},
                      .in_specs = in_specs,
                      .out_specs = {kv, kv},
                      .interpret = cfg.interpret,
                      .name = with_causal(kname, attn),
                      .compiler_params = sh.params,
                      .cost_estimate = CostEstimate{flops, batch * heads * seq * seq, 0}});
}

Call flash_attention_bwd_dq(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                            AttentionConfig attn, AttentionBwdConfig cfg) {
  const char* kname = "flash_attention_bwd_dq";
  BwdShape sh = bwd_shape(kname, batch, heads, seq, head_dim, dtype, attn, cfg, true);
  const int64_t bq = sh.bq, bk = sh.bk, group = sh.group;
  const double scale = sh.scale;
  const bool causal = attn.causal;
  DType acc = acc_dtype(dtype);
  const bool segments = attn.segment_ids;
  auto kernel = [=](std::vector<Ref> r) {
    const Ref &q_ref = r[0], &k_ref = r[1], &v_ref = r[2], &do_ref = r[3], &lse_ref = r[4], &delta_ref = r[5];
    const Ref& dq_ref = r[segments ? 7 : 6];
    Value i = program_id(2);
    Value q = q_ref[all];
    Value seg_q = segments ? r[6](ds(i * bq, bq)) : Value();
    Value d_o = do_ref[all];
    Value l = expand_dims(lse_ref[all], 1);
    Value dl = expand_dims(delta_ref[all], 1);
    // Causal: key blocks past the diagonal are skipped by the loop bound.
    Value hi = causal ? Value((i + 1) * bq + bk - 1) / bk : Value(seq / bk);
    Value dq = fori_loop(0, hi, Value(zeros({bq, head_dim}, acc)), [&](Value j, Value acc_dq) {
      Value kb = k_ref(ds(j * bk, bk), all);
      Value vb = v_ref(ds(j * bk, bk), all);
      Value s = dot(q, kb, {.trans_b = true}) * scale;  // [bq, bk]
      if (causal) {
        Value rw = i * bq + iota(DType::I32, {bq, bk}, 0);
        Value cl = j * bk + iota(DType::I32, {bq, bk}, 1);
        s = where(rw >= cl, s, -INFINITY);
      }
      if (segments) s = where(expand_dims(seg_q, 1) == expand_dims(r[6](ds(j * bk, bk)), 0), s, full_like(s, -INFINITY));
      Value p = exp(s - l);
      Value dp = dot(d_o, vb, {.trans_b = true});  // dO V^T: [bq, bk]
      Value dsc = p * (dp - dl);
      return acc_dq + dot(dsc.astype(dtype), kb);  // dS K: [bq, D]
    });
    dq_ref[all] = (dq * scale).astype(dtype);
  };
  BlockSpec rows({squeezed, squeezed, bq, head_dim}, [](Value b, Value h, Value i) { return idx(b, h, i, 0); });
  BlockSpec stat({squeezed, squeezed, bq}, [](Value b, Value h, Value i) { return idx(b, h, i); });
  BlockSpec kv = group == 1 ? BlockSpec({squeezed, squeezed, seq, head_dim},
                                        [](Value b, Value h, Value) { return idx(b, h, 0, 0); })
                            : BlockSpec({squeezed, squeezed, seq, head_dim},
                                        [group](Value b, Value h, Value) { return idx(b, h / group, 0, 0); });
  int64_t flops = 6 * batch * heads * seq * seq * head_dim / (causal ? 2 : 1);
  std::vector<BlockSpec> in_specs = {rows, kv, kv, rows, stat, stat};
  if (segments) in_specs.push_back(segment_spec(seq));
  return pallas_call(kernel, ShapeDtype({batch, heads, seq, head_dim}, dtype),
                     {.grid = {batch, heads, seq / bq},
                      .in_specs = in_specs,
                      .out_specs = {rows},
                      .interpret = cfg.interpret,
                      .name = with_causal(kname, attn),
                      .compiler_params = sh.params,
                      .cost_estimate = CostEstimate{flops, batch * heads * seq * seq, 0}});
}

CustomVjp flash_attention_vjp(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, DType dtype,
                              AttentionConfig cfg, AttentionBwdConfig bwd_cfg) {
  Call fwd = flash_attention_fwd(batch, heads, seq, head_dim, dtype, cfg);
  Call primal = flash_attention(batch, heads, seq, head_dim, dtype, cfg);
  Call pre = flash_attention_bwd_preprocess(batch, heads, seq, head_dim, dtype, bwd_cfg);
  Call dkdv = flash_attention_bwd_dkdv(batch, heads, seq, head_dim, dtype, cfg, bwd_cfg);
  Call dq = flash_attention_bwd_dq(batch, heads, seq, head_dim, dtype, cfg, bwd_cfg);
  // Traced now for the shapes they were made for, so that arrays of other shapes are refused
  // at the first call rather than read as padded blocks.
  int64_t kv_heads = cfg.kv_heads ? cfg.kv_heads : heads;
  ShapeDtype qs({batch, heads, seq, head_dim}, dtype), kvs({batch, kv_heads, seq, head_dim}, dtype);
  ShapeDtype stat({batch, heads, seq}, dtype == DType::F64 ? DType::F64 : DType::F32);
  const bool segments = cfg.segment_ids;
  std::vector<ShapeDtype> fwd_in = {qs, kvs, kvs}, bwd_in = {qs, kvs, kvs, qs, stat, stat};
  if (segments) fwd_in.push_back(ShapeDtype({batch, seq}, DType::I32)), bwd_in.push_back(fwd_in.back());
  fwd.trace(fwd_in);
  primal.trace(fwd_in);
  pre.trace({qs, qs});
  dkdv.trace(bwd_in);
  dq.trace(bwd_in);
  // a = {q, k, v[, seg] (residual inputs), o (a residual output), lse (fwd's residual), do}.
  BwdFn f = [pre, dkdv, dq, segments](const std::vector<Array>& a) {
    size_t n = segments ? 4 : 3;
    const Array &q = a[0], &k = a[1], &v = a[2], &o = a[n], &lse = a[n + 1], &d_o = a[n + 2];
    Array delta = pre({o, d_o})[0];
    std::vector<Array> args = {q, k, v, d_o, lse, delta};
    if (segments) args.push_back(a[3]);
    std::vector<Array> kv = dkdv(args);
    Array dqa = dq(args)[0];
    return std::vector<Array>{dqa, kv[0], kv[1]};  // (seg, an integer input, has none)
  };
  std::vector<int> residual_inputs = {0, 1, 2};
  if (segments) residual_inputs.push_back(3);
  return custom_vjp(fwd, f, 1, {.residual_inputs = residual_inputs, .residual_outputs = {0}, .primal = primal},
                    "flash_attention_bwd_preprocess + flash_attention_bwd_dkdv + flash_attention_bwd_dq");
}

}  // namespace pallas::kernels
