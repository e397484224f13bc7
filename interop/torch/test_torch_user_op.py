#!/usr/bin/env python3
"""Checks a user's own Pallas kernel registered as a torch custom op (pallas_torch_user.h and the
worked example interop/torch/example/rms_scale.cc): built with pallas_torch.load_user_ops,
called as torch.ops.user_ops.rms_scale (two results) on CPU tensors (the Pallas interpreter) and
CUDA tensors where there is a GPU, against a torch reference; its gradients by the automatic vjp
(pallas_torch.register_automatic_vjp) against torch's autograd; traced by torch.compile
(fullgraph, through the Meta kernel); and the errors (operands the factory refuses) as torch
errors naming the op. Plain script: exits 1 if a check failed.

    python3 interop/torch/test_torch_user_op.py [pallas_build_dir]
"""
import sys
from pathlib import Path

try:
    import torch
except ImportError as e:
    print(f"SKIPPED: torch is not importable here ({e})")
    sys.exit(0)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import pallas_torch  # noqa: E402

failures = []


def check(what, ok, detail=""):
    print(("ok    " if ok else "FAIL  ") + what + (f"  [{detail}]" if detail and not ok else ""))
    if not ok:
        failures.append(what)


def reference(x, w):
    v = x.float()
    rs = torch.rsqrt((v * v).mean(dim=1) + 1e-6)
    return (v * rs[:, None] * w.float()).to(x.dtype), rs


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else None
    pallas_torch.load_user_ops([HERE / "example" / "rms_scale.cc"], "user_rms_scale_ops", build)
    pallas_torch.register_automatic_vjp("user_ops::rms_scale")
    pallas_torch.register_automatic_vjp("user_ops::rms_norm")  # its vjp is the pair's backward
    print(f"torch {torch.__version__}; torch.ops.user_ops.rms_scale registered")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if len(devices) == 1:
        print("SKIPPED: the CUDA checks: torch sees no GPU here")
    for dev in devices:
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
            name = f"{dev} {dtype}"
            g = torch.Generator().manual_seed(0)
            x = torch.randn(37, 96, generator=g).to(dev, dtype)
            w = torch.randn(96, generator=g).to(dev, dtype)
            y, rs = torch.ops.user_ops.rms_scale(x, w)
            want_y, want_rs = reference(x, w)
            err_y = (y.float() - want_y.float()).abs().max().item()
            err_rs = ((rs - want_rs).abs() / want_rs).max().item()
            check(f"rms_scale {name}: both results match torch", err_y <= 4 * tol * max(1.0, want_y.float().abs().max().item())
                  and err_rs <= 1e-5 and y.device == x.device and rs.dtype == torch.float32, f"{err_y:.3g} {err_rs:.3g}")
            f = torch.compile(lambda a, b: torch.ops.user_ops.rms_scale(a * 2, b)[0] + 1, fullgraph=True)
            z = f(x, w)
            check(f"rms_scale {name}: torch.compile(fullgraph=True) traces through it",
                  torch.allclose(z.float(), reference(x * 2, w)[0].float() + 1, atol=8 * tol, rtol=8 * tol))
        # gradients through the automatic vjp (the kernel transposed) against torch's autograd of
        # the reference, with a weight on each output
        for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 3e-2)):
            g = torch.Generator().manual_seed(1)
            x = torch.randn(9, 40, generator=g).to(dev, dtype).requires_grad_()
            w = torch.randn(40, generator=g).to(dev, dtype).requires_grad_()
            gy = torch.randn(9, 40, generator=g).to(dev, dtype)
            grs = torch.randn(9, generator=g).to(dev)
            y, rs = torch.ops.user_ops.rms_scale(x, w)
            dx, dw = torch.autograd.grad((y.float() * gy.float()).sum() + (rs * grs).sum(), (x, w))
            xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
            yr, rsr = reference(xr, wr)
            dxr, dwr = torch.autograd.grad((yr.float() * gy.float()).sum() + (rsr * grs).sum(), (xr, wr))
            err = max(((dx.float() - dxr.float()).abs().max() / dxr.float().abs().max()).item(),
                      ((dw.float() - dwr.float()).abs().max() / dwr.float().abs().max()).item())
            check(f"rms_scale {dev} {dtype}: gradients by the automatic vjp match torch autograd", err <= tol and dx.dtype == dtype,
                  f"relative error {err:.3g}")
            # the same through torch.compile (fullgraph): the forward and the automatic vjp traced
            cf = torch.compile(lambda a, b: (torch.ops.user_ops.rms_scale(a, b)[0].float() * gy.float()).sum(), fullgraph=True)
            dxc, dwc = torch.autograd.grad(cf(x, w), (x, w))
            dxr2, dwr2 = torch.autograd.grad((reference(xr, wr)[0].float() * gy.float()).sum(), (xr, wr))
            errc = max(((dxc.float() - dxr2.float()).abs().max() / dxr2.float().abs().max()).item(),
                       ((dwc.float() - dwr2.float()).abs().max() / dwr2.float().abs().max()).item())
            check(f"rms_scale {dev} {dtype}: torch.compile(fullgraph=True) of a loss, backward through the automatic vjp",
                  errc <= tol, f"relative error {errc:.3g}")
            # an output without a gradient (None) counts as zero
            (dx2,) = torch.autograd.grad(torch.ops.user_ops.rms_scale(x, w)[0].float().sum(), (x,))
            (dx2r,) = torch.autograd.grad(reference(xr, wr)[0].float().sum(), (xr,))
            check(f"rms_scale {dev} {dtype}: an output left out of the loss has a zero gradient",
                  ((dx2.float() - dx2r.float()).abs().max() / dx2r.float().abs().max()).item() <= tol)
        # the library's rms norm with its hand-written backward kernels (a custom_vjp pair)
        for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 3e-2)):
            g = torch.Generator().manual_seed(2)
            x = torch.randn(12, 64, generator=g).to(dev, dtype).requires_grad_()
            w = torch.randn(64, generator=g).to(dev, dtype).requires_grad_()
            gy = torch.randn(12, 64, generator=g).to(dev, dtype)
            y = torch.ops.user_ops.rms_norm(x, w)
            dx, dw = torch.autograd.grad((y.float() * gy.float()).sum(), (x, w))
            xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
            yr = reference(xr, wr)[0]
            dxr, dwr = torch.autograd.grad((yr.float() * gy.float()).sum(), (xr, wr))
            rel = lambda a, b: ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
            check(f"rms_norm {dev} {dtype}: output and gradients (hand-written backward) match torch",
                  rel(y, yr) <= tol and max(rel(dx, dxr), rel(dw, dwr)) <= tol and dw.dtype == dtype,
                  f"{rel(y, yr):.3g} {rel(dx, dxr):.3g} {rel(dw, dwr):.3g}")
        try:
            torch.ops.user_ops.rms_scale(torch.ones(4, 8, device=dev), torch.ones(7, device=dev))
            check(f"error {dev}: operands the factory refuses", False, "no error")
        except Exception as e:  # noqa: BLE001
            check(f"error {dev}: operands the factory refuses",
                  "user_ops::rms_scale" in str(e) and "rms_scale takes x [R, C] and w [C]" in str(e), str(e)[:300])
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)
    print("all user-op checks passed")


if __name__ == "__main__":
    main()
