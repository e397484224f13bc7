// Grouped (ragged) matmul for mixture-of-experts layers, as JAX's megablox gmm/tgmm and
// Triton's grouped GEMMs: the rows of x are the tokens sorted by expert, group g taking the next
// group_sizes[g] rows, and each group is multiplied by its own weight matrix, all in one call.
// The group sizes are a scalar-prefetch operand: a program finds the groups its row block meets
// from them, so one compiled kernel serves every routing.
//   forward  out[r] = x[r] · w[g(r)]        grid (row blocks, column blocks); a row block that
//            straddles groups runs its K loop once per group it meets and keeps each group's
//            rows of the result (tiles inside one group, the common case, run it once);
//   dx       dy · w[g]^T: the same kernel with w read transposed;
//   dw[g]    x[rows of g]^T · dy[rows of g]  grid (groups, K blocks, N blocks): a program walks
//            its group's row blocks; in its first and last, rows of other groups are masked out.
// Sizes are clamped into the rows there are (negative as 0; past the end cut): under
// pl::checkify a negative size or sizes summing past the rows are reported. Rows after the last
// group get zeros.
#include <algorithm>

#include "pallas/kernels.h"

namespace pallas::kernels {

namespace {

DType acc_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

std::string kname(const char* k) { return std::string("pl::kernels::") + k; }

void check_grouped(const char* k, int64_t m, int64_t kk, int64_t n, int64_t groups, DType in_dtype, DType out_dtype,
                   const GroupedMatmulConfig& cfg) {
  if (m <= 0 || kk <= 0 || n <= 0 || groups <= 0)
    throw Error(kname(k) + ": m, k, n and groups must be positive (got " + std::to_string(m) + ", " + std::to_string(kk) + ", " +
                std::to_string(n) + ", " + std::to_string(groups) + ")");
  if (!is_float(in_dtype) || !is_float(out_dtype))
    throw Error(kname(k) + ": dtypes are " + dtype_name(in_dtype) + " -> " + dtype_name(out_dtype) +
                "; the kernel takes f16, bf16, f32 or f64");
  if (cfg.block_m <= 0 || cfg.block_n <= 0 || cfg.block_k <= 0)
    throw Error(kname(k) + ": block_m, block_n and block_k must be positive");
  auto divides = [&](const char* what, int64_t b, const char* dim, int64_t len) {
    if (len % std::min(b, len))
      throw Error(kname(k) + ": " + dim + "=" + std::to_string(len) + " is not a multiple of " + what + "=" + std::to_string(b));
  };
  divides("block_m", cfg.block_m, "m", m);
  divides("block_k", cfg.block_k, "k", kk);
  divides("block_n", cfg.block_n, "n", n);
}

// Group g's size as the kernels use it: at least 0, reported when negative.
Value group_size(const Ref& sizes, const Value& g, const char* k) {
  Value s = sizes(g);
  check(s >= 0, std::string(k) + ": group_sizes[{}] is {}; a group size must be at least 0", g, s);
  return maximum(s, Value(int32_t{0}));
}

}  // namespace

Call grouped_matmul(int64_t m, int64_t k, int64_t n, int64_t groups, DType in_dtype, DType out_dtype, GroupedMatmulConfig cfg) {
  const char* name = "grouped_matmul";
  check_grouped(name, m, k, n, groups, in_dtype, out_dtype, cfg);
  const int64_t bm = std::min(cfg.block_m, m), bn = std::min(cfg.block_n, n), bk = std::min(cfg.block_k, k);
  const int64_t steps = k / bk;
  const bool tw = cfg.trans_rhs;
  const DType acc_t = acc_dtype(in_dtype);
  auto kernel = [=](Ref sizes, Ref x, Ref w, Ref o) {
    Value r0 = program_id(0) * bm;
    // The groups this row block meets, [g_lo, g_hi), and where g_lo starts: groups end in
    // order, so those ending at or before r0 come first.
    // (carries: the running end, clamped to the rows; g_lo; g_hi; g_lo's start; the sizes' sum)
    Value zero(int32_t{0});
    auto range = fori_loop(0, groups, std::vector<Value>{zero, zero, zero, zero, zero}, [&](Value g, std::vector<Value> c) {
      Value size = group_size(sizes, g, name);
      Value start = c[0], end = minimum(start + size, Value(static_cast<int32_t>(m)));
      Value before = end <= r0;
      return std::vector<Value>{end, where(before, g + 1, c[1]), where(start < r0 + bm, g + 1, c[2]), where(before, end, c[3]),
                                c[4] + size};
    });
    check(range[4] <= m, std::string(name) + ": the group sizes sum to {}, past the " + std::to_string(m) + " rows of x", range[4]);
    Value rows = r0 + iota(DType::I32, {bm, bn}, 0);
    auto outs = fori_loop(range[1], range[2], std::vector<Value>{zeros({bm, bn}, acc_t), range[3]}, [&](Value g, std::vector<Value> c) {
      Value start = c[1], end = minimum(start + group_size(sizes, g, name), Value(static_cast<int32_t>(m)));
      // an empty group runs no step
      Value part = fori_loop(0, where(end > start, Value(static_cast<int32_t>(steps)), Value(int32_t{0})), zeros({bm, bn}, acc_t),
                             [&](Value s, Value acc) {
                               Value xb = x(all, ds(s * bk, bk));
                               Value wb = tw ? w(g, all, ds(s * bk, bk)) : w(g, ds(s * bk, bk), all);
                               if (xb.dtype() != in_dtype) xb = xb.astype(in_dtype);
                               if (wb.dtype() != in_dtype) wb = wb.astype(in_dtype);
                               return acc + dot(xb, wb, {.trans_b = tw});
                             });
      Value mine = (rows >= start) & (rows < end);
      return std::vector<Value>{c[0] + where(mine, part, 0.0), end};
    });
    o[all] = outs[0].astype(out_dtype);
  };
  BlockSpec wspec = tw ? BlockSpec({groups, bn, k}, [](Value, Value j, Ref) { return idx(0, j, 0); })
                       : BlockSpec({groups, k, bn}, [](Value, Value j, Ref) { return idx(0, 0, j); });
  return pallas_call(kernel, ShapeDtype({m, n}, out_dtype),
                     {.grid = {m / bm, n / bn},
                      .in_specs = {BlockSpec({bm, k}, [](Value i, Value, Ref) { return idx(i, 0); }), wspec},
                      .out_specs = {BlockSpec({bm, bn}, [](Value i, Value j, Ref) { return idx(i, j); })},
                      .num_scalar_prefetch = 1,
                      .interpret = cfg.interpret,
                      .name = tw ? "grouped_matmul_wt" : name,
                      .compiler_params = cfg.compiler_params,
                      .cost_estimate = CostEstimate{2 * m * n * k, 0,
                                                    static_cast<int64_t>((m * k + groups * k * n) * itemsize(in_dtype) +
                                                                         m * n * itemsize(out_dtype))}});
}

Call grouped_matmul_dw(int64_t m, int64_t k, int64_t n, int64_t groups, DType in_dtype, DType out_dtype, GroupedMatmulConfig cfg) {
  const char* name = "grouped_matmul_dw";
  check_grouped(name, m, k, n, groups, in_dtype, out_dtype, cfg);
  const int64_t bm = std::min(cfg.block_m, m), bn = std::min(cfg.block_n, n), bk = std::min(cfg.block_k, k);
  const DType acc_t = acc_dtype(in_dtype);
  auto kernel = [=](Ref sizes, Ref x, Ref dy, Ref dw) {
    Value g = program_id(0);
    // where group g starts and ends
    Value start = fori_loop(0, g, Value(int32_t{0}), [&](Value h, Value s) { return s + group_size(sizes, h, name); });
    start = minimum(start, Value(static_cast<int32_t>(m)));
    Value end = minimum(start + group_size(sizes, g, name), Value(static_cast<int32_t>(m)));
    // Row blocks wholly inside the group, [full_lo, full_hi), read x and dy as they are (the
    // loop pipeliner streams both); the group's first and last blocks, when partly another
    // group's, are added apart with the other rows masked out.
    Value first = start / bm, last = where(end > start, (end + (bm - 1)) / bm, first);
    Value full_lo = (start + (bm - 1)) / bm, full_hi = maximum(end / bm, full_lo);
    auto block = [&](Value t, bool masked, Value take) {
      Value xb = x(ds(t * bm, bm), all);
      Value yb = dy(ds(t * bm, bm), all);
      if (xb.dtype() != in_dtype) xb = xb.astype(in_dtype);
      if (yb.dtype() != in_dtype) yb = yb.astype(in_dtype);
      if (masked) {
        Value rows = t * bm + iota(DType::I32, {bm, bk}, 0);
        xb = where(take & (rows >= start) & (rows < end), xb, zeros_like(xb));
      }
      return dot(xb, yb, {.trans_a = true});
    };
    Value acc = fori_loop(full_lo, full_hi, zeros({bk, bn}, acc_t), [&](Value t, Value acc) { return acc + block(t, false, Value()); });
    acc = fori_loop(0, 2, acc, [&](Value j, Value acc) {
      Value t = where(j == 0, first, last - 1);
      Value partial = (t < full_lo) | (t >= full_hi);
      Value take = (last > first) & partial & ((j == 0) | (last - 1 != first));
      return acc + block(maximum(t, Value(int32_t{0})), true, take);
    });
    dw[all] = acc.astype(out_dtype);
  };
  return pallas_call(kernel, ShapeDtype({groups, k, n}, out_dtype),
                     {.grid = {groups, k / bk, n / bn},
                      .in_specs = {BlockSpec({m, bk}, [](Value, Value kb, Value, Ref) { return idx(0, kb); }),
                                   BlockSpec({m, bn}, [](Value, Value, Value j, Ref) { return idx(0, j); })},
                      .out_specs = {BlockSpec({squeezed, bk, bn}, [](Value g, Value kb, Value j, Ref) { return idx(g, kb, j); })},
                      .num_scalar_prefetch = 1,
                      .interpret = cfg.interpret,
                      .name = name,
                      .compiler_params = cfg.compiler_params,
                      .cost_estimate = CostEstimate{2 * m * n * k, 0,
                                                    static_cast<int64_t>((m * k + m * n) * itemsize(in_dtype) +
                                                                         groups * k * n * itemsize(out_dtype))}});
}

CustomVjp grouped_matmul_vjp(int64_t m, int64_t k, int64_t n, int64_t groups, DType in_dtype, DType out_dtype, GroupedMatmulConfig cfg) {
  if (cfg.trans_rhs)
    throw Error(kname("grouped_matmul_vjp") + ": trans_rhs is set; the vjp takes the forward with w as [G, K, N]");
  Call fwd = grouped_matmul(m, k, n, groups, in_dtype, out_dtype, cfg);
  // dx [M, K] = dy [M, N] · w[g]^T ([G, K, N] read as N x K): the forward with w transposed;
  // its reduction runs over N, so block_k becomes block_n's and block_n block_k's
  GroupedMatmulConfig dx_cfg = cfg;
  dx_cfg.trans_rhs = !cfg.trans_rhs;
  dx_cfg.block_k = cfg.block_n, dx_cfg.block_n = cfg.block_k;
  Call dx = grouped_matmul(m, n, k, groups, in_dtype, in_dtype, dx_cfg);
  Call dw = grouped_matmul_dw(m, k, n, groups, in_dtype, in_dtype, cfg);
  ShapeDtype sizes({groups}, DType::I32), xs({m, k}, in_dtype), ws({groups, k, n}, in_dtype), ys({m, n}, out_dtype);
  fwd.trace({sizes, xs, ws});
  dx.trace({sizes, ys, ws});
  dw.trace({sizes, xs, ys});
  // residuals: group sizes, x, w (inputs), then dy
  BwdFn bwd = [dx, dw](const std::vector<Array>& r) {
    return std::vector<Array>{dx({r[0], r[3], r[2]})[0], dw({r[0], r[1], r[3]})[0]};  // (the sizes, integers, have none)
  };
  return custom_vjp(fwd, bwd, 1, {.residual_inputs = {0, 1, 2}}, "grouped_matmul (dy w^T) + grouped_matmul_dw (x^T dy)");
}

}  // namespace pallas::kernels
