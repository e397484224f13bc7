// The library's kernels as torch ops, registered the way a user registers theirs
// (pallas_torch_user.h): torch.ops.pallas_kernels.{rms_norm, layer_norm, softmax, cross_entropy,
// flash_attention, matmul}, each with a Meta kernel and, through pallas_torch.load(), autograd from
// its hand-written backward kernels (the custom_vjp pairs of interop/common/library_factories.h).
#include "common/library_factories.h"
#include "pallas_torch_user.h"

PALLAS_TORCH_OP(pallas_kernels, "rms_norm(Tensor x, Tensor w) -> Tensor", library_ops::rms_norm)
PALLAS_TORCH_OP(pallas_kernels, "layer_norm(Tensor x, Tensor w, Tensor b) -> Tensor", library_ops::layer_norm)
PALLAS_TORCH_OP(pallas_kernels, "softmax(Tensor x) -> Tensor", library_ops::softmax)
PALLAS_TORCH_OP(pallas_kernels, "cross_entropy(Tensor x, Tensor t) -> Tensor", library_ops::cross_entropy)
PALLAS_TORCH_OP(pallas_kernels, "flash_attention(Tensor q, Tensor k, Tensor v) -> Tensor", library_ops::flash_attention)
PALLAS_TORCH_OP(pallas_kernels, "matmul(Tensor a, Tensor b) -> Tensor", library_ops::matmul)
