# Anchors measured in the same device call as our benchmarks: torch (cuBLAS) on the same
# workloads, CUDA events, median of many runs.
import torch

def bench(f, reps=30):
    for _ in range(3): f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); return ts[len(ts) // 2]

print("workload,ms,metric,value")
n = 1 << 28
x = torch.randn(n, device="cuda"); y = torch.randn(n, device="cuda")
ms = bench(lambda: x + y); print(f"torch_f32_add_2^28,{ms:.4f},GB/s,{3*n*4/ms/1e6:.1f}")
ms = bench(lambda: x.clone()); print(f"torch_copy_1GiB,{ms:.4f},GB/s,{2*n*4/ms/1e6:.1f}")
del x, y
s = torch.randn(16384, 4096, device="cuda")
ms = bench(lambda: torch.softmax(s, dim=1)); print(f"torch_f32_softmax_16384x4096,{ms:.4f},GB/s,{2*s.numel()*4/ms/1e6:.1f}")
for m in (1024, 2048, 4096):
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16); b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    ms = bench(lambda: a @ b, 20); print(f"torch_bf16_matmul_{m}^3,{ms:.4f},TFLOP/s,{2*m**3/ms/1e9:.1f}")
try:
    import triton, triton.language as tl
    @triton.jit
    def add_k(x, y, o, n, B: tl.constexpr):
        i = tl.program_id(0) * B + tl.arange(0, B); m = i < n
        tl.store(o + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)
    x = torch.randn(n, device="cuda"); y = torch.randn(n, device="cuda"); o = torch.empty_like(x)
    ms = bench(lambda: add_k[(n // 4096,)](x, y, o, n, B=4096))
    print(f"triton_f32_add_2^28,{ms:.4f},GB/s,{3*n*4/ms/1e6:.1f}")
except Exception as e:
    print("triton,failed," + repr(e)[:200])
