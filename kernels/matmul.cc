#include "pallas/kernels.h"

#include <functional>

namespace pallas::kernels {

Call matmul(int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype, MatmulConfig cfg) {
  int64_t bm = std::min(cfg.block_m, m), bn = std::min(cfg.block_n, n), bk = std::min(cfg.block_k, k);
  if (k % bk) throw Error("kernels::matmul: K=" + std::to_string(k) + " is not a multiple of block_k=" + std::to_string(bk));
  int64_t steps = k / bk;
  auto kernel = [=](Ref a, Ref b, Ref o) {
    Value acc = fori_loop(0, steps, zeros({bm, bn}, DType::F32), [&](Value s, Value acc) {
      Value x = a(all, ds(s * bk, bk));
      Value y = b(ds(s * bk, bk), all);
      return acc + dot(x, y);
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
                      .in_specs = {spec({bm, k}, [](Value i, Value) { return idx(i, 0); }),
                                   spec({k, bn}, [](Value, Value j) { return idx(0, j); })},
                      .out_specs = {spec({bm, bn}, [](Value i, Value j) { return idx(i, j); })},
                      .interpret = cfg.interpret,
                      .name = "matmul",
                      .compiler_params = cfg.compiler_params,
                      .cost_estimate = CostEstimate{2 * m * n * k, 0,
                                                    static_cast<int64_t>((m * k + k * n) * itemsize(in_dtype) +
                                                                         m * n * itemsize(out_dtype))}});
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
