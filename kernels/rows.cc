// Row-wise kernels: softmax and layer norm, computed in f32 whatever the input dtype.
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
  auto kernel = [=](Ref x, Ref o) {
    Value v = x[all].astype(DType::F32);
    Value e = exp(v - max(v, axis, true));
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
  auto kernel = [=](Ref x, Ref w, Ref b, Ref o) {
    Value v = x[all].astype(DType::F32);
    Value mean = sum(v, axis, true) / static_cast<double>(cols);
    Value c = v - mean;
    Value var = sum(c * c, axis, true) / static_cast<double>(cols);
    Value y = c * rsqrt(var + eps) * w[all].astype(DType::F32) + b[all].astype(DType::F32);
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
