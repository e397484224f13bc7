#!/usr/bin/env python3
"""Checks the Pallas C++ JAX FFI custom calls (pallas_jax_ffi.cc) end to end. Plain script:
prints each check, exits 1 if any failed, 0 with a visible "SKIPPED: ..." where jax or a GPU
is missing.

    python3 interop/jax/test_jax_ffi.py [pallas_build_dir]   (default: $PALLAS_BUILD_DIR or build)

On JAX's CPU device the handlers run the Pallas interpreter (checked everywhere jax is); on
its GPU (where there is one) the CUDA handlers run the kernels on XLA's buffers and stream.
Checked: results against jnp references and against the interpreter, inside jax.jit (alone
and between other ops), zero-copy by pointer identity, the traced kernels on the GPU, and
input errors.
"""
import os
import sys
from pathlib import Path

# Pallas C++ needs GPU memory of its own (its modules, the context): keep XLA from taking 75%.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

try:
    import jax
    import jax.numpy as jnp
    import numpy as np
except ImportError as e:
    print(f"SKIPPED: jax is not importable here ({e})")
    sys.exit(0)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pallas_jax  # noqa: E402

failures = []


def check(what, ok, detail=""):
    print(("ok    " if ok else "FAIL  ") + what + (f"  [{detail}]" if detail and not ok else ""))
    if not ok:
        failures.append(what)


TOL = {jnp.float32: 1e-5, jnp.float16: 2e-3, jnp.bfloat16: 2e-2}


def close(a, b, dtype, tol=None):
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = max(1.0, float(np.max(np.abs(b))) if b.size else 0.0)
    return err <= (tol or TOL[dtype]) * scale, f"max error {err:.3g}"


def ref_gelu_mul(x, y):
    return (jax.nn.gelu(x.astype(jnp.float32), approximate=True) * y.astype(jnp.float32)).astype(x.dtype)


def ref_softmax(x):
    return jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype)


def check_device(dev):
    kind = "cuda" if dev.platform != "cpu" else "interpreter"
    name = dev.platform
    # the interpreter computes in its own buffers and copies into XLA's: the same pointer
    # check, but only the GPU's is zero-copy
    wrote = "zero-copy: the kernel wrote" if kind == "cuda" else "the interpreter's result went into"
    gelu_mul = jax.jit(pallas_jax.gelu_mul)
    softmax = jax.jit(pallas_jax.softmax)
    key = jax.random.key(0)
    for shape in [(4096,), (3, 1000), (2, 5, 333)]:
        for dtype in [jnp.float32, jnp.float16, jnp.bfloat16]:
            key, k1, k2 = jax.random.split(key, 3)
            x = jax.device_put(jax.random.normal(k1, shape, jnp.float32).astype(dtype), dev)
            y = jax.device_put(jax.random.normal(k2, shape, jnp.float32).astype(dtype), dev)
            tag = f"{name} {jnp.dtype(dtype).name} {list(shape)}"
            out = gelu_mul(x, y)
            out.block_until_ready()
            ptr, be = pallas_jax.last_launch()
            check(f"gelu_mul {tag} in jax.jit matches jnp", *close(out, ref_gelu_mul(x, y), dtype))
            check(f"gelu_mul {tag} {wrote} XLA's result buffer on {kind}",
                  ptr == out.unsafe_buffer_pointer() and be == kind,
                  f"kernel wrote {ptr:#x} on {be}, result at {out.unsafe_buffer_pointer():#x}")
            s = softmax(x)
            s.block_until_ready()
            ptr, be = pallas_jax.last_launch()
            check(f"softmax {tag} in jax.jit matches jnp", *close(s, ref_softmax(x), dtype))
            check(f"softmax {tag} {wrote} XLA's result buffer on {kind}", ptr == s.unsafe_buffer_pointer() and be == kind,
                  f"kernel wrote {ptr:#x} on {be}, result at {s.unsafe_buffer_pointer():#x}")
            if kind == "cuda":  # the library's other backend, on the same data
                cpu = jax.devices("cpu")[0]
                on_cpu = gelu_mul(jax.device_put(x, cpu), jax.device_put(y, cpu))
                check(f"gelu_mul {tag}: GPU equals the Pallas interpreter", *close(out, on_cpu, dtype))

    # between other ops in one jitted program: the custom calls are ordered with XLA's own
    # kernels on its stream (a wrong stream would read unfinished inputs)
    @jax.jit
    def chain(x, y):
        return pallas_jax.softmax(pallas_jax.gelu_mul(x * 2.0, y) + 1.0) * 3.0

    x = jax.device_put(jax.random.normal(jax.random.key(1), (64, 1024)), dev)
    y = jax.device_put(jax.random.normal(jax.random.key(2), (64, 1024)), dev)
    ref = ref_softmax(ref_gelu_mul(x * 2.0, y) + 1.0) * 3.0
    # (looser: XLA's own tanh and exp, in the reference, are approximations, and softmax of
    # inputs up to ~30 magnifies them; a wrong stream would be off by O(1))
    for i in range(3):  # again, with the compiled program and the cached Pallas calls
        check(f"chain {name} (run {i}): jit(softmax(gelu_mul(2x, y) + 1) * 3) matches jnp",
              *close(chain(x, y), ref, jnp.float32, tol=1e-3))

    # gradients (jax.custom_vjp, the backward a Pallas kernel too) against jnp's, in jax.jit
    x = jax.device_put(jax.random.normal(jax.random.key(3), (6, 700)), dev)
    y = jax.device_put(jax.random.normal(jax.random.key(4), (6, 700)), dev)
    w = jax.device_put(jax.random.normal(jax.random.key(5), (6, 700)), dev)
    got = jax.jit(jax.grad(lambda x, y: jnp.sum(pallas_jax.gelu_mul(x, y) * w), argnums=(0, 1)))(x, y)
    want = jax.grad(lambda x, y: jnp.sum(ref_gelu_mul(x, y) * w), argnums=(0, 1))(x, y)
    check(f"gelu_mul {name}: jax.grad (a Pallas backward kernel) matches jnp's",
          close(got[0], want[0], jnp.float32)[0] and close(got[1], want[1], jnp.float32)[0])
    got = jax.jit(jax.grad(lambda x: jnp.sum(pallas_jax.softmax(x) * w)))(x)
    want = jax.grad(lambda x: jnp.sum(ref_softmax(x) * w))(x)
    check(f"softmax {name}: jax.grad (pl::kernels::softmax_bwd) matches jnp's", *close(got, want, jnp.float32))

    # errors: a dtype the kernels do not take (at trace time), and operands the handler itself
    # refuses (the raw ffi_call, past the Python checks), which JAX raises with the message
    xi = jax.device_put(jnp.ones((8,), jnp.int32), dev)
    try:
        gelu_mul(xi, xi)
        check(f"error {name}: an int32 input is refused", False, "no error raised")
    except TypeError as e:
        check(f"error {name}: an int32 input is refused with a clear message", "not supported" in str(e), str(e))
    a = jax.device_put(jnp.ones((8,), jnp.float32), dev)
    b = jax.device_put(jnp.ones((9,), jnp.float32), dev)
    raw = jax.jit(lambda a, b: jax.ffi.ffi_call("pallas_gelu_mul", jax.ShapeDtypeStruct(a.shape, a.dtype))(a, b))
    try:
        raw(a, b).block_until_ready()
        check(f"error {name}: the handler refuses operands of different shapes", False, "no error raised")
    except Exception as e:  # noqa: BLE001 - XlaRuntimeError's module moves between versions
        check(f"error {name}: the handler refuses operands of different shapes, naming the kernel",
              "pallas gelu_mul" in str(e) and "another shape" in str(e), str(e).splitlines()[0])


def check_library_kernels(dev):
    """pallas_jax.kernels.*: the library's kernels registered as a user registers theirs, outputs
    and jax.grad (their hand-written backward kernels) against jnp's."""
    k = pallas_jax.kernels
    keys = iter(jax.random.split(jax.random.key(11), 64))
    rnd = lambda *shape: jax.device_put(jax.random.normal(next(keys), shape, jnp.float32), dev)

    def ref_attention(q, kk, v):
        kk, v = jnp.repeat(kk, q.shape[1] // kk.shape[1], axis=1), jnp.repeat(v, q.shape[1] // v.shape[1], axis=1)
        s = jnp.einsum("bhqd,bhkd->bhqk", q, kk) / jnp.sqrt(q.shape[-1])
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    def ref_layer_norm(x, w, b):
        m = x.mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b

    cases = [
        ("rms_norm", (rnd(6, 32), rnd(32)), lambda x, w: x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w),
        ("layer_norm", (rnd(6, 32), rnd(32), rnd(32)), ref_layer_norm),
        ("softmax", (rnd(6, 32),), lambda x: jax.nn.softmax(x, axis=-1)),
        ("flash_attention", (rnd(1, 4, 32, 16), rnd(1, 2, 32, 16), rnd(1, 2, 32, 16)), ref_attention),
        ("matmul", (rnd(16, 32), rnd(32, 24)), lambda a, b: a @ b),
    ]
    for name, args, ref in cases:
        f = getattr(k, name)
        gy = rnd(*ref(*args).shape)
        loss = lambda fn: (lambda *a: jnp.sum(fn(*a) * gy))
        argnums = tuple(range(len(args)))
        y, g = jax.jit(f)(*args), jax.jit(jax.grad(loss(f), argnums=argnums))(*args)
        yr, gr = ref(*args), jax.grad(loss(ref), argnums=argnums)(*args)
        tol = 2e-3 if name in ("flash_attention", "matmul") else 1e-4  # (f32 dots round to tf32)
        rel = lambda a, b: float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))
        err = max([rel(y, yr)] + [rel(a, b) for a, b in zip(g, gr)])
        check(f"kernels.{name} {dev.platform}: output and jax.grad (hand-written backward) match jnp's", err <= tol, f"{err:.3g}")
    x, t = rnd(5, 40), jax.device_put(jax.random.randint(next(keys), (5,), 0, 40, jnp.int32), dev)
    ref_ce = lambda x: jax.nn.logsumexp(x, axis=-1) - jnp.take_along_axis(x, t[:, None], axis=-1)[:, 0]
    err = max(rel(k.cross_entropy(x, t), ref_ce(x)),
              rel(jax.grad(lambda x: jnp.sum(k.cross_entropy(x, t)))(x), jax.grad(lambda x: jnp.sum(ref_ce(x)))(x)))
    check(f"kernels.cross_entropy {dev.platform}: per-row loss and jax.grad match jnp's", err <= 1e-4, f"{err:.3g}")


def main():
    build_dir = sys.argv[1] if len(sys.argv) > 1 else None
    pallas_jax.load(build_dir)
    print(f"jax {jax.__version__}; FFI library built against libpallas.a in "
          f"{build_dir or os.environ.get('PALLAS_BUILD_DIR') or 'build'}")
    devices = [jax.devices("cpu")[0]]
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:  # no GPU backend in this jaxlib, or no device
        gpus = []
    if gpus:
        devices.append(gpus[0])
    for dev in devices:
        print(f"--- {dev.platform} ({dev}) ---")
        check_device(dev)
        check_library_kernels(dev)
    if not gpus:
        print("SKIPPED: the GPU checks (CUDA handlers, zero-copy on the GPU): jax has no CUDA device here")
    print(f"{len(failures)} failed" if failures else "all jax interop checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
