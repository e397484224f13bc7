// Cross entropy over a vocabulary, forward and backward, written in the kernel language, and
// the custom_vjp pair that attaches them (what a training step's loss needs; Liger-Kernel's
// cross entropy is the anchor).
//
// loss[n] = logsumexp(x[n, :]) - x[n, t[n]]. The forward walks a row's logits in chunks of
// block_v columns with an online logsumexp (the running max m and the sum l of exp(x - m)) and
// picks the target's logit on the way, so no softmax row is ever written; it keeps
// lse = m + log(l) per row as the backward's residual. The backward is elementwise over
// (row, chunk) programs: dx = (exp(x - lse) - onehot(t)) * dloss. x is read twice and dx
// written once, the bytes a fused forward-with-gradient (Liger's) moves as well.
#include <cmath>

#include "pallas/kernels.h"

namespace pallas::kernels {

namespace {

DType acc_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

struct CeShape {
  int64_t bv;  // columns a step (forward) or a program (backward)
};

CeShape ce_shape(const char* kernel, int64_t rows, int64_t vocab, DType dtype, const CrossEntropyConfig& cfg) {
  std::string name = std::string("pl::kernels::") + kernel;
  if (rows < 1 || vocab < 1)
    throw Error(name + ": rows and vocab must be at least 1 (got " + std::to_string(rows) + " x " + std::to_string(vocab) + ")");
  if (!is_float(dtype)) throw Error(name + ": dtype is " + dtype_name(dtype) + "; the logits must be f16, bf16, f32 or f64");
  if (cfg.block_v < 0) throw Error(name + ": block_v is " + std::to_string(cfg.block_v) + "; give a positive count, or 0 for the default");
  if (cfg.ignore_index >= 0 && cfg.ignore_index < vocab)
    throw Error(name + ": ignore_index " + std::to_string(cfg.ignore_index) + " is a class of the vocabulary [0, " + std::to_string(vocab) +
                "); give a negative value (the default is -100)");
  CeShape s;
  s.bv = std::min(cfg.block_v ? cfg.block_v : int64_t{4096}, vocab);
  return s;
}

// The target's row factor: 0 for ignored rows, NaN for a target outside [0, V), else x.
Value by_target(const Value& x, const Value& t, int64_t vocab, int64_t ignore_index) {
  Value valid = (t >= 0) & (t < static_cast<int32_t>(vocab));
  return where(t == static_cast<int32_t>(ignore_index), full_like(x, 0.0), where(valid, x, full_like(x, NAN)));
}

}  // namespace

Call cross_entropy_fwd(int64_t rows, int64_t vocab, DType dtype, CrossEntropyConfig cfg) {
  CeShape sh = ce_shape("cross_entropy_fwd", rows, vocab, dtype, cfg);
  const int64_t bv = sh.bv, full_steps = vocab / bv, tail = vocab % bv, ignore = cfg.ignore_index;
  DType acc = acc_dtype(dtype);
  auto kernel = [=](Ref x_ref, Ref t_ref, Ref loss_ref, Ref lse_ref) {
    Value t = t_ref[all];
    // One chunk of the row: the running max, the sum of exp(x - max), and the target's logit.
    auto chunk = [&](const Value& xb, const Value& cols, const std::vector<Value>& c) {
      Value m = stop_gradient(maximum(c[0], max(xb, 0)));  // only keeps exp in range: no gradient
      Value l = c[1] * exp(c[0] - m) + sum(exp(xb - m), 0);
      Value xt = c[2] + sum(where(cols == t, xb, full_like(xb, 0.0)), 0);
      return std::vector<Value>{m, l, xt};
    };
    std::vector<Value> init = {full({}, -INFINITY, acc), full({}, 0.0, acc), full({}, 0.0, acc)};
    std::vector<Value> c = fori_loop(0, static_cast<int32_t>(full_steps), init, [&](Value s, std::vector<Value> c) {
      return chunk(x_ref(ds(s * bv, bv)).astype(acc), s * bv + iota(DType::I32, {bv}, 0), c);
    });
    if (tail)  // the last columns, a static slice of their own (no masked steps)
      c = chunk(x_ref(ds(full_steps * bv, tail)).astype(acc), static_cast<int32_t>(full_steps * bv) + iota(DType::I32, {tail}, 0), c);
    Value lse = c[0] + log(c[1]);
    loss_ref[all] = by_target(lse - c[2], t, vocab, ignore);
    lse_ref[all] = lse;
  };
  BlockSpec row({squeezed, vocab}, [](Value n) { return idx(n, 0); });
  BlockSpec one({squeezed}, [](Value n) { return idx(n); });
  Call call = pallas_call(kernel, std::vector<ShapeDtype>{ShapeDtype({rows}, acc), ShapeDtype({rows}, acc)},
                          {.grid = {rows},
                           .in_specs = {row, one},
                           .out_specs = {one, one},
                           .interpret = cfg.interpret,
                           .name = "cross_entropy_fwd",
                           .compiler_params = cfg.compiler_params});
  call.trace({ShapeDtype({rows, vocab}, dtype), ShapeDtype({rows}, DType::I32)});  // other arguments are refused
  return call;
}

Call cross_entropy_bwd(int64_t rows, int64_t vocab, DType dtype, CrossEntropyConfig cfg) {
  CeShape sh = ce_shape("cross_entropy_bwd", rows, vocab, dtype, cfg);
  const int64_t bv = sh.bv, ignore = cfg.ignore_index;
  DType acc = acc_dtype(dtype);
  auto kernel = [=](Ref x_ref, Ref t_ref, Ref lse_ref, Ref dloss_ref, Ref dx_ref) {
    Value t = t_ref[all];
    Value cols = program_id(1) * bv + iota(DType::I32, {bv}, 0);
    Value p = exp(x_ref[all].astype(acc) - lse_ref[all]);
    Value g = (p - where(cols == t, full_like(p, 1.0), full_like(p, 0.0))) * dloss_ref[all];
    dx_ref[all] = by_target(g, t, vocab, ignore).astype(dtype);
  };
  // The last chunk of a row may pass the vocabulary: its block overhangs the array (reads past
  // it are never used, writes past it are dropped).
  BlockSpec chunk({squeezed, bv}, [](Value n, Value c) { return idx(n, c); });
  BlockSpec one({squeezed}, [](Value n, Value) { return idx(n); });
  Call call = pallas_call(kernel, ShapeDtype({rows, vocab}, dtype),
                          {.grid = {rows, (vocab + bv - 1) / bv},
                           .in_specs = {chunk, one, one, one},
                           .out_specs = {chunk},
                           .interpret = cfg.interpret,
                           .name = "cross_entropy_bwd",
                           .compiler_params = cfg.compiler_params});
  ShapeDtype stat({rows}, acc);
  call.trace({ShapeDtype({rows, vocab}, dtype), ShapeDtype({rows}, DType::I32), stat, stat});
  return call;
}

CustomVjp cross_entropy_vjp(int64_t rows, int64_t vocab, DType dtype, CrossEntropyConfig cfg) {
  Call fwd = cross_entropy_fwd(rows, vocab, dtype, cfg);
  Call bwd = cross_entropy_bwd(rows, vocab, dtype, cfg);
  // residuals: x and t (inputs, not copied), then lse; t is an integer input: no cotangent.
  return custom_vjp(fwd, bwd, 1, {.residual_inputs = {0, 1}});
}

}  // namespace pallas::kernels
