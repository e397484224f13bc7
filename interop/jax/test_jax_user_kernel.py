#!/usr/bin/env python3
"""Checks a user's own Pallas kernel registered as a JAX FFI target (pallas_jax_user.h and the
worked example interop/jax/example/rms_scale.cc): built with pallas_jax.build_user_library,
registered with pallas_jax.register_targets, called through jax.ffi.ffi_call (two results),
differentiated by jax.grad through its automatic vjp (pallas_jax.differentiable),
inside jax.jit, on JAX's CPU device (the Pallas interpreter) and its GPU where there is one,
against a jnp reference; and the errors (results of another shape, operands the factory
refuses) as JAX exceptions naming the kernel. Plain script: exits 1 if a check failed.

    python3 interop/jax/test_jax_user_kernel.py [pallas_build_dir]
"""
import os
import sys
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
try:
    import jax
    import jax.numpy as jnp
    import numpy as np
except ImportError as e:
    print(f"SKIPPED: jax is not importable here ({e})")
    sys.exit(0)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import pallas_jax  # noqa: E402

failures = []


def check(what, ok, detail=""):
    print(("ok    " if ok else "FAIL  ") + what + (f"  [{detail}]" if detail and not ok else ""))
    if not ok:
        failures.append(what)


def rms_scale(x, w):
    out = (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape[:1], jnp.float32))
    return jax.ffi.ffi_call("user_rms_scale", out)(x, w)


def reference(x, w):
    v = x.astype(jnp.float32)
    rs = jax.lax.rsqrt(jnp.mean(v * v, axis=1) + 1e-6)
    return (v * rs[:, None] * w.astype(jnp.float32)).astype(x.dtype), rs


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else None
    lib = pallas_jax.build_user_library([HERE / "example" / "rms_scale.cc"], "user_rms_scale", build)
    pallas_jax.register_targets(lib, {"user_rms_scale": "UserRmsScale", "user_rms_norm": "UserRmsNorm"})
    print(f"jax {jax.__version__}; user library {lib.name}")
    devices = [("cpu", jax.devices("cpu")[0])]
    try:
        devices.append(("gpu", jax.devices("gpu")[0]))
    except RuntimeError:
        print("SKIPPED: the GPU checks: jax has no CUDA device here")
    for label, dev in devices:
        for dtype, tol in ((jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)):
            key = jax.random.key(0)
            x = jax.device_put(jax.random.normal(key, (37, 96), dtype), dev)
            w = jax.device_put(jax.random.normal(jax.random.key(1), (96,), dtype), dev)
            name = f"{label} {jnp.dtype(dtype).name}"
            y, rs = jax.jit(rms_scale)(x, w)
            want_y, want_rs = reference(x, w)
            err_y = float(jnp.max(jnp.abs(y.astype(jnp.float32) - want_y.astype(jnp.float32))))
            err_rs = float(jnp.max(jnp.abs(rs - want_rs) / want_rs))
            check(f"rms_scale {name}: both results match jnp", err_y <= tol * 4 and err_rs <= 1e-5, f"{err_y:.3g} {err_rs:.3g}")
            # between other ops, twice with other shapes (a call per shape)
            z = jax.jit(lambda a, b: rms_scale(a * 2, b)[0] + 1)(x[:5], w)
            check(f"rms_scale {name}: inside jax.jit between other ops", np.allclose(
                np.asarray(z, np.float32), np.asarray(reference(x[:5] * 2, w)[0], np.float32) + 1, atol=tol * 8))
        # gradients through the automatic vjp (the kernel transposed) against jax.grad of the reference
        f = pallas_jax.differentiable("user_rms_scale", lambda x, w: (jax.ShapeDtypeStruct(x.shape, x.dtype),
                                                                       jax.ShapeDtypeStruct(x.shape[:1], jnp.float32)))
        for dtype, tol in ((jnp.float32, 1e-4), (jnp.bfloat16, 3e-2)):
            xg = jax.device_put(jax.random.normal(jax.random.key(2), (9, 40), dtype), dev)
            wg = jax.device_put(jax.random.normal(jax.random.key(3), (40,), dtype), dev)
            gy = jax.random.normal(jax.random.key(4), (9, 40), jnp.float32)
            grs = jax.random.normal(jax.random.key(5), (9,), jnp.float32)

            def loss(fn, x, w):
                y, rs = fn(x, w)
                return jnp.sum(y.astype(jnp.float32) * gy) + jnp.sum(rs * grs)

            dx, dw = jax.jit(jax.grad(lambda x, w: loss(f, x, w), argnums=(0, 1)))(xg, wg)
            dxr, dwr = jax.grad(lambda x, w: loss(reference, x, w), argnums=(0, 1))(xg, wg)
            rel = lambda a, b: float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))) / jnp.max(jnp.abs(b.astype(jnp.float32))))
            err = max(rel(dx, dxr), rel(dw, dwr))
            check(f"rms_scale {label} {jnp.dtype(dtype).name}: jax.grad through the automatic vjp matches jnp's", err <= tol and dx.dtype == dtype,
                  f"relative error {err:.3g}")
        # the library's rms norm with its hand-written backward kernels (a custom_vjp pair)
        norm = pallas_jax.differentiable("user_rms_norm", lambda x, w: jax.ShapeDtypeStruct(x.shape, x.dtype))
        for dtype, tol in ((jnp.float32, 1e-4), (jnp.bfloat16, 3e-2)):
            xn = jax.device_put(jax.random.normal(jax.random.key(6), (12, 64), dtype), dev)
            wn = jax.device_put(jax.random.normal(jax.random.key(7), (64,), dtype), dev)
            gy = jax.random.normal(jax.random.key(8), (12, 64), jnp.float32)
            y = jax.jit(norm)(xn, wn)
            loss = lambda fn: (lambda x, w: jnp.sum(fn(x, w).astype(jnp.float32) * gy))
            dx, dw = jax.jit(jax.grad(loss(norm), argnums=(0, 1)))(xn, wn)
            dxr, dwr = jax.grad(loss(lambda x, w: reference(x, w)[0]), argnums=(0, 1))(xn, wn)
            rel = lambda a, b: float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))) / jnp.max(jnp.abs(b.astype(jnp.float32))))
            errs = (rel(y, reference(xn, wn)[0]), rel(dx, dxr), rel(dw, dwr))
            check(f"rms_norm {label} {jnp.dtype(dtype).name}: output and jax.grad (hand-written backward) match jnp's", max(errs) <= tol,
                  " ".join(f"{e:.3g}" for e in errs))
        # errors: a result of another shape; operands the factory refuses
        try:
            jax.ffi.ffi_call("user_rms_scale", (jax.ShapeDtypeStruct((37, 96), jnp.float32),
                                                jax.ShapeDtypeStruct((36,), jnp.float32)))(x.astype(jnp.float32), w.astype(jnp.float32))
            jax.effects_barrier()
            check(f"error {label}: a result of another shape is refused", False, "no error")
        except Exception as e:  # noqa: BLE001
            check(f"error {label}: a result of another shape is refused", "result 1 of the call is f32[36]" in str(e) and "rms_scale" in str(e),
                  str(e)[:300])
        try:
            rms_scale(x.astype(jnp.float32), jnp.ones((95,), jnp.float32))
            jax.effects_barrier()
            check(f"error {label}: operands the factory refuses", False, "no error")
        except Exception as e:  # noqa: BLE001
            check(f"error {label}: operands the factory refuses", "rms_scale takes x [R, C] and w [C]" in str(e), str(e)[:300])
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)
    print("all user-kernel checks passed")


if __name__ == "__main__":
    main()
