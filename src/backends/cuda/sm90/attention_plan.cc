#include "src/backends/cuda/sm90/attention_plan.h"

#include <cmath>

#include "pallas/kernels.h"
#include "src/backends/cuda/sm90/device_sources.inc"
#include "src/ir/primitive.h"

namespace pallas::cuda::sm90 {

namespace {
// The scale literal: the f32 constant multiplied into the scores (the only non-integral
// f32 literal of the kernel's loop body other than -inf).
bool find_scale(const ir::Jaxpr& j, double* scale) {
  for (auto& e : j.eqns) {
    if (e.prim->id == ir::PrimId::mul)
      for (auto& a : e.in)
        if (auto* l = std::get_if<ir::Literal>(&a); l && is_float(l->dtype) && std::isfinite(l->f) && l->f != std::floor(l->f)) {
          *scale = l->f;
          return true;
        }
    for (auto& [k, v] : e.params.items)
      if (auto* s = std::get_if<ir::JaxprPtr>(&v))
        if (find_scale(**s, scale)) return true;
  }
  return false;
}
}  // namespace

std::optional<AttentionPlan> plan_attention(const core::PallasCall& c, std::string* why_not) {
  auto no = [&](const char* w) -> std::optional<AttentionPlan> {
    if (why_not) *why_not = w;
    return std::nullopt;
  };
  const core::GridMapping& g = c.grid;
  if (g.grid.size() != 3 || g.inputs.size() != 3 || g.outputs.size() != 1 || !g.prefetch.empty() || !g.scratch.empty() ||
      !c.aliases.empty())
    return no("not a (batch, heads, q-blocks) call of q, k, v");
  const Shape& qs = g.inputs[0].array.shape;
  if (qs.size() != 4) return no("q is not [B, H, S, D]");
  int64_t B = qs[0], H = qs[1], S = qs[2], D = qs[3];
  DType dt = g.inputs[0].array.dtype;
  for (auto* b : {&g.inputs[1], &g.inputs[2], &g.outputs[0]})
    if (b->array.shape != qs || b->array.dtype != dt) return no("q, k, v, o differ in shape or dtype");
  if (dt != DType::BF16 && dt != DType::F16) return no("dtype is not bf16 or f16");
  if (D != 128 || S % 128 != 0) return no("head_dim is not 128 or seq is not a multiple of 128");
  const Shape& qb = g.inputs[0].block_shape;
  const Shape& kb = g.inputs[1].block_shape;
  int64_t bq = qb[2];
  double scale_log2 = 0;
  if (!find_scale(*c.kernel, &scale_log2)) return no("no score scale found");
  std::string text = ir::to_text(*c.kernel);
  // The literal is sm_scale * log2(e); the sm_scale that gives it back, or a neighbour of it.
  double s0 = scale_log2 / 1.4426950408889634;
  for (double scale : {s0, std::nextafter(s0, 0.0), std::nextafter(s0, 1e300)})
  for (bool causal : {false, true}) {
    // The library kernel with the same parameters; block_k is read off the loop body's loads.
    for (int64_t bk : {16, 32, 64, 128, 256}) {
      if (S % bk || bk > S) continue;
      Call ref = kernels::flash_attention(B, H, S, D, dt, {.block_q = bq, .block_k = bk, .causal = causal, .sm_scale = scale});
      ref.trace({g.inputs[0].array, g.inputs[1].array, g.inputs[2].array});
      const core::PallasCall& r = ref.state()->get_traced();
      if (ir::to_text(*r.kernel) != text || r.grid.grid != g.grid || r.grid.inputs[1].block_shape != kb) continue;
      AttentionPlan p;
      p.batch = B, p.heads = H, p.seq = S, p.head_dim = D, p.dtype = dt, p.causal = causal, p.scale = scale;
      p.smem_bytes = 128 * 256 + 2 * 2 * 128 * 256 + 1024;  // AttnTile<128>::SMEM + alignment
      p.grid_x = S / 128;
      p.grid_y = B * H;
      p.entry = "pallas_attention_sm90";
      int elt = dt == DType::BF16 ? 0 : 1;
      std::string cz = causal ? "true" : "false";
      p.source = std::string(kHopperCuh) + "\n" + kAttentionSm90Cuh + "\nusing namespace pallas_dev;\n" +
                 "extern \"C\" __global__ void __launch_bounds__(384, 1)\n"
                 "pallas_attention_sm90(const __grid_constant__ TensorMap tq, const __grid_constant__ TensorMap tk,\n"
                 "    const __grid_constant__ TensorMap tv, unsigned short* out, int seq, float scale_log2) {\n"
                 "  typedef AttnTile<128> T;\n"
                 "  extern __shared__ unsigned char smem_raw[];\n"
                 "  __shared__ u64 bars[T::BARRIERS];\n"
                 "  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);\n"
                 "  if (threadIdx.x == 0) {\n"
                 "    mbar_init(&bars[0], 1);\n"
                 "    for (int s = 0; s < T::STAGES; ++s) {\n"
                 "      mbar_init(&bars[1 + s], 1); mbar_init(&bars[1 + T::STAGES + s], 1); mbar_init(&bars[1 + 2 * T::STAGES + s], 2);\n"
                 "    }\n"
                 "    mbar_fence_init();\n"
                 "  }\n"
                 "  __syncthreads();\n"
                 "  const int nqb = seq / 128; (void)nqb;\n"
                 "  int q_block = " + (causal ? std::string("nqb - 1 - blockIdx.x") : std::string("blockIdx.x")) + ";\n"
                 "  int bh = blockIdx.y;\n"
                 "  float o[64];\n"
                 "  if (attention_mainloop<" + std::to_string(elt) + ", " + cz +
                 ", 128>(&tq, &tk, &tv, smem, bars, bh * seq, bh * seq, q_block, seq, scale_log2, o)) {\n"
                 "    int tid = threadIdx.x % 128, c = threadIdx.x / 128 - 1, warp = tid / 32, lane = tid % 32;\n"
                 "#pragma unroll\n"
                 "    for (int i = 0; i < 64; i += 2) {\n"
                 "      int row = q_block * 128 + c * 64 + warp * 16 + lane / 4 + ((i % 4) >= 2 ? 8 : 0);\n"
                 "      int col = (i / 4) * 8 + (lane % 4) * 2;\n"
                 "      *reinterpret_cast<unsigned*>(&out[((long long)bh * seq + row) * 128 + col]) = pack2(o[i], o[i + 1], " +
                 std::to_string(elt) + ");\n"
                 "    }\n"
                 "  }\n"
                 "}\n";
      return p;
    }
  }
  return no("kernel is not structurally the library's flash attention");
}

}  // namespace pallas::cuda::sm90
