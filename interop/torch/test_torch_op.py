#!/usr/bin/env python3
"""Checks torch.ops.pallas (pallas_torch_ops.cc) end to end. Plain script: prints each check,
exits 1 if any failed, 0 with a visible "SKIPPED: ..." where torch or a GPU is missing.

    python3 interop/torch/test_torch_op.py [pallas_build_dir]   (default: $PALLAS_BUILD_DIR or build)

CPU tensors run on the Pallas interpreter (checked everywhere torch is); CUDA tensors on the
GPU (checked where torch sees one): results against torch references and against the
interpreter, zero-copy by pointer identity, torch's current (non-default) stream, the
traced-call cache, torch.compile(fullgraph=True), autograd, and input errors.
"""
import os
import sys
from pathlib import Path

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"SKIPPED: torch is not importable here ({e})")
    sys.exit(0)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pallas_torch  # noqa: E402

failures = []


def check(what, ok, detail=""):
    print(("ok    " if ok else "FAIL  ") + what + (f"  [{detail}]" if detail and not ok else ""))
    if not ok:
        failures.append(what)


TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def close(a, b, dtype):
    err = (a.float() - b.float()).abs().max().item() if a.numel() else 0.0
    scale = max(1.0, b.float().abs().max().item() if b.numel() else 0.0)
    return err <= TOL[dtype] * scale, f"max error {err:.3g}"


def ref_gelu_mul(x, y):
    return (F.gelu(x.float(), approximate="tanh") * y.float()).to(x.dtype)


def ref_softmax(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def last():
    ptr, backend, cuda_runs, cached = torch.ops.pallas.debug_last_launch()
    return ptr, backend, cuda_runs, cached


def check_results(dev):
    backend = "cuda" if dev == "cuda" else "interpreter"
    # the interpreter computes in its own buffers and copies into the given output: the same
    # pointer check, but only the GPU's is zero-copy
    wrote = "zero-copy: the kernel wrote" if dev == "cuda" else "the interpreter's result went into"
    g = torch.Generator().manual_seed(0)
    for shape in [(4096,), (3, 1000), (2, 5, 333)]:  # 1000, 333, 3330: blocks that overhang
        for dtype in [torch.float32, torch.float16, torch.bfloat16]:
            x = torch.randn(shape, generator=g).to(dev, dtype)
            y = torch.randn(shape, generator=g).to(dev, dtype)
            out = torch.ops.pallas.gelu_mul(x, y)
            ptr, be, _, _ = last()
            tag = f"{dev} {dtype} {list(shape)}"
            check(f"gelu_mul {tag} matches torch", *close(out, ref_gelu_mul(x, y), dtype))
            check(f"gelu_mul {tag} {wrote} out.data_ptr() on {backend}",
                  ptr == out.data_ptr() and be == backend, f"kernel wrote {ptr:#x} on {be}, out at {out.data_ptr():#x}")
            s = torch.ops.pallas.softmax(x)
            ptr, be, _, _ = last()
            check(f"softmax {tag} matches torch", *close(s, ref_softmax(x), dtype))
            check(f"softmax {tag} {wrote} out.data_ptr() on {backend}", ptr == s.data_ptr() and be == backend,
                  f"kernel wrote {ptr:#x} on {be}, out at {s.data_ptr():#x}")
            if dev == "cuda":  # the library's other backend, on the same data
                cpu = torch.ops.pallas.gelu_mul(x.cpu(), y.cpu())
                check(f"gelu_mul {tag}: GPU equals the Pallas interpreter", *close(out.cpu(), cpu, dtype))

    # out= form: written into the caller's tensor, which keeps its storage
    x = torch.randn(5000, generator=g).to(dev)
    y = torch.randn(5000, generator=g).to(dev)
    out = torch.full_like(x, float("nan"))
    before = out.data_ptr()
    torch.ops.pallas.gelu_mul_out(x, y, out)
    ptr, _, _, _ = last()
    check(f"gelu_mul_out {dev}: written in place into out", out.data_ptr() == before and ptr == before
          and close(out, ref_gelu_mul(x, y), torch.float32)[0])

    # the traced call is cached per shape and dtype: repeated calls add no entry (and, on the
    # GPU, each is one launch)
    torch.ops.pallas.gelu_mul(x, y)
    _, _, runs0, cached0 = last()
    for _ in range(3):
        torch.ops.pallas.gelu_mul(x, y)
    _, _, runs1, cached1 = last()
    check(f"gelu_mul {dev}: repeated calls reuse the cached traced call", cached1 == cached0, f"{cached0} -> {cached1}")
    if dev == "cuda":
        check("gelu_mul cuda: three calls ran three times on the GPU", runs1 - runs0 == 3, f"{runs1 - runs0} GPU runs")


def check_autograd(dev):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 700, generator=g).to(dev).requires_grad_()
    y = torch.randn(3, 700, generator=g).to(dev).requires_grad_()
    w = torch.randn(3, 700, generator=g).to(dev)
    (torch.ops.pallas.gelu_mul(x, y) * w).sum().backward()
    gx, gy = x.grad, y.grad
    x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    (F.gelu(x2, approximate="tanh") * y2 * w).sum().backward()
    check(f"gelu_mul {dev}: backward (a Pallas kernel) matches torch autograd",
          close(gx, x2.grad, torch.float32)[0] and close(gy, y2.grad, torch.float32)[0])
    xs = x.detach().clone().requires_grad_()
    (torch.ops.pallas.softmax(xs) * w).sum().backward()
    xr = x.detach().clone().requires_grad_()
    (torch.softmax(xr, -1) * w).sum().backward()
    check(f"softmax {dev}: backward (a Pallas kernel, softmax_backward) matches torch autograd", *close(xs.grad, xr.grad, torch.float32))
    # finite differences in f32 (the ops take no f64), hence the loose tolerances
    a = torch.randn(2, 40, generator=g).to(dev).requires_grad_()
    b = torch.randn(2, 40, generator=g).to(dev).requires_grad_()
    ok = torch.autograd.gradcheck(torch.ops.pallas.gelu_mul, (a, b), eps=1e-2, atol=2e-2, rtol=2e-2,
                                  raise_exception=False)
    check(f"gelu_mul {dev}: torch.autograd.gradcheck (f32, eps 1e-2)", ok)
    ok = torch.autograd.gradcheck(torch.ops.pallas.softmax, (a,), eps=1e-2, atol=2e-2, rtol=2e-2,
                                  raise_exception=False)
    check(f"softmax {dev}: torch.autograd.gradcheck (f32, eps 1e-2)", ok)


def check_compile(dev):
    torch._dynamo.reset()

    def f(x, y):
        return torch.ops.pallas.softmax(torch.ops.pallas.gelu_mul(x, y) * 2.0 + 1.0)

    # the GPU uses the default (inductor) backend; on the CPU aot_eager is enough to show the
    # ops trace (Meta shapes, autograd) and spares a C++ build of inductor's CPU code
    compiled = torch.compile(f, fullgraph=True, backend="inductor" if dev == "cuda" else "aot_eager")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 512, generator=g).to(dev).requires_grad_()
    y = torch.randn(4, 512, generator=g).to(dev)
    try:
        out = compiled(x, y)
        out.sum().backward()
    except Exception as e:  # noqa: BLE001 - report any tracing failure as a check
        check(f"torch.compile(fullgraph=True) {dev}", False, f"{type(e).__name__}: {e}")
        return
    x2 = x.detach().clone().requires_grad_()
    ref = torch.softmax(F.gelu(x2, approximate="tanh") * y * 2.0 + 1.0, -1)
    ref.sum().backward()
    check(f"torch.compile(fullgraph=True) {dev}: forward matches", *close(out, ref, torch.float32))
    check(f"torch.compile(fullgraph=True) {dev}: backward matches", *close(x.grad, x2.grad, torch.float32))


def check_stream():
    # The op must launch on torch's current stream, not the default one, and without waiting.
    # Queue a long sleep, then new input values, on a side stream; the op queued after them on
    # the same stream must see the new values. Had it launched on another stream it would read
    # the old ones (or a mix); had it synchronised, the stream would be idle when it returns.
    n = 1 << 22
    x = torch.zeros(n, device="cuda")
    y = torch.ones(n, device="cuda")
    torch.ops.pallas.gelu_mul(x, y)  # warm: trace and compile outside the timed part
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    new = torch.full((n,), 2.0, device="cuda")
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU cycles
        x.copy_(new)
        out = torch.empty_like(x)
        torch.ops.pallas.gelu_mul_out(x, y, out)
        busy = not s.query()
    s.synchronize()
    expect = ref_gelu_mul(new, y)
    check("non-default stream: the op is ordered after earlier work on torch's current stream",
          *close(out, expect, torch.float32))
    check("non-default stream: the launch is asynchronous (returned with the stream busy)", busy)
    # and a plain call on a non-blocking stream, read back after a stream sync
    s2 = torch.cuda.Stream()
    with torch.cuda.stream(s2):
        a = torch.randn(3, 777, device="cuda")
        b = torch.randn(3, 777, device="cuda")
        c = torch.ops.pallas.softmax(torch.ops.pallas.gelu_mul(a, b))
    s2.synchronize()
    check("non-default stream: a chain of Pallas ops", *close(c, ref_softmax(ref_gelu_mul(a, b)), torch.float32))


def check_library_ops(dev):
    """torch.ops.pallas_kernels.*: the library's kernels registered as a user registers theirs,
    outputs and gradients (their hand-written backward kernels) against torch's."""
    g = torch.Generator().manual_seed(3)
    rnd = lambda *shape: torch.randn(*shape, generator=g).to(dev)
    F = torch.nn.functional
    cases = [
        ("rms_norm", [rnd(6, 32), rnd(32)], lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w),
        ("layer_norm", [rnd(6, 32), rnd(32), rnd(32)], lambda x, w, b: F.layer_norm(x, (32,), w, b, 1e-5)),
        ("softmax", [rnd(6, 32)], lambda x: torch.softmax(x, -1)),
        ("flash_attention", [rnd(1, 4, 32, 16), rnd(1, 2, 32, 16), rnd(1, 2, 32, 16)],
         lambda q, k, v: F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))),
        ("matmul", [rnd(16, 32), rnd(32, 24)], lambda a, b: a @ b),
    ]
    for name, args, ref in cases:
        ours = [a.clone().requires_grad_() for a in args]
        theirs = [a.clone().requires_grad_() for a in args]
        y = getattr(torch.ops.pallas_kernels, name)(*ours)
        yr = ref(*theirs)
        gy = torch.randn(yr.shape, generator=g).to(dev)
        grads = torch.autograd.grad((y * gy).sum(), ours)
        grads_r = torch.autograd.grad((yr * gy).sum(), theirs)
        # (f32 dots round to tf32, Precision::Default, on both backends)
        tol = 2e-3 if name in ("flash_attention", "matmul") else 1e-4
        err = max([((y - yr).abs().max() / yr.abs().max()).item()] +
                  [((a - b).abs().max() / b.abs().max()).item() for a, b in zip(grads, grads_r)])
        check(f"pallas_kernels.{name} {dev}: output and gradients (hand-written backward) match torch", err <= tol, f"{err:.3g}")
    x, t = rnd(5, 40).requires_grad_(), torch.randint(0, 40, (5,), generator=g).to(dev, torch.int32)
    loss = torch.ops.pallas_kernels.cross_entropy(x, t)
    (dx,) = torch.autograd.grad(loss.sum(), (x,))
    xr = x.detach().clone().requires_grad_()
    lr = F.cross_entropy(xr, t.long(), reduction="none")
    (dxr,) = torch.autograd.grad(lr.sum(), (xr,))
    err = max(((loss - lr).abs().max() / lr.abs().max()).item(), ((dx - dxr).abs().max() / dxr.abs().max()).item())
    check(f"pallas_kernels.cross_entropy {dev}: per-row loss and gradient match torch", err <= 1e-4, f"{err:.3g}")


def check_errors(dev):
    x = torch.randn(8, 16, device=dev)
    for what, args, needle in [
        ("a non-contiguous input", (x.t(), torch.randn(16, 8, device=dev)), "not contiguous"),
        ("a float64 input", (x.double(), x.double()), "supported: float32, float16, bfloat16"),
        ("shapes that differ", (x, torch.randn(8, 15, device=dev)), "has shape"),
    ]:
        try:
            torch.ops.pallas.gelu_mul(*args)
            check(f"error {dev}: {what} is refused", False, "no error raised")
        except RuntimeError as e:
            check(f"error {dev}: {what} is refused with a clear message", needle in str(e) and "pallas::gelu_mul" in str(e),
                  str(e).splitlines()[0])


def main():
    build_dir = sys.argv[1] if len(sys.argv) > 1 else None
    pallas_torch.load(build_dir)
    print(f"torch {torch.__version__}; extension built against libpallas.a in "
          f"{build_dir or os.environ.get('PALLAS_BUILD_DIR') or 'build'}")
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    for dev in devices:
        print(f"--- {dev} ---")
        check_results(dev)
        check_autograd(dev)
        check_compile(dev)
        check_library_ops(dev)
        check_errors(dev)
    if "cuda" in devices:
        check_stream()
    else:
        print("SKIPPED: the GPU checks (zero-copy on cuda:0, streams, inductor): torch.cuda.is_available() is False")
    print(f"{len(failures)} failed" if failures else "all torch interop checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
