"""Pallas C++ kernels as JAX FFI custom calls.

    import pallas_jax
    pallas_jax.load("build")                 # a CMake build dir holding libpallas.a
    out = jax.jit(pallas_jax.gelu_mul)(x, y)  # out = gelu(x) * y
    p = jax.jit(pallas_jax.softmax)(x)        # softmax over the last axis

load() compiles pallas_jax_ffi.cc (XLA's header-only FFI API from jax.ffi.include_dir(),
the Pallas headers) into a shared library linked with the static libpallas.a, loads it with
ctypes and registers its handlers for the CUDA and the CPU platform. Inside jax.jit, XLA calls
the handler with its own buffers and stream; the kernel writes XLA's result buffer in place.
"""
import ctypes
import os
import shlex
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SOURCE = HERE / "pallas_jax_ffi.cc"

_lib = None


def compile_command(pallas_build_dir, output, syntax_only=False, sources=None):
    """The compiler command line for the FFI library (or, syntax_only, just a compile check);
    sources: a user's own FFI sources instead of the library's (build_user_library)."""
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    # -isystem: XLA's headers are not warning-free under -Wextra; ours are
    flags = ["-std=c++20", "-O2", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter",
             "-Wno-missing-field-initializers",  # designated initializers, as the project builds
             f"-I{ROOT / 'include'}", f"-I{ROOT / 'interop'}", f"-I{HERE}", "-isystem", jax.ffi.include_dir()]
    flags += [str(s) for s in (sources or [SOURCE])]
    if syntax_only:
        return cxx + flags + ["-fsyntax-only"]
    build = Path(pallas_build_dir)
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    cuda_lib = cuda / "lib64" if (cuda / "lib64").exists() else cuda / "lib"
    # libpallas.a is position-independent (CMakeLists.txt), so it links into a shared object;
    # NVRTC compiles its kernels (a library built without the CUDA backend needs none); the
    # CUDA driver is dlopen'ed by the library itself. --no-undefined: a missing library shows
    # here, not when Python loads the result.
    nvrtc = [f"-L{cuda_lib}", "-lnvrtc", f"-Wl,-rpath,{cuda_lib}"] if list(cuda_lib.glob("libnvrtc.so*")) else []
    return cxx + flags + ["-shared", "-Wl,--no-undefined", "-o", str(output), str(build / "libpallas.a")] + nvrtc + [
        "-ldl", "-lpthread"] + PRIVATE_RUNTIME


# The C++ runtime goes inside the library, its symbols hidden (--exclude-libs): the process
# already holds the framework's libstdc++, and a toolchain that links its own (static) copy
# exports it, so half the calls bound to one copy and half to the other (iostreams, locales):
# a crash at the first GPU call on the H200. Hidden, each library uses its own copy alone.
PRIVATE_RUNTIME = ["-static-libstdc++", "-Wl,--exclude-libs,ALL"]


def build(pallas_build_dir=None):
    """Compiles the FFI library into <build>/interop-jax/ unless it is newer than its inputs."""
    build_dir = Path(pallas_build_dir or os.environ.get("PALLAS_BUILD_DIR") or ROOT / "build").resolve()
    lib = build_dir / "libpallas.a"
    if not lib.exists():
        raise RuntimeError(f"pallas_jax: {lib} not found; build the library first "
                           f"(cmake --build {build_dir} --target pallas)")
    out = build_dir / "interop-jax" / "libpallas_jax_ffi.so"
    out.parent.mkdir(exist_ok=True)
    inputs = [lib, SOURCE, HERE / "pallas_jax_user.h"] + sorted((ROOT / "interop" / "common").glob("*.h"))
    if not out.exists() or any(p.stat().st_mtime > out.stat().st_mtime for p in inputs):
        cmd = compile_command(build_dir, out)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("pallas_jax: building the FFI library failed:\n" + shlex.join(cmd) + "\n" + r.stderr)
    return out


def build_user_library(sources, name, pallas_build_dir=None):
    """Compiles a user's FFI sources (each defining targets with PALLAS_JAX_FFI_TARGET, from
    pallas_jax_user.h) into <build>/interop-jax/lib<name>.so, linked with libpallas.a, unless it
    is newer than its inputs. Returns the library's path."""
    build_dir = Path(pallas_build_dir or os.environ.get("PALLAS_BUILD_DIR") or ROOT / "build").resolve()
    lib = build_dir / "libpallas.a"
    if not lib.exists():
        raise RuntimeError(f"pallas_jax: {lib} not found; build the library first "
                           f"(cmake --build {build_dir} --target pallas)")
    out = build_dir / "interop-jax" / f"lib{name}.so"
    out.parent.mkdir(exist_ok=True)
    sources = [Path(s).resolve() for s in sources]
    # (headers the sources include are not tracked but for the interop ones)
    inputs = [lib, HERE / "pallas_jax_user.h"] + sources + sorted((ROOT / "interop" / "common").glob("*.h"))
    if not out.exists() or any(p.stat().st_mtime > out.stat().st_mtime for p in inputs):
        cmd = compile_command(build_dir, out, sources=sources)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"pallas_jax: building {name} failed:\n" + shlex.join(cmd) + "\n" + r.stderr)
    return out


def register_targets(library, targets):
    """Loads a library built by build_user_library (a path) and registers its targets for JAX's
    CPU (the Pallas interpreter) and CUDA platforms: targets maps the name jax.ffi.ffi_call
    uses to the Name given to PALLAS_JAX_FFI_TARGET. Returns the loaded library."""
    lib = ctypes.cdll.LoadLibrary(str(library))
    for name, symbol in targets.items():
        for suffix, sym in (("", symbol), ("_vjp", symbol + "Vjp")):  # the target and its automatic vjp
            jax.ffi.register_ffi_target(name + suffix, jax.ffi.pycapsule(getattr(lib, sym + "Cuda")), platform="CUDA")
            jax.ffi.register_ffi_target(name + suffix, jax.ffi.pycapsule(getattr(lib, sym + "Cpu")), platform="cpu")
    return lib


def differentiable(target, out_shapes):
    """A user's target as a differentiable JAX function: out_shapes(*args) gives its results'
    jax.ShapeDtypeStruct (one, or a tuple); the gradient is the target's automatic vjp
    (<target>_vjp: the Pallas kernel transposed; its forward runs again inside it), through
    jax.custom_vjp. Integer arguments get no gradient (float0 zeros)."""
    import jax.numpy as jnp

    @jax.custom_vjp
    def f(*args):
        return jax.ffi.ffi_call(target, out_shapes(*args))(*args)

    def fwd(*args):
        return f(*args), args

    def bwd(args, cots):
        cots = cots if isinstance(cots, (tuple, list)) else (cots,)
        res = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args)
        g = jax.ffi.ffi_call(target + "_vjp", res)(*args, *cots, num_primals=np.int64(len(args)))
        return tuple(gi if jnp.issubdtype(a.dtype, jnp.floating) else np.zeros(a.shape, jax.dtypes.float0) for gi, a in zip(g, args))

    f.defvjp(fwd, bwd)
    return f


class _Kernels:
    """The library's kernels with their hand-written backwards, as differentiable functions (after
    load()): rms_norm(x, w), layer_norm(x, w, b), softmax(x) over [rows, cols]; cross_entropy(x, t)
    per-row losses (t int32); flash_attention(q, k, v) on [B, H, S, D] (grouped-query when k and v
    have fewer heads); matmul(a, b)."""

    def __getattr__(self, name):
        if name not in _LIBRARY_OPS:
            raise AttributeError(f"pallas_jax.kernels has no {name}; it has {', '.join(_LIBRARY_OPS)}")
        import jax.numpy as jnp
        shapes = {
            "rms_norm": lambda x, w: jax.ShapeDtypeStruct(x.shape, x.dtype),
            "layer_norm": lambda x, w, b: jax.ShapeDtypeStruct(x.shape, x.dtype),
            "softmax": lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
            "cross_entropy": lambda x, t: jax.ShapeDtypeStruct(x.shape[:1], jnp.float32),
            "flash_attention": lambda q, k, v: jax.ShapeDtypeStruct(q.shape, q.dtype),
            "matmul": lambda a, b: jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), a.dtype),
        }
        f = differentiable("pallas_kernels_" + name, shapes[name])
        setattr(self, name, f)
        return f


_LIBRARY_OPS = ("rms_norm", "layer_norm", "softmax", "cross_entropy", "flash_attention", "matmul")
kernels = _Kernels()


def load(pallas_build_dir=None):
    """Builds (if needed) and loads the library, and registers its FFI targets."""
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.cdll.LoadLibrary(str(build(pallas_build_dir)))
    for name, symbol in [("pallas_gelu_mul", "PallasGeluMul"), ("pallas_softmax", "PallasSoftmax"),
                         ("pallas_gelu_mul_backward", "PallasGeluMulBackward"),
                         ("pallas_softmax_backward", "PallasSoftmaxBackward")]:
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, symbol + "Cuda")), platform="CUDA")
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, symbol + "Cpu")), platform="cpu")
    # the library's kernels as user targets (with their hand-written backwards): kernels.*
    register_targets(str(build(pallas_build_dir)), {"pallas_kernels_" + n: "PallasKernels" + "".join(w.title() for w in n.split("_"))
                                                    for n in _LIBRARY_OPS})
    lib.pallas_jax_last_output.restype = ctypes.c_size_t
    lib.pallas_jax_last_backend.restype = ctypes.c_char_p
    _lib = lib
    return lib


_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(jax.numpy.bfloat16))


def _check(name, *xs):
    # The handler checks these too; checking here gives the error at trace time, with shapes.
    for x in xs:
        if x.dtype not in _DTYPES:
            raise TypeError(f"pallas_jax.{name}: dtype {x.dtype} not supported (float32, float16, bfloat16)")
    for x in xs[1:]:
        if x.shape != xs[0].shape or x.dtype != xs[0].dtype:
            raise ValueError(f"pallas_jax.{name}: operands differ: {xs[0].shape} {xs[0].dtype} vs {x.shape} {x.dtype}")


# Each op is a jax.custom_vjp whose backward is a Pallas kernel too, called through its own FFI
# target (jax.grad, jax.vjp and jax.jit of a training step go through them).

@jax.custom_vjp
def gelu_mul(x, y):
    """gelu(x) * y (tanh approximation), by a Pallas C++ kernel; its gradient by another."""
    _check("gelu_mul", x, y)
    return jax.ffi.ffi_call("pallas_gelu_mul", jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)


def _gelu_mul_fwd(x, y):
    return gelu_mul(x, y), (x, y)


def _gelu_mul_bwd(res, g):
    x, y = res
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    dx, dy = jax.ffi.ffi_call("pallas_gelu_mul_backward", (out, out))(x, y, g.astype(x.dtype))
    return dx, dy


gelu_mul.defvjp(_gelu_mul_fwd, _gelu_mul_bwd)


@jax.custom_vjp
def softmax(x):
    """Softmax over the last axis, by the library's pl::kernels::softmax; its gradient by
    pl::kernels::softmax_bwd."""
    _check("softmax", x)
    if x.ndim == 0:
        raise ValueError("pallas_jax.softmax: x must have at least one dimension")
    return jax.ffi.ffi_call("pallas_softmax", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def _softmax_fwd(x):
    y = softmax(x)
    return y, y


def _softmax_bwd(y, g):
    dx = jax.ffi.ffi_call("pallas_softmax_backward", jax.ShapeDtypeStruct(y.shape, y.dtype))(y, g.astype(y.dtype))
    return (dx,)


softmax.defvjp(_softmax_fwd, _softmax_bwd)


def last_launch():
    """(address of the output the last kernel wrote, the backend it ran on): for the tests."""
    return int(_lib.pallas_jax_last_output()), _lib.pallas_jax_last_backend().decode()


if __name__ == "__main__":  # python3 pallas_jax.py [build_dir]: build only
    print("pallas_jax: built", build(sys.argv[1] if len(sys.argv) > 1 else None))
