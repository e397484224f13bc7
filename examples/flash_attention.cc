// Flash-attention forward: online softmax over KV blocks, causal and not.
#include "examples/examples.h"
#include "pallas/kernels.h"

namespace pl = pallas;

namespace examples {

bool attention_one(bool causal) {
  const int64_t B = 1, H = 2, S = 256, D = 128;
  pl::Array q = pl::random::normal({B, H, S, D}, pl::bf16, 9), k = pl::random::normal({B, H, S, D}, pl::bf16, 10),
            v = pl::random::normal({B, H, S, D}, pl::bf16, 11);
  auto call = pl::kernels::flash_attention(B, H, S, D, pl::bf16, {.block_q = 64, .block_k = 64, .causal = causal});
  pl::Array o;
  double ms = time_ms([&] { o = call(q, k, v); });
  auto Q = q.to_vector<double>(), K = k.to_vector<double>(), V = v.to_vector<double>(), O = o.to_vector<double>();
  std::vector<double> ref(O.size());
  double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> s(S);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < S; ++i) {
      const double* qi = &Q[(bh * S + i) * D];
      double mx = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += qi[d] * K[(bh * S + j) * D + d];
        s[j] = (causal && j > i) ? -INFINITY : acc * scale;
        mx = std::max(mx, s[j]);
      }
      double l = 0;
      for (int64_t j = 0; j < S; ++j) l += (s[j] = std::exp(s[j] - mx));
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += s[j] * V[(bh * S + j) * D + d];
        ref[(bh * S + i) * D + d] = acc / l;
      }
    }
  // bf16 output and bf16 probabilities in the PV product: errors of a few bf16 ulps
  return report(std::string("flash_attention bf16") + (causal ? " causal" : "") + " [1,2,256,128]", call, rel_error(O, ref),
                1e-2, ms);
}

bool flash_attention() {
  bool ok = attention_one(false);
  return attention_one(true) && ok;
}

}  // namespace examples
