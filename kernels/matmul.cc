#include "pallas/kernels.h"

#include <algorithm>
#include <functional>

namespace pallas::kernels {

Call matmul(int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype, MatmulConfig cfg) {
  int64_t bm = std::min(cfg.block_m, m), bn = std::min(cfg.block_n, n), bk = std::min(cfg.block_k, k);
  if (k % bk) throw Error("kernels::matmul: K=" + std::to_string(k) + " is not a multiple of block_k=" + std::to_string(bk));
  int64_t steps = k / bk;
  const bool ta = cfg.trans_a, tb = cfg.trans_b;
  auto kernel = [=](Ref a, Ref b, Ref o) {
    // f32 accumulation (f64 for f64 operands: a dot of f64 operands is f64)
    const DType acc_t = in_dtype == DType::F64 ? DType::F64 : DType::F32;
    Value acc = fori_loop(0, steps, zeros({bm, bn}, acc_t), [&](Value s, Value acc) {
      Value x = ta ? a(ds(s * bk, bk), all) : a(all, ds(s * bk, bk));
      Value y = tb ? b(all, ds(s * bk, bk)) : b(ds(s * bk, bk), all);
      if (x.dtype() != in_dtype) x = x.astype(in_dtype);
      if (y.dtype() != in_dtype) y = y.astype(in_dtype);
      return acc + dot(x, y, {.trans_a = ta, .trans_b = tb});
    });
    o[all] = acc.astype(out_dtype);
  };
  const int64_t rows = (m + bm - 1) / bm, cols = (n + bn - 1) / bn, gm = std::min(cfg.group_m, rows);
  // The index maps take (block row, block column); with a group, the 1-D program id becomes one.
  auto spec = [=](Shape shape, std::function<BlockIndex(Value, Value)> f) {
    if (gm <= 1) return BlockSpec(std::move(shape), [f](Value i, Value j) { return f(i, j); });
    return BlockSpec(std::move(shape), [=](Value pid) {
      Value group = pid / int(gm * cols), first = group * int(gm), in_group = pid % int(gm * cols);
      Value height = minimum(int(rows) - first, Value(int(gm)));
      return f(first + in_group % height, in_group / height);
    });
  };
  return pallas_call(kernel, ShapeDtype({m, n}, out_dtype),
                     {.grid = gm <= 1 ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows * cols},
                      .in_specs = {ta ? spec({k, bm}, [](Value i, Value) { return idx(0, i); }) : spec({bm, k}, [](Value i, Value) { return idx(i, 0); }),
                                   tb ? spec({bn, k}, [](Value, Value j) { return idx(j, 0); }) : spec({k, bn}, [](Value, Value j) { return idx(0, j); })},
                      .out_specs = {spec({bm, bn}, [](Value i, Value j) { return idx(i, j); })},
                      .interpret = cfg.interpret,
                      .name = "matmul",
                      .compiler_params = cfg.compiler_params,
                      .cost_estimate = CostEstimate{2 * m * n * k, 0,
                                                    static_cast<int64_t>((m * k + k * n) * itemsize(in_dtype) +
                                                                         m * n * itemsize(out_dtype))}});
}

CustomVjp matmul_vjp(int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype, MatmulConfig cfg) {
  Call fwd = matmul(m, n, k, in_dtype, out_dtype, cfg);
  MatmulConfig da_cfg = cfg, db_cfg = cfg;
  da_cfg.trans_a = false, da_cfg.trans_b = true;   // dA[M,K] = dC[M,N] (B[K,N] as N x K)^T
  db_cfg.trans_a = true, db_cfg.trans_b = false;   // dB[K,N] = (A[M,K] as K x M)^T dC[M,N]
  // the backward's reductions run over N (dA) and M (dB): block_k halved until it divides them
  auto dividing = [&](int64_t len) {
    int64_t b = std::min(cfg.block_k, len);
    while (b > 1 && len % b) b /= 2;
    return b;
  };
  da_cfg.block_k = dividing(n), db_cfg.block_k = dividing(m);
  Call da = matmul(m, k, n, in_dtype, in_dtype, da_cfg);
  Call db = matmul(k, n, m, in_dtype, in_dtype, db_cfg);
  // residuals: A, B (inputs), then dC
  BwdFn bwd = [da, db](const std::vector<Array>& r) { return std::vector<Array>{da({r[2], r[1]})[0], db({r[0], r[2]})[0]}; };
  return custom_vjp(fwd, bwd, 1, {.residual_inputs = {0, 1}}, "matmul (dC B^T) + matmul (A^T dC)");
}

Autotuned tuned_matmul(DType out_dtype, std::vector<Config> space, bool interpret) {
  if (space.empty()) {
    for (int64_t bm : {64, 128})
      for (int64_t bn : {64, 128})
        for (int64_t bk : {32, 64})
          for (int64_t warps : {4, 8}) space.push_back(Config{{{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"num_warps", warps}, {"num_stages", 3}}});
    space.push_back(Config{{{"block_m", 128}, {"block_n", 256}, {"block_k", 64}, {"num_warps", 8}, {"num_stages", 3}}});
  }
  auto factory = [out_dtype, interpret](const Config& c, const std::vector<ShapeDtype>& in) {
    if (in.size() != 2 || in[0].shape.size() != 2 || in[1].shape.size() != 2 || in[0].shape[1] != in[1].shape[0] || in[0].dtype != in[1].dtype)
      throw Error("kernels::tuned_matmul: takes A[M,K] and B[K,N] of one dtype");
    MatmulConfig cfg{.block_m = c.get("block_m"), .block_n = c.get("block_n"), .block_k = c.get("block_k"),
                     .compiler_params = {.num_warps = static_cast<int>(c.get("num_warps")), .num_stages = static_cast<int>(c.get("num_stages"))},
                     .interpret = interpret};
    return matmul(in[0].shape[0], in[1].shape[1], in[0].shape[1], in[0].dtype, out_dtype, cfg);
  };
  return autotune(factory, std::move(space), {.name = "kernels::matmul " + std::string(dtype_name(out_dtype))});
}

}  // namespace pallas::kernels
