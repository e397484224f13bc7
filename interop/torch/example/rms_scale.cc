// A user's kernel as a torch custom op (docs/interop.md, "Your own kernels"): with the factory
// (interop/common/example_rms_scale.h), this is all a user writes to get
// torch.ops.user_ops.rms_scale(x, w) -> (y, rstd), with a Meta kernel for torch.compile and
// its automatic vjp; and the library's rms norm with its hand-written backward.
#include "common/example_rms_scale.h"
#include "pallas_torch_user.h"

PALLAS_TORCH_OP(user_ops, "rms_scale(Tensor x, Tensor w) -> (Tensor, Tensor)", example::make_rms_scale)
// a library kernel with its hand-written backward (a custom_vjp pair): torch.ops.user_ops.rms_norm
PALLAS_TORCH_OP(user_ops, "rms_norm(Tensor x, Tensor w) -> Tensor", example::make_rms_norm)
