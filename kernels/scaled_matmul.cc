// Scaled matmul of 8-bit floats (fp8 serving and training), written in the kernel language:
// the K loop is the matmul's (a dot per step into an f32 carry the backend keeps in wgmma
// fragments, its loads pipelined), and the scales are a few multiplies a user would write.
#include "pallas/kernels.h"

#include <algorithm>

namespace pallas::kernels {

Call scaled_matmul(int64_t m, int64_t n, int64_t k, DType in_dtype, DType out_dtype, ScaledMatmulConfig cfg) {
  const std::string name = "kernels::scaled_matmul";
  if (!is_float8(in_dtype))
    throw Error(name + ": in_dtype is " + dtype_name(in_dtype) + "; the operands must be f8e4m3 or f8e5m2 (for wider floats use kernels::matmul)");
  if (out_dtype != DType::BF16 && out_dtype != DType::F16 && out_dtype != DType::F32)
    throw Error(name + ": out_dtype is " + dtype_name(out_dtype) + "; it must be bf16, f16 or f32");
  const ScaleKind kind = cfg.scales;
  const bool fast = cfg.fast_accumulation;
  constexpr int64_t kScaleBlock = 128;
  if (kind == ScaleKind::Blockwise) {
    if (k % kScaleBlock || n % kScaleBlock)
      throw Error(name + ": blockwise scales need K and N multiples of 128, got K=" + std::to_string(k) + ", N=" + std::to_string(n));
    cfg.block_k = kScaleBlock;
    if (cfg.block_n % kScaleBlock && kScaleBlock % cfg.block_n)
      throw Error(name + ": blockwise scales need block_n to divide 128 or be a multiple of it, got " + std::to_string(cfg.block_n));
  }
  const int64_t bm = std::min(cfg.block_m, m), bn = std::min(cfg.block_n, n), bk = std::min(cfg.block_k, k);
  for (auto [len, b, what] : {std::tuple{m, bm, "M"}, std::tuple{n, bn, "N"}, std::tuple{k, bk, "K"}})
    if (len % b)
      throw Error(name + ": " + what + "=" + std::to_string(len) + " is not a multiple of its block (" + std::to_string(b) + ")");
  const int64_t steps = k / bk, kb = k / kScaleBlock;
  auto kernel = [=](Ref a, Ref b, Ref sa, Ref sb, Ref o) {
    Value acc;
    if (kind == ScaleKind::Blockwise) {
      // b's 128 x 128 scale block of this program's columns (bn divides 128, or is a multiple:
      // then the scale varies along the columns in steps of 128)
      acc = fori_loop(0, steps, zeros({bm, bn}), [&](Value s, Value acc) {
        Value part = dot(a(all, ds(s * bk, bk)), b(all, ds(s * bk, bk)), {.trans_b = true});
        Value scale_a = sa(all, ds(s, 1));  // [bm, 1]
        Value scale_b = sb(all, ds(s, 1));  // [bn / 128 or 1, 1]
        Value sbr = reshape(scale_b, {1, scale_b.shape()[0]});
        if (bn > kScaleBlock) sbr = reshape(broadcast_to(reshape(sbr, {bn / kScaleBlock, 1}), {bn / kScaleBlock, kScaleBlock}), {1, bn});
        return acc + part * scale_a * sbr;
      });
    } else {
      const Precision precision = fast ? Precision::Default : Precision::Highest;
      acc = fori_loop(0, steps, zeros({bm, bn}), [&](Value s, Value acc) {
        return acc + dot(a(all, ds(s * bk, bk)), b(all, ds(s * bk, bk)), {.trans_b = true, .precision = precision});
      });
      acc = acc * sa[all] * sb[all];  // [1, 1] or [bm, 1] times [1, 1] or [1, bn]
    }
    o[all] = acc.astype(out_dtype);
  };
  BlockSpec a_scale, b_scale;
  switch (kind) {
    case ScaleKind::Tensorwise:
      a_scale = BlockSpec({1, 1}, [](Value, Value) { return idx(0, 0); });
      b_scale = BlockSpec({1, 1}, [](Value, Value) { return idx(0, 0); });
      break;
    case ScaleKind::Rowwise:
      a_scale = BlockSpec({bm, 1}, [](Value i, Value) { return idx(i, 0); });
      b_scale = BlockSpec({1, bn}, [](Value, Value j) { return idx(0, j); });
      break;
    case ScaleKind::Blockwise: {
      a_scale = BlockSpec({bm, kb}, [](Value i, Value) { return idx(i, 0); });
      // the rows of b's scales this program's columns fall in: bn / 128 of them, or one
      // shared by 128 / bn programs
      const int64_t rows = std::max<int64_t>(1, bn / kScaleBlock), per = std::max<int64_t>(1, kScaleBlock / bn);
      b_scale = BlockSpec({rows, kb}, [per](Value, Value j) { return idx(j / int(per), 0); });
      break;
    }
  }
  return pallas_call(kernel, ShapeDtype({m, n}, out_dtype),
                     {.grid = {m / bm, n / bn},
                      .in_specs = {BlockSpec({bm, k}, [](Value i, Value) { return idx(i, 0); }),
                                   BlockSpec({bn, k}, [](Value, Value j) { return idx(j, 0); }), a_scale, b_scale},
                      .out_specs = {BlockSpec({bm, bn}, [](Value i, Value j) { return idx(i, j); })},
                      .interpret = cfg.interpret,
                      .name = "scaled_matmul",
                      .compiler_params = cfg.compiler_params,
                      .cost_estimate = CostEstimate{2 * m * n * k, 0, (m * k + n * k) + m * n * static_cast<int64_t>(itemsize(out_dtype))}});
}

}  // namespace pallas::kernels
