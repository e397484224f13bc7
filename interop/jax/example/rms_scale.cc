// A user's kernel as a JAX FFI target (docs/interop.md, "Your own kernels"): with the factory
// (interop/common/example_rms_scale.h), this is all a user writes to get the handler symbols
// UserRmsScaleCpu and UserRmsScaleCuda that pallas_jax.register_targets registers.
#include "common/example_rms_scale.h"
#include "pallas_jax_user.h"

PALLAS_JAX_FFI_TARGET(UserRmsScale, example::make_rms_scale)
// a library kernel with its hand-written backward (a custom_vjp pair)
PALLAS_JAX_FFI_TARGET(UserRmsNorm, example::make_rms_norm)
