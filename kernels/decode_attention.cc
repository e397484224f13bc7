// Decode attention (one query token per sequence against a long KV cache) and paged attention
// (the cache in fixed-size pages, a block table per sequence), as FlashDecoding and JAX's
// pallas/ops/gpu decode_attention and paged_attention split them:
//   1. partial: one program per (sequence, kv head, split of the key axis). The program's
//      queries are the kv head's whole group ([G, D]: every query head that reads this kv
//      head, so one dot serves the group and the cache is read once), and it runs the online
//      softmax over its split's keys block by block, up to the sequence's length. It writes its
//      split's normalised output [G, D] and logsumexp [G] (-inf when the split holds no key).
//   2. merge: one program per (sequence, kv head) combines the splits' outputs weighted by
//      exp(lse_s - logsumexp over the splits).
// The lengths (and the block tables) are scalar-prefetch operands: they bound the loops and
// pick the pages. A length or a block-table entry past the cache is clamped into it (no read
// outside the cache ever happens) and reported by a pl::check: under pl::checkify the call
// returns the error (an entry and the bound it broke) instead of a result.
#include <cmath>
#include <functional>
#include <utility>

#include "kernels/attention_common.h"
#include "pallas/kernels.h"

namespace pallas::kernels {

namespace {

DType acc_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

struct DecodeShape {
  int64_t kv_heads, group, bk, splits, chunk;
  double scale;
};

std::string kname(const char* k) { return std::string("pl::kernels::") + k; }

// splits: given (it must divide the blocks of keys), or chosen: enough programs for two waves
// of a large GPU (264), in powers of two that divide the key blocks.
DecodeShape decode_shape(const char* k, int64_t batch, int64_t heads, int64_t keys, int64_t head_dim, DType dtype,
                         const DecodeAttentionConfig& cfg) {
  detail_attention::check_attention(k, batch, heads, keys, head_dim, dtype, cfg.kv_heads);
  DecodeShape s;
  s.kv_heads = cfg.kv_heads ? cfg.kv_heads : heads;
  s.group = heads / s.kv_heads;
  // 32 keys a step. (Before the loop pipeliner took mma.sync dots, their operands went through
  // registers and 64 keys spilled on 4 warps; now K and V blocks stream through shared memory
  // and 64 or 128 keys compile without spills (ptxas, sm_90a). Not yet swept on the GPU.)
  s.bk = detail_attention::block_size(k, "block_k", cfg.block_k, 32, keys);
  int64_t blocks = keys / s.bk;
  if (cfg.k_splits < 0)
    throw Error(kname(k) + ": k_splits is " + std::to_string(cfg.k_splits) + "; give a positive count, or 0 to choose one");
  if (cfg.k_splits) {
    if (blocks % cfg.k_splits)
      throw Error(kname(k) + ": k_splits (" + std::to_string(cfg.k_splits) + ") must divide the key blocks (" +
                  std::to_string(keys) + " keys / block_k " + std::to_string(s.bk) + " = " + std::to_string(blocks) + ")");
    s.splits = cfg.k_splits;
  } else {
    s.splits = 1;
    while (batch * s.kv_heads * s.splits < 264 && blocks % (s.splits * 2) == 0) s.splits *= 2;
  }
  s.chunk = keys / s.splits;
  s.scale = detail_attention::softmax_scale(AttentionConfig{.sm_scale = cfg.sm_scale}, head_dim);
  return s;
}

// The online softmax of one program over `count` blocks of keys whose first `valid` keys are
// real; key_block(j) gives block j's keys and values ([bk, D] each). Returns {o [G, D], lse [G]}
// in the compute dtype: o normalised, 0 where no key was seen; lse -inf there.
std::vector<Value> online_softmax(const Value& q, Value count, Value valid, int64_t bk, int64_t group, int64_t head_dim,
                                  double scale, DType dtype, const std::function<std::pair<Value, Value>(Value)>& key_block) {
  DType acc_t = acc_dtype(dtype);
  const double scale_log2 = scale * 1.4426950408889634;
  Value m0 = full({group}, -INFINITY, acc_t), l0 = zeros({group}, acc_t), acc0 = zeros({group, head_dim}, acc_t);
  auto outs = fori_loop(0, count, std::vector<Value>{m0, l0, acc0}, [&](Value j, std::vector<Value> c) {
    auto [kb, vb] = key_block(j);
    Value s = dot(q, kb, {.trans_b = true});  // [G, bk]
    Value key = j * bk + iota(DType::I32, {group, bk}, 1);
    s = where(key < valid, s, -INFINITY);
    // (as the flash-attention forward: base 2, and rows whose maximum is still -inf subtract 0)
    Value m_new = stop_gradient(maximum(c[0], max(s, 1) * scale_log2));
    Value m_sub = where(m_new == -INFINITY, zeros_like(m_new), m_new);
    Value alpha = exp2(c[0] - m_sub);
    Value p = exp2(s * scale_log2 - expand_dims(m_sub, 1));
    Value l_new = c[1] * alpha + sum(p, 1);
    Value acc = c[2] * expand_dims(alpha, 1) + dot(p.astype(dtype), vb);
    return std::vector<Value>{m_new, l_new, acc};
  });
  Value l = outs[1];
  Value seen = l > 0.0;
  Value o = where(expand_dims(seen, 1), outs[2] / expand_dims(where(seen, l, full_like(l, 1.0)), 1), 0.0);
  Value lse = where(seen, outs[0] * 0.6931471805599453 + log(where(seen, l, full_like(l, 1.0))), -INFINITY);
  return {o, lse};
}

// Clamps a runtime length into [0, keys], reporting one outside it.
Value checked_length(const Ref& lengths, const Value& b, int64_t keys, const char* k) {
  Value len = lengths(b);
  check(len >= 0, std::string(k) + ": lengths[{}] is {}; a length must be at least 0", b, len);
  check(len <= keys, std::string(k) + ": lengths[{}] is {}, past the cache's " + std::to_string(keys) + " keys", b, len);
  return minimum(maximum(len, Value(int32_t{0})), Value(static_cast<int32_t>(keys)));
}

// The partial outputs' shapes: o [B, KVH, splits, G, D] and lse [B, KVH, splits, G], f32 (f64 for f64).
std::vector<ShapeDtype> partial_shapes(int64_t batch, const DecodeShape& s, int64_t head_dim, DType dtype) {
  DType acc_t = acc_dtype(dtype);
  return {ShapeDtype({batch, s.kv_heads, s.splits, s.group, head_dim}, acc_t),
          ShapeDtype({batch, s.kv_heads, s.splits, s.group}, acc_t)};
}

// The merge: one program per (sequence, kv head) weighs its group's splits by exp(lse_s - max).
Call merge_call(const char* k, int64_t batch, int64_t heads, int64_t head_dim, DType dtype, const DecodeShape& s,
                const DecodeAttentionConfig& cfg) {
  auto kernel = [=](Ref o_part, Ref lse_part, Ref o) {
    Value l = lse_part[all];  // [splits, G]
    Value m = max(l, 0);
    Value m_safe = where(m == -INFINITY, zeros_like(m), m);
    Value w = exp(l - expand_dims(m_safe, 0));  // 0 for a split without keys
    Value den = sum(w, 0);                      // [G]
    Value num = sum(o_part[all] * expand_dims(w, 2), 0);
    Value seen = expand_dims(den > 0.0, 1);
    o[all] = where(seen, num / where(seen, expand_dims(den, 1), full_like(expand_dims(den, 1), 1.0)), 0.0).astype(dtype);
  };
  return pallas_call(kernel, ShapeDtype({batch, heads, head_dim}, dtype),
                     {.grid = {batch, s.kv_heads},
                      .in_specs = {BlockSpec({squeezed, squeezed, s.splits, s.group, head_dim},
                                             [](Value b, Value h) { return idx(b, h, 0, 0, 0); }),
                                   BlockSpec({squeezed, squeezed, s.splits, s.group}, [](Value b, Value h) { return idx(b, h, 0, 0); })},
                      .out_specs = {BlockSpec({squeezed, s.group, head_dim}, [](Value b, Value h) { return idx(b, h, 0); })},
                      .interpret = cfg.interpret,
                      .name = std::string(k) + "_merge"});
}

// Traced now for the shapes they were made for, so that arrays of other shapes are refused at
// the first call (naming the kernel and the input) rather than read as padded blocks.
void trace_for_shapes(DecodeAttention& d, int64_t batch, int64_t heads, int64_t head_dim, DType dtype, const DecodeShape& s,
                      std::vector<ShapeDtype> prefetch, const ShapeDtype& kv) {
  std::vector<ShapeDtype> in = std::move(prefetch);
  in.insert(in.end(), {ShapeDtype({batch, heads, head_dim}, dtype), kv, kv});
  d.partial.trace(in);
  d.merge.trace(partial_shapes(batch, s, head_dim, dtype));
}

// The partial call of a kernel over (sequence, kv head, split) programs: q's group block, the
// split's o and lse blocks, and `kv` for K and V (the cache's split, or a head's page pool);
// Prefetch... the scalar-prefetch operands' Ref parameters of the index maps (one per operand).
template <class... Prefetch, class Kernel>
Call partial_call(const char* k, Kernel kernel, const BlockSpec& kv, int64_t batch, int64_t heads, int64_t keys, int64_t head_dim,
                  DType dtype, const DecodeShape& s, const DecodeAttentionConfig& cfg) {
  auto qmap = [](Value b, Value h, Value, Prefetch...) { return idx(b, h, 0); };
  auto omap = [](Value b, Value h, Value sp, Prefetch...) { return idx(b, h, sp, 0, 0); };
  auto lmap = [](Value b, Value h, Value sp, Prefetch...) { return idx(b, h, sp, 0); };
  int64_t bytes = 2 * batch * s.kv_heads * keys * head_dim * static_cast<int64_t>(itemsize(dtype));
  return pallas_call(kernel, partial_shapes(batch, s, head_dim, dtype),
                     {.grid = {batch, s.kv_heads, s.splits},
                      .in_specs = {BlockSpec({squeezed, s.group, head_dim}, qmap), kv, kv},
                      .out_specs = {BlockSpec({squeezed, squeezed, squeezed, s.group, head_dim}, omap),
                                    BlockSpec({squeezed, squeezed, squeezed, s.group}, lmap)},
                      .num_scalar_prefetch = static_cast<int>(sizeof...(Prefetch)),
                      .interpret = cfg.interpret,
                      .name = k,
                      .compiler_params = cfg.compiler_params,
                      .cost_estimate = CostEstimate{4 * batch * heads * keys * head_dim, batch * heads * keys, bytes}});
}

}  // namespace

std::vector<Array> DecodeAttention::operator()(const std::vector<Array>& args) const {
  std::vector<Array> parts = partial(args);
  return merge({parts[0], parts[1]});
}

DecodeAttention decode_attention(int64_t batch, int64_t heads, int64_t keys, int64_t head_dim, DType dtype,
                                 DecodeAttentionConfig cfg) {
  const char* k = "decode_attention";
  DecodeShape s = decode_shape(k, batch, heads, keys, head_dim, dtype, cfg);
  const int64_t bk = s.bk, chunk = s.chunk, group = s.group;
  const double scale = s.scale;
  auto kernel = [=](std::vector<Ref> r) {
    const Ref &lengths = r[0], &q_ref = r[1], &k_ref = r[2], &v_ref = r[3], &o_ref = r[4], &lse_ref = r[5];
    Value b = program_id(0), sp = program_id(2);
    Value len = checked_length(lengths, b, keys, k);
    // the split's real keys: those of [sp * chunk, (sp + 1) * chunk) before the length
    Value valid = minimum(maximum(len - sp * chunk, Value(int32_t{0})), Value(static_cast<int32_t>(chunk)));
    Value count = (valid + (bk - 1)) / bk;
    auto outs = online_softmax(q_ref[all], count, valid, bk, group, head_dim, scale, dtype, [&](Value j) {
      return std::pair<Value, Value>{k_ref(ds(j * bk, bk), all), v_ref(ds(j * bk, bk), all)};
    });
    o_ref[all] = outs[0];
    lse_ref[all] = outs[1];
  };
  BlockSpec kv({squeezed, squeezed, chunk, head_dim}, [](Value b, Value h, Value sp, Ref) { return idx(b, h, sp, 0); });
  DecodeAttention d;
  d.partial = partial_call<Ref>(k, kernel, kv, batch, heads, keys, head_dim, dtype, s, cfg);
  d.merge = merge_call(k, batch, heads, head_dim, dtype, s, cfg);
  ShapeDtype kv_shape({batch, s.kv_heads, keys, head_dim}, dtype);
  trace_for_shapes(d, batch, heads, head_dim, dtype, s, {ShapeDtype({batch}, DType::I32)}, kv_shape);
  return d;
}

DecodeAttention paged_attention(int64_t batch, int64_t heads, int64_t pages_per_seq, int64_t page_size, int64_t total_pages,
                                int64_t head_dim, DType dtype, DecodeAttentionConfig cfg) {
  const char* k = "paged_attention";
  if (pages_per_seq <= 0 || page_size <= 0 || total_pages <= 0)
    throw Error(kname(k) + ": pages_per_seq, page_size and total_pages must be positive (got " + std::to_string(pages_per_seq) +
                ", " + std::to_string(page_size) + ", " + std::to_string(total_pages) + ")");
  if (cfg.block_k && cfg.block_k != page_size)
    throw Error(kname(k) + ": block_k is " + std::to_string(cfg.block_k) + "; the kernel reads one page a step, so leave it 0 or give page_size (" +
                std::to_string(page_size) + ")");
  cfg.block_k = page_size;
  const int64_t keys = pages_per_seq * page_size;
  DecodeShape s = decode_shape(k, batch, heads, keys, head_dim, dtype, cfg);
  const int64_t bk = page_size, chunk = s.chunk, group = s.group, pages = chunk / page_size;
  const double scale = s.scale;
  auto kernel = [=](std::vector<Ref> r) {
    const Ref &lengths = r[0], &tables = r[1], &q_ref = r[2], &k_ref = r[3], &v_ref = r[4], &o_ref = r[5], &lse_ref = r[6];
    Value b = program_id(0), sp = program_id(2);
    Value len = checked_length(lengths, b, keys, k);
    Value valid = minimum(maximum(len - sp * chunk, Value(int32_t{0})), Value(static_cast<int32_t>(chunk)));
    Value count = (valid + (bk - 1)) / bk;
    // The pages this program reads are checked in a loop of their own: a check in the key loop
    // would give it an effect, and the loop pipeliner takes only loops without one.
    fori_loop(0, count, std::vector<Value>{}, [&](Value j, std::vector<Value>) {
      Value slot = sp * pages + j;
      Value page = tables(b, slot);
      check(page >= 0, std::string(k) + ": block_tables[{}, {}] is {}; a page index must be at least 0", b, slot, page);
      check(page < total_pages, std::string(k) + ": block_tables[{}, {}] is {}, past the cache's " + std::to_string(total_pages) + " pages",
            b, slot, page);
      return std::vector<Value>{};
    });
    auto outs = online_softmax(q_ref[all], count, valid, bk, group, head_dim, scale, dtype, [&](Value j) {
      Value page = tables(b, sp * pages + j);
      page = minimum(maximum(page, Value(int32_t{0})), Value(static_cast<int32_t>(total_pages - 1)));
      return std::pair<Value, Value>{k_ref(page, all, all), v_ref(page, all, all)};
    });
    o_ref[all] = outs[0];
    lse_ref[all] = outs[1];
  };
  // Each kv head's whole page pool: the kernel picks its pages by the block table.
  BlockSpec kv({squeezed, total_pages, page_size, head_dim}, [](Value, Value h, Value, Ref, Ref) { return idx(h, 0, 0, 0); });
  DecodeAttention d;
  d.partial = partial_call<Ref, Ref>(k, kernel, kv, batch, heads, keys, head_dim, dtype, s, cfg);
  d.merge = merge_call(k, batch, heads, head_dim, dtype, s, cfg);
  ShapeDtype kv_shape({s.kv_heads, total_pages, page_size, head_dim}, dtype);
  trace_for_shapes(d, batch, heads, head_dim, dtype, s,
                   {ShapeDtype({batch}, DType::I32), ShapeDtype({batch, pages_per_seq}, DType::I32)}, kv_shape);
  return d;
}

}  // namespace pallas::kernels
