"""Builds and loads the Pallas C++ torch operators (torch.ops.pallas.*) and registers their
autograd formulas.

    import pallas_torch
    pallas_torch.load("build")             # a CMake build dir holding libpallas.a
    out = torch.ops.pallas.gelu_mul(x, y)  # or pallas_torch.gelu_mul(x, y)

The extension is built with torch's own tooling (torch.utils.cpp_extension.load, ninja) as a
plain C++ extension: Pallas compiles its kernels with NVRTC at run time, so no .cu file and
none of torch's nvcc version checks. It links the static libpallas.a (built
position-independent), NVRTC, and libc10_cuda for torch's current stream.
"""
import os
import sys
from pathlib import Path

import torch
from torch.utils import cpp_extension

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _cuda_home():
    home = os.environ.get("CUDA_HOME") or cpp_extension.CUDA_HOME or "/usr/local/cuda"
    if not (Path(home) / "include" / "cuda_runtime_api.h").exists():
        raise RuntimeError(f"pallas_torch: no CUDA headers under {home}/include (cuda_runtime_api.h); "
                           "set CUDA_HOME to the CUDA toolkit")
    return Path(home)


def _build_dir(pallas_build_dir):
    build = Path(pallas_build_dir or os.environ.get("PALLAS_BUILD_DIR") or ROOT / "build").resolve()
    if not (build / "libpallas.a").exists():
        raise RuntimeError(f"pallas_torch: {build / 'libpallas.a'} not found; build the library first "
                           f"(cmake --build {build} --target pallas)")
    if not torch._C._GLIBCXX_USE_CXX11_ABI:
        raise RuntimeError("pallas_torch: this torch uses the pre-C++11 std::string ABI; libpallas.a "
                           "uses the C++11 ABI. Use a torch built with _GLIBCXX_USE_CXX11_ABI=1")
    return build


def load_user_ops(sources, name, pallas_build_dir=None, verbose=False):
    """Builds and loads a user's own ops: C++ sources that register Pallas calls with
    PALLAS_TORCH_OP (pallas_torch_user.h). Their ops appear under torch.ops.<namespace> when
    this returns. Built into <build>/interop-torch/<name>/ (ninja rebuilds only what changed)."""
    build = _build_dir(pallas_build_dir)
    cuda = _cuda_home()
    cuda_lib = cuda / "lib64" if (cuda / "lib64").exists() else cuda / "lib"
    out_dir = build / "interop-torch" / name
    out_dir.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(
        name=name,
        sources=[str(Path(s).resolve()) for s in sources],
        extra_include_paths=[str(ROOT / "include"), str(ROOT / "interop"), str(HERE), str(cuda / "include")],
        extra_cflags=["-O2", "-std=c++20"],
        extra_ldflags=[str(build / "libpallas.a"), f"-L{cuda_lib}", "-lnvrtc", "-lc10_cuda", "-ldl", "-lpthread",
                       f"-Wl,-rpath,{cuda_lib}", "-static-libstdc++", "-Wl,--exclude-libs,ALL"],
        build_directory=str(out_dir),
        is_python_module=False,
        verbose=verbose,
    )


def register_automatic_vjp(qualname):
    """Attaches autograd to a user's op registered with PALLAS_TORCH_OP ("ns::name"): its
    backward is the op's automatic vjp, torch.ops.ns.name_vjp (the Pallas kernel transposed;
    the forward runs again inside it). The inputs are saved for the backward; an output whose
    gradient is None counts as zero."""
    ns, name = qualname.split("::")
    vjp = getattr(getattr(torch.ops, ns), name + "_vjp")

    def setup_context(ctx, inputs, output):
        outs = output if isinstance(output, (tuple, list)) else (output,)
        ctx.out_meta = [(o.shape, o.dtype, o.device) for o in outs]
        ctx.save_for_backward(*inputs)

    def backward(ctx, *grads):
        cots = [g if g is not None else torch.zeros(s, dtype=d, device=dev) for g, (s, d, dev) in zip(grads, ctx.out_meta)]
        return tuple(vjp(list(ctx.saved_tensors), cots))

    torch.library.register_autograd(qualname, backward, setup_context=setup_context)


# The library's kernels registered through pallas_torch_user.h (library_ops.cc).
LIBRARY_OPS = ("rms_norm", "layer_norm", "softmax", "cross_entropy", "flash_attention", "matmul")


def load(pallas_build_dir=None, verbose=False):
    """Builds (once; ninja rebuilds only what changed) and loads the operators."""
    build = Path(pallas_build_dir or os.environ.get("PALLAS_BUILD_DIR") or ROOT / "build").resolve()
    lib = build / "libpallas.a"
    if not lib.exists():
        raise RuntimeError(f"pallas_torch: {lib} not found; build the library first "
                           f"(cmake --build {build} --target pallas)")
    # libpallas.a is built by the system compiler with the C++11 string ABI (the default);
    # torch wheels since 2.7 use it too. A mismatch would fail at link or load time with
    # undefined std::__cxx11 symbols, so say it plainly instead.
    if not torch._C._GLIBCXX_USE_CXX11_ABI:
        raise RuntimeError("pallas_torch: this torch uses the pre-C++11 std::string ABI; libpallas.a "
                           "uses the C++11 ABI. Use a torch built with _GLIBCXX_USE_CXX11_ABI=1")
    cuda = _cuda_home()
    cuda_lib = cuda / "lib64" if (cuda / "lib64").exists() else cuda / "lib"
    out_dir = build / "interop-torch"
    out_dir.mkdir(exist_ok=True)
    cpp_extension.load(
        name="pallas_torch_ops",
        # the library's own ops, and its kernels registered as a user registers theirs
        sources=[str(HERE / "pallas_torch_ops.cc"), str(HERE / "library_ops.cc")],
        extra_include_paths=[str(ROOT / "include"), str(ROOT / "interop"), str(HERE), str(cuda / "include")],
        # the library is C++20; the later -std wins over torch's default
        extra_cflags=["-O2", "-std=c++20"],
        extra_ldflags=[str(lib), f"-L{cuda_lib}", "-lnvrtc", "-lc10_cuda", "-ldl", "-lpthread",
                       f"-Wl,-rpath,{cuda_lib}",
                       # the C++ runtime inside the library with its symbols hidden: a toolchain
                       # that links its own copy exported it, and torch's libstdc++ interposed
                       # half of its calls (a crash building an error message on the H200)
                       "-static-libstdc++", "-Wl,--exclude-libs,ALL"],
        build_directory=str(out_dir),
        is_python_module=False,  # registers torch.ops.pallas.* (TORCH_LIBRARY) when loaded
        verbose=verbose,
    )
    _register_autograd()


def _gelu_mul_setup(ctx, inputs, output):
    x, y = inputs
    ctx.save_for_backward(x, y)


def _gelu_mul_backward(ctx, grad):
    # The backward is itself a Pallas kernel (one pass, two outputs).
    x, y = ctx.saved_tensors
    dx, dy = torch.ops.pallas.gelu_mul_backward(x, y, grad.contiguous())
    return dx, dy


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_backward(ctx, grad):
    # The library's backward kernel (kernels::softmax_bwd): dx = y (g - sum(g y)).
    (y,) = ctx.saved_tensors
    return torch.ops.pallas.softmax_backward(y, grad.contiguous())


_registered = False


def _register_autograd():
    global _registered
    if _registered:
        return
    torch.library.register_autograd("pallas::gelu_mul", _gelu_mul_backward, setup_context=_gelu_mul_setup)
    torch.library.register_autograd("pallas::softmax", _softmax_backward, setup_context=_softmax_setup)
    # torch.ops.pallas_kernels.*: gradients from each kernel's hand-written backward
    for name in LIBRARY_OPS:
        register_automatic_vjp("pallas_kernels::" + name)
    _registered = True


def gelu_mul(x, y):
    return torch.ops.pallas.gelu_mul(x, y)


def softmax(x):
    return torch.ops.pallas.softmax(x)


if __name__ == "__main__":  # python3 pallas_torch.py [build_dir]: build only
    load(sys.argv[1] if len(sys.argv) > 1 else None, verbose=True)
    print("pallas_torch: built and loaded torch.ops.pallas")
