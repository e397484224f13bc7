// CUDA backend benchmarks on the GPU, kernels written as a user writes them: memory-bound
// kernels (add, gelu, softmax, norms), matmuls with epilogues, flash attention, the library
// matmul under pl::autotune; first-call cost, the host cost of a cached call and of a CUDA-graph
// replay. Times with CUDA events (pl::do_bench), medians.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <cuda.h>
#include <nvrtc.h>
#include <pallas/kernels.h>
#include <pallas/pallas.h>
#include <pallas/stream.h>
#include <pallas/transforms.h>

#include "bench/user_kernels.h"


namespace pl = pallas;

// Median of CUDA-event timings (pl::do_bench), without flushing the L2 between runs: the
// anchors (bench/anchors.py) time the same way.
static double median_ms(const std::function<void()>& f, int reps) {
  return pl::do_bench(f, {.warmup = 3, .reps = reps, .flush_l2 = false}).median_ms;
}

static double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CUDA_BENCH_ONLY=section[,section...] runs only those sections: launch (first call, host cost,
// the raw driver launch, graph replay), memory, matmul, autotune, attention, backward (the
// library's backward kernels through pl::vjp), bwdsweep (their blocks, warps and stages; normsweep:
// the norms' alone), decode (decode and paged attention; decodesweep: its knobs), grouped (the grouped matmul; groupedsweep: its blocks), quant (bf16 x i8
// and x f8e4m3 weights), fp8 (scaled matmul of 8-bit floats).
// Unset: all.
static bool section(const char* name) {
  const char* only = std::getenv("CUDA_BENCH_ONLY");
  if (!only || !*only) return true;
  std::string list = std::string(",") + only + ",";
  return list.find(std::string(",") + name + ",") != std::string::npos;
}

// Runs one benchmark row; an error (a kernel the backend refuses, a launch that fails) is printed
// as the row's result and the next row runs.
static void row(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::printf("error,0,-,0,%.200s\n", e.what());
  }
}

// cuLaunchKernel of a hand-written kernel like the tiny call's, compiled here with NVRTC.
static void raw_driver_launch(void* x, void* o, int n) {
  const char* src =
      "extern \"C\" __global__ void raw_tiny(const float* x, float* o, int* err, unsigned long long* log, int poison) {\n"
      "  int i = threadIdx.x; if (i < 128) o[i] = x[i] + 1.f;\n}\n";
  auto fail = [](const char* what) { std::printf("raw_driver_launch,0,-,0,error: %s\n", what); };
  CUdevice dev;
  CUcontext ctx;
  int major = 0, minor = 0;
  if (cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
      cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ||
      cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    return fail("no context");
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, src, "raw_tiny.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) return fail("nvrtc");
  std::string arch = "--gpu-architecture=sm_" + std::to_string(major) + std::to_string(minor);
  const char* opts[] = {arch.c_str()};
  size_t size = 0;
  std::string cubin;
  if (nvrtcCompileProgram(prog, 1, opts) == NVRTC_SUCCESS && nvrtcGetCUBINSize(prog, &size) == NVRTC_SUCCESS) {
    cubin.resize(size);
    nvrtcGetCUBIN(prog, cubin.data());
  }
  nvrtcDestroyProgram(&prog);
  CUmodule m;
  CUfunction f;
  if (cubin.empty() || cuModuleLoadData(&m, cubin.data()) || cuModuleGetFunction(&f, m, "raw_tiny")) return fail("compiling or loading");
  CUdeviceptr px = reinterpret_cast<CUdeviceptr>(x), po = reinterpret_cast<CUdeviceptr>(o), perr = 0, plog = 0;
  int poison = 0;
  void* params[] = {&px, &po, &perr, &plog, &poison};
  for (int i = 0; i < 100; ++i) cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr);
  cuCtxSynchronize();
  double t0 = now_ms();
  bool ok = true;
  for (int i = 0; i < n; ++i) ok = cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr) == CUDA_SUCCESS && ok;
  ok = cuCtxSynchronize() == CUDA_SUCCESS && ok;
  double ms = now_ms() - t0;
  if (!ok) return fail("a launch failed");
  std::printf("raw_driver_launch,%.4f,us_per_call,%.2f\n", ms / n, ms / n * 1000);
  cuModuleUnload(m);
}

int main() {
  if (!pl::cuda_available()) {
    std::printf("no GPU: %s\n", "CUDA backend unavailable");
    return 1;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows survive a crash of a later one
  std::printf("workload,ms,metric,value\n");
  if (section("launch")) {  // first call: trace + lower + compile (cold unless the disk cache has it) + launch
    double t0 = now_ms();
    auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::exp(x[pl::all]) * 2.f; }, pl::ShapeDtype({1024}, pl::f32),
                             {.grid = {8}, .in_specs = {pl::BlockSpec({128}, [](pl::Value i) { return pl::idx(i); })},
                              .out_specs = {pl::BlockSpec({128}, [](pl::Value i) { return pl::idx(i); })}, .name = "first"});
    auto x = pl::random::normal({1024}, pl::f32, 1).to(pl::Device::cuda(0));
    auto o = k(x);
    auto v = o.to_vector<float>();
    std::printf("first_call_small_kernel,%.2f,ms,%s\n", now_ms() - t0, std::getenv("PALLAS_NO_DISK_CACHE") ? "cold" : "disk-cache");
  }
  if (section("launch")) {  // steady-state cost of one call of a tiny kernel (inputs on the device)
    auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + 1.f; }, pl::ShapeDtype({128}, pl::f32), {.name = "tiny"});
    auto x = pl::random::normal({128}, pl::f32, 1).to(pl::Device::cuda(0));
    for (int i = 0; i < 100; ++i) k(x);
    pl::synchronize();
    int n = 20000;
    double t0 = now_ms();
    for (int i = 0; i < n; ++i) k(x);
    pl::synchronize();
    std::printf("tiny_call_host_overhead,%.4f,us_per_call,%.2f\n", (now_ms() - t0) / n, (now_ms() - t0) / n * 1000);
    // The same call writing the caller's output (no allocation by the library).
    pl::Array out(pl::Shape{128}, pl::f32, pl::Device::cuda(0));
    std::vector<pl::Array> outs{out}, args{x};
    for (int i = 0; i < 100; ++i) k.into(outs, args);
    pl::synchronize();
    t0 = now_ms();
    for (int i = 0; i < n; ++i) k.into(outs, args);
    pl::synchronize();
    std::printf("tiny_into_host_overhead,%.4f,us_per_call,%.2f\n", (now_ms() - t0) / n, (now_ms() - t0) / n * 1000);
    // The driver's floor: cuLaunchKernel alone, timed the same way, on a kernel of the same
    // shape (one block of 128 threads, the parameters a Pallas kernel takes: input, output,
    // check flag, print log, poison flag).
    raw_driver_launch(x.raw_data(), out.raw_data(), n);
  }
  if (section("launch")) {  // the same tiny call captured into a CUDA graph (100 calls a graph) and replayed: the cost per call
    auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + 1.f; }, pl::ShapeDtype({128}, pl::f32), {.name = "tiny"});
    auto x = pl::random::normal({128}, pl::f32, 1).to(pl::Device::cuda(0));
    pl::Array out(pl::Shape{128}, pl::f32, pl::Device::cuda(0));
    k.into({out}, {x});  // compiled, loaded and the context current before the capture
    pl::synchronize();
    CUstream st = nullptr;
    CUgraph g = nullptr;
    CUgraphExec ge = nullptr;
    const int calls = 100, replays = 200;
    auto ok = [](CUresult r) { return r == CUDA_SUCCESS; };
    bool good = ok(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    if (good) {
      pl::StreamScope scope(st);
      good = ok(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
      try {
        for (int i = 0; good && i < calls; ++i) k.into({out}, {x});
      } catch (const pl::Error& e) {
        std::printf("graph_replay_tiny_call,0,-,0,error in the capture: %.160s\n", e.what());
        good = false;
      }
      good = ok(cuStreamEndCapture(st, &g)) && good && ok(cuGraphInstantiate(&ge, g, 0));
      for (int i = 0; good && i < 5; ++i) good = ok(cuGraphLaunch(ge, st));
      good = good && ok(cuStreamSynchronize(st));
      double t0 = now_ms();
      for (int i = 0; good && i < replays; ++i) good = ok(cuGraphLaunch(ge, st));
      double host_ms = now_ms() - t0;
      good = good && ok(cuStreamSynchronize(st));
      double all_ms = now_ms() - t0;
      if (good)
        std::printf("graph_replay_tiny_call,%.4f,us_per_call,%.3f,host launch %.3f us per call,%d calls a graph\n", all_ms / replays / calls,
                    all_ms / replays / calls * 1000, host_ms / replays / calls * 1000, calls);
    }
    if (!good) std::printf("graph_replay_tiny_call,0,-,0,error: a CUDA graph call failed\n");
    if (ge) cuGraphExecDestroy(ge);
    if (g) cuGraphDestroy(g);
    if (st) cuStreamDestroy(st);
  }
  for (int bs : {1024, 4096, 8192}) {  // f32 add over 2^28
    if (!section("memory")) break;
    row([&] {
      int64_t n = int64_t{1} << 28;
      int warps = bs >= 4096 ? 8 : 4;
      auto k = bench::add(n, bs, warps);
      auto x = pl::random::normal({n}, pl::f32, 1).to(pl::Device::cuda(0));
      auto y = pl::random::normal({n}, pl::f32, 2).to(pl::Device::cuda(0));
      pl::Array out;
      double ms = median_ms([&] { out = k(x, y); }, 30);
      // correctness spot check
      auto xv = x.to_vector<float>(), yv = y.to_vector<float>(), ov = out.to_vector<float>();
      double err = 0;
      for (int64_t i = 0; i < n; i += 4099) err = std::max(err, (double)std::fabs(ov[i] - (xv[i] + yv[i])));
      std::printf("f32_add_2^28_block%d_warps%d,%.4f,GB/s,%.1f,maxerr=%g\n", bs, warps, ms, 3.0 * n * 4 / ms / 1e6, err);
    });
  }
  if (section("memory")) row([&] {  // f32 softmax 16384 x 4096, one row per program
    int64_t R = 16384, C = 4096;
    for (int warps : {4, 8, 16}) {
      auto k = bench::softmax(R, C, warps);
      auto x = pl::random::normal({R, C}, pl::f32, 3).to(pl::Device::cuda(0));
      pl::Array out;
      double ms = median_ms([&] { out = k(x); }, 20);
      auto xv = x.to_vector<float>(), ov = out.to_vector<float>();
      double err = 0;
      for (int64_t r = 0; r < R; r += 1001) {
        double m = -1e30, s = 0;
        for (int64_t c = 0; c < C; ++c) m = std::max(m, (double)xv[r * C + c]);
        for (int64_t c = 0; c < C; ++c) s += std::exp(xv[r * C + c] - m);
        for (int64_t c = 0; c < C; ++c) err = std::max(err, std::fabs(ov[r * C + c] - std::exp(xv[r * C + c] - m) / s));
      }
      std::printf("f32_softmax_16384x4096_warps%d,%.4f,GB/s,%.1f,maxerr=%g\n", warps, ms, 2.0 * R * C * 4 / ms / 1e6, err);
    }
  });
  // Memory-bound kernels as a user writes them from the README and docs/ops.md.
  for (int64_t rows : {int64_t{8}, int64_t{1}}) {  // bf16 rms norm 16384 x 4096, 8 rows or 1 row per program, f32 inside
    if (!section("memory")) break;
    row([&] {
      int64_t R = 16384, C = 4096;
      auto k = bench::rms_norm(R, C, rows);
      auto x = pl::random::normal({R, C}, pl::bf16, 7).to(pl::Device::cuda(0));
      auto w = pl::random::normal({1, C}, pl::bf16, 8).to(pl::Device::cuda(0));
      pl::Array out;
      double ms = median_ms([&] { out = k(x, w); }, 20);
      auto xv = x.to_vector<float>(), wv = w.to_vector<float>(), ov = out.to_vector<float>();
      double err = 0;
      for (int64_t r = 0; r < R; r += 997) {
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += (double)xv[r * C + c] * xv[r * C + c];
        double inv = 1 / std::sqrt(ss / C + 1e-6);
        for (int64_t c = 0; c < C; ++c) err = std::max(err, std::fabs(ov[r * C + c] - xv[r * C + c] * inv * wv[c]) / (1 + std::fabs(ov[r * C + c])));
      }
      std::printf("bf16_rms_norm_16384x4096_%lldrows,%.4f,GB/s,%.1f,relerr=%g\n", (long long)rows, ms, 2.0 * R * C * 2 / ms / 1e6, err);
    });
  }
  if (section("memory")) row([&] {  // f32 row argmax 16384 x 4096, 8 rows per program (a row reduction with an index)
    int64_t R = 16384, C = 4096, rows = 8;
    auto k = bench::row_argmax(R, C, rows);
    auto x = pl::random::normal({R, C}, pl::f32, 9).to(pl::Device::cuda(0));
    pl::Array out;
    double ms = median_ms([&] { out = k(x); }, 20);
    auto xv = x.to_vector<float>();
    auto ov = out.to_vector<int32_t>();
    int64_t wrong = 0;
    for (int64_t r = 0; r < R; r += 97)
      wrong += ov[r] != std::max_element(xv.begin() + r * C, xv.begin() + (r + 1) * C) - (xv.begin() + r * C);
    std::printf("f32_row_argmax_16384x4096,%.4f,GB/s,%.1f,wrong_rows=%lld\n", ms, 1.0 * R * C * 4 / ms / 1e6, (long long)wrong);
  });
  if (section("memory")) row([&] {  // f32 column sums of 16384 x 4096: a reduction over a sequential grid axis into one block
    // 32 columns a program: 128 programs walk the rows (a wider block leaves most SMs idle)
    int64_t R = 16384, C = 4096, rows = 256, cols = 32;
    auto k = bench::column_sum(R, C, rows, cols);
    auto x = pl::random::normal({R, C}, pl::f32, 10).to(pl::Device::cuda(0));
    pl::Array out;
    double ms = median_ms([&] { out = k(x); }, 20);
    auto xv = x.to_vector<float>();
    auto ov = out.to_vector<float>();
    double err = 0;
    for (int64_t c = 0; c < C; c += 37) {
      double want = 0;
      for (int64_t r = 0; r < R; ++r) want += xv[r * C + c];
      err = std::max(err, std::fabs(ov[c] - want) / (1 + std::fabs(want)));
    }
    std::printf("f32_column_sum_16384x4096_grid_axis,%.4f,GB/s,%.1f,relerr=%g\n", ms, 1.0 * R * C * 4 / ms / 1e6, err);
  });
  if (section("memory")) row([&] {  // f32 layer norm 16384 x 4096, one row per program
    int64_t R = 16384, C = 4096;
    auto k = bench::layer_norm(R, C);
    auto x = pl::random::normal({R, C}, pl::f32, 9).to(pl::Device::cuda(0));
    pl::Array out;
    double ms = median_ms([&] { out = k(x); }, 20);
    std::printf("f32_layer_norm_16384x4096,%.4f,GB/s,%.1f\n", ms, 2.0 * R * C * 4 / ms / 1e6);
  });
  if (section("memory")) row([&] {  // f32 gelu(x) * y over 2^26 elements (tanh form)
    int64_t n = int64_t{1} << 26, bs = 4096;
    auto k = bench::gelu_mul(n, bs);
    auto x = pl::random::normal({n}, pl::f32, 10).to(pl::Device::cuda(0));
    auto y = pl::random::normal({n}, pl::f32, 11).to(pl::Device::cuda(0));
    pl::Array out;
    double ms = median_ms([&] { out = k(x, y); }, 20);
    std::printf("f32_gelu_mul_2^26,%.4f,GB/s,%.1f\n", ms, 3.0 * n * 4 / ms / 1e6);
  });
  // Matmuls (bench/user_kernels.h): bf16 with a bias + relu epilogue or a residual add, bf16
  // x W^T (trans_b, as a linear layer), A^T B (trans_a, A stored K x M), f16, f32 (tf32 dots),
  // i8, 8192^3, and an edge shape (M, N not multiples of the block: masked edge blocks).
  using bench::Epilogue;
  using bench::MatmulCase;
  for (const MatmulCase& mc : {MatmulCase{"bf16_matmul_bias_relu", pl::bf16, false, false, Epilogue::BiasRelu, 2048, 2048, 2048},
                               MatmulCase{"bf16_matmul_bias_relu", pl::bf16, false, false, Epilogue::BiasRelu, 4096, 4096, 4096},
                               MatmulCase{"bf16_matmul_bias_relu", pl::bf16, false, false, Epilogue::BiasRelu, 4096, 4096, 4096, 256},
                               MatmulCase{"bf16_matmul_residual", pl::bf16, false, false, Epilogue::Residual, 4096, 4096, 4096},
                               MatmulCase{"bf16_matmul_residual", pl::bf16, false, false, Epilogue::Residual, 4096, 4096, 4096, 256},
                               MatmulCase{"bf16_x_wT", pl::bf16, false, true, Epilogue::None, 4096, 4096, 4096},
                               MatmulCase{"bf16_aT_b", pl::bf16, true, false, Epilogue::None, 4096, 4096, 4096},
                               MatmulCase{"bf16_aT_b", pl::bf16, true, false, Epilogue::None, 4096, 4096, 4096, 256},
                               MatmulCase{"bf16_x_wT", pl::bf16, false, true, Epilogue::None, 4096, 4096, 4096, 256},
                               MatmulCase{"bf16_matmul", pl::bf16, false, false, Epilogue::None, 8192, 8192, 8192},
                               MatmulCase{"bf16_matmul", pl::bf16, false, false, Epilogue::None, 8192, 8192, 8192, 256},
                               // the grouped program order (group_m = 8, in the index maps): L2 reuse
                               MatmulCase{"bf16_matmul", pl::bf16, false, false, Epilogue::None, 8192, 8192, 8192, 256, 128, 0, 8, 0, 8},
                               MatmulCase{"bf16_matmul_bias_relu", pl::bf16, false, false, Epilogue::BiasRelu, 4096, 4096, 4096, 256, 128, 0, 8, 0, 8},
                               MatmulCase{"bf16_matmul_edge", pl::bf16, false, false, Epilogue::None, 4000, 4000, 4096},
                               MatmulCase{"bf16_matmul_edge", pl::bf16, false, false, Epilogue::None, 4000, 4000, 4096, 256},
                               MatmulCase{"bf16_matmul_edge", pl::bf16, false, false, Epilogue::None, 4000, 4000, 4096, 256, 128, 0, 8, 0, 8},
                               MatmulCase{"f16_matmul", pl::f16, false, false, Epilogue::None, 4096, 4096, 4096},
                               MatmulCase{"f16_matmul", pl::f16, false, false, Epilogue::None, 4096, 4096, 4096, 256},
                               MatmulCase{"f32_tf32_matmul", pl::f32, false, false, Epilogue::None, 4096, 4096, 4096},
                               MatmulCase{"i8_matmul", pl::i8, false, false, Epilogue::None, 4096, 4096, 4096},
                               MatmulCase{"i8_matmul", pl::i8, false, false, Epilogue::None, 4096, 4096, 4096, 256},
                               // 128 K a block: a whole 128-byte swizzle row of i8, as Triton's int8 configs take
                               MatmulCase{"i8_matmul", pl::i8, false, false, Epilogue::None, 4096, 4096, 4096, 128, 128, 128},
                               MatmulCase{"i8_matmul", pl::i8, false, false, Epilogue::None, 4096, 4096, 4096, 256, 128, 128}}) {
    if (!section("matmul")) break;
    const int64_t M = mc.M, N = mc.N, K = mc.K;
    const bool ta = mc.ta, tb = mc.tb;
    const Epilogue epi = mc.epi;
    const pl::DType t = mc.t;
    pl::Call k = bench::matmul(mc);
    auto a = (t == pl::i8 ? pl::random::randint(ta ? pl::Shape{K, M} : pl::Shape{M, K}, t, 4, -8, 8)
                          : pl::random::normal(ta ? pl::Shape{K, M} : pl::Shape{M, K}, t, 4)).to(pl::Device::cuda(0));
    auto b = (t == pl::i8 ? pl::random::randint(tb ? pl::Shape{N, K} : pl::Shape{K, N}, t, 5, -8, 8)
                          : pl::random::normal(tb ? pl::Shape{N, K} : pl::Shape{K, N}, t, 5)).to(pl::Device::cuda(0));
    auto extra = pl::random::normal(epi == Epilogue::Residual ? pl::Shape{M, N} : pl::Shape{1, N}, t == pl::i8 ? pl::bf16 : t, 6).to(pl::Device::cuda(0));
    std::vector<pl::Array> args = {a, b};
    if (epi != Epilogue::None) args.push_back(extra);
    pl::Array out;
    double t0 = now_ms();
    try {
      out = k(args)[0];
      pl::synchronize();
    } catch (const pl::Error& e) {
      std::printf("%s,0,-,0,error: %.160s\n", mc.label().c_str(), e.what());
      continue;
    }
    double first_ms = now_ms() - t0;
    double ms = median_ms([&] { out = k(args)[0]; }, 5);
    auto av = a.to_vector<float>(), bv = b.to_vector<float>(), cv = extra.to_vector<float>(), ov = out.to_vector<float>();
    double err = 0;
    for (int64_t i = 0; i < M; i += 509)
      for (int64_t j = 0; j < N; j += 263) {
        double s = 0;
        for (int64_t q = 0; q < K; ++q) s += (double)(ta ? av[q * M + i] : av[i * K + q]) * (tb ? bv[j * K + q] : bv[q * N + j]);
        double want = epi == Epilogue::BiasRelu ? std::max(0.0, s + cv[j]) : epi == Epilogue::Residual ? s + cv[i * N + j] : s;
        err = std::max(err, std::fabs(ov[i * N + j] - want) / (1 + std::fabs(want)));
      }
    std::printf("%s,%.4f,%s,%.2f,relerr=%g,first_call_ms=%.0f\n", mc.label().c_str(), ms,
                t == pl::i8 ? "TOP/s" : "TFLOP/s", 2.0 * M * N * K / ms / 1e9, err, first_ms);
  }
  for (int64_t bn : {128, 256}) if (section("matmul")) row([&] {  // bf16 batched matmul 16 x 2048^3: a batch axis in the grid, squeezed from the blocks
    const int64_t B = 16, M = 2048, N = 2048, K = 2048;
    auto k = bench::batched_matmul(B, M, N, K, bn);
    auto a = pl::random::normal({B, M, K}, pl::bf16, 7).to(pl::Device::cuda(0));
    auto b = pl::random::normal({B, K, N}, pl::bf16, 8).to(pl::Device::cuda(0));
    pl::Array out;
    double t0 = now_ms();
    out = k(a, b);
    pl::synchronize();
    double first_ms = now_ms() - t0;
    double ms = median_ms([&] { out = k(a, b); }, 5);
    auto av = a.to_vector<float>(), bv = b.to_vector<float>(), ov = out.to_vector<float>();
    double err = 0;
    for (int64_t z = 0; z < B; z += 5)
      for (int64_t i = 0; i < M; i += 509)
        for (int64_t j = 0; j < N; j += 263) {
          double want = 0;
          for (int64_t q = 0; q < K; ++q) want += (double)av[(z * M + i) * K + q] * bv[(z * K + q) * N + j];
          err = std::max(err, std::fabs(ov[(z * M + i) * N + j] - want) / (1 + std::fabs(want)));
        }
    std::printf("bf16_batched_matmul_16x2048^3_128x%d,%.4f,TFLOP/s,%.2f,relerr=%g,first_call_ms=%.0f\n", (int)bn, ms, 2.0 * B * M * N * K / ms / 1e9, err, first_ms);
  });
  if (section("tf32")) {  // the f32 (tf32) user matmul over block shapes, stages and warps (CUDA_BENCH_ONLY=tf32)
    int64_t n = 4096;
    auto a = pl::random::normal({n, n}, pl::f32, 4).to(pl::Device::cuda(0));
    auto b = pl::random::normal({n, n}, pl::f32, 5).to(pl::Device::cuda(0));
    struct C { int64_t bm, bn, bk; int warps, stages; };
    for (C c : {C{128, 128, 32, 8, 3}, C{128, 128, 32, 8, 2}, C{128, 128, 32, 4, 3}, C{128, 128, 16, 8, 4}, C{128, 256, 32, 8, 2},
                C{128, 128, 64, 8, 2}, C{64, 128, 32, 4, 3}}) {
      auto k = bench::matmul({.name = "tf32_sweep", .t = pl::f32, .ta = false, .tb = false, .epi = Epilogue::None, .M = n, .N = n, .K = n,
                              .bn = c.bn, .bm = c.bm, .bk = c.bk, .warps = c.warps, .stages = c.stages});
      pl::Array out;
      try {
        out = k(a, b);
      } catch (const pl::Error& e) {
        std::printf("tf32_matmul_sweep,0,-,0,bm=%lld bn=%lld bk=%lld w%d s%d error: %.120s\n", (long long)c.bm, (long long)c.bn, (long long)c.bk, c.warps,
                    c.stages, e.what());
        continue;
      }
      double ms = median_ms([&] { out = k(a, b); }, 5);
      std::printf("tf32_matmul_sweep,%.4f,TFLOP/s,%.2f,bm=%lld bn=%lld bk=%lld w%d s%d\n", ms, 2.0 * n * n * n / ms / 1e9, (long long)c.bm, (long long)c.bn,
                  (long long)c.bk, c.warps, c.stages);
    }
  }
  if (section("autotune")) {  // the library's matmul tuned by pl::autotune, against its default configuration
    int64_t n = 4096;
    auto a = pl::random::normal({n, n}, pl::bf16, 12).to(pl::Device::cuda(0));
    auto b = pl::random::normal({n, n}, pl::bf16, 13).to(pl::Device::cuda(0));
    auto cfg = [](int64_t bm, int64_t bn, int64_t bk, int64_t w, int64_t s) {
      return pl::Config{{{"block_m", bm}, {"block_n", bn}, {"block_k", bk}, {"num_warps", w}, {"num_stages", s}}};
    };
    pl::Autotuned mm = pl::kernels::tuned_matmul(pl::bf16, {cfg(128, 128, 64, 8, 3), cfg(128, 128, 64, 8, 2), cfg(128, 128, 64, 4, 3),
                                                          cfg(128, 256, 64, 8, 3), cfg(128, 256, 64, 8, 2), cfg(64, 128, 64, 4, 4),
                                                          cfg(128, 128, 32, 8, 4), cfg(256, 128, 64, 8, 2)});
    double t0 = now_ms();
    pl::TuningReport r = mm.tune({a, b});
    double tune_ms = now_ms() - t0;
    for (auto& [c, ms] : r.timings_ms) std::printf("autotune_candidate,%.4f,TFLOP/s,%.2f,%s\n", ms, 2.0 * n * n * n / ms / 1e9, c.str().c_str());
    for (auto& [c, why] : r.rejected) std::printf("autotune_rejected,0,-,0,%s: %.120s\n", c.str().c_str(), why.c_str());
    pl::Array out;
    double ms = median_ms([&] { out = mm(a, b); }, 10);
    pl::Call def = pl::kernels::matmul(n, n, n, pl::bf16, pl::bf16);
    double ms_def = median_ms([&] { out = def(a, b); }, 10);
    std::printf("autotuned_bf16_matmul_4096^3,%.4f,TFLOP/s,%.2f,chosen=%s%s,default(128x128x64 w8)=%.2f TFLOP/s,tuning_ms=%.0f\n", ms,
                2.0 * n * n * n / ms / 1e9, r.best.str().c_str(), r.from_cache ? " (cached)" : "", 2.0 * n * n * n / ms_def / 1e9, tune_ms);
  }
  // Flash attention as a user writes it (kernels/attention.cc is written that way: online
  // softmax over KV blocks, two pl::dot per iteration), through the general compiler as every
  // kernel is.
  using bench::AttentionCase;
  for (AttentionCase c : {AttentionCase{8, 16, 2048, 64, 64, 64, 4}, AttentionCase{8, 16, 2048, 64, 128, 64, 8},
                          AttentionCase{8, 16, 2048, 64, 128, 128, 8}, AttentionCase{4, 16, 4096, 128, 128, 64, 8},
                          AttentionCase{4, 16, 4096, 128, 128, 64, 8, true}, AttentionCase{4, 16, 4096, 128, 128, 128, 8},
                          AttentionCase{4, 16, 4096, 128, 128, 128, 8, true}, AttentionCase{4, 16, 4096, 256, 64, 64, 4}}) {
    if (!section("attention")) break;
    pl::Call k = bench::attention(c);
    pl::Shape sh{c.B, c.H, c.S, c.D};
    auto q = pl::random::normal(sh, pl::bf16, 21).to(pl::Device::cuda(0));
    auto kk = pl::random::normal(sh, pl::bf16, 22).to(pl::Device::cuda(0));
    auto v = pl::random::normal(sh, pl::bf16, 23).to(pl::Device::cuda(0));
    pl::Array out;
    double t0 = now_ms();
    try {
      out = k(q, kk, v);
      pl::synchronize();
    } catch (const pl::Error& e) {
      std::printf("%s,0,-,0,error: %.160s\n", c.label().c_str(), e.what());
      continue;
    }
    double first_ms = now_ms() - t0;
    double ms = median_ms([&] { out = k(q, kk, v); }, 10);
    // a few query rows of head (0, 0) against a double-precision reference
    auto qv = q.to_vector<float>(), kv = kk.to_vector<float>(), vv = v.to_vector<float>(), ov = out.to_vector<float>();
    double err = 0, scale = 1 / std::sqrt((double)c.D);
    for (int64_t i = 0; i < c.S; i += 331) {
      std::vector<double> p(c.S);
      double m = -1e300, l = 0;
      for (int64_t j = 0; j < c.S; ++j) {
        if (c.causal && j > i) {  // masked: no weight
          p[j] = -1e300;
          continue;
        }
        double s = 0;
        for (int64_t d = 0; d < c.D; ++d) s += (double)qv[i * c.D + d] * kv[j * c.D + d];
        p[j] = s * scale, m = std::max(m, p[j]);
      }
      for (int64_t j = 0; j < c.S; ++j) l += (p[j] = p[j] <= -1e299 ? 0.0 : std::exp(p[j] - m));
      for (int64_t d = 0; d < c.D; ++d) {
        double o = 0;
        for (int64_t j = 0; j < c.S; ++j) o += p[j] * vv[j * c.D + d];
        err = std::max(err, std::fabs(ov[i * c.D + d] - o / l));
      }
    }
    double flops = 4.0 * c.B * c.H * c.S * c.S * c.D / (c.causal ? 2 : 1);  // as the anchors count causal attention
    std::printf("%s,%.4f,TFLOP/s,%.2f,maxerr=%g,first_call_ms=%.0f\n", c.label().c_str(), ms, flops / ms / 1e9, err, first_ms);
  }
  // The library's backward kernels (kernels/attention_vjp.cc, kernels/rows_vjp.cc, written in
  // the kernel language), timed through the pullback of pl::vjp as a training step calls them.
  struct AttnBwdCase {
    int64_t B, H, S, D;
    bool causal;
  };
  for (AttnBwdCase c : {AttnBwdCase{8, 16, 2048, 64, false}, AttnBwdCase{4, 16, 4096, 128, false},
                        AttnBwdCase{4, 16, 4096, 128, true}, AttnBwdCase{4, 16, 4096, 256, false}}) {
    if (!section("backward")) break;
    row([&] {
      char label[96];
      std::snprintf(label, sizeof label, "bf16_attention_bwd_B%lld_H%lld_S%lld_D%lld%s", (long long)c.B, (long long)c.H,
                    (long long)c.S, (long long)c.D, c.causal ? "_causal" : "");
      pl::kernels::AttentionConfig cfg;
      cfg.causal = c.causal;
      pl::CustomVjp f = pl::kernels::flash_attention_vjp(c.B, c.H, c.S, c.D, pl::bf16, cfg);
      pl::Shape sh{c.B, c.H, c.S, c.D};
      auto q = pl::random::normal(sh, pl::bf16, 31).to(pl::Device::cuda(0));
      auto k = pl::random::normal(sh, pl::bf16, 32).to(pl::Device::cuda(0));
      auto v = pl::random::normal(sh, pl::bf16, 33).to(pl::Device::cuda(0));
      auto dout = pl::random::normal(sh, pl::bf16, 34).to(pl::Device::cuda(0));
      double t0 = now_ms();
      auto [outs, pullback] = pl::vjp(f, {q, k, v});
      std::vector<pl::Array> grads = pullback({dout});
      pl::synchronize();
      double first_ms = now_ms() - t0;
      double ms = median_ms([&] { grads = pullback({dout}); }, 10);
      // the three kernels alone (the preprocess, dK/dV, dQ) on the forward's residuals
      pl::kernels::AttentionBwdConfig bcfg;
      pl::Call fwd = pl::kernels::flash_attention_fwd(c.B, c.H, c.S, c.D, pl::bf16, cfg);
      std::vector<pl::Array> o_lse = fwd({q, k, v});
      pl::Call pre = pl::kernels::flash_attention_bwd_preprocess(c.B, c.H, c.S, c.D, pl::bf16, bcfg);
      pl::Call dkdv = pl::kernels::flash_attention_bwd_dkdv(c.B, c.H, c.S, c.D, pl::bf16, cfg, bcfg);
      pl::Call dq = pl::kernels::flash_attention_bwd_dq(c.B, c.H, c.S, c.D, pl::bf16, cfg, bcfg);
      std::vector<pl::Array> delta = pre({o_lse[0], dout});
      std::vector<pl::Array> tmp;
      double ms_pre = median_ms([&] { tmp = pre({o_lse[0], dout}); }, 10);
      double ms_dkdv = median_ms([&] { tmp = dkdv({q, k, v, dout, o_lse[1], delta[0]}); }, 10);
      double ms_dq = median_ms([&] { tmp = dq({q, k, v, dout, o_lse[1], delta[0]}); }, 10);
      // dq of a few query rows of head (0, 0) against a double-precision reference
      auto qv = q.to_vector<float>(), kv = k.to_vector<float>(), vv = v.to_vector<float>(), dov = dout.to_vector<float>();
      auto dqv = grads[0].to_vector<float>();
      double err = 0, scale = 1 / std::sqrt((double)c.D);
      for (int64_t i = 0; i < c.S; i += c.S / 7 + 1) {
        int64_t n = c.causal ? i + 1 : c.S;
        std::vector<double> s(n), dp(n);
        double m = -1e300, l = 0, delta_i = 0;
        for (int64_t j = 0; j < n; ++j) {
          double a = 0, b = 0;
          for (int64_t d = 0; d < c.D; ++d) a += (double)qv[i * c.D + d] * kv[j * c.D + d], b += (double)dov[i * c.D + d] * vv[j * c.D + d];
          s[j] = a * scale, dp[j] = b, m = std::max(m, s[j]);
        }
        for (int64_t j = 0; j < n; ++j) l += std::exp(s[j] - m);
        for (int64_t j = 0; j < n; ++j) s[j] = std::exp(s[j] - m) / l, delta_i += s[j] * dp[j];
        for (int64_t d = 0; d < c.D; ++d) {
          double g = 0;
          for (int64_t j = 0; j < n; ++j) g += s[j] * (dp[j] - delta_i) * kv[j * c.D + d];
          err = std::max(err, std::fabs(dqv[i * c.D + d] - g * scale));
        }
      }
      // FlashAttention-2's count: the backward is 2.5x the forward's 4 B H S^2 D (half for causal)
      double flops = 2.5 * 4.0 * c.B * c.H * c.S * c.S * c.D / (c.causal ? 2 : 1);
      std::printf("%s,%.4f,TFLOP/s,%.2f,preprocess_ms=%.3f,dkdv_ms=%.3f,dq_ms=%.3f,dq_maxerr=%g,first_call_ms=%.0f\n", label, ms,
                  flops / ms / 1e9, ms_pre, ms_dkdv, ms_dq, err, first_ms);
    });
  }
  // The automatic vjp (the forward's kernel transposed) against the hand-written backward, bf16
  // 16384 x 4096 softmax and layer norm (issue 33's target: within 2x).
  for (const char* which : {"softmax", "layer_norm"}) {
    if (!section("backward")) break;
    row([&] {
      int64_t R = 16384, C = 4096;
      bool ln = std::string(which) == "layer_norm";
      auto x = pl::random::normal({R, C}, pl::bf16, 61).to(pl::Device::cuda(0));
      auto w = pl::random::normal({C}, pl::bf16, 62).to(pl::Device::cuda(0));
      auto b = pl::random::normal({C}, pl::bf16, 63).to(pl::Device::cuda(0));
      auto dy = pl::random::normal({R, C}, pl::bf16, 64).to(pl::Device::cuda(0));
      std::vector<pl::Array> primals = ln ? std::vector<pl::Array>{x, w, b} : std::vector<pl::Array>{x};
      pl::Call fwd = ln ? pl::kernels::layer_norm(R, C, pl::bf16) : pl::kernels::softmax(R, C, pl::bf16);
      pl::CustomVjp hand = ln ? pl::kernels::layer_norm_vjp(R, C, pl::bf16) : pl::kernels::softmax_vjp(R, C, pl::bf16);
      auto [o1, auto_pb] = pl::vjp(fwd, primals);
      auto [o2, hand_pb] = pl::vjp(hand, primals);
      std::vector<pl::Array> ga = auto_pb({dy}), gh = hand_pb({dy});
      double ms_auto = median_ms([&] { ga = auto_pb({dy}); }, 10), ms_hand = median_ms([&] { gh = hand_pb({dy}); }, 10);
      auto av = ga[0].to_vector<float>(), hv = gh[0].to_vector<float>();
      double err = 0;
      for (size_t i = 0; i < av.size(); i += 997) err = std::max(err, (double)std::fabs(av[i] - hv[i]) / (1 + std::fabs(hv[i])));
      std::printf("bf16_%s_16384x4096_automatic_vjp,%.4f,x_hand_written,%.2f,hand_ms=%.3f,dx_reldiff=%g\n", which, ms_auto, ms_auto / ms_hand, ms_hand, err);
    });
  }
  // The dK/dV and dQ kernels alone over their blocks, warps and stages (B4 H16 S4096, D128 and
  // D256; CUDA_BENCH_ONLY=bwdsweep).
  struct SweepCase {
    int64_t D;
    bool causal;
  };
  for (SweepCase sc : {SweepCase{128, false}, SweepCase{128, true}, SweepCase{256, false}}) {
    if (!section("bwdsweep")) break;
    row([&] {
      const bool causal = sc.causal;
      int64_t B = 4, H = 16, S = 4096, D = sc.D;
      pl::kernels::AttentionConfig cfg;
      cfg.causal = causal;
      pl::Shape sh{B, H, S, D};
      auto q = pl::random::normal(sh, pl::bf16, 31).to(pl::Device::cuda(0));
      auto k = pl::random::normal(sh, pl::bf16, 32).to(pl::Device::cuda(0));
      auto v = pl::random::normal(sh, pl::bf16, 33).to(pl::Device::cuda(0));
      auto dout = pl::random::normal(sh, pl::bf16, 34).to(pl::Device::cuda(0));
      std::vector<pl::Array> o_lse = pl::kernels::flash_attention_fwd(B, H, S, D, pl::bf16, cfg)({q, k, v});
      std::vector<pl::Array> delta = pl::kernels::flash_attention_bwd_preprocess(B, H, S, D, pl::bf16)({o_lse[0], dout});
      struct Variant {
        int64_t bq, bk;
        int warps, stages;
      };
      std::vector<Variant> variants = {Variant{64, 64, 4, 2}, Variant{64, 64, 4, 3}, Variant{64, 128, 8, 2}, Variant{128, 128, 8, 2}};
      if (D > 128) variants = {Variant{64, 64, 4, 2}, Variant{64, 64, 8, 2}, Variant{64, 64, 16, 2}, Variant{128, 64, 8, 2}};
      for (Variant x : variants) {
        pl::kernels::AttentionBwdConfig bcfg;
        bcfg.block_q = x.bq, bcfg.block_k = x.bk, bcfg.compiler_params = {.num_warps = x.warps, .num_stages = x.stages};
        std::vector<pl::Array> tmp;
        double flops = 4.0 * B * H * S * S * D / (causal ? 2 : 1);  // each kernel: two of the backward's dots of 2 B H S^2 D
        char label[128];
        std::snprintf(label, sizeof label, "D%lld_bq%lld_bk%lld_w%d_s%d%s", (long long)D, (long long)x.bq, (long long)x.bk, x.warps, x.stages, causal ? "_causal" : "");
        try {
          pl::Call dkdv = pl::kernels::flash_attention_bwd_dkdv(B, H, S, D, pl::bf16, cfg, bcfg);
          double ms = median_ms([&] { tmp = dkdv({q, k, v, dout, o_lse[1], delta[0]}); }, 10);
          std::printf("bf16_attention_bwd_dkdv_%s,%.4f,TFLOP/s,%.2f\n", label, ms, 2 * flops / ms / 1e9);
        } catch (const std::exception& e) {
          std::printf("bf16_attention_bwd_dkdv_%s,0,-,0,error: %.160s\n", label, e.what());
        }
        try {
          pl::Call dq = pl::kernels::flash_attention_bwd_dq(B, H, S, D, pl::bf16, cfg, bcfg);
          double ms = median_ms([&] { tmp = dq({q, k, v, dout, o_lse[1], delta[0]}); }, 10);
          std::printf("bf16_attention_bwd_dq_%s,%.4f,TFLOP/s,%.2f\n", label, ms, 1.5 * flops / ms / 1e9);
        } catch (const std::exception& e) {
          std::printf("bf16_attention_bwd_dq_%s,0,-,0,error: %.160s\n", label, e.what());
        }
      }
    });
  }
  // Norm and softmax backward, bf16 16384 x 4096: bytes are what the backward must move (x or y,
  // dy in; dx out; the per-row residuals and the weight once), against the copy bandwidth.
  for (const char* which : {"layer_norm", "rms_norm", "softmax"}) {
    if (!section("backward")) break;
    row([&] {
      int64_t R = 16384, C = 4096;
      std::string kind = which;
      auto x = pl::random::normal({R, C}, pl::bf16, 41).to(pl::Device::cuda(0));
      auto w = pl::random::normal({C}, pl::bf16, 42).to(pl::Device::cuda(0));
      auto b = pl::random::normal({C}, pl::bf16, 43).to(pl::Device::cuda(0));
      auto dy = pl::random::normal({R, C}, pl::bf16, 44).to(pl::Device::cuda(0));
      pl::CustomVjp f = kind == "layer_norm" ? pl::kernels::layer_norm_vjp(R, C, pl::bf16)
                        : kind == "rms_norm" ? pl::kernels::rms_norm_vjp(R, C, pl::bf16)
                                             : pl::kernels::softmax_vjp(R, C, pl::bf16);
      std::vector<pl::Array> primals = kind == "layer_norm" ? std::vector<pl::Array>{x, w, b}
                                       : kind == "rms_norm" ? std::vector<pl::Array>{x, w}
                                                            : std::vector<pl::Array>{x};
      double t0 = now_ms();
      auto [outs, pullback] = pl::vjp(f, primals);
      std::vector<pl::Array> grads = pullback({dy});
      pl::synchronize();
      double first_ms = now_ms() - t0;
      double ms = median_ms([&] { grads = pullback({dy}); }, 20);
      // dx of a few rows against a double-precision reference
      auto xv = x.to_vector<float>(), wv = w.to_vector<float>(), dyv = dy.to_vector<float>(), dxv = grads[0].to_vector<float>();
      double err = 0;
      for (int64_t r = 0; r < R; r += 4093) {
        const float* xr = &xv[r * C];
        const float* g = &dyv[r * C];
        std::vector<double> want(C);
        if (kind == "softmax") {
          double m = -1e300, l = 0, dot = 0;
          for (int64_t j = 0; j < C; ++j) m = std::max(m, (double)xr[j]);
          std::vector<double> y(C);
          for (int64_t j = 0; j < C; ++j) l += (y[j] = std::exp(xr[j] - m));
          for (int64_t j = 0; j < C; ++j) y[j] /= l, dot += y[j] * g[j];
          for (int64_t j = 0; j < C; ++j) want[j] = y[j] * (g[j] - dot);
        } else {
          double mean = 0, var = 0;
          if (kind == "layer_norm")
            for (int64_t j = 0; j < C; ++j) mean += xr[j] / (double)C;
          for (int64_t j = 0; j < C; ++j) var += (xr[j] - mean) * (xr[j] - mean) / C;
          double rstd = 1 / std::sqrt(var + (kind == "layer_norm" ? 1e-5 : 1e-6)), a = 0, bsum = 0;
          for (int64_t j = 0; j < C; ++j) {  // xhat = (x - mean) rstd; gw = g w
            double xh = (xr[j] - mean) * rstd, gw = (double)g[j] * wv[j];
            a += gw * xh / C, bsum += gw / C;
          }
          for (int64_t j = 0; j < C; ++j) {
            double xh = (xr[j] - mean) * rstd, gw = (double)g[j] * wv[j];
            want[j] = rstd * (gw - xh * a - (kind == "layer_norm" ? bsum : 0.0));
          }
        }
        for (int64_t j = 0; j < C; ++j) err = std::max(err, std::fabs(dxv[r * C + j] - want[j]) / (1 + std::fabs(want[j])));
      }
      double bytes = 3.0 * R * C * 2 + (kind == "softmax" ? 0.0 : 2.0 * R * 4);
      std::printf("bf16_%s_bwd_16384x4096,%.4f,GB/s,%.1f,dx_relerr=%g,first_call_ms=%.0f\n", which, ms, bytes / ms / 1e6, err, first_ms);
    });
  }
  // Cross entropy over a 128256-token vocabulary (Llama 3's), bf16 logits of 4096 rows: the
  // forward (per-row loss, lse) and the pullback (dx) as a training step runs them; bytes are
  // the logits read twice and dx written once.
  if (section("backward")) row([&] {
    int64_t R = 4096, V = 128256;
    auto x = pl::random::normal({R, V}, pl::bf16, 51).to(pl::Device::cuda(0));
    auto t = pl::random::randint({R}, pl::i32, 52, 0, static_cast<int32_t>(V)).to(pl::Device::cuda(0));
    auto dloss = pl::Array::full({R}, 1.0 / R, pl::f32).to(pl::Device::cuda(0));
    pl::CustomVjp f = pl::kernels::cross_entropy_vjp(R, V, pl::bf16);
    double t0 = now_ms();
    auto [outs, pullback] = pl::vjp(f, {x, t});
    std::vector<pl::Array> g = pullback({dloss});
    pl::synchronize();
    double first_ms = now_ms() - t0;
    double ms = median_ms([&] {
      auto r = pl::vjp(f, {x, t});
      g = r.second({dloss});
    }, 10);
    double ms_fwd = median_ms([&] { outs = f.fwd()({x, t}); }, 10);
    // loss and dx of a few rows against a double-precision reference
    auto xv = x.to_vector<float>();
    auto tv = t.to_vector<int32_t>();
    auto lv = outs[0].to_vector<float>();
    auto dxv = g[0].to_vector<float>();
    double err_loss = 0, err_dx = 0;
    for (int64_t r = 0; r < R; r += 997) {
      const float* xr = &xv[r * V];
      double m = -1e300, l = 0;
      for (int64_t j = 0; j < V; ++j) m = std::max(m, (double)xr[j]);
      for (int64_t j = 0; j < V; ++j) l += std::exp(xr[j] - m);
      double lse = m + std::log(l);
      err_loss = std::max(err_loss, std::fabs(lv[r] - (lse - xr[tv[r]])));
      for (int64_t j = 0; j < V; ++j)
        err_dx = std::max(err_dx, std::fabs(dxv[r * V + j] - (std::exp(xr[j] - lse) - (j == tv[r])) / R) * R);
    }
    std::printf("bf16_cross_entropy_fwd_bwd_4096x128256,%.4f,GB/s,%.1f,fwd_ms=%.3f,loss_maxerr=%g,dx_maxerr_x_rows=%g,first_call_ms=%.0f\n", ms,
                3.0 * R * V * 2 / ms / 1e6, ms_fwd, err_loss, err_dx, first_ms);
  });
  // Grouped matmul for mixture-of-experts (CUDA_BENCH_ONLY=grouped): 16384 tokens routed unevenly
  // to 8 experts, x [16384, 4096] bf16, w [8, 4096, 4096]: the forward, dx (w transposed) and dw,
  // in TFLOP/s against the library's plain matmul of the same total size in the same run (the
  // issue's target: >= 0.9x), with a few rows of the forward against a double-precision reference.
  if (section("grouped")) row([&] {
    const int64_t M = 16384, K = 4096, N = 4096, G = 8;
    std::vector<int32_t> sizes = {3000, 1024, 2500, 17, 4096, 1800, 2947, 1000};  // sums to 16384
    auto sz = pl::Array::from_vector(sizes, {G}).to(pl::Device::cuda(0));
    auto x = pl::random::normal({M, K}, pl::bf16, 81).to(pl::Device::cuda(0));
    auto w = pl::random::normal({G, K, N}, pl::bf16, 82).to(pl::Device::cuda(0));
    auto dy = pl::random::normal({M, N}, pl::bf16, 83).to(pl::Device::cuda(0));
    pl::Call fwd = pl::kernels::grouped_matmul(M, K, N, G, pl::bf16, pl::bf16);
    pl::Call dx = pl::kernels::grouped_matmul(M, N, K, G, pl::bf16, pl::bf16, {.trans_rhs = true});
    pl::Call dw = pl::kernels::grouped_matmul_dw(M, K, N, G, pl::bf16, pl::bf16);
    pl::Call plain = pl::kernels::matmul(M, N, K, pl::bf16, pl::bf16);
    auto w0 = pl::random::normal({K, N}, pl::bf16, 84).to(pl::Device::cuda(0));
    double t0 = now_ms();
    pl::Array o = fwd({sz, x, w})[0];
    pl::synchronize();
    double first_ms = now_ms() - t0;
    double ms_fwd = median_ms([&] { o = fwd({sz, x, w})[0]; }, 10);
    pl::Array tmp;
    double ms_dx = median_ms([&] { tmp = dx({sz, dy, w})[0]; }, 10);
    double ms_dw = median_ms([&] { tmp = dw({sz, x, dy})[0]; }, 10);
    double ms_plain = median_ms([&] { tmp = plain({x, w0})[0]; }, 10);
    // rows 0, 3000 (group 1's first), 6541 (group 4's first, after a group of 17) and 16383
    auto xv = x.to_vector<float>(), wv = w.to_vector<float>(), ov = o.to_vector<float>();
    double err = 0;
    for (auto [r, g] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {3000, 1}, {6541, 4}, {16383, 7}})
      for (int64_t n = 0; n < N; n += 97) {
        double a = 0;
        for (int64_t k = 0; k < K; ++k) a += (double)xv[r * K + k] * wv[(g * K + k) * N + n];
        err = std::max(err, std::fabs(ov[r * N + n] - a) / (1 + std::fabs(a)));
      }
    double flops = 2.0 * M * N * K;
    std::printf("bf16_grouped_matmul_16384x4096x4096_G8,%.4f,TFLOP/s,%.1f,dx_tflops=%.1f,dw_tflops=%.1f,plain_matmul_tflops=%.1f,fwd_vs_plain=%.2f,relerr=%g,first_call_ms=%.0f\n",
                ms_fwd, flops / ms_fwd / 1e9, flops / ms_dx / 1e9, flops / ms_dw / 1e9, flops / ms_plain / 1e9, ms_plain / ms_fwd, err, first_ms);
  });
  // Weight-only quantised matmul at decode-like shapes (CUDA_BENCH_ONLY=quant): x [M, 8192] bf16
  // times w [8192, 8192] in i8 with a per-column scale, as a serving user writes it (the i8
  // operand converted as it enters the dot), against the same kernel with bf16 weights: GB/s of
  // the weights read, and the ratio (issue 34's target: the i8 kernel faster).
  for (int64_t M : {16, 64}) {
    if (!section("quant")) break;
    row([&] {
      const int64_t K = 8192, N = 8192, bn = 64, bk = 128;
      auto make = [&](pl::DType wt) {
        return pl::pallas_call(
            [=](pl::Ref x, pl::Ref w, pl::Ref sc, pl::Ref o) {
              pl::Value acc = pl::fori_loop(0, K / bk, pl::zeros({M, bn}), [&](pl::Value k, pl::Value acc) {
                return acc + pl::dot(x(pl::all, pl::ds(k * bk, bk)), w(pl::ds(k * bk, bk), pl::all));
              });
              o[pl::all] = (acc * pl::expand_dims(sc[pl::all], 0)).astype(pl::bf16);
            },
            pl::ShapeDtype({M, N}, pl::bf16),
            {.grid = {N / bn},
             .in_specs = {pl::BlockSpec({M, K}, [](pl::Value) { return pl::idx(0, 0); }),
                          pl::BlockSpec({K, bn}, [](pl::Value j) { return pl::idx(0, j); }),
                          pl::BlockSpec({bn}, [](pl::Value j) { return pl::idx(j); })},
             .out_specs = {pl::BlockSpec({M, bn}, [](pl::Value j) { return pl::idx(0, j); })},
             .name = wt == pl::i8 ? "matmul_w8" : wt == pl::f8e4m3 ? "matmul_wf8" : "matmul_w16",
             .compiler_params = {.num_warps = 4}});
      };
      auto x = pl::random::normal({M, K}, pl::bf16, 91).to(pl::Device::cuda(0));
      auto w8 = pl::random::randint({K, N}, pl::i8, 92, -127, 127).to(pl::Device::cuda(0));
      auto w16 = pl::random::normal({K, N}, pl::bf16, 93).to(pl::Device::cuda(0));
      auto sc = pl::random::uniform({N}, pl::f32, 94, 0.001, 0.01).to(pl::Device::cuda(0));
      auto wf8 = pl::random::normal({K, N}, pl::f32, 95).astype(pl::f8e4m3).to(pl::Device::cuda(0));
      pl::Call q8 = make(pl::i8), q16 = make(pl::bf16), qf8 = make(pl::f8e4m3);
      pl::Array o;
      double ms8 = median_ms([&] { o = q8({x, w8, sc})[0]; }, 20), ms16 = median_ms([&] { o = q16({x, w16, sc})[0]; }, 20);
      double msf8 = median_ms([&] { o = qf8({x, wf8, sc})[0]; }, 20);
      std::printf("bf16_x_i8_weights_matmul_M%lld_8192x8192,%.4f,GB/s,%.1f,bf16_weights_ms=%.4f,bf16_weights_gbps=%.1f,i8_speedup=%.2f,f8e4m3_weights_ms=%.4f,f8_speedup=%.2f\n",
                  (long long)M, ms8, K * N * 1.0 / ms8 / 1e6, ms16, K * N * 2.0 / ms16 / 1e6, ms16 / ms8, msf8, ms16 / msf8);
    });
  }
  // Scaled matmul of 8-bit floats (CUDA_BENCH_ONLY=fp8): kernels::scaled_matmul, e4m3 x e4m3
  // -> bf16 with rowwise, tensorwise and blockwise (1x128 / 128x128) scales, beside our bf16
  // matmul of the same size; anchor: torch._scaled_mm (bench/anchors.py fp8).
  for (int64_t n : {4096, 8192}) {
    if (!section("fp8")) break;
    row([&] {
      auto a = pl::random::normal({n, n}, pl::f32, 121).astype(pl::f8e4m3).to(pl::Device::cuda(0));
      auto b = pl::random::normal({n, n}, pl::f32, 122).astype(pl::f8e4m3).to(pl::Device::cuda(0));
      auto row_a = pl::random::uniform({n, 1}, pl::f32, 123, 0.5, 1.5).to(pl::Device::cuda(0));
      auto row_b = pl::random::uniform({1, n}, pl::f32, 124, 0.5, 1.5).to(pl::Device::cuda(0));
      auto one = pl::Array::full({1, 1}, 1.0, pl::f32).to(pl::Device::cuda(0));
      auto blk_a = pl::random::uniform({n, n / 128}, pl::f32, 125, 0.5, 1.5).to(pl::Device::cuda(0));
      auto blk_b = pl::random::uniform({n / 128, n / 128}, pl::f32, 126, 0.5, 1.5).to(pl::Device::cuda(0));
      using pl::kernels::ScaleKind;
      double t0 = now_ms();
      pl::Call rowwise = pl::kernels::scaled_matmul(n, n, n, pl::f8e4m3, pl::bf16, {.scales = ScaleKind::Rowwise});
      pl::Array o = rowwise({a, b, row_a, row_b})[0];
      pl::synchronize();
      double first_ms = now_ms() - t0;
      double ms_row = median_ms([&] { o = rowwise({a, b, row_a, row_b})[0]; }, 20);
      pl::Call fast = pl::kernels::scaled_matmul(n, n, n, pl::f8e4m3, pl::bf16, {.scales = ScaleKind::Rowwise, .fast_accumulation = true});
      double ms_fast = median_ms([&] { o = fast({a, b, row_a, row_b})[0]; }, 20);
      pl::Call tensorwise = pl::kernels::scaled_matmul(n, n, n, pl::f8e4m3, pl::bf16, {.scales = ScaleKind::Tensorwise});
      double ms_tensor = median_ms([&] { o = tensorwise({a, b, one, one})[0]; }, 20);
      pl::Call blockwise = pl::kernels::scaled_matmul(n, n, n, pl::f8e4m3, pl::bf16, {.scales = ScaleKind::Blockwise});
      double ms_block = median_ms([&] { o = blockwise({a, b, blk_a, blk_b})[0]; }, 20);
      // bf16 matmul of the same size (the library's, 128 x 256 tiles)
      auto x = pl::random::normal({n, n}, pl::bf16, 127).to(pl::Device::cuda(0));
      auto y = pl::random::normal({n, n}, pl::bf16, 128).to(pl::Device::cuda(0));
      pl::Call mm = pl::kernels::matmul(n, n, n, pl::bf16, pl::bf16, {.block_m = 128, .block_n = 256, .block_k = 64, .compiler_params = {.num_warps = 8}});
      double ms_bf16 = median_ms([&] { o = mm({x, y})[0]; }, 20);
      // a few outputs of the rowwise call against a double-precision reference
      pl::Array ro = rowwise({a, b, row_a, row_b})[0].to_host();
      auto av = a.to_host().astype(pl::f64).to_vector<double>(), bv = b.to_host().astype(pl::f64).to_vector<double>();
      auto sav = row_a.to_host().to_vector<double>(), sbv = row_b.to_host().to_vector<double>(), ov = ro.astype(pl::f64).to_vector<double>();
      double err = 0;
      for (int64_t i = 0; i < n; i += 997)
        for (int64_t j = 0; j < n; j += 991) {
          double acc = 0;
          for (int64_t k = 0; k < n; ++k) acc += av[i * n + k] * bv[j * n + k];
          acc *= sav[i] * sbv[j];
          err = std::max(err, std::fabs(ov[i * n + j] - acc) / (1 + std::fabs(acc)));
        }
      double flops = 2.0 * n * n * n;
      std::printf("fp8_e4m3_scaled_matmul_rowwise_%lldcubed,%.4f,TFLOP/s,%.1f,fast_accumulation_tflops=%.1f,tensorwise_tflops=%.1f,blockwise_tflops=%.1f,bf16_matmul_tflops=%.1f,relerr=%g,first_call_ms=%.0f\n",
                  (long long)n, ms_row, flops / ms_row / 1e9, flops / ms_fast / 1e9, flops / ms_tensor / 1e9, flops / ms_block / 1e9, flops / ms_bf16 / 1e9, err, first_ms);
    });
  }
  // Decode attention (one query token, GQA 32 query heads on 8 kv heads, D128, bf16) and paged
  // attention (32-token pages, shuffled block tables), every sequence at the full length: GB/s
  // of the KV cache read (CUDA_BENCH_ONLY=decode), with a few outputs of sequence 0 against a
  // double-precision reference.
  struct DecodeCase {
    int64_t B, S;
    bool paged;
  };
  for (DecodeCase c : {DecodeCase{32, 8192, false}, DecodeCase{128, 4096, false}, DecodeCase{32, 32768, false},
                       DecodeCase{32, 8192, true}, DecodeCase{128, 4096, true}}) {
    if (!section("decode")) break;
    row([&] {
      const int64_t H = 32, KVH = 8, D = 128, page = 32, per_seq = c.S / page, total = c.B * per_seq;
      auto q = pl::random::normal({c.B, H, D}, pl::bf16, 71).to(pl::Device::cuda(0));
      pl::Shape kvs = c.paged ? pl::Shape{KVH, total, page, D} : pl::Shape{c.B, KVH, c.S, D};
      auto k = pl::random::normal(kvs, pl::bf16, 72).to(pl::Device::cuda(0));
      auto v = pl::random::normal(kvs, pl::bf16, 73).to(pl::Device::cuda(0));
      auto lens = pl::Array::full({c.B}, static_cast<double>(c.S), pl::i32).to(pl::Device::cuda(0));
      std::vector<int32_t> table(static_cast<size_t>(total));
      for (int64_t i = 0; i < total; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % total);  // a permutation (7919 prime)
      auto tables = pl::Array::from_vector(table, {c.B, per_seq}).to(pl::Device::cuda(0));
      pl::kernels::DecodeAttentionConfig cfg{.kv_heads = KVH};
      pl::kernels::DecodeAttention f = c.paged ? pl::kernels::paged_attention(c.B, H, per_seq, page, total, D, pl::bf16, cfg)
                                               : pl::kernels::decode_attention(c.B, H, c.S, D, pl::bf16, cfg);
      std::vector<pl::Array> args = c.paged ? std::vector<pl::Array>{lens, tables, q, k, v} : std::vector<pl::Array>{lens, q, k, v};
      double t0 = now_ms();
      std::vector<pl::Array> o = f(args);
      pl::synchronize();
      double first_ms = now_ms() - t0;
      double ms = median_ms([&] { o = f(args); }, 20);
      std::vector<pl::Array> parts;
      double ms_partial = median_ms([&] { parts = f.partial(args); }, 20);
      // heads 0..3 of sequence 0 (kv head 0) against a double-precision reference
      auto qv = q.to_vector<float>(), kv = k.to_vector<float>(), vv = v.to_vector<float>(), ov = o[0].to_vector<float>();
      double err = 0;
      for (int64_t h = 0; h < H / KVH; ++h) {
        std::vector<double> s(static_cast<size_t>(c.S));
        double m = -1e300, l = 0;
        auto at = [&](int64_t t, int64_t d) {
          return c.paged ? static_cast<size_t>((table[static_cast<size_t>(t / page)] * page + t % page) * D + d) : static_cast<size_t>(t * D + d);
        };
        for (int64_t t = 0; t < c.S; ++t) {
          double a = 0;
          for (int64_t d = 0; d < D; ++d) a += (double)qv[h * D + d] * kv[at(t, d)];
          s[t] = a / std::sqrt((double)D), m = std::max(m, s[t]);
        }
        for (int64_t t = 0; t < c.S; ++t) l += (s[t] = std::exp(s[t] - m));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t t = 0; t < c.S; ++t) acc += s[t] * vv[at(t, d)];
          err = std::max(err, std::fabs(ov[h * D + d] - acc / l));
        }
      }
      double bytes = 2.0 * c.B * KVH * c.S * D * 2;
      std::printf("bf16_%s_attention_B%lld_S%lld_H32_KVH8_D128%s,%.4f,GB/s,%.1f,splits=%lld,partial_ms=%.4f,maxerr=%g,first_call_ms=%.0f\n",
                  c.paged ? "paged" : "decode", (long long)c.B, (long long)c.S, c.paged ? "_page32" : "", ms, bytes / ms / 1e6,
                  (long long)parts[0].shape()[2], ms_partial, err, first_ms);
    });
  }
  // The grouped matmul's blocks (CUDA_BENCH_ONLY=groupedsweep), the grouped row's shapes: the
  // forward and the weights' gradient each over block_m x block_n x block_k, warps and stages
  // (TFLOP/s; dw's output tile is block_k x block_n, its reduction runs over block_m rows).
  if (section("groupedsweep")) row([&] {
    const int64_t M = 16384, K = 4096, N = 4096, G = 8;
    std::vector<int32_t> sizes = {3000, 1024, 2500, 17, 4096, 1800, 2947, 1000};
    auto sz = pl::Array::from_vector(sizes, {G}).to(pl::Device::cuda(0));
    auto x = pl::random::normal({M, K}, pl::bf16, 81).to(pl::Device::cuda(0));
    auto w = pl::random::normal({G, K, N}, pl::bf16, 82).to(pl::Device::cuda(0));
    auto dy = pl::random::normal({M, N}, pl::bf16, 83).to(pl::Device::cuda(0));
    struct Variant {
      int64_t bm, bn, bk;
      int warps, stages;
    };
    const double flops = 2.0 * M * N * K;
    for (bool fwd : {true, false}) {
      std::string out;
      std::vector<Variant> vs = fwd ? std::vector<Variant>{{128, 128, 64, 8, 0}, {128, 256, 64, 8, 0}, {128, 256, 64, 8, 4}, {128, 128, 64, 4, 0}, {64, 256, 64, 4, 0}}
                                    : std::vector<Variant>{{128, 128, 64, 8, 0}, {128, 128, 128, 8, 0}, {128, 128, 128, 8, 2}, {128, 256, 128, 8, 0},
                                                           {64, 256, 128, 8, 0}, {64, 128, 128, 4, 0}, {64, 128, 64, 4, 0}};
      for (auto [bm, bn, bk, warps, stages] : vs) {
        pl::kernels::GroupedMatmulConfig cfg{.block_m = bm, .block_n = bn, .block_k = bk, .compiler_params = {.num_warps = warps, .num_stages = stages}};
        char buf[96];
        std::snprintf(buf, sizeof buf, ",m%lld_n%lld_k%lld_w%d_s%d=", (long long)bm, (long long)bn, (long long)bk, warps, stages);
        out += buf;
        try {
          pl::Call k = fwd ? pl::kernels::grouped_matmul(M, K, N, G, pl::bf16, pl::bf16, cfg) : pl::kernels::grouped_matmul_dw(M, K, N, G, pl::bf16, pl::bf16, cfg);
          pl::Array tmp;
          double ms = median_ms([&] { tmp = fwd ? k({sz, x, w})[0] : k({sz, x, dy})[0]; }, 10);
          std::snprintf(buf, sizeof buf, "%.1f", flops / ms / 1e9);
          out += buf;
        } catch (const pl::Error&) {
          out += "error";
        }
      }
      std::printf("grouped_sweep_%s_16384x4096x4096_G8,TFLOP/s%s\n", fwd ? "fwd" : "dw", out.c_str());
    }
  });
  // Decode attention's knobs (CUDA_BENCH_ONLY=decodesweep): keys a step, warps and splits, at
  // B32 S8192 (GQA 32/8, D128, bf16): GB/s of the KV cache read by the partial call alone.
  for (int64_t block_k : {32, 64, 128}) {
    if (!section("decodesweep")) break;
    row([&] {
      const int64_t B = 32, S = 8192, H = 32, KVH = 8, D = 128;
      auto q = pl::random::normal({B, H, D}, pl::bf16, 71).to(pl::Device::cuda(0));
      auto k = pl::random::normal({B, KVH, S, D}, pl::bf16, 72).to(pl::Device::cuda(0));
      auto v = pl::random::normal({B, KVH, S, D}, pl::bf16, 73).to(pl::Device::cuda(0));
      auto lens = pl::Array::full({B}, static_cast<double>(S), pl::i32).to(pl::Device::cuda(0));
      std::string out;
      for (int warps : {4, 8})
        for (int64_t splits : {8, 16, 32}) {
          pl::kernels::DecodeAttentionConfig cfg{.kv_heads = KVH, .k_splits = splits, .block_k = block_k, .compiler_params = {.num_warps = warps}};
          try {
            pl::kernels::DecodeAttention f = pl::kernels::decode_attention(B, H, S, D, pl::bf16, cfg);
            std::vector<pl::Array> parts;
            double ms = median_ms([&] { parts = f.partial({lens, q, k, v}); }, 10);
            char buf[96];
            std::snprintf(buf, sizeof buf, ",w%d_s%lld=%.0f", warps, (long long)splits, 2.0 * B * KVH * S * D * 2 / ms / 1e6);
            out += buf;
          } catch (const pl::Error& e) {
            out += ",w" + std::to_string(warps) + "_s" + std::to_string(splits) + "=error";
          }
        }
      std::printf("decode_sweep_B32_S8192_block_k%lld,GB/s%s\n", (long long)block_k, out.c_str());
    });
  }
  // The norm backward kernels alone over their grid's two knobs: rows a step and programs (each
  // program sums its rows' dw/db into its own row of partials).
  for (const char* which : {"layer_norm", "rms_norm"}) {
    if (!section("bwdsweep") && !section("normsweep")) break;
    row([&] {
      int64_t R = 16384, C = 4096;
      bool ln = std::string(which) == "layer_norm";
      auto x = pl::random::normal({R, C}, pl::bf16, 41).to(pl::Device::cuda(0));
      auto w = pl::random::normal({C}, pl::bf16, 42).to(pl::Device::cuda(0));
      auto dy = pl::random::normal({R, C}, pl::bf16, 44).to(pl::Device::cuda(0));
      auto st = pl::random::uniform({R}, pl::f32, 45).to(pl::Device::cuda(0));
      struct Variant {
        int64_t br, programs;
        int warps;  // 0: the default
      };
      for (auto [br, programs, warps] : std::vector<Variant>{{1, 264, 8}, {1, 528, 8}, {1, 1056, 4}, {1, 264, 16}, {1, 528, 16}, {1, 132, 16}, {2, 264, 16}, {2, 528, 16}, {4, 128, 0}}) {
        pl::kernels::NormBwdConfig cfg;
        cfg.block_rows = br, cfg.programs = programs, cfg.compiler_params.num_warps = warps;
        pl::Call k = ln ? pl::kernels::layer_norm_bwd(R, C, pl::bf16, cfg) : pl::kernels::rms_norm_bwd(R, C, pl::bf16, cfg);
        std::vector<pl::Array> args = ln ? std::vector<pl::Array>{x, w, st, st, dy} : std::vector<pl::Array>{x, w, st, dy};
        std::vector<pl::Array> out;
        double ms = median_ms([&] { out = k(args); }, 20);
        std::printf("bf16_%s_bwd_kernel_16384x4096_rows%lld_programs%lld_w%d,%.4f,GB/s,%.1f\n", which, (long long)br, (long long)programs, warps,
                    ms, 3.0 * R * C * 2 / ms / 1e6);
      }
    });
  }
  return 0;
}
