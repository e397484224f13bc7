// The library's kernels with their hand-written backwards (pl::kernels::*_vjp, custom_vjp pairs)
// as factories for the framework registrations (pallas_torch_user.h, pallas_jax_user.h): each
// takes the operands' shapes and dtypes and the backend, checks them (a pl::Error names the op
// and what it takes), and makes the pair for them. Registered as torch.ops.pallas_kernels.*
// (interop/torch/library_ops.cc).
#pragma once
#include <pallas/kernels.h>
#include <pallas/pallas.h>

#include <string>
#include <vector>

namespace library_ops {
namespace pl = pallas;
namespace k = pl::kernels;

inline void expect(bool ok, const char* op, const char* takes) {
  if (!ok) throw pl::Error(std::string(op) + " takes " + takes);
}
inline bool is_2d(const pl::ShapeDtype& s) { return s.shape.size() == 2; }
inline bool is_vec(const pl::ShapeDtype& s, int64_t n) { return s.shape.size() == 1 && s.shape[0] == n; }

// rms_norm(x [R, C], w [C]) -> y [R, C]
inline pl::CustomVjp rms_norm(const std::vector<pl::ShapeDtype>& in, pl::Backend b) {
  expect(in.size() == 2 && is_2d(in[0]) && is_vec(in[1], in[0].shape[1]) && in[1].dtype == in[0].dtype, "rms_norm",
         "x [R, C] and w [C] of one float dtype");
  const bool ip = b == pl::Backend::Interpret;
  return k::rms_norm_vjp(in[0].shape[0], in[0].shape[1], in[0].dtype, 1e-6, {.interpret = ip}, {.interpret = ip});
}

// layer_norm(x [R, C], w [C], b [C]) -> y [R, C]
inline pl::CustomVjp layer_norm(const std::vector<pl::ShapeDtype>& in, pl::Backend b) {
  expect(in.size() == 3 && is_2d(in[0]) && is_vec(in[1], in[0].shape[1]) && is_vec(in[2], in[0].shape[1]) &&
             in[1].dtype == in[0].dtype && in[2].dtype == in[0].dtype,
         "layer_norm", "x [R, C], w [C] and b [C] of one float dtype");
  const bool ip = b == pl::Backend::Interpret;
  return k::layer_norm_vjp(in[0].shape[0], in[0].shape[1], in[0].dtype, 1e-5, {.interpret = ip}, {.interpret = ip});
}

// softmax(x [R, C]) -> y [R, C], over the last axis
inline pl::CustomVjp softmax(const std::vector<pl::ShapeDtype>& in, pl::Backend b) {
  expect(in.size() == 1 && is_2d(in[0]), "softmax", "x [R, C] of a float dtype");
  return k::softmax_vjp(in[0].shape[0], in[0].shape[1], in[0].dtype, {.interpret = b == pl::Backend::Interpret});
}

// cross_entropy(x [N, V], t [N] int32) -> loss [N] float32 (per row, as reduction='none')
inline pl::CustomVjp cross_entropy(const std::vector<pl::ShapeDtype>& in, pl::Backend b) {
  expect(in.size() == 2 && is_2d(in[0]) && is_vec(in[1], in[0].shape[0]) && in[1].dtype == pl::i32, "cross_entropy",
         "logits x [N, V] of a float dtype and targets t [N] int32");
  return k::cross_entropy_vjp(in[0].shape[0], in[0].shape[1], in[0].dtype, {.interpret = b == pl::Backend::Interpret});
}

// flash_attention(q [B, H, S, D], k [B, KVH, S, D], v [B, KVH, S, D]) -> o [B, H, S, D] (not causal)
inline pl::CustomVjp flash_attention(const std::vector<pl::ShapeDtype>& in, pl::Backend b) {
  expect(in.size() == 3 && in[0].shape.size() == 4 && in[1].shape.size() == 4 && in[1].shape == in[2].shape &&
             in[1].shape[0] == in[0].shape[0] && in[1].shape[2] == in[0].shape[2] && in[1].shape[3] == in[0].shape[3] &&
             in[1].dtype == in[0].dtype && in[2].dtype == in[0].dtype,
         "flash_attention", "q [B, H, S, D], k and v [B, KVH, S, D] of one float dtype");
  const bool ip = b == pl::Backend::Interpret;
  const pl::Shape& q = in[0].shape;
  return k::flash_attention_vjp(q[0], q[1], q[2], q[3], in[0].dtype, {.interpret = ip, .kv_heads = in[1].shape[1]}, {.interpret = ip});
}

// matmul(a [M, K], b [K, N]) -> c [M, N] in a's dtype
inline pl::CustomVjp matmul(const std::vector<pl::ShapeDtype>& in, pl::Backend b) {
  expect(in.size() == 2 && is_2d(in[0]) && is_2d(in[1]) && in[0].shape[1] == in[1].shape[0] && in[0].dtype == in[1].dtype, "matmul",
         "a [M, K] and b [K, N] of one float dtype");
  const int64_t K = in[0].shape[1];
  int64_t bk = std::min<int64_t>(64, K);
  while (K % bk) bk /= 2;  // the K loop's block must divide K
  return k::matmul_vjp(in[0].shape[0], in[1].shape[1], K, in[0].dtype, in[0].dtype, {.block_k = bk, .interpret = b == pl::Backend::Interpret});
}

}  // namespace library_ops
