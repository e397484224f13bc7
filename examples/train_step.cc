// One training step of a small transformer block, forward and backward, on the library's
// kernels and its reverse mode; the gradients checked against finite differences.
//
// The block (pre-norm, as GPT-2 and Llama), for x[B*S, D] (B sequences of S tokens, D features):
//
//   h1   = layer_norm(x; g1, b1)                     kernels::layer_norm_vjp
//   q, k, v = h1 @ Wq, h1 @ Wk, h1 @ Wv               kernels::matmul_vjp (x3)
//   qh, kh, vh = split_heads(q, k, v)  [B,H,S,Dh]     user kernel, pl::vjp (automatic)
//   oh   = causal_attention(qh, kh, vh)              kernels::flash_attention_vjp
//   a    = merge_heads(oh)             [B*S, D]       user kernel, pl::vjp (automatic)
//   x1   = x + a @ Wo                                matmul_vjp, user add kernel + pl::vjp
//   h2   = rms_norm(x1; g2)                          kernels::rms_norm_vjp
//   x2   = x1 + gelu(h2 @ W1) @ W2                   matmul_vjp, user GELU kernel + pl::vjp, add
//   loss = mean over rows of cross_entropy(x2 @ Wvocab, targets)   kernels::cross_entropy_vjp
//
// How reverse mode works here (docs/transforms.md, "vjp" and "custom_vjp"). Every step of the
// forward is run through pl::vjp(f, inputs), which returns f's outputs and a *pullback*: a
// function from the cotangent of f's outputs (dL/d output) to the cotangents of its inputs
// (dL/d input). The library's kernels come with hand-written backward kernels attached
// (pl::CustomVjp: matmul_vjp, layer_norm_vjp, ...); our own small kernels are plain
// pallas_calls, and pl::vjp transposes them automatically. The forward keeps the pullbacks (the
// `Tape` below); the backward starts from dL/dL = 1 and calls them in reverse order, each
// turning the cotangent of a value into the cotangents of what it was computed from. Where a
// value feeds two consumers (x feeds the norm and the residual add; h1 feeds three matmuls) its
// cotangent is the SUM of what each consumer sends back: the chain rule over every path.
//
// Then one SGD step, w -= lr * dL/dw, by a user kernel, and the loss again: it must go down.
//
// Checks (the program exits 1 on a failure):
//  1. In f64 (the library's kernels compute in f64 for f64 inputs), dL/dw for entries of every
//     weight and of x against central finite differences of the forward loss, to 1e-6
//     relative (the figures printed are near 1e-10).
//  2. The same step in f32 and bf16, its loss and every whole gradient against the f64 ones at
//     loose tolerances, on the GPU where one is usable. Without one that GPU run is skipped
//     (the program says so) and the two steps run on the interpreter instead.
// Every call is left to Backend::Auto: the GPU where one is usable, else the interpreter. On
// the interpreter the whole program takes well under a second; PALLAS_CUDA_COMPILE_CHECK=1
// also compiles every kernel for the GPU (sm_90a) on a machine without one.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include <pallas/kernels.h>
#include <pallas/pallas.h>

namespace pl = pallas;
namespace plk = pallas::kernels;

namespace {

// ---- sizes: small, so the interpreter runs the whole check in seconds ----
constexpr int64_t B = 2, S = 32, D = 32, H = 2, Dh = D / H, F = 64, V = 64;
constexpr int64_t N = B * S;       // rows (tokens) of every activation
constexpr int64_t kRowBlock = 16;  // rows per program of the user's row-wise kernels
constexpr double kLearningRate = 0.5;

// The compute dtype of a storage dtype: f32 for the 16-bit floats (rounding every step of a
// polynomial to bf16 would lose most of its digits), else itself.
pl::DType compute_dtype(pl::DType t) { return t == pl::f64 ? pl::f64 : pl::f32; }

// ---- the user's kernels ----

// [B*S, D] -> [B, H, S, Dh]: the rows of sequence b, columns h*Dh .. (h+1)*Dh, become head h
// of sequence b. The kernel body is a plain copy; the block specs do the transpose: program
// (b, h) reads block (b, h) of the [B*S, D] input (S rows, Dh columns) and writes block
// (b, h, 0, 0) of the output, with the two leading dimensions squeezed so both blocks are
// [S, Dh] tiles. Its automatic vjp is the inverse shuffle: each input block's cotangent is
// read from the output cotangent's block (b, h).
pl::Call split_heads(pl::DType t) {
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({B, H, S, Dh}, t),
      {.grid = {B, H},
       .in_specs = {pl::BlockSpec({S, Dh}, [](pl::Value b, pl::Value h) { return pl::idx(b, h); })},
       .out_specs = {pl::BlockSpec({pl::squeezed, pl::squeezed, S, Dh}, [](pl::Value b, pl::Value h) { return pl::idx(b, h, 0, 0); })},
       .name = "split_heads"});
}

// [B, H, S, Dh] -> [B*S, D], the inverse of split_heads (specs swapped).
pl::Call merge_heads(pl::DType t) {
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({N, D}, t),
      {.grid = {B, H},
       .in_specs = {pl::BlockSpec({pl::squeezed, pl::squeezed, S, Dh}, [](pl::Value b, pl::Value h) { return pl::idx(b, h, 0, 0); })},
       .out_specs = {pl::BlockSpec({S, Dh}, [](pl::Value b, pl::Value h) { return pl::idx(b, h); })},
       .name = "merge_heads"});
}

// Row blocks of a [rows, cols] activation: program i sees rows i*kRowBlock .. (i+1)*kRowBlock.
pl::BlockSpec row_block(int64_t cols) {
  return pl::BlockSpec({kRowBlock, cols}, [](pl::Value i) { return pl::idx(i, 0); });
}

// a + b for [rows, cols] arrays: the residual connections, and the sum of two cotangents.
pl::Call add(int64_t rows, int64_t cols, pl::DType t) {
  return pl::pallas_call(
      [](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = a[pl::all] + b[pl::all]; }, pl::ShapeDtype({rows, cols}, t),
      {.grid = {rows / kRowBlock}, .in_specs = {row_block(cols), row_block(cols)}, .out_specs = {row_block(cols)}, .name = "add"});
}

// GELU, tanh approximation (GPT-2's): 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))).
// Only the forward is written: pl::vjp differentiates it (tanh, mul and add have rules), the
// derivative recomputed from u in the transposed kernel rather than saved.
pl::Call gelu(int64_t rows, int64_t cols, pl::DType t) {
  const pl::DType ct = compute_dtype(t);
  const double c = std::sqrt(2.0 / std::numbers::pi);
  auto kernel = [=](pl::Ref u_ref, pl::Ref o_ref) {
    pl::Value u = u_ref[pl::all].astype(ct);
    pl::Value inner = c * (u + 0.044715 * u * u * u);  // C++ numbers take u's dtype (weak types)
    o_ref[pl::all] = (0.5 * u * (1 + pl::tanh(inner))).astype(t);
  };
  return pl::pallas_call(kernel, pl::ShapeDtype({rows, cols}, t),
                         {.grid = {rows / kRowBlock}, .in_specs = {row_block(cols)}, .out_specs = {row_block(cols)}, .name = "gelu_tanh"});
}

// SGD: w - lr * g, over the weight flattened to 1-D (Array::reshape shares the storage), 256
// elements a program (fewer for a small weight).
pl::Call sgd(int64_t size, pl::DType t, double lr) {
  const pl::DType ct = compute_dtype(t);
  const int64_t block = std::min<int64_t>(size, 256);
  if (size % block) throw pl::Error("sgd: " + std::to_string(size) + " elements is not a multiple of " + std::to_string(block));
  auto kernel = [=](pl::Ref w, pl::Ref g, pl::Ref o) { o[pl::all] = (w[pl::all].astype(ct) - lr * g[pl::all].astype(ct)).astype(t); };
  pl::BlockSpec spec({block}, [](pl::Value i) { return pl::idx(i); });
  return pl::pallas_call(kernel, pl::ShapeDtype({size}, t),
                         {.grid = {size / block}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "sgd"});
}

// ---- the model ----

// The trainable parameters (and, for the gradients, their cotangents, in the same struct).
struct Params {
  pl::Array g1, b1;          // layer norm weight and bias [D]
  pl::Array wq, wk, wv, wo;  // [D, D]
  pl::Array g2;              // rms norm weight [D]
  pl::Array w1, w2;          // [D, F], [F, D]
  pl::Array wvocab;          // [D, V]
  std::vector<std::pair<const char*, pl::Array*>> named() {
    return {{"g1", &g1}, {"b1", &b1}, {"Wq", &wq}, {"Wk", &wk}, {"Wv", &wv},
            {"Wo", &wo}, {"g2", &g2}, {"W1", &w1}, {"W2", &w2}, {"Wvocab", &wvocab}};
  }
};

Params init_params(uint64_t seed) {
  auto normal = [&](pl::Shape s, double stddev) { return pl::random::normal(std::move(s), pl::f64, seed++, 0.0, stddev); };
  const double sd = 1 / std::sqrt(double(D)), sf = 1 / std::sqrt(double(F));
  Params p;
  p.g1 = normal({D}, 0.1), p.b1 = normal({D}, 0.1);  // norm weights around 1, biases around 0
  p.g2 = normal({D}, 0.1);
  for (pl::Array* g : {&p.g1, &p.g2}) {
    std::vector<double> v = g->to_vector<double>();
    for (double& e : v) e += 1;
    *g = pl::Array::from_vector(v, {D});
  }
  p.wq = normal({D, D}, sd), p.wk = normal({D, D}, sd), p.wv = normal({D, D}, sd), p.wo = normal({D, D}, sd);
  p.w1 = normal({D, F}, sd), p.w2 = normal({F, D}, sf), p.wvocab = normal({D, V}, sd);
  return p;
}

// Runs f (a pl::Call or a pl::CustomVjp) on args; with a tape slot, through pl::vjp, keeping
// the pullback there. The outputs are the same either way.
template <class F>
std::vector<pl::Array> run(const F& f, const std::vector<pl::Array>& args, pl::VjpFn* slot) {
  if (!slot) return f(args);
  auto [outs, pullback] = pl::vjp(f, args);
  *slot = std::move(pullback);
  return outs;
}

// A differentiable step of the forward, whatever computes it: the library's CustomVjp pairs and
// the user's Calls (pl::vjp takes both) behind one type.
using Step = std::function<std::vector<pl::Array>(const std::vector<pl::Array>&, pl::VjpFn*)>;
template <class F>
Step step(F f) {
  return [f](const std::vector<pl::Array>& args, pl::VjpFn* slot) { return run(f, args, slot); };
}

// The pullbacks the forward records, one per step, for the backward to call in reverse.
struct Tape {
  pl::VjpFn ln1, q, k, v, split_q, split_k, split_v, attn, merge, wo, res1, ln2, up, act, down, res2, vocab, xent;
};

// The block's kernels for one dtype, made once: each traces on its first call and is reused
// (finite differences run the forward dozens of times).
struct Block {
  pl::DType t;
  Step ln1, ln2, proj, up, down, vocab, attn, xent;  // the library's kernels, backwards attached
  Step split, merge, residual, act;                  // ours, differentiated by pl::vjp
  pl::Call add_cot;                                  // a + b on [N, D]: sums of cotangents
  std::map<int64_t, pl::Call> update;                // SGD, by the weight's element count

  explicit Block(pl::DType t_) : t(t_) {
    ln1 = step(plk::layer_norm_vjp(N, D, t, 1e-5, {.block_rows = kRowBlock}, {.block_rows = kRowBlock}));
    ln2 = step(plk::rms_norm_vjp(N, D, t, 1e-6, {.block_rows = kRowBlock}, {.block_rows = kRowBlock}));
    // [M, K] @ [K, N] and its two backward products, out_dtype t: every activation and
    // cotangent is stored in t (the matmul accumulates in f32, f64 for f64).
    plk::MatmulConfig mm{.block_m = 32, .block_n = 32, .block_k = 32, .compiler_params = {.num_warps = 4}};
    auto linear = [&](int64_t m, int64_t n, int64_t k) { return step(plk::matmul_vjp(m, n, k, t, t, mm)); };
    proj = linear(N, D, D);  // Wq, Wk, Wv and Wo all have this shape
    up = linear(N, F, D);
    down = linear(N, D, F);
    vocab = linear(N, V, D);
    // Causal (a language model: token i sees tokens 0..i); the blocks must divide S.
    attn = step(plk::flash_attention_vjp(B, H, S, Dh, t, {.block_q = 16, .block_k = 16, .causal = true}, {.block_q = 16, .block_k = 16}));
    xent = step(plk::cross_entropy_vjp(N, V, t));
    split = step(split_heads(t)), merge = step(merge_heads(t));
    add_cot = add(N, D, t);
    residual = step(add_cot);
    act = step(gelu(N, F, t));
    for (int64_t size : {D, D * D, D * F, D * V}) update[size] = sgd(size, t, kLearningRate);
  }
};

struct Forward {
  double loss = 0;
  pl::Array row_losses;  // [N], f32 (f64 for f64)
};

// The forward pass; with a tape it records every pullback. Weights and x in blk.t.
Forward forward(const Block& blk, const Params& p, const pl::Array& x, const pl::Array& targets, Tape* tape) {
  auto slot = [&](pl::VjpFn Tape::*m) { return tape ? &(tape->*m) : nullptr; };
  pl::Array h1 = blk.ln1({x, p.g1, p.b1}, slot(&Tape::ln1))[0];
  pl::Array q = blk.proj({h1, p.wq}, slot(&Tape::q))[0];
  pl::Array k = blk.proj({h1, p.wk}, slot(&Tape::k))[0];
  pl::Array v = blk.proj({h1, p.wv}, slot(&Tape::v))[0];
  pl::Array qh = blk.split({q}, slot(&Tape::split_q))[0];
  pl::Array kh = blk.split({k}, slot(&Tape::split_k))[0];
  pl::Array vh = blk.split({v}, slot(&Tape::split_v))[0];
  pl::Array oh = blk.attn({qh, kh, vh}, slot(&Tape::attn))[0];
  pl::Array a = blk.merge({oh}, slot(&Tape::merge))[0];
  pl::Array proj = blk.proj({a, p.wo}, slot(&Tape::wo))[0];
  pl::Array x1 = blk.residual({x, proj}, slot(&Tape::res1))[0];
  pl::Array h2 = blk.ln2({x1, p.g2}, slot(&Tape::ln2))[0];
  pl::Array u = blk.up({h2, p.w1}, slot(&Tape::up))[0];
  pl::Array gu = blk.act({u}, slot(&Tape::act))[0];
  pl::Array m = blk.down({gu, p.w2}, slot(&Tape::down))[0];
  pl::Array x2 = blk.residual({x1, m}, slot(&Tape::res2))[0];
  pl::Array logits = blk.vocab({x2, p.wvocab}, slot(&Tape::vocab))[0];
  Forward f;
  f.row_losses = blk.xent({logits, targets}, slot(&Tape::xent))[0];
  // The loss is the mean of the per-row losses (the kernel returns torch's reduction='none'),
  // summed here on the host in double.
  for (double l : f.row_losses.to_vector<double>()) f.loss += l;
  f.loss /= N;
  return f;
}

// The backward pass: the pullbacks in reverse order, each under the forward line it undoes.
// Returns dL/dparams and dL/dx. Every cotangent has its value's shape and dtype.
//
// Two rules place every cotangent:
//  - A pullback sends a value's cotangent to exactly the inputs that value was computed from
//    (the chain rule, one step back), so each line below consumes the cotangent of a forward
//    line's output and produces those of its inputs.
//  - A value used more than once gets the SUM of the cotangents its uses send back (d/dv of
//    f(v) + g(v) is f' + g'). The activations x, x1 and h1 are used twice or three times, so we
//    add their cotangents with the add kernel. A weight is used by every row (token): that is
//    fan-out too, and its gradient is the sum over rows, which the backward kernels do inside
//    (dW = A^T dC contracts over the rows; the norms sum dg over rows in per-program partial
//    sums, then norm_partial_sum).
std::pair<Params, pl::Array> backward(const Block& blk, const Tape& tape, const Forward& fwd) {
  Params g;
  // loss = (1/N) sum_n row_losses[n]: dL/dL = 1, so each row's loss has cotangent 1/N (in the
  // losses' dtype, f32 or f64, as the pullback checks).
  pl::Array d_rows = pl::Array::full({N}, 1.0 / N, fwd.row_losses.dtype());
  // row_losses = cross_entropy(logits, targets): d_logits = (softmax(logits) - onehot) / N.
  // The targets are integers: no cotangent (an empty Array in its place).
  pl::Array d_logits = tape.xent(d_rows)[0];
  // logits = x2 @ Wvocab: dx2 = d_logits Wvocab^T (x2's row n reached every logit of row n
  // through Wvocab), dWvocab = x2^T d_logits (summed over the rows).
  auto gv = tape.vocab(d_logits);
  pl::Array dx2 = gv[0];
  g.wvocab = gv[1];
  // x2 = x1 + m: d(x1 + m)/dx1 = d(x1 + m)/dm = 1, so the add hands dx2 to both operands.
  // dx1_skip is only x1's first share: x1 is also read by the norm below.
  auto g_res2 = tape.res2(dx2);
  pl::Array dx1_skip = g_res2[0], dm = g_res2[1];
  // m = gelu(u) @ W2: {d gelu(u), dW2}
  auto gd = tape.down(dm);
  g.w2 = gd[1];
  // gelu(u), elementwise: du = gelu'(u) * d gelu(u). The automatic pullback is the GELU kernel
  // transposed: it recomputes tanh(...) from u (nothing was saved but u) and applies the chain
  // rule through tanh, the cube and the products.
  pl::Array du = tape.act(gd[0])[0];
  // u = h2 @ W1: {dh2, dW1}
  auto gu = tape.up(du);
  g.w1 = gu[1];
  // h2 = rms_norm(x1; g2): {x1's second share, dg2}. The norm mixes a whole row (every output
  // depends on the row's mean square), so dx1's row is a full row-wise backward, not dh2 * g2.
  auto gn2 = tape.ln2(gu[0]);
  g.g2 = gn2[1];
  // x1 had two uses (the skip connection to x2 and the norm): its cotangent is the sum.
  pl::Array dx1 = blk.add_cot(dx1_skip, gn2[0]);
  // x1 = x + proj: dx1 to both; dx_skip is x's first share (x is also read by the first norm).
  auto g_res1 = tape.res1(dx1);
  pl::Array dx_skip = g_res1[0], dproj = g_res1[1];
  // proj = a @ Wo: {da, dWo}
  auto go = tape.wo(dproj);
  g.wo = go[1];
  // a = merge_heads(oh), a permutation of elements: its pullback is the inverse permutation,
  // the cotangent split into heads again (merge_heads transposed is split_heads).
  pl::Array doh = tape.merge(go[0])[0];
  // oh = attention(qh, kh, vh): {dq, dk, dv}, each [B, H, S, Dh]. The pullback recomputes the
  // probabilities block by block from q, k and the saved logsumexp (FlashAttention-2).
  auto ga = tape.attn(doh);
  // qh = split_heads(q), ...: each back to [B*S, D] by the inverse permutation.
  pl::Array dq = tape.split_q(ga[0])[0], dk = tape.split_k(ga[1])[0], dv = tape.split_v(ga[2])[0];
  // q = h1 @ Wq, k = h1 @ Wk, v = h1 @ Wv: three pullbacks, each {dh1 share, dW}.
  auto gq = tape.q(dq), gk = tape.k(dk), gvv = tape.v(dv);
  g.wq = gq[1], g.wk = gk[1], g.wv = gvv[1];
  // h1 had three uses: dh1 = dh1 (via q) + dh1 (via k) + dh1 (via v).
  pl::Array dh1 = blk.add_cot(blk.add_cot(gq[0], gk[0]), gvv[0]);
  // h1 = layer_norm(x; g1, b1): {x's second share, dg1, db1}
  auto gn1 = tape.ln1(dh1);
  g.g1 = gn1[1], g.b1 = gn1[2];
  // x had two uses (the first norm and the skip connection to x1).
  pl::Array dx = blk.add_cot(dx_skip, gn1[0]);
  return {g, dx};
}

// One step: forward with a tape, backward, SGD (w - lr * dw for every weight, new arrays; a
// longer training loop would update in place: input_output_aliases {{0, 0}} and Call::into),
// then the forward again.
struct StepResult {
  double loss_before = 0, loss_after = 0;
  Params grads;
  pl::Array dx;
  std::string backend;
};

StepResult train_step(const Block& blk, Params p, const pl::Array& x, const pl::Array& targets) {
  StepResult r;
  Tape tape;
  Forward fwd = forward(blk, p, x, targets, &tape);
  r.loss_before = fwd.loss;
  std::tie(r.grads, r.dx) = backward(blk, tape, fwd);
  r.backend = blk.add_cot.backend_name();
  auto named_p = p.named(), named_g = r.grads.named();
  for (size_t i = 0; i < named_p.size(); ++i) {
    pl::Array& w = *named_p[i].second;
    const pl::Array& dw = *named_g[i].second;
    pl::Shape shape = w.shape();
    w = blk.update.at(w.size())(w.reshape({w.size()}), dw.reshape({dw.size()})).reshape(shape);
  }
  r.loss_after = forward(blk, p, x, targets, nullptr).loss;
  return r;
}

Params cast(Params p, pl::DType t) {
  for (auto& [name, a] : p.named()) *a = a->astype(t);
  return p;
}

// ||a - b|| / ||b||
double rel_error(const pl::Array& a, const pl::Array& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) num += (x[i] - y[i]) * (x[i] - y[i]), den += y[i] * y[i];
  return std::sqrt(num / (den > 0 ? den : 1));
}

}  // namespace

int main() {
  auto start = std::chrono::steady_clock::now();
  bool ok = true;
  try {
    // ---- 1. the step in f64, its gradients against finite differences ----
    Params p = init_params(/*seed=*/1);
    pl::Array x = pl::random::normal({N, D}, pl::f64, /*seed=*/100);
    pl::Array targets = pl::random::randint({N}, pl::i32, /*seed=*/101, 0, V);
    Block blk64(pl::f64);
    StepResult r = train_step(blk64, p, x, targets);
    std::printf("train_step: block B=%lld S=%lld D=%lld H=%lld MLP=%lld vocab=%lld, f64, backend: %s\n", (long long)B, (long long)S,
                (long long)D, (long long)H, (long long)F, (long long)V, r.backend.c_str());
    std::printf("  loss before the step %.10f, after (SGD, lr %.2g) %.10f\n", r.loss_before, kLearningRate, r.loss_after);
    if (!(r.loss_after < r.loss_before)) {
      std::printf("  FAILED: the loss did not go down\n");
      ok = false;
    }

    // Central differences of the forward alone (no tape), the fourth-order stencil
    //   dL/dw_i ~ (8 (L(w + h e_i) - L(w - h e_i)) - (L(w + 2h e_i) - L(w - 2h e_i))) / 12h,
    // whose error (h^4 terms, and rounding of L / h) is near 1e-12 here, far below the tolerance;
    // the two-point (L(w + h) - L(w - h)) / 2h would need h ~ 1e-5 and leave ~1e-7.
    const double h = 1e-3, tol = 1e-6;
    auto fd_check = [&](const char* name, pl::Array* entry, const pl::Array& grad, int64_t i) {
      std::vector<double> base = entry->to_vector<double>(), g = grad.to_vector<double>();
      pl::Array saved = *entry;
      auto loss_at = [&](double delta) {
        std::vector<double> v = base;
        v[i] += delta;
        *entry = pl::Array::from_vector(v, saved.shape());
        return forward(blk64, p, x, targets, nullptr).loss;
      };
      double fd = (8 * (loss_at(h) - loss_at(-h)) - (loss_at(2 * h) - loss_at(-2 * h))) / (12 * h);
      *entry = saved;
      double err = std::abs(g[i] - fd) / std::max(std::abs(fd), 1e-6);
      bool good = err <= tol;
      std::printf("  d loss / d %-6s[%4lld]  reverse mode % .10e  finite diff % .10e  rel.err %.1e  %s\n", name, (long long)i, g[i], fd,
                  err, good ? "ok" : "FAILED");
      ok = ok && good;
    };
    std::printf("  gradient check against central differences (h %.0e, tol %.0e):\n", h, tol);
    auto named_p = p.named(), named_g = r.grads.named();
    for (size_t w = 0; w < named_p.size(); ++w)
      for (uint64_t j = 0; j < 3; ++j) {
        int64_t n = named_p[w].second->size();
        fd_check(named_p[w].first, named_p[w].second, *named_g[w].second, static_cast<int64_t>((w * 7919 + j * 104729 + 13) % n));
      }
    for (int64_t i : {5, 1000, 2047}) fd_check("x", &x, r.dx, i);

    // ---- 2. the same step in f32 and bf16 (the GPU's dtypes), against the f64 one ----
    // Same weights and inputs, rounded to the dtype. On the GPU, f32 dots run in tf32 (10-bit
    // mantissas) and bf16 keeps 8 bits, so the loss and gradients agree with f64 to ~1e-3 and
    // ~1e-2: the tolerances are loose. Where no GPU is usable the steps run on the
    // interpreter instead.
    if (!pl::cuda_available())
      std::printf("  no GPU usable here: the GPU run was skipped; the f32 and bf16 steps run on the interpreter\n");
    // (PALLAS_BACKEND=interpret on a GPU machine also runs them on the interpreter.)
    struct Low {
      pl::DType t;
      double loss_tol, grad_tol;
    };
    for (Low low : {Low{pl::f32, 1e-3, 1e-2}, Low{pl::bf16, 2e-2, 1e-1}}) {
      Block blk(low.t);
      StepResult low_r = train_step(blk, cast(p, low.t), x.astype(low.t), targets);
      double loss_err = std::abs(low_r.loss_before - r.loss_before) / r.loss_before;
      bool good = loss_err <= low.loss_tol && low_r.loss_after < low_r.loss_before;
      std::printf("  %s (backend: %s): loss %.6f -> %.6f; the loss against f64: rel.err %.1e (tol %.0e)  %s\n", pl::dtype_name(low.t),
                  low_r.backend.c_str(), low_r.loss_before, low_r.loss_after, loss_err, low.loss_tol, good ? "ok" : "FAILED");
      ok = ok && good;
      // Every gradient, whole: ||g - g64|| / ||g64||.
      std::string line;
      double worst = 0;
      auto check = [&](const char* name, const pl::Array& g, const pl::Array& g64) {
        double e = rel_error(g, g64);
        worst = std::max(worst, std::isnan(e) ? INFINITY : e);
        char buf[64];
        std::snprintf(buf, sizeof buf, " d%s %.0e", name, e);
        line += buf;
      };
      auto lg = low_r.grads.named(), rg = r.grads.named();
      for (size_t w = 0; w < lg.size(); ++w) check(lg[w].first, *lg[w].second, *rg[w].second);
      check("x", low_r.dx, r.dx);
      good = worst <= low.grad_tol;
      std::printf("  %s gradients against f64, rel.err (tol %.0e):%s  %s\n", pl::dtype_name(low.t), low.grad_tol, line.c_str(),
                  good ? "ok" : "FAILED");
      ok = ok && good;
    }
  } catch (const pl::Error& e) {
    std::printf("train_step: FAILED: %s\n", e.what());
    return 1;
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("train_step: %s (%.1f s)\n", ok ? "ok" : "FAILED", s);
  return ok ? 0 : 1;
}
