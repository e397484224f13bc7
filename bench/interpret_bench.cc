// Interpreter speed against the Pallas interpret-mode figures in shared/DESIGN.md
// (measured there on a 16-core machine): exp over 2^20 in 1024 programs, 274 ms;
// matmul 512^3 f32 in 16 programs of 128x128 blocks, 12.9 ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include <pallas/pallas.h>

namespace pl = pallas;

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

double g_cpu_ms = 0;  // median CPU time (all threads) of the last median_ms: on a shared machine
                      // it shows the work done, wall time the wait too

double fma_peak_gflops(long iters = 4000000, int reps = 5);
double g_peak_fraction = 0;  // median over reps of (GFLOP/s per cpu-second) / (FMA peak just before)

template <class F>
double median_ms(F&& f, int reps, double flops = 0) {
  std::vector<double> t, c, frac;
  for (int r = 0; r < reps; ++r) {
    // the clock of a shared machine drifts: measure the FMA peak next to every run
    double peak = flops > 0 ? fma_peak_gflops(200000, 1) : 0;
    double c0 = cpu_ms();
    auto a = std::chrono::steady_clock::now();
    f();
    auto b = std::chrono::steady_clock::now();
    c.push_back(cpu_ms() - c0);
    t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
    if (flops > 0) frac.push_back(flops / c.back() / 1e6 / peak);
  }
  std::sort(t.begin(), t.end());
  std::sort(c.begin(), c.end());
  std::sort(frac.begin(), frac.end());
  g_cpu_ms = c[c.size() / 2];
  g_peak_fraction = frac.empty() ? 0 : frac[frac.size() / 2];
  return t[t.size() / 2];
}

// The f32 FMA rate of one core, per CPU-second: 24 independent chains of the widest vector
// FMA this build targets (what the interpreter's GEMM can at best reach), run on as many
// threads as the interpreter uses (cores running wide FMAs at once may clock lower).
// Two builds of the loop, as the interpreter's GEMM has (src/backends/interpret/sgemm.h):
// 512-bit vectors where the CPU has AVX-512, else 128-bit ones of the portable build.
template <class vf>
__attribute__((always_inline)) inline void fma_chains(long iters, float* sink) {
  constexpr int L = sizeof(vf) / 4, N = 24;
  vf acc[N], a, b;
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < L; ++j) acc[i][j] = 1.f + i * 1e-3f;
  for (int j = 0; j < L; ++j) a[j] = 0.999999f, b[j] = 1e-7f;
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < N; ++i) acc[i] = acc[i] * a + b;  // 24 independent chains (no fast-math: no closed form)
  }
  float s = 0;
  for (int i = 0; i < N; ++i) s += acc[i][0];
  *sink = s;
}
#if defined(__x86_64__)
__attribute__((target("avx512f,fma"))) void fma_loop_avx512(long iters, float* sink) {
  typedef float vf __attribute__((vector_size(64)));
  fma_chains<vf>(iters, sink);
}
__attribute__((target("avx2,fma"))) void fma_loop_avx2(long iters, float* sink) {
  typedef float vf __attribute__((vector_size(32)));
  fma_chains<vf>(iters, sink);
}
#endif
// The widest FMA the interpreter's GEMM uses here (PALLAS_INTERPRET_ISA caps both alike).
void fma_loop(long iters, float* sink) {
#if defined(__x86_64__)
  const char* f = std::getenv("PALLAS_INTERPRET_ISA");
  std::string cap = f ? f : "";
  if ((cap.empty() || cap == "avx512") && __builtin_cpu_supports("avx512f")) return fma_loop_avx512(iters, sink);
  if (cap != "portable" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return fma_loop_avx2(iters, sink);
#endif
  typedef float vf __attribute__((vector_size(16)));
  fma_chains<vf>(iters, sink);
}

double fma_peak_gflops(long iters, int reps) {
#if defined(__AVX512F__)
  constexpr int L = 16;
#else
  constexpr int L = 8;
#endif
  int threads = pl::interpret_num_threads();
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<float> sink(static_cast<size_t>(threads));
    double c0 = cpu_ms();
    std::vector<std::thread> ts;
    for (int t = 1; t < threads; ++t) ts.emplace_back(fma_loop, iters, &sink[static_cast<size_t>(t)]);
    fma_loop(iters, &sink[0]);
    for (auto& t : ts) t.join();
    double ms = cpu_ms() - c0;
    best = std::max(best, 2.0 * 24 * L * iters * threads / ms / 1e6);
  }
  return best;
}

int main() {
  std::printf("interpreter benchmark, %u hardware threads, %d interpreter threads\n", std::thread::hardware_concurrency(),
              pl::interpret_num_threads());
  const char* only = std::getenv("BENCH_ONLY");  // run the workloads whose name contains this
  auto want = [&](const char* name) { return !only || std::string(name).find(only) != std::string::npos; };
  int reps = std::getenv("BENCH_REPS") ? std::atoi(std::getenv("BENCH_REPS")) : 41;
  std::printf("%-44s %9s %9s %10s %8s\n", "workload (median)", "wall ms", "cpu ms", "Pallas ms", "speedup");
  double peak = 0;
  auto row = [&](const char* name, double ms, double pallas, double flops) {
    std::printf("%-44s %9.3f %9.3f %10.1f %7.1fx", name, ms, g_cpu_ms, pallas, pallas / ms);
    if (flops > 0) {
      if (peak == 0) peak = fma_peak_gflops();
      std::printf("   %.0f GFLOP/s wall, %.0f per cpu-second; %.0f%% of the FMA peak of the cores it ran on (one: %.0f)",
                  flops / ms / 1e6, flops / g_cpu_ms / 1e6, 100 * g_peak_fraction, peak);
    }
    std::printf("\n");
  };

  if (want("exp")) {  // exp over 2^20 in 1024 programs
    const int64_t n = 1 << 20, b = 1024;
    auto spec = pl::BlockSpec({b}, [](pl::Value i) { return pl::idx(i); });
    auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::exp(x[pl::all]); },
                                pl::ShapeDtype({n}, pl::f32),
                                {.grid = {n / b}, .in_specs = {spec}, .out_specs = {spec}, .interpret = true});
    pl::Array x = pl::random::normal({n}, pl::f32, 0);
    call(x);  // trace once
    row("exp f32[2^20], 1024 programs", median_ms([&] { call(x); }, reps), 274.0, 0);
  }
  const int64_t n = 512, b = 128, bk = std::getenv("BENCH_BK") ? std::atoi(std::getenv("BENCH_BK")) : 32;
  pl::Array x = pl::random::normal({n, n}, pl::f32, 1), y = pl::random::normal({n, n}, pl::f32, 2);
  if (want("dot")) {  // matmul 512^3 in 16 programs of 128x128 blocks (full K per program)
    auto call = pl::pallas_call(
        [](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = pl::dot(x[pl::all], y[pl::all]); },
        pl::ShapeDtype({n, n}, pl::f32),
        {.grid = {n / b, n / b},
         .in_specs = {pl::BlockSpec({b, n}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
                      pl::BlockSpec({n, b}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })},
         .out_specs = {pl::BlockSpec({b, b}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
         .interpret = true});
    call(x, y);
    row("matmul f32 512^3, one dot (128x128 blocks)", median_ms([&] { call(x, y); }, reps, 2.0 * n * n * n), 12.9,
        2.0 * n * n * n);
  }
  if (want("kloop")) {  // the same matmul as users write it (README, kernels/matmul.cc) and as the
                        // Pallas anchor ran: a K loop over 32-wide slices, acc + dot(...)
    auto call = pl::pallas_call(
        [bk](pl::Ref x, pl::Ref y, pl::Ref o) {
          pl::Value acc = pl::fori_loop(0, n / bk, pl::zeros({b, b}, pl::f32), [&](pl::Value k, pl::Value acc) {
            return acc + pl::dot(x(pl::all, pl::ds(k * bk, bk)), y(pl::ds(k * bk, bk), pl::all));
          });
          o[pl::all] = acc;
        },
        pl::ShapeDtype({n, n}, pl::f32),
        {.grid = {n / b, n / b},
         .in_specs = {pl::BlockSpec({b, n}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
                      pl::BlockSpec({n, b}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })},
         .out_specs = {pl::BlockSpec({b, b}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
         .interpret = true});
    call(x, y);
    row("matmul f32 512^3, K loop of 32 (128x128)", median_ms([&] { call(x, y); }, reps, 2.0 * n * n * n), 12.9,
        2.0 * n * n * n);
  }
  if (want("tiny")) {  // trace + first call of a small kernel (no compile on the interpreter)
    auto t0 = std::chrono::steady_clock::now();
    auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.0f + 1.0f; },
                                pl::ShapeDtype({1024}, pl::f32), {.interpret = true});
    pl::Array x = pl::random::normal({1024}, pl::f32, 3);
    call(x);
    auto t1 = std::chrono::steady_clock::now();
    std::printf("%-44s %9.3f\n", "first call (trace + run), tiny kernel", std::chrono::duration<double, std::milli>(t1 - t0).count());
    double steady = median_ms([&] { call(x); }, 10 * reps);
    std::printf("%-44s %9.4f %9.4f\n", "steady-state call, tiny kernel", steady, g_cpu_ms);
  }
  return 0;
}
