#include "pallas/kernels.h"

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
  return pallas_call(kernel, ShapeDtype({m, n}, out_dtype),
                     {.grid = {(m + bm - 1) / bm, (n + bn - 1) / bn},
                      .in_specs = {BlockSpec({bm, k}, [](Value i, Value) { return idx(i, 0); }),
                                   BlockSpec({k, bn}, [](Value, Value j) { return idx(0, j); })},
                      .out_specs = {BlockSpec({bm, bn}, [](Value i, Value j) { return idx(i, j); })},
                      .interpret = cfg.interpret,
                      .name = "matmul",
                      .compiler_params = cfg.compiler_params,
                      .cost_estimate = CostEstimate{2 * m * n * k, 0,
                                                    static_cast<int64_t>((m * k + k * n) * itemsize(in_dtype) +
                                                                         m * n * itemsize(out_dtype))}});
}

}  // namespace pallas::kernels
