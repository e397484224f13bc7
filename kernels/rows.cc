// Row-wise kernels: softmax and layer norm, computed in f32 (f64 for f64 inputs, so that their
// gradients can be checked by finite differences). Their backwards are in rows_vjp.cc.
#include "pallas/kernels.h"

namespace pallas::kernels {

namespace {
BlockSpec row_spec(int64_t br, int64_t cols) {
  if (br == 1) return BlockSpec({squeezed, cols}, [](Value i) { return idx(i, 0); });
  return BlockSpec({br, cols}, [](Value i) { return idx(i, 0); });
}
}  // namespace

Call softmax(int64_t rows, int64_t cols, DType dtype, RowConfig cfg) {
  int64_t br = cfg.block_rows;
  int axis = br == 1 ? 0 : 1;
  DType acc = dtype == DType::F64 ? DType::F64 : DType::F32;
  auto kernel = [=](Ref x, Ref o) {
    Value v = x[all].astype(acc);
    // The max only keeps exp in range: softmax does not depend on it, so it takes no
    // gradient (jax.nn.softmax's stop_gradient), and pl::vjp of this kernel skips its
    // reductions.
    Value e = exp(v - stop_gradient(max(v, axis, true)));
    o[all] = (e / sum(e, axis, true)).astype(dtype);
  };
  return pallas_call(kernel, ShapeDtype({rows, cols}, dtype),
                     {.grid = {(rows + br - 1) / br},
                      .in_specs = {row_spec(br, cols)},
                      .out_specs = {row_spec(br, cols)},
                      .interpret = cfg.interpret,
                      .name = "softmax",
                      .compiler_params = cfg.compiler_params});
}

Call layer_norm(int64_t rows, int64_t cols, DType dtype, double eps, RowConfig cfg) {
  int64_t br = cfg.block_rows;
  int axis = br == 1 ? 0 : 1;
  DType acc = dtype == DType::F64 ? DType::F64 : DType::F32;
  auto kernel = [=](Ref x, Ref w, Ref b, Ref o) {
    Value v = x[all].astype(acc);
    Value mean = sum(v, axis, true) / static_cast<double>(cols);
    Value c = v - mean;
    Value var = sum(c * c, axis, true) / static_cast<double>(cols);
    Value y = c * rsqrt(var + eps) * w[all].astype(acc) + b[all].astype(acc);
    o[all] = y.astype(dtype);
  };
  BlockSpec vec({cols}, [](Value) { return idx(0); });
  return pallas_call(kernel, ShapeDtype({rows, cols}, dtype),
                     {.grid = {(rows + br - 1) / br},
                      .in_specs = {row_spec(br, cols), vec, vec},
                      .out_specs = {row_spec(br, cols)},
                      .interpret = cfg.interpret,
                      .name = "layer_norm",
                      .compiler_params = cfg.compiler_params});
}

}  // namespace pallas::kernels
