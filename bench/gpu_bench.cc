// GPU benchmarks of pallas_calls (CUDA events, median), for bench/run_h200.sh.
// Prints one JSON line per result, as bench/anchors.py does.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <pallas/kernels.h>
#include <pallas/pallas.h>


namespace pl = pallas;

// Median of CUDA-event timings (pl::do_bench; no L2 flush, as the anchors time).
template <class F>
double gpu_ms(F&& f, int reps) {
  return pl::do_bench(f, {.warmup = 3, .reps = reps, .flush_l2 = false}).median_ms;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  bool first_only = argc > 1 && std::string(argv[1]) == "first-call";
  if (!pl::cuda_available()) {
    std::printf("{\"error\": \"no GPU\"}\n");
    return 1;
  }
  pl::Device gpu = pl::Device::cuda();
  {  // first call of a small kernel: trace + plan + NVRTC (or the disk cache) + load + run
    double t0 = now_ms();
    auto mm = pl::kernels::matmul(256, 256, 256, pl::bf16, pl::bf16);
    pl::Array a = pl::random::normal({256, 256}, pl::bf16, 1).to(gpu), b = pl::random::normal({256, 256}, pl::bf16, 2).to(gpu);
    pl::Array c = mm(a, b);
    c.to_host();
    std::printf("{\"workload\": \"first call, matmul 256^3 (trace+compile+run)\", \"impl\": \"ours (%s)\", \"ms\": %.2f}\n",
                mm.backend_name().c_str(), now_ms() - t0);
    // steady-state host cost of a cached call with device arrays
    for (int i = 0; i < 100; ++i) mm(a, b);
    pl::synchronize();
    double t1 = now_ms();
    for (int i = 0; i < 2000; ++i) mm(a, b);
    double host = (now_ms() - t1) / 2000 * 1e3;
    pl::synchronize();
    std::printf("{\"workload\": \"steady-state tiny call\", \"impl\": \"ours\", \"us\": %.2f}\n", host);
  }
  if (first_only) return 0;
  for (int64_t s : {4096, 8192}) {
    auto mm = pl::kernels::matmul(s, s, s, pl::bf16, pl::bf16, {.block_m = 128, .block_n = 256, .block_k = 64});
    pl::Array a = pl::random::normal({s, s}, pl::bf16, 3).to(gpu), b = pl::random::normal({s, s}, pl::bf16, 4).to(gpu);
    pl::Array c;
    double ms = gpu_ms([&] { c = mm(a, b); }, 20);
    std::printf("{\"workload\": \"bf16 matmul %lld^3\", \"impl\": \"ours (%s)\", \"ms\": %.4f, \"tflops\": %.1f}\n",
                static_cast<long long>(s), mm.backend_name().c_str(), ms, 2.0 * s * s * s / ms / 1e9);
  }
  for (bool causal : {false, true}) {
    const int64_t B = 4, H = 16, S = 4096, D = 128;
    auto at = pl::kernels::flash_attention(B, H, S, D, pl::bf16, {.block_q = 128, .block_k = 64, .causal = causal});
    pl::Array q = pl::random::normal({B, H, S, D}, pl::bf16, 5).to(gpu), k = pl::random::normal({B, H, S, D}, pl::bf16, 6).to(gpu),
              v = pl::random::normal({B, H, S, D}, pl::bf16, 7).to(gpu);
    pl::Array o;
    double ms = gpu_ms([&] { o = at(q, k, v); }, 20);
    double flops = 4.0 * B * H * S * S * D / (causal ? 2 : 1);
    std::printf("{\"workload\": \"bf16 attention B4 H16 S4096 D128%s\", \"impl\": \"ours (%s)\", \"ms\": %.4f, \"tflops\": %.1f}\n",
                causal ? " causal" : "", at.backend_name().c_str(), ms, flops / ms / 1e9);
  }
  return 0;
}
