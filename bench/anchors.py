"""Anchor figures on the GPU, measured in the same run as our kernels (bench/run_h200.sh).

torch (cuBLAS / cuDNN), plain Triton and JAX Pallas on the workloads of docs/benchmarks.md.
Each figure is the median of CUDA-event timings after warm-up; prints one JSON line per result.
"""
import json
import math
import statistics
import sys
import time


def emit(**kw):
    print(json.dumps(kw), flush=True)


def torch_time(fn, reps=30, warmup=5):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def jtime(f, *args, reps=30):
    """Median wall time of a jitted JAX call, ms (block_until_ready around each)."""
    import jax
    r = f(*args)
    jax.block_until_ready(r)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def torch_anchors():
    import torch
    dev = "cuda"
    n = 1 << 28
    x = torch.randn(n, device=dev)
    y = torch.randn(n, device=dev)
    out = torch.empty_like(x)
    ms = torch_time(lambda: torch.add(x, y, out=out))
    emit(workload="f32 add 2^28", impl="torch", ms=ms, gbps=3 * n * 4 / ms / 1e6)
    big = torch.empty(1 << 28, device=dev)
    ms = torch_time(lambda: big.copy_(x))
    emit(workload="device copy 1 GiB", impl="torch copy_", ms=ms, gbps=2 * n * 4 / ms / 1e6)
    del x, y, out, big
    r, c = 16384, 4096
    a = torch.randn(r, c, device=dev)
    ms = torch_time(lambda: torch.softmax(a, dim=-1))
    emit(workload="f32 softmax 16384x4096", impl="torch", ms=ms, gbps=2 * r * c * 4 / ms / 1e6)
    w = torch.randn(c, device=dev)
    bb = torch.randn(c, device=dev)
    ms = torch_time(lambda: torch.nn.functional.layer_norm(a, (c,), w, bb))
    emit(workload="f32 layer norm 16384x4096", impl="torch", ms=ms, gbps=2 * r * c * 4 / ms / 1e6)
    xb = torch.randn(r, c, device=dev, dtype=torch.bfloat16)
    wb = torch.randn(c, device=dev, dtype=torch.bfloat16)
    ms = torch_time(lambda: torch.nn.functional.rms_norm(xb, (c,), wb, 1e-6))
    emit(workload="bf16 rms norm 16384x4096", impl="torch", ms=ms, gbps=2 * r * c * 2 / ms / 1e6)
    ms = torch_time(lambda: torch.argmax(a, dim=1))
    emit(workload="f32 row argmax 16384x4096", impl="torch", ms=ms, gbps=r * c * 4 / ms / 1e6)
    ms = torch_time(lambda: a.sum(dim=0))
    emit(workload="f32 column sum 16384x4096", impl="torch", ms=ms, gbps=r * c * 4 / ms / 1e6)
    del xb
    n = 1 << 26
    gx = torch.randn(n, device=dev)
    gy = torch.randn(n, device=dev)
    gelu_mul = torch.compile(lambda u, v: torch.nn.functional.gelu(u, approximate="tanh") * v)
    ms = torch_time(lambda: gelu_mul(gx, gy))
    emit(workload="f32 gelu(x)*y 2^26", impl="torch.compile", ms=ms, gbps=3 * n * 4 / ms / 1e6)
    del gx, gy
    for s in (4096, 8192):
        p = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
        q = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
        ms = torch_time(lambda: p @ q, reps=20)
        emit(workload=f"bf16 matmul {s}^3", impl="torch cuBLAS", ms=ms, tflops=2 * s**3 / ms / 1e9)
    pb = torch.randn(16, 2048, 2048, device=dev, dtype=torch.bfloat16)
    qb = torch.randn(16, 2048, 2048, device=dev, dtype=torch.bfloat16)
    ms = torch_time(lambda: torch.bmm(pb, qb), reps=20)
    emit(workload="bf16 batched matmul 16x2048^3", impl="torch cuBLAS bmm", ms=ms, tflops=2 * 16 * 2048**3 / ms / 1e9)
    del pb, qb
    # the user-written matmul rows of cuda_bench: relu(x W + b), x W^T (linear), tf32
    s = 4096
    p = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    q = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    bias = torch.randn(s, device=dev, dtype=torch.bfloat16)
    ms = torch_time(lambda: torch.relu(torch.addmm(bias, p, q)), reps=20)
    emit(workload=f"bf16 relu(x W + b) {s}^3", impl="torch cuBLAS", ms=ms, tflops=2 * s**3 / ms / 1e9)
    ms = torch_time(lambda: torch.nn.functional.linear(p, q), reps=20)
    emit(workload=f"bf16 x W^T {s}^3", impl="torch cuBLAS", ms=ms, tflops=2 * s**3 / ms / 1e9)
    r = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    ms = torch_time(lambda: torch.addmm(r, p, q), reps=20)
    emit(workload=f"bf16 x W + residual {s}^3", impl="torch cuBLAS", ms=ms, tflops=2 * s**3 / ms / 1e9)
    pt = p.t().contiguous()  # A stored K x M
    ms = torch_time(lambda: pt.t() @ q, reps=20)
    emit(workload=f"bf16 A^T B {s}^3", impl="torch cuBLAS", ms=ms, tflops=2 * s**3 / ms / 1e9)
    pe, qe = p[:4000].contiguous(), q[:, :4000].contiguous()
    ms = torch_time(lambda: pe @ qe, reps=20)
    emit(workload="bf16 matmul 4000x4000x4096", impl="torch cuBLAS", ms=ms, tflops=2 * 4000 * 4000 * s / ms / 1e9)
    pi = torch.randint(-8, 8, (s, s), device=dev, dtype=torch.int8)
    qi = torch.randint(-8, 8, (s, s), device=dev, dtype=torch.int8)
    try:
        ms = torch_time(lambda: torch._int_mm(pi, qi), reps=20)
        emit(workload=f"i8 matmul {s}^3", impl="torch _int_mm", ms=ms, tops=2 * s**3 / ms / 1e9)
    except Exception as e:  # noqa: BLE001 - an anchor that cannot run says so
        emit(workload=f"i8 matmul {s}^3", impl="torch _int_mm", error=str(e)[:120])
    del r, pt, pe, qe, pi, qi
    pf, qf = p.float(), q.float()
    torch.backends.cuda.matmul.allow_tf32 = True
    ms = torch_time(lambda: pf @ qf, reps=20)
    torch.backends.cuda.matmul.allow_tf32 = False
    emit(workload=f"f32 (tf32) matmul {s}^3", impl="torch cuBLAS", ms=ms, tflops=2 * s**3 / ms / 1e9)
    del p, q, pf, qf
    torch_attention_anchors()


def torch_attention_anchors():
    import torch
    from torch.nn.attention import sdpa_kernel, SDPBackend
    dev = "cuda"
    # (B, H, S, D, and whether the causal case runs too)
    for B, H, S, D, causals in ((8, 16, 2048, 64, (False,)), (4, 16, 4096, 128, (False, True)), (4, 16, 4096, 256, (False,))):
        q = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn_like(q)
        v = torch.randn_like(q)
        for causal in causals:
            flops = 4 * B * H * S * S * D / (2 if causal else 1)
            for be, name in ((SDPBackend.CUDNN_ATTENTION, "torch cuDNN"), (SDPBackend.FLASH_ATTENTION, "torch FA2")):
                try:
                    with sdpa_kernel(be):
                        ms = torch_time(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), reps=20)
                    emit(workload=f"bf16 attention B{B} H{H} S{S} D{D}{' causal' if causal else ''}", impl=name, ms=ms,
                         tflops=flops / ms / 1e9)
                except Exception as e:  # noqa: BLE001
                    emit(workload=f"attention D{D}", impl=name, error=str(e)[:200])
        del q, k, v


def jax_pallas_anchors():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    n = 1 << 28
    x = jnp.ones((n,), jnp.float32)
    y = jnp.ones((n,), jnp.float32)

    def add_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    blk = 1 << 14
    f = jax.jit(pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct((n,), jnp.float32), grid=(n // blk,),
                               in_specs=[pl.BlockSpec((blk,), lambda i: (i,))] * 2,
                               out_specs=pl.BlockSpec((blk,), lambda i: (i,))))
    ms = jtime(f, x, y)
    emit(workload="f32 add 2^28", impl="jax pallas", ms=ms, gbps=3 * n * 4 / ms / 1e6)
    # dispatch cost of a tiny kernel
    t = jnp.ones((128,), jnp.float32)
    g = jax.jit(pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct((128,), jnp.float32)))
    ms = jtime(g, t, t, reps=200)
    emit(workload="steady-state tiny call", impl="jax pallas", us=ms * 1e3)
    del x, y
    jax_attention_anchors()


def jax_attention_anchors():
    import jax
    import jax.numpy as jnp

    # JAX Pallas' own flash attention for GPUs (ops/gpu/attention.py: the Triton lowering), the
    # issue's anchor for attention; its inputs are (batch, seq, heads, head_dim)
    from jax.experimental.pallas.ops.gpu import attention as pallas_attention
    for B, H, S, D, causal in ((8, 16, 2048, 64, False), (4, 16, 4096, 128, False), (4, 16, 4096, 128, True)):
        name = f"bf16 attention B{B} H{H} S{S} D{D}{' causal' if causal else ''}"
        try:
            keys = jax.random.split(jax.random.key(0), 3)
            q, k, v = (jax.random.normal(kk, (B, S, H, D), jnp.bfloat16) for kk in keys)
            sizes = pallas_attention.BlockSizes(block_q=128, block_k=64)
            f = jax.jit(lambda q, k, v: pallas_attention.mha(q, k, v, None, sm_scale=1 / math.sqrt(D), causal=causal, block_sizes=sizes,
                                                             num_warps=4 if D <= 64 else 8, num_stages=2))
            ms = jtime(f, q, k, v, reps=20)
            flops = 4 * B * H * S * S * D / (2 if causal else 1)
            emit(workload=name, impl="jax pallas mha", ms=ms, tflops=flops / ms / 1e9)
        except Exception as e:  # noqa: BLE001 - an anchor that cannot run says so
            emit(workload=name, impl="jax pallas mha", error=str(e)[:200])


def triton_anchors():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add(x, y, o, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(o + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

    n = 1 << 28
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    o = torch.empty_like(x)
    ms = torch_time(lambda: add[(triton.cdiv(n, 4096),)](x, y, o, n, BLOCK=4096))
    emit(workload="f32 add 2^28", impl="triton", ms=ms, gbps=3 * n * 4 / ms / 1e6)
    del x, y, o

    @triton.jit
    def softmax(x, o, C: tl.constexpr):
        base = tl.program_id(0).to(tl.int64) * C
        cols = tl.arange(0, C)
        v = tl.load(x + base + cols)
        e = tl.exp(v - tl.max(v, 0))
        tl.store(o + base + cols, e / tl.sum(e, 0))

    r, c = 16384, 4096
    a = torch.randn(r, c, device="cuda")
    b = torch.empty_like(a)
    for w in (4, 8, 16):
        ms = torch_time(lambda: softmax[(r,)](a, b, C=c, num_warps=w))
        emit(workload="f32 softmax 16384x4096", impl=f"triton warps{w}", ms=ms, gbps=2 * r * c * 4 / ms / 1e6)
    del a, b

    # A matmul as a Triton user writes it: (BM, BN) tiles over a K loop of tl.dot, f32
    # accumulation, then the epilogue (bias + relu, or none), at the tiles cuda_bench runs.
    @triton.jit
    def matmul(a, b, bias, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, RELU_BIAS: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
            acc = tl.dot(x, y, acc)
        if RELU_BIAS:
            acc = tl.maximum(acc + tl.load(bias + rn)[None, :].to(tl.float32), 0.0)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

    for s, bn, relu_bias in ((4096, 128, True), (4096, 256, True), (8192, 128, False), (8192, 256, False)):
        p = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        q = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(s, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(s, s, device="cuda", dtype=torch.bfloat16)
        name = f"bf16 relu(x W + b) {s}^3" if relu_bias else f"bf16 matmul {s}^3"
        try:
            ms = torch_time(lambda: matmul[(s // 128, s // bn)](p, q, bias, out, s, s, s, BM=128, BN=bn, BK=64, RELU_BIAS=relu_bias,
                                                                 num_warps=8, num_stages=3), reps=20)
            emit(workload=name, impl=f"triton 128x{bn}x64 w8 s3", ms=ms, tflops=2 * s**3 / ms / 1e9)
        except Exception as e:  # noqa: BLE001
            emit(workload=name, impl=f"triton 128x{bn}x64 w8 s3", error=str(e)[:200])
        del p, q, bias, out

    t = torch.randn(128, device="cuda")
    import time
    for _ in range(10):
        add[(1,)](t, t, t, 128, BLOCK=128)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(1000):
        add[(1,)](t, t, t, 128, BLOCK=128)
    torch.cuda.synchronize()
    emit(workload="steady-state tiny call", impl="triton", us=(time.perf_counter() - t0) * 1e3)


# The backward anchors (issue 33): attention backward of torch's sdpa backends and of JAX Pallas'
# mha, and Liger-Kernel's Triton norm and softmax backward (liger-kernel installed beside torch
# with --no-deps; run_h200.sh puts it on PYTHONPATH). Each times the backward alone: the forward
# runs once, then the gradient call is timed.
ATTN_BWD_SHAPES = ((8, 16, 2048, 64, False), (4, 16, 4096, 128, False), (4, 16, 4096, 128, True), (4, 16, 4096, 256, False))


def torch_backward_anchors():
    import torch
    from torch.nn.attention import sdpa_kernel, SDPBackend
    dev = "cuda"
    for B, H, S, D, causal in ATTN_BWD_SHAPES:
        name = f"bf16 attention bwd B{B} H{H} S{S} D{D}{' causal' if causal else ''}"
        flops = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1)
        q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        do = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16)
        for be, impl in ((SDPBackend.CUDNN_ATTENTION, "torch cuDNN"), (SDPBackend.FLASH_ATTENTION, "torch FA2")):
            try:
                with sdpa_kernel(be):
                    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    ms = torch_time(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), reps=20)
                emit(workload=name, impl=impl, ms=ms, tflops=flops / ms / 1e9)
                del o
            except Exception as e:  # noqa: BLE001
                emit(workload=name, impl=impl, error=str(e)[:200])
        del q, k, v, do
    # norms and softmax, bf16 16384 x 4096: bytes the backward must move (x or y, dy in; dx out)
    R, C = 16384, 4096
    x = torch.randn(R, C, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(R, C, device=dev, dtype=torch.bfloat16)
    w = torch.randn(C, device=dev, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(C, device=dev, dtype=torch.bfloat16, requires_grad=True)
    nbytes = 3 * R * C * 2
    cases = [("layer_norm", "torch", lambda: torch.nn.functional.layer_norm(x, (C,), w, b, 1e-5), (x, w, b)),
             ("rms_norm", "torch", lambda: torch.nn.functional.rms_norm(x, (C,), w, 1e-6), (x, w)),
             ("softmax", "torch", lambda: torch.softmax(x, -1), (x,))]
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
        cases += [("layer_norm", "liger", lambda: LigerLayerNormFunction.apply(x, w, b, 1e-5), (x, w, b)),
                  ("rms_norm", "liger", lambda: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False), (x, w)),
                  ("softmax", "liger", lambda: LigerSoftmaxFunction.apply(x), (x,))]
    except Exception as e:  # noqa: BLE001
        emit(workload="norm bwd", impl="liger", error=repr(e)[:200])
    for which, impl, fwd, wrt in cases:
        try:
            y = fwd()
            ms = torch_time(lambda: torch.autograd.grad(y, wrt, dy, retain_graph=True), reps=20)
            emit(workload=f"bf16 {which} bwd 16384x4096", impl=impl, ms=ms, gbps=nbytes / ms / 1e6)
            del y
        except Exception as e:  # noqa: BLE001
            emit(workload=f"bf16 {which} bwd 16384x4096", impl=impl, error=repr(e)[:200])
    del x, dy, w, b
    # cross entropy forward + backward, bf16 logits 4096 x 128256 (mean over the rows); bytes:
    # the logits read twice, the gradient written once
    R, V = 4096, 128256
    t = torch.randint(0, V, (R,), device=dev)
    ce = [("torch", lambda x: torch.nn.functional.cross_entropy(x, t))]
    try:
        from liger_kernel.transformers.cross_entropy import LigerCrossEntropyLoss
        liger_ce = LigerCrossEntropyLoss()
        ce.append(("liger", lambda x: liger_ce(x, t)))  # Liger's loss takes (input, target)
    except Exception as e:  # noqa: BLE001
        emit(workload="cross entropy", impl="liger", error=repr(e)[:200])
    for impl, fn in ce:
        try:
            x = torch.randn(R, V, device=dev, dtype=torch.bfloat16, requires_grad=True)
            def step():
                x.grad = None
                fn(x).backward()
            ms = torch_time(step, reps=10)
            emit(workload=f"bf16 cross entropy fwd+bwd {R}x{V}", impl=impl, ms=ms, gbps=3 * R * V * 2 / ms / 1e6)
            del x
        except Exception as e:  # noqa: BLE001
            emit(workload=f"bf16 cross entropy fwd+bwd {R}x{V}", impl=impl, error=repr(e)[:200])
    big = torch.empty(1 << 28, device=dev)
    src = torch.randn(1 << 28, device=dev)
    ms = torch_time(lambda: big.copy_(src))
    emit(workload="device copy 1 GiB", impl="torch copy_", ms=ms, gbps=2 * (1 << 28) * 4 / ms / 1e6)


def jax_backward_anchors():
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.gpu import attention as pallas_attention
    for B, H, S, D, causal in ATTN_BWD_SHAPES:
        name = f"bf16 attention bwd B{B} H{H} S{S} D{D}{' causal' if causal else ''}"
        try:
            keys = jax.random.split(jax.random.key(0), 4)
            q, k, v, do = (jax.random.normal(kk, (B, S, H, D), jnp.bfloat16) for kk in keys)
            bq = 64 if D > 128 else 128
            flops = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1)
        except Exception as e:  # noqa: BLE001
            emit(workload=name, impl="jax pallas mha", error=str(e)[:200])
            continue
        for bb in (32, 64):  # the backward's blocks (JAX's default is 32): both, the best is the anchor
            impl = f"jax pallas mha bwd blocks {bb}"
            try:
                sizes = pallas_attention.BlockSizes(block_q=bq, block_k=64, block_q_dkv=bb, block_kv_dkv=bb, block_q_dq=bb,
                                                    block_kv_dq=bb)
                f = lambda q, k, v: pallas_attention.mha(q, k, v, None, sm_scale=1 / math.sqrt(D), causal=causal,
                                                         block_sizes=sizes, num_warps=4 if D <= 64 else 8, num_stages=2)
                _, pullback = jax.vjp(f, q, k, v)
                ms = jtime(jax.jit(lambda pb, do: pb(do)), pullback, do, reps=20)
                emit(workload=name, impl=impl, ms=ms, tflops=flops / ms / 1e9)
            except Exception as e:  # noqa: BLE001
                emit(workload=name, impl=impl, error=str(e)[:200])


DECODE_SHAPES = [(32, 8192), (128, 4096), (32, 32768)]  # (batch, kv length): GQA 32 query heads on 8 kv heads, D128


def decode_anchors():
    """One query token against a KV cache (bf16, GQA 32/8, D128): the copy of the cache's bytes,
    torch sdpa (flash and cuDNN; enable_gqa) and JAX Pallas' decode_attention.gqa and
    paged_attention (32-token pages, 4 a compute block)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    H, KVH, D = 32, 8, 128
    for B, S in DECODE_SHAPES:
        name = f"bf16 decode attention B{B} S{S} H{H} KVH{KVH} D{D}"
        nbytes = 2 * B * KVH * S * D * 2
        try:
            q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(B, KVH, S, D, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(B, KVH, S, D, device="cuda", dtype=torch.bfloat16)
            kk = torch.empty_like(k)
            ms = torch_time(lambda: kk.copy_(k))  # reads and writes k: the bytes of k and v moved once
            emit(workload=name, impl="copy of k (GB/s: bytes read and written)", ms=ms, gbps=nbytes / ms / 1e6)
            for backend, label in ((SDPBackend.FLASH_ATTENTION, "torch sdpa flash"), (SDPBackend.CUDNN_ATTENTION, "torch sdpa cudnn"),
                                   (SDPBackend.EFFICIENT_ATTENTION, "torch sdpa efficient")):
                try:
                    with sdpa_kernel(backend):
                        ms = torch_time(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
                    emit(workload=name, impl=label, ms=ms, gbps=nbytes / ms / 1e6)
                except Exception as e:  # noqa: BLE001
                    emit(workload=name, impl=label, error=str(e)[:200])
            del q, k, v, kk
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            emit(workload=name, impl="torch", error=str(e)[:200])
        try:
            import jax
            import jax.numpy as jnp
            from jax.experimental.pallas.ops.gpu import decode_attention as pallas_decode
            keys = jax.random.split(jax.random.key(0), 3)
            jq = jax.random.normal(keys[0], (B, H, D), jnp.bfloat16)
            jk = jax.random.normal(keys[1], (B, S, KVH, D), jnp.bfloat16)
            jv = jax.random.normal(keys[2], (B, S, KVH, D), jnp.bfloat16)
            for splits in (8, 16):
                f = jax.jit(lambda q, k, v, s=splits: pallas_decode.gqa(q, k, v, k_splits=s))
                ms = jtime(f, jq, jk, jv, reps=20)
                emit(workload=name, impl=f"jax pallas decode_attention.gqa k_splits {splits}", ms=ms, gbps=nbytes / ms / 1e6)
            del jq, jk, jv
        except Exception as e:  # noqa: BLE001
            emit(workload=name, impl="jax pallas decode_attention.gqa", error=str(e)[:200])
        if S > 8192:
            continue
        pname = f"bf16 paged attention B{B} S{S} H{H} KVH{KVH} D{D} page32"
        try:
            import jax
            import jax.numpy as jnp
            from jax.experimental.pallas.ops.gpu import paged_attention as pallas_paged
            page, per_seq = 32, S // 32
            total = B * per_seq
            keys = jax.random.split(jax.random.key(1), 3)
            jq = jax.random.normal(keys[0], (B, H, D), jnp.bfloat16)
            kp = jax.random.normal(keys[1], (KVH, total, page, D), jnp.bfloat16)
            vp = jax.random.normal(keys[2], (KVH, total, page, D), jnp.bfloat16)
            tables = ((jnp.arange(total, dtype=jnp.int32) * 7919) % total).reshape(B, per_seq)
            lengths = jnp.full((B,), S, jnp.int32)
            for splits in (8, 16):
                f = jax.jit(lambda q, kp, vp, t, l, s=splits: pallas_paged.paged_attention(q, kp, vp, t, l, k_splits=s,
                                                                                         pages_per_compute_block=4))
                ms = jtime(f, jq, kp, vp, tables, lengths, reps=20)
                emit(workload=pname, impl=f"jax pallas paged_attention k_splits {splits}", ms=ms, gbps=nbytes / ms / 1e6)
            del jq, kp, vp
        except Exception as e:  # noqa: BLE001
            emit(workload=pname, impl="jax pallas paged_attention", error=str(e)[:200])


def fp8_anchors():
    """torch._scaled_mm (cuBLAS fp8, e4m3 x e4m3 -> bf16) at 4096^3 and 8192^3, tensorwise and
    rowwise scales, beside torch's bf16 matmul of the same size; and bf16 x bf16 at decode-like
    shapes (M 16/64, 8192 x 8192), the weight-only quantised rows' baseline."""
    import torch
    for n in (4096, 8192):
        name = f"fp8 e4m3 scaled matmul {n}^3 -> bf16"
        try:
            a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
            b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)  # [N, K]; _scaled_mm takes b.t()
            flops = 2.0 * n * n * n
            for label, sa, sb in (("tensorwise", torch.tensor(1.0, device="cuda"), torch.tensor(1.0, device="cuda")),
                                  ("rowwise", torch.rand(n, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5)):
                try:
                    ms = torch_time(lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
                    emit(workload=name, impl=f"torch._scaled_mm {label} (cuBLAS)", ms=ms, tflops=flops / ms / 1e9)
                except Exception as e:  # noqa: BLE001
                    emit(workload=name, impl=f"torch._scaled_mm {label}", error=str(e)[:200])
            x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            ms = torch_time(lambda: x @ y)
            emit(workload=name, impl="torch bf16 matmul (cuBLAS), same size", ms=ms, tflops=flops / ms / 1e9)
            del a, b, x, y
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            emit(workload=name, impl="torch", error=str(e)[:200])


if __name__ == "__main__":
    # `attention` alone: torch's (cuDNN, FA2) and JAX Pallas' attention rows only; `backward`: the
    # backward rows (attention, norms, softmax), `decode` the decode and paged attention rows, `fp8`
    # torch._scaled_mm; not in the default set
    which = sys.argv[1:] or ["torch", "triton", "jax"]
    for name, fn in (("torch", torch_anchors), ("triton", triton_anchors), ("jax", jax_pallas_anchors),
                     ("attention", lambda: (torch_attention_anchors(), jax_attention_anchors())),
                     ("backward", lambda: (torch_backward_anchors(), jax_backward_anchors())),
                     ("decode", decode_anchors), ("fp8", fp8_anchors)):
        if name in which:
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                emit(impl=name, error=repr(e)[:300])
