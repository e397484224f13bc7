// The worked example of docs/interop.md, "Your own kernels": a user's Pallas call and the
// factory the framework registrations take (interop/jax/example, interop/torch/example; each
// of those files is what a user adds for one framework). rms_scale(x [R, C], w [C]) -> (y [R, C],
// rstd [R]): each row scaled by the reciprocal of its root mean square, then by w; rstd returned
// too (two outputs). One row a program, computed in f32 whatever the storage dtype. And
// make_rms_norm: the library's rms norm with its hand-written backward, as a custom_vjp pair.
#pragma once
#include <pallas/kernels.h>
#include <pallas/pallas.h>

#include <vector>

namespace example {
namespace pl = pallas;

inline pl::Call make_rms_scale(const std::vector<pl::ShapeDtype>& in, pl::Backend backend) {
  if (in.size() != 2 || in[0].shape.size() != 2 || in[1].shape.size() != 1 || in[1].shape[0] != in[0].shape[1] ||
      in[0].dtype != in[1].dtype)
    throw pl::Error("rms_scale takes x [R, C] and w [C] of one dtype");
  const int64_t R = in[0].shape[0], C = in[0].shape[1];
  const pl::DType t = in[0].dtype;
  auto kernel = [=](pl::Ref x, pl::Ref w, pl::Ref y, pl::Ref rstd) {
    pl::Value v = x[pl::all].astype(pl::f32);
    pl::Value rs = pl::rsqrt(pl::sum(v * v) / static_cast<double>(C) + 1e-6);
    y[pl::all] = (v * rs * w[pl::all].astype(pl::f32)).astype(t);
    rstd[0] = rs;
  };
  return pl::pallas_call(kernel, {pl::ShapeDtype({R, C}, t), pl::ShapeDtype({R}, pl::f32)},
                         {.grid = {R},
                          .in_specs = {pl::BlockSpec({pl::squeezed, C}, [](pl::Value i) { return pl::idx(i, 0); }),
                                       pl::BlockSpec({C}, [](pl::Value) { return pl::idx(0); })},
                          .out_specs = {pl::BlockSpec({pl::squeezed, C}, [](pl::Value i) { return pl::idx(i, 0); }),
                                        pl::BlockSpec({1}, [](pl::Value i) { return pl::idx(i); })},
                          .name = "rms_scale",
                          .backend = backend});
}

// A library kernel with its hand-written backward: pl::kernels::rms_norm_vjp (a custom_vjp pair
// of rms_norm_fwd and rms_norm_bwd + norm_partial_sum) for x [R, C], w [C] -> y [R, C]. A
// framework op made from it takes its gradient from the pair's backward kernels.
inline pl::CustomVjp make_rms_norm(const std::vector<pl::ShapeDtype>& in, pl::Backend backend) {
  if (in.size() != 2 || in[0].shape.size() != 2 || in[1].shape.size() != 1 || in[1].shape[0] != in[0].shape[1] ||
      in[0].dtype != in[1].dtype)
    throw pl::Error("rms_norm takes x [R, C] and w [C] of one dtype");
  const bool interpret = backend == pl::Backend::Interpret;
  return pl::kernels::rms_norm_vjp(in[0].shape[0], in[0].shape[1], in[0].dtype, 1e-6, {.interpret = interpret}, {.interpret = interpret});
}

}  // namespace example
