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
// the raw driver launch, graph replay), memory, matmul, autotune, attention. Unset: all.
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
      auto spec = pl::BlockSpec({bs}, [](pl::Value i) { return pl::idx(i); });
      int warps = bs >= 4096 ? 8 : 4;
      auto k = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; }, pl::ShapeDtype({n}, pl::f32),
                               {.grid = {n / bs}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "add",
                                .compiler_params = {.num_warps = warps}});
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
      auto spec = pl::BlockSpec({1, C}, [](pl::Value i) { return pl::idx(i, 0); });
      auto k = pl::pallas_call(
          [](pl::Ref x, pl::Ref o) {
            pl::Value v = x[pl::all];
            pl::Value e = pl::exp(v - pl::max(v, {1}, true));
            o[pl::all] = e / pl::sum(e, {1}, true);
          },
          pl::ShapeDtype({R, C}, pl::f32),
          {.grid = {R}, .in_specs = {spec}, .out_specs = {spec}, .name = "softmax", .compiler_params = {.num_warps = warps}});
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
      auto spec = pl::BlockSpec({rows, C}, [](pl::Value i) { return pl::idx(i, 0); });
      auto k = pl::pallas_call(
          [C](pl::Ref x, pl::Ref w, pl::Ref o) {
            pl::Value v = x[pl::all].astype(pl::f32);
            pl::Value inv = pl::rsqrt(pl::sum(v * v, {1}, true) / static_cast<float>(C) + 1e-6f);
            o[pl::all] = (v * inv * w[pl::all].astype(pl::f32)).astype(pl::bf16);
          },
          pl::ShapeDtype({R, C}, pl::bf16),
          {.grid = {R / rows}, .in_specs = {spec, pl::BlockSpec({1, C}, [](pl::Value i) { return pl::idx(0, 0); })}, .out_specs = {spec},
           .name = "rms_norm", .compiler_params = {.num_warps = 8}});
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
    auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::argmax(x[pl::all], 1); }, pl::ShapeDtype({R}, pl::i32),
                             {.grid = {R / rows}, .in_specs = {pl::BlockSpec({rows, C}, [](pl::Value i) { return pl::idx(i, 0); })},
                              .out_specs = {pl::BlockSpec({rows}, [](pl::Value i) { return pl::idx(i); })}, .name = "row_argmax",
                              .compiler_params = {.num_warps = 8}});
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
    auto k = pl::pallas_call(
        [](pl::Ref x, pl::Ref o) {
          pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({1, 32}, pl::f32); });
          o[pl::all] += pl::sum(x[pl::all], {0}, true);
        },
        pl::ShapeDtype({1, C}, pl::f32),
        {.grid = {C / cols, R / rows}, .in_specs = {pl::BlockSpec({rows, cols}, [](pl::Value j, pl::Value i) { return pl::idx(i, j); })},
         .out_specs = {pl::BlockSpec({1, cols}, [](pl::Value j, pl::Value) { return pl::idx(0, j); })}, .name = "column_sum",
         .compiler_params = {.num_warps = 8}});  // axis 1 revisits the output block: sequential (inferred)
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
    auto spec = pl::BlockSpec({1, C}, [](pl::Value i) { return pl::idx(i, 0); });
    auto k = pl::pallas_call(
        [C](pl::Ref x, pl::Ref o) {
          pl::Value v = x[pl::all];
          pl::Value mu = pl::sum(v, {1}, true) / static_cast<float>(C);
          pl::Value d = v - mu;
          o[pl::all] = d * pl::rsqrt(pl::sum(d * d, {1}, true) / static_cast<float>(C) + 1e-5f);
        },
        pl::ShapeDtype({R, C}, pl::f32), {.grid = {R}, .in_specs = {spec}, .out_specs = {spec}, .name = "layer_norm", .compiler_params = {.num_warps = 8}});
    auto x = pl::random::normal({R, C}, pl::f32, 9).to(pl::Device::cuda(0));
    pl::Array out;
    double ms = median_ms([&] { out = k(x); }, 20);
    std::printf("f32_layer_norm_16384x4096,%.4f,GB/s,%.1f\n", ms, 2.0 * R * C * 4 / ms / 1e6);
  });
  if (section("memory")) row([&] {  // f32 gelu(x) * y over 2^26 elements (tanh form)
    int64_t n = int64_t{1} << 26, bs = 4096;
    auto spec = pl::BlockSpec({bs}, [](pl::Value i) { return pl::idx(i); });
    auto k = pl::pallas_call(
        [](pl::Ref x, pl::Ref y, pl::Ref o) {
          pl::Value v = x[pl::all];
          pl::Value g = 0.5f * v * (1.f + pl::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
          o[pl::all] = g * y[pl::all];
        },
        pl::ShapeDtype({n}, pl::f32), {.grid = {n / bs}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "gelu_mul", .compiler_params = {.num_warps = 8}});
    auto x = pl::random::normal({n}, pl::f32, 10).to(pl::Device::cuda(0));
    auto y = pl::random::normal({n}, pl::f32, 11).to(pl::Device::cuda(0));
    pl::Array out;
    double ms = median_ms([&] { out = k(x, y); }, 20);
    std::printf("f32_gelu_mul_2^26,%.4f,GB/s,%.1f\n", ms, 3.0 * n * 4 / ms / 1e6);
  });
  // Matmuls written as a user writes them: a K loop of pl::dot over (bm, bk) x (bk, bn) slices
  // of whole-K blocks, f32 accumulation (i32 for i8), then the epilogue. Variants: bf16 with a
  // bias + relu epilogue or a residual add, bf16 x W^T (trans_b, as a linear layer), A^T B
  // (trans_a, A stored K x M), f16, f32 (tf32 dots), i8, 8192^3, and an edge shape (M, N not
  // multiples of the block: masked edge blocks).
  enum class Epi { None, BiasRelu, Residual };
  struct MatmulCase {
    const char* name;
    pl::DType t;
    bool ta, tb;
    Epi epi;
    int64_t M, N, K;
    int64_t bn = 128;  // the block's columns (bm = 128); 256 is the tile cuBLAS and Triton's best configs take
  };
  for (const MatmulCase& mc : {MatmulCase{"bf16_matmul_bias_relu", pl::bf16, false, false, Epi::BiasRelu, 2048, 2048, 2048},
                               MatmulCase{"bf16_matmul_bias_relu", pl::bf16, false, false, Epi::BiasRelu, 4096, 4096, 4096},
                               MatmulCase{"bf16_matmul_bias_relu", pl::bf16, false, false, Epi::BiasRelu, 4096, 4096, 4096, 256},
                               MatmulCase{"bf16_matmul_residual", pl::bf16, false, false, Epi::Residual, 4096, 4096, 4096},
                               MatmulCase{"bf16_x_wT", pl::bf16, false, true, Epi::None, 4096, 4096, 4096},
                               MatmulCase{"bf16_aT_b", pl::bf16, true, false, Epi::None, 4096, 4096, 4096},
                               MatmulCase{"bf16_x_wT", pl::bf16, false, true, Epi::None, 4096, 4096, 4096, 256},
                               MatmulCase{"bf16_matmul", pl::bf16, false, false, Epi::None, 8192, 8192, 8192},
                               MatmulCase{"bf16_matmul", pl::bf16, false, false, Epi::None, 8192, 8192, 8192, 256},
                               MatmulCase{"bf16_matmul_edge", pl::bf16, false, false, Epi::None, 4000, 4000, 4096},
                               MatmulCase{"f16_matmul", pl::f16, false, false, Epi::None, 4096, 4096, 4096},
                               MatmulCase{"f32_tf32_matmul", pl::f32, false, false, Epi::None, 4096, 4096, 4096},
                               MatmulCase{"i8_matmul", pl::i8, false, false, Epi::None, 4096, 4096, 4096}}) {
    if (!section("matmul")) break;
    const int64_t M = mc.M, N = mc.N, K = mc.K, bm = 128, bn = mc.bn, bk = mc.t == pl::f32 ? 32 : 64;
    const bool ta = mc.ta, tb = mc.tb;
    const Epi epi = mc.epi;
    const pl::DType t = mc.t, acc_t = t == pl::i8 ? pl::i32 : pl::f32, out_t = t == pl::i8 ? pl::i32 : t;
    auto k = pl::pallas_call(
        [K, bm, bn, bk, ta, tb, epi, acc_t, out_t](pl::Ref a, pl::Ref b, pl::Ref extra, pl::Ref o) {
          pl::Value acc = pl::fori_loop(0, int(K / bk), pl::Value(pl::zeros({bm, bn}, acc_t)), [&](pl::Value kk, pl::Value acc) {
            pl::Value x = ta ? a(pl::ds(kk * bk, bk), pl::all) : a(pl::all, pl::ds(kk * bk, bk));
            pl::Value y = tb ? b(pl::all, pl::ds(kk * bk, bk)) : b(pl::ds(kk * bk, bk), pl::all);
            return acc + pl::dot(x, y, {.trans_a = ta, .trans_b = tb});
          });
          if (epi == Epi::BiasRelu) acc = pl::maximum(acc + extra[pl::all].astype(pl::f32), 0.f);
          if (epi == Epi::Residual) acc = acc + extra[pl::all].astype(pl::f32);
          o[pl::all] = acc.astype(out_t);
        },
        pl::ShapeDtype({M, N}, out_t),
        {.grid = {(M + bm - 1) / bm, (N + bn - 1) / bn},
         .in_specs = {ta ? pl::BlockSpec({K, bm}, [](pl::Value i, pl::Value j) { return pl::idx(0, i); })
                         : pl::BlockSpec({bm, K}, [](pl::Value i, pl::Value j) { return pl::idx(i, 0); }),
                      tb ? pl::BlockSpec({bn, K}, [](pl::Value i, pl::Value j) { return pl::idx(j, 0); })
                         : pl::BlockSpec({K, bn}, [](pl::Value i, pl::Value j) { return pl::idx(0, j); }),
                      epi == Epi::Residual ? pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })
                                           : pl::BlockSpec({1, bn}, [](pl::Value i, pl::Value j) { return pl::idx(0, j); })},
         .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
         .name = mc.name, .compiler_params = {.num_warps = 8}});
    auto a = (t == pl::i8 ? pl::random::randint(ta ? pl::Shape{K, M} : pl::Shape{M, K}, t, 4, -8, 8)
                          : pl::random::normal(ta ? pl::Shape{K, M} : pl::Shape{M, K}, t, 4)).to(pl::Device::cuda(0));
    auto b = (t == pl::i8 ? pl::random::randint(tb ? pl::Shape{N, K} : pl::Shape{K, N}, t, 5, -8, 8)
                          : pl::random::normal(tb ? pl::Shape{N, K} : pl::Shape{K, N}, t, 5)).to(pl::Device::cuda(0));
    auto extra = pl::random::normal(epi == Epi::Residual ? pl::Shape{M, N} : pl::Shape{1, N}, t == pl::i8 ? pl::bf16 : t, 6).to(pl::Device::cuda(0));
    pl::Array out;
    double t0 = now_ms();
    try {
      out = k(a, b, extra);
      pl::synchronize();
    } catch (const pl::Error& e) {
      std::printf("%s_%lldx%lldx%lld,0,-,0,error: %.160s\n", mc.name, (long long)M, (long long)N, (long long)K, e.what());
      continue;
    }
    double first_ms = now_ms() - t0;
    double ms = median_ms([&] { out = k(a, b, extra); }, 5);
    auto av = a.to_vector<float>(), bv = b.to_vector<float>(), cv = extra.to_vector<float>(), ov = out.to_vector<float>();
    double err = 0;
    for (int64_t i = 0; i < M; i += 509)
      for (int64_t j = 0; j < N; j += 263) {
        double s = 0;
        for (int64_t q = 0; q < K; ++q) s += (double)(ta ? av[q * M + i] : av[i * K + q]) * (tb ? bv[j * K + q] : bv[q * N + j]);
        double want = epi == Epi::BiasRelu ? std::max(0.0, s + cv[j]) : epi == Epi::Residual ? s + cv[i * N + j] : s;
        err = std::max(err, std::fabs(ov[i * N + j] - want) / (1 + std::fabs(want)));
      }
    std::string shape = M == N && N == K ? std::to_string(M) + "^3" : std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
    std::printf("%s_%s_%lldx%lld,%.4f,%s,%.2f,relerr=%g,first_call_ms=%.0f\n", mc.name, shape.c_str(), (long long)bm, (long long)bn, ms,
                t == pl::i8 ? "TOP/s" : "TFLOP/s", 2.0 * M * N * K / ms / 1e9, err, first_ms);
  }
  if (section("matmul")) row([&] {  // bf16 batched matmul 16 x 2048^3: a batch axis in the grid, squeezed from the blocks
    const int64_t B = 16, M = 2048, N = 2048, K = 2048, bm = 128, bn = 128, bk = 64;
    auto k = pl::pallas_call(
        [](pl::Ref a, pl::Ref b, pl::Ref o) {
          pl::Value acc = pl::fori_loop(0, int(K / bk), pl::Value(pl::zeros({bm, bn}, pl::f32)), [&](pl::Value kk, pl::Value acc) {
            return acc + pl::dot(a(pl::all, pl::ds(kk * bk, bk)), b(pl::ds(kk * bk, bk), pl::all));
          });
          o[pl::all] = acc.astype(pl::bf16);
        },
        pl::ShapeDtype({B, M, N}, pl::bf16),
        {.grid = {B, M / bm, N / bn},
         .in_specs = {pl::BlockSpec({pl::squeezed, bm, K}, [](pl::Value z, pl::Value i, pl::Value) { return pl::idx(z, i, 0); }),
                      pl::BlockSpec({pl::squeezed, K, bn}, [](pl::Value z, pl::Value, pl::Value j) { return pl::idx(z, 0, j); })},
         .out_specs = {pl::BlockSpec({pl::squeezed, bm, bn}, [](pl::Value z, pl::Value i, pl::Value j) { return pl::idx(z, i, j); })},
         .name = "batched_matmul", .compiler_params = {.num_warps = 8}});
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
    std::printf("bf16_batched_matmul_16x2048^3,%.4f,TFLOP/s,%.2f,relerr=%g,first_call_ms=%.0f\n", ms, 2.0 * B * M * N * K / ms / 1e9, err, first_ms);
  });
  if (section("tf32")) {  // the f32 (tf32) user matmul over block shapes, stages and warps (CUDA_BENCH_ONLY=tf32)
    int64_t n = 4096;
    auto a = pl::random::normal({n, n}, pl::f32, 4).to(pl::Device::cuda(0));
    auto b = pl::random::normal({n, n}, pl::f32, 5).to(pl::Device::cuda(0));
    struct C { int64_t bm, bn, bk; int warps, stages; };
    for (C c : {C{128, 128, 32, 8, 3}, C{128, 128, 32, 8, 2}, C{128, 128, 32, 4, 3}, C{128, 128, 16, 8, 4}, C{128, 256, 32, 8, 2},
                C{128, 128, 64, 8, 2}, C{64, 128, 32, 4, 3}}) {
      auto k = pl::pallas_call(
          [n, c](pl::Ref x, pl::Ref y, pl::Ref o) {
            o[pl::all] = pl::fori_loop(0, int(n / c.bk), pl::Value(pl::zeros({c.bm, c.bn}, pl::f32)), [&](pl::Value kk, pl::Value acc) {
              return acc + pl::dot(x(pl::all, pl::ds(kk * c.bk, c.bk)), y(pl::ds(kk * c.bk, c.bk), pl::all));
            });
          },
          pl::ShapeDtype({n, n}, pl::f32),
          {.grid = {n / c.bm, n / c.bn},
           .in_specs = {pl::BlockSpec({c.bm, n}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
                        pl::BlockSpec({n, c.bn}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })},
           .out_specs = {pl::BlockSpec({c.bm, c.bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
           .name = "tf32_sweep", .compiler_params = {.num_warps = c.warps, .num_stages = c.stages}});
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
    std::printf("autotuned_bf16_matmul_4096^3,%.4f,TFLOP/s,%.2f,chosen=%s%s,default(64x64x32 w4)=%.2f TFLOP/s,tuning_ms=%.0f\n", ms,
                2.0 * n * n * n / ms / 1e9, r.best.str().c_str(), r.from_cache ? " (cached)" : "", 2.0 * n * n * n / ms_def / 1e9, tune_ms);
  }
  // Flash attention as a user writes it (kernels/attention.cc is written that way: online
  // softmax over KV blocks, two pl::dot per iteration); run with PALLAS_NO_FAST_PATHS=1 it
  // takes the general compiler, not the recognised sm_90a kernel.
  struct AttnCase {
    int64_t B, H, S, D, bq, bk;
    int warps;
    bool causal = false;
  };
  for (AttnCase c : {AttnCase{8, 16, 2048, 64, 64, 64, 4}, AttnCase{8, 16, 2048, 64, 128, 64, 8}, AttnCase{8, 16, 2048, 64, 128, 128, 8},
                     AttnCase{4, 16, 4096, 128, 128, 64, 8}, AttnCase{4, 16, 4096, 128, 128, 64, 8, true},
                     AttnCase{4, 16, 4096, 256, 64, 64, 4}}) {
    if (!section("attention")) break;
    pl::kernels::AttentionConfig cfg{.block_q = c.bq, .block_k = c.bk, .causal = c.causal};
    cfg.compiler_params.num_warps = c.warps;
    pl::Call k = pl::kernels::flash_attention(c.B, c.H, c.S, c.D, pl::bf16, cfg);
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
      std::printf("bf16_attention_B%lldH%lldS%lldD%lld_bq%lld_bk%lld_w%d,0,-,0,error: %.160s\n", (long long)c.B, (long long)c.H, (long long)c.S, (long long)c.D,
                  (long long)c.bq, (long long)c.bk, c.warps, e.what());
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
    std::printf("bf16_attention%s_B%lldH%lldS%lldD%lld_bq%lld_bk%lld_w%d,%.4f,TFLOP/s,%.2f,maxerr=%g,first_call_ms=%.0f\n", c.causal ? "_causal" : "",
                (long long)c.B, (long long)c.H, (long long)c.S, (long long)c.D, (long long)c.bq, (long long)c.bk, c.warps, ms, flops / ms / 1e9, err,
                first_ms);
  }
  return 0;
}
