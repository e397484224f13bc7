// Backward kernels of the row-wise kernels (softmax, layer norm, rms norm), written in the
// kernel language like their forwards, and the custom_vjp pairs that attach them.
//
// Norm backward: dx is row-local; dw (and db) sum over every row. One program per row block
// would write a partial sum per row block (as many bytes as x for one-row blocks), so the grid
// is (programs, steps): program g walks `steps` row blocks one after the other (a sequential
// axis) and accumulates its partial dw/db in its own row of an f32 [programs, N] output, which
// stays resident while the program walks its rows; a second small kernel sums the
// `programs` rows. x and dy are read once; the partials add 2 * programs * N * 4 bytes.
#include <algorithm>

#include "pallas/kernels.h"

namespace pallas::kernels {

namespace {
// f64 inputs are computed in f64 (so gradients can be checked by finite differences); the
// others in f32, as the forwards.
DType acc_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

BlockSpec row_spec(int64_t br, int64_t cols) {
  if (br == 1) return BlockSpec({squeezed, cols}, [](Value i) { return idx(i, 0); });
  return BlockSpec({br, cols}, [](Value i) { return idx(i, 0); });
}

void check_rows(const char* kernel, int64_t rows, int64_t cols, DType dtype, int64_t block_rows) {
  auto name = std::string("pl::kernels::") + kernel;
  if (rows < 1 || cols < 1)
    throw Error(name + ": rows and cols must be at least 1 (got " + std::to_string(rows) + " x " + std::to_string(cols) + ")");
  if (!is_float(dtype)) throw Error(name + ": dtype is " + dtype_name(dtype) + "; the kernel takes f16, bf16, f32 or f64");
  if (block_rows < 1) throw Error(name + ": block_rows is " + std::to_string(block_rows) + "; it must be at least 1");
}

// ---- layer norm / rms norm: shared forward-with-residuals and backward ----

// Forward that also writes the residuals the backward needs: mean[R] (layer norm only) and
// rstd[R], in the compute dtype.
Call norm_fwd(bool centered, int64_t rows, int64_t cols, DType dtype, double eps, RowConfig cfg) {
  const char* name = centered ? "layer_norm_fwd" : "rms_norm_fwd";
  check_rows(name, rows, cols, dtype, cfg.block_rows);
  int64_t br = cfg.block_rows;
  int axis = br == 1 ? 0 : 1;
  DType acc = acc_dtype(dtype);
  auto kernel = [=](std::vector<Ref> r) {
    const Ref &x = r[0], &w = r[1];
    size_t k = centered ? 3 : 2;  // after x, w (, b)
    Value v = x[all].astype(acc);
    Value c = v;
    if (centered) {
      Value mean = sum(v, axis, true) / static_cast<double>(cols);
      c = v - mean;
      r[k + 1][all] = mean.reshape({br});
    }
    Value rs = rsqrt(sum(c * c, axis, true) / static_cast<double>(cols) + eps);
    Value y = c * rs * w[all].astype(acc);
    if (centered) y = y + r[2][all].astype(acc);
    r[k][all] = y.astype(dtype);
    r[centered ? k + 2 : k + 1][all] = rs.reshape({br});
  };
  BlockSpec vec({cols}, [](Value) { return idx(0); });
  BlockSpec stat({br}, [](Value i) { return idx(i); });
  std::vector<BlockSpec> in = {row_spec(br, cols), vec};
  if (centered) in.push_back(vec);
  std::vector<ShapeDtype> outs = {ShapeDtype({rows, cols}, dtype)};
  std::vector<BlockSpec> out_specs = {row_spec(br, cols)};
  for (int s = 0; s < (centered ? 2 : 1); ++s) {
    outs.push_back(ShapeDtype({rows}, acc));
    out_specs.push_back(stat);
  }
  return pallas_call(kernel, outs,
                     {.grid = {(rows + br - 1) / br},
                      .in_specs = in,
                      .out_specs = out_specs,
                      .interpret = cfg.interpret,
                      .name = name,
                      .compiler_params = cfg.compiler_params});
}

struct NormGrid {
  int64_t br, nb, programs, steps;
};
NormGrid norm_grid(const char* kernel, int64_t rows, NormBwdConfig cfg) {
  auto name = std::string("pl::kernels::") + kernel;
  if (cfg.programs < 0)
    throw Error(name + ": programs is " + std::to_string(cfg.programs) + "; give a positive count, or 0 for the default");
  NormGrid g;
  g.br = cfg.block_rows;
  g.nb = (rows + g.br - 1) / g.br;
  int64_t want = cfg.programs ? cfg.programs : 128;
  want = std::min(want, g.nb);
  g.steps = (g.nb + want - 1) / want;
  g.programs = (g.nb + g.steps - 1) / g.steps;  // every program has at least one real block
  return g;
}

// (x, w, [mean], rstd, dy) -> (dx, dw partial [programs, N], [db partial [programs, N]]).
Call norm_bwd(bool centered, int64_t rows, int64_t cols, DType dtype, NormBwdConfig cfg) {
  const char* name = centered ? "layer_norm_bwd" : "rms_norm_bwd";
  check_rows(name, rows, cols, dtype, cfg.block_rows);
  NormGrid g = norm_grid(name, rows, cfg);
  DType acc = acc_dtype(dtype);
  const int64_t br = g.br, steps = g.steps, last = g.nb - 1;
  auto kernel = [=](std::vector<Ref> r) {
    size_t k = 0;
    const Ref& x = r[k++];
    const Ref& w = r[k++];
    Ref mean;
    if (centered) mean = r[k++];
    const Ref& rstd = r[k++];
    const Ref& dy = r[k++];
    const Ref& dx = r[k++];
    const Ref& dwp = r[k++];
    Ref dbp;
    if (centered) dbp = r[k++];
    Value step = program_id(1);
    when(step == 0, [&] {
      dwp[all] = zeros({cols}, acc);
      if (centered) dbp[all] = zeros({cols}, acc);
    });
    Value rs = rstd[all].get().reshape({br, 1});
    Value xv = x[all].astype(acc);
    Value xhat = centered ? (xv - mean[all].get().reshape({br, 1})) * rs : xv * rs;
    Value gv = dy[all].astype(acc);
    // The parameter gradients first: dy is then dead, and only xhat and w * dy stay live across
    // the row sums (three [br, N] values a thread would hold otherwise). Rows past the array
    // (an edge block's padding, or a clamped repeat of the last block) add nothing to them.
    Value row0 = (program_id(0) * steps + step) * br;
    Value valid = row0 + iota(DType::I32, {br, 1}, 0) < rows;
    dwp[all] += sum(where(valid, gv * xhat, 0.0), 0);
    if (centered) dbp[all] += sum(where(valid, gv, 0.0), 0);
    Value wdy = gv * w[all].astype(acc);
    Value c1 = sum(xhat * wdy, 1, true) / static_cast<double>(cols);
    Value inner = xhat * c1;
    if (centered) inner = inner + sum(wdy, 1, true) / static_cast<double>(cols);
    dx[all] = ((wdy - inner) * rs).astype(dtype);
  };
  auto blk = [steps, last](Value p, Value s) { return minimum(p * steps + s, Value(static_cast<int32_t>(last))); };
  BlockSpec rows_spec({br, cols}, [blk](Value p, Value s) { return idx(blk(p, s), 0); });
  BlockSpec stat({br}, [blk](Value p, Value s) { return idx(blk(p, s)); });
  BlockSpec vec({cols}, [](Value, Value) { return idx(0); });
  BlockSpec part({squeezed, cols}, [](Value p, Value) { return idx(p, 0); });
  std::vector<BlockSpec> in = {rows_spec, vec};
  if (centered) in.push_back(stat);
  in.push_back(stat);
  in.push_back(rows_spec);
  std::vector<ShapeDtype> outs = {ShapeDtype({rows, cols}, dtype), ShapeDtype({g.programs, cols}, acc)};
  std::vector<BlockSpec> out_specs = {rows_spec, part};
  if (centered) {
    outs.push_back(ShapeDtype({g.programs, cols}, acc));
    out_specs.push_back(part);
  }
  return pallas_call(kernel, outs,
                     {.grid = {g.programs, steps},
                      .dimension_semantics = {parallel, sequential},
                      .in_specs = in,
                      .out_specs = out_specs,
                      .interpret = cfg.interpret,
                      .name = name,
                      .compiler_params = cfg.compiler_params});
}

void check_eps(const char* kernel, double eps) {
  if (!(eps > 0))
    throw Error(std::string("pl::kernels::") + kernel + ": eps is " + std::to_string(eps) +
                "; it must be positive (it keeps rsqrt finite for a constant row)");
}

}  // namespace

Call softmax_bwd(int64_t rows, int64_t cols, DType dtype, RowConfig cfg) {
  check_rows("softmax_bwd", rows, cols, dtype, cfg.block_rows);
  int64_t br = cfg.block_rows;
  int axis = br == 1 ? 0 : 1;
  DType acc = acc_dtype(dtype);
  auto kernel = [=](Ref y, Ref dy, Ref dx) {
    Value yv = y[all].astype(acc);
    Value g = dy[all].astype(acc);
    dx[all] = (yv * (g - sum(g * yv, axis, true))).astype(dtype);
  };
  return pallas_call(kernel, ShapeDtype({rows, cols}, dtype),
                     {.grid = {(rows + br - 1) / br},
                      .in_specs = {row_spec(br, cols), row_spec(br, cols)},
                      .out_specs = {row_spec(br, cols)},
                      .interpret = cfg.interpret,
                      .name = "softmax_bwd",
                      .compiler_params = cfg.compiler_params});
}

CustomVjp softmax_vjp(int64_t rows, int64_t cols, DType dtype, RowConfig cfg) {
  // bwd needs y, the primal output itself: handed over, not written twice.
  return custom_vjp(softmax(rows, cols, dtype, cfg), softmax_bwd(rows, cols, dtype, cfg), 1,
                    {.residual_outputs = {0}});
}

Call norm_partial_sum(int64_t programs, int64_t cols, DType out_dtype, bool interpret) {
  if (programs < 1 || cols < 1)
    throw Error("pl::kernels::norm_partial_sum: programs and cols must be at least 1 (got " + std::to_string(programs) +
                " x " + std::to_string(cols) + ")");
  if (!is_float(out_dtype))
    throw Error(std::string("pl::kernels::norm_partial_sum: out_dtype is ") + dtype_name(out_dtype) + "; give a float dtype");
  DType acc = acc_dtype(out_dtype);
  const int64_t bn = std::min<int64_t>(cols, 32);
  auto kernel = [=](Ref p, Ref o) { o[all] = sum(p[all].astype(acc), 0).astype(out_dtype); };
  return pallas_call(kernel, ShapeDtype({cols}, out_dtype),
                     {.grid = {(cols + bn - 1) / bn},
                      .in_specs = {BlockSpec({programs, bn}, [](Value j) { return idx(0, j); })},
                      .out_specs = {BlockSpec({bn}, [](Value j) { return idx(j); })},
                      .interpret = interpret,
                      .name = "norm_partial_sum"});
}

Call layer_norm_fwd(int64_t rows, int64_t cols, DType dtype, double eps, RowConfig cfg) {
  check_eps("layer_norm_fwd", eps);
  return norm_fwd(true, rows, cols, dtype, eps, cfg);
}
Call layer_norm_bwd(int64_t rows, int64_t cols, DType dtype, NormBwdConfig cfg) {
  return norm_bwd(true, rows, cols, dtype, cfg);
}
Call rms_norm(int64_t rows, int64_t cols, DType dtype, double eps, RowConfig cfg) {
  check_eps("rms_norm", eps);
  check_rows("rms_norm", rows, cols, dtype, cfg.block_rows);
  int64_t br = cfg.block_rows;
  int axis = br == 1 ? 0 : 1;
  DType acc = acc_dtype(dtype);
  auto kernel = [=](Ref x, Ref w, Ref o) {
    Value v = x[all].astype(acc);
    Value rs = rsqrt(sum(v * v, axis, true) / static_cast<double>(cols) + eps);
    o[all] = (v * rs * w[all].astype(acc)).astype(dtype);
  };
  BlockSpec vec({cols}, [](Value) { return idx(0); });
  return pallas_call(kernel, ShapeDtype({rows, cols}, dtype),
                     {.grid = {(rows + br - 1) / br},
                      .in_specs = {row_spec(br, cols), vec},
                      .out_specs = {row_spec(br, cols)},
                      .interpret = cfg.interpret,
                      .name = "rms_norm",
                      .compiler_params = cfg.compiler_params});
}
Call rms_norm_fwd(int64_t rows, int64_t cols, DType dtype, double eps, RowConfig cfg) {
  check_eps("rms_norm_fwd", eps);
  return norm_fwd(false, rows, cols, dtype, eps, cfg);
}
Call rms_norm_bwd(int64_t rows, int64_t cols, DType dtype, NormBwdConfig cfg) {
  return norm_bwd(false, rows, cols, dtype, cfg);
}

CustomVjp layer_norm_vjp(int64_t rows, int64_t cols, DType dtype, double eps, RowConfig fwd_cfg, NormBwdConfig bwd_cfg) {
  Call bwd = layer_norm_bwd(rows, cols, dtype, bwd_cfg);
  int64_t programs = norm_grid("layer_norm_bwd", rows, bwd_cfg).programs;
  Call reduce = norm_partial_sum(programs, cols, dtype, bwd_cfg.interpret);
  // residuals: x, w (inputs, not copied), mean, rstd (fwd outputs 1, 2); then dy.
  BwdFn f = [bwd, reduce](const std::vector<Array>& a) {
    std::vector<Array> r = bwd(a);  // dx, dw partials, db partials
    return std::vector<Array>{r[0], reduce(r[1]), reduce(r[2])};
  };
  return custom_vjp(layer_norm_fwd(rows, cols, dtype, eps, fwd_cfg), f, 1,
                    {.residual_inputs = {0, 1}, .primal = layer_norm(rows, cols, dtype, eps, fwd_cfg)},
                    "layer_norm_bwd + norm_partial_sum");
}

CustomVjp rms_norm_vjp(int64_t rows, int64_t cols, DType dtype, double eps, RowConfig fwd_cfg, NormBwdConfig bwd_cfg) {
  Call bwd = rms_norm_bwd(rows, cols, dtype, bwd_cfg);
  int64_t programs = norm_grid("rms_norm_bwd", rows, bwd_cfg).programs;
  Call reduce = norm_partial_sum(programs, cols, dtype, bwd_cfg.interpret);
  BwdFn f = [bwd, reduce](const std::vector<Array>& a) {
    std::vector<Array> r = bwd(a);  // dx, dw partials
    return std::vector<Array>{r[0], reduce(r[1])};
  };
  return custom_vjp(rms_norm_fwd(rows, cols, dtype, eps, fwd_cfg), f, 1,
                    {.residual_inputs = {0, 1}, .primal = rms_norm(rows, cols, dtype, eps, fwd_cfg)},
                    "rms_norm_bwd + norm_partial_sum");
}

}  // namespace pallas::kernels
