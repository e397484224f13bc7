// Tutorial 06: flash attention (forward) — the online softmax over blocks of keys.
//
// What it does: for each head h, out[h] = softmax(Q[h] K[h]^T / sqrt(D)) V[h], with Q, K, V:
// bf16[2, 256, 64] (heads, sequence, head dim) and out: f32[2, 256, 64].
//
// The Pallas ideas:
//  - The grid is (head, query block): program (h, i) owns 64 query rows of one head and
//    produces their 64 output rows. Its Q block is {pl::squeezed, 64, 64}; K and V come whole
//    for that head ({pl::squeezed, 256, 64}, index map (h, i) -> (h, 0, 0)), and the kernel walks
//    them 64 keys at a time with pl::ds.
//  - Flash attention never forms the [256, 256] score matrix. For each block of keys it
//    computes the [64, 64] scores s = q k^T (pl::dot with .trans_b) and folds them into three
//    running values per query row, carried through pl::fori_loop as a vector of Values:
//      m   the largest score seen so far,
//      l   the sum of e^(s - m) over the keys seen so far,
//      acc the sum of e^(s - m) * v over the keys seen so far.
//    When a block raises the maximum from m to m', the old sums were scaled by e^-m instead of
//    e^-m', so both are multiplied by e^(m - m') before the new block's terms are added: the
//    online softmax. At the end out = acc / l, the exact softmax-weighted sum of V.
//  - Tiles of different shapes meet through broadcasting: pl::max(s, 1) is a row vector f32[64];
//    pl::expand_dims(m, 1) makes it [64, 1] so it subtracts from every column of s.
//  - Precision: scores and sums in f32; the probabilities are rounded to bf16 for the second
//    dot (as real kernels do, so the tensor cores take bf16), which costs ~3 significant digits
//    in the output, hence the tolerance of the check.
//
// Try next: causal attention — key j is visible to query row r only if j <= r: mask the scores
// with pl::where(rows >= cols, s, -INFINITY) (rows and cols from pl::iota, offset by the block
// starts), and stop the loop at the diagonal block; block sizes 128; exp2 with log2(e) folded
// into the scale, as kernels/attention.cc does.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <pallas/pallas.h>
#include <pallas/testing.h>

namespace pl = pallas;
using V = pl::Value;

int main() {
  if (!pl::testing::backend_available()) return 77;  // PALLAS_BACKEND=cuda without a GPU: skipped

  const int64_t H = 2, S = 256, D = 64, bq = 64, bk = 64;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  pl::Array q = pl::random::normal({H, S, D}, pl::bf16, /*seed=*/8);
  pl::Array k = pl::random::normal({H, S, D}, pl::bf16, /*seed=*/9);
  pl::Array v = pl::random::normal({H, S, D}, pl::bf16, /*seed=*/10);

  auto kernel = [=](pl::Ref q_ref, pl::Ref k_ref, pl::Ref v_ref, pl::Ref o_ref) {
    V q = q_ref[pl::all];  // bf16[64, 64]: this program's query rows
    std::vector<V> init{pl::full({bq}, -INFINITY), pl::zeros({bq}), pl::zeros({bq, D})};  // m, l, acc
    std::vector<V> sums = pl::fori_loop(0, S / bk, init, [&](V j, const std::vector<V>& carry) {
      V m = carry[0], l = carry[1], acc = carry[2];
      V keys = k_ref(pl::ds(j * bk, bk), pl::all);    // bf16[64, 64]
      V values = v_ref(pl::ds(j * bk, bk), pl::all);  // bf16[64, 64]
      V s = pl::dot(q, keys, {.trans_b = true}) * scale;  // f32[64, 64] scores
      V m_new = pl::maximum(m, pl::max(s, 1));
      V rescale = pl::exp(m - m_new);                  // e^(m - m'): 0 on the first block (m = -inf)
      V p = pl::exp(s - pl::expand_dims(m_new, 1));    // this block's unnormalised probabilities
      V l_new = l * rescale + pl::sum(p, 1);
      V acc_new = acc * pl::expand_dims(rescale, 1) + pl::dot(p.astype(pl::bf16), values);
      return std::vector<V>{m_new, l_new, acc_new};
    });
    o_ref[pl::all] = sums[2] / pl::expand_dims(sums[1], 1);  // acc / l
  };
  pl::BlockSpec q_spec({pl::squeezed, bq, D}, [](V h, V i) { return pl::idx(h, i, 0); });
  pl::BlockSpec kv_spec({pl::squeezed, S, D}, [](V h, V i) { return pl::idx(h, 0, 0); });
  pl::Call attention = pl::pallas_call(kernel, pl::ShapeDtype({H, S, D}, pl::f32),
                                       {.grid = {H, S / bq},
                                        .in_specs = {q_spec, kv_spec, kv_spec},
                                        .out_specs = {q_spec},
                                        .name = "flash_attention"});
  pl::Array out = attention(q, k, v);

  // The reference: the whole score row, softmax, weighted sum — in double.
  std::vector<double> Q = q.to_vector<double>(), Kd = k.to_vector<double>(), Vd = v.to_vector<double>(), expected(H * S * D);
  std::vector<double> w(S);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t r = 0; r < S; ++r) {
      const double* qr = &Q[(h * S + r) * D];
      double m = -INFINITY, l = 0;
      for (int64_t j = 0; j < S; ++j) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += qr[d] * Kd[(h * S + j) * D + d];
        w[j] = s * scale;
        m = std::max(m, w[j]);
      }
      for (int64_t j = 0; j < S; ++j) l += (w[j] = std::exp(w[j] - m));
      for (int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t j = 0; j < S; ++j) o += w[j] * Vd[(h * S + j) * D + d];
        expected[(h * S + r) * D + d] = o / l;
      }
    }
  auto check = pl::testing::allclose(out, expected, {.rtol = 2e-2, .atol = 2e-3});
  std::printf("%s: %lld programs on the %s\n%s", attention.name().c_str(), static_cast<long long>(H * (S / bq)),
              attention.backend_name().c_str(), check.report.c_str());
  return check ? 0 : 1;
}
