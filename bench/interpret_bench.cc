// Interpreter speed against the Pallas interpret-mode figures in shared/DESIGN.md
// (measured there on a 16-core machine): exp over 2^20 in 1024 programs, 274 ms;
// matmul 512^3 f32 in 16 programs of 128x128 blocks, 12.9 ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <pallas/pallas.h>

namespace pl = pallas;

template <class F>
double median_ms(F&& f, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto a = std::chrono::steady_clock::now();
    f();
    auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  std::printf("interpreter benchmark, %u hardware threads\n", std::thread::hardware_concurrency());
  std::printf("%-44s %10s %12s %8s\n", "workload", "ours ms", "Pallas ms", "speedup");

  {  // exp over 2^20 in 1024 programs
    const int64_t n = 1 << 20, b = 1024;
    auto spec = pl::BlockSpec({b}, [](pl::Value i) { return pl::idx(i); });
    auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::exp(x[pl::all]); },
                                pl::ShapeDtype({n}, pl::f32),
                                {.grid = {n / b}, .in_specs = {spec}, .out_specs = {spec}, .interpret = true});
    pl::Array x = pl::random::normal({n}, pl::f32, 0);
    call(x);  // trace once
    double ms = median_ms([&] { call(x); }, 21);
    std::printf("%-44s %10.2f %12.1f %7.0fx\n", "exp f32[2^20], 1024 programs", ms, 274.0, 274.0 / ms);
  }
  {  // matmul 512^3 in 16 programs of 128x128 blocks (full K per program)
    const int64_t n = 512, b = 128;
    auto call = pl::pallas_call(
        [](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = pl::dot(x[pl::all], y[pl::all]); },
        pl::ShapeDtype({n, n}, pl::f32),
        {.grid = {n / b, n / b},
         .in_specs = {pl::BlockSpec({b, n}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
                      pl::BlockSpec({n, b}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })},
         .out_specs = {pl::BlockSpec({b, b}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
         .interpret = true});
    pl::Array x = pl::random::normal({n, n}, pl::f32, 1), y = pl::random::normal({n, n}, pl::f32, 2);
    call(x, y);
    double ms = median_ms([&] { call(x, y); }, 21);
    std::printf("%-44s %10.2f %12.1f %7.1fx   (%.0f GFLOP/s)\n", "matmul f32 512^3, 16 programs (128x128)", ms, 12.9,
                12.9 / ms, 2.0 * n * n * n / ms / 1e6);
  }
  {  // the same matmul as users write it (README, kernels/matmul.cc) and as the Pallas anchor ran:
     // a K loop over 32-wide slices, acc + dot(...), 16 programs of 128x128 blocks
    const int64_t n = 512, b = 128, bk = 32;
    auto call = pl::pallas_call(
        [](pl::Ref x, pl::Ref y, pl::Ref o) {
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
    pl::Array x = pl::random::normal({n, n}, pl::f32, 1), y = pl::random::normal({n, n}, pl::f32, 2);
    call(x, y);
    double ms = median_ms([&] { call(x, y); }, 41);
    std::printf("%-44s %10.2f %12.1f %7.1fx   (%.0f GFLOP/s)\n", "matmul f32 512^3, K loop of 32 (128x128)", ms, 12.9,
                12.9 / ms, 2.0 * n * n * n / ms / 1e6);
  }
  {  // trace + first call of a small kernel (no compile on the interpreter)
    auto t0 = std::chrono::steady_clock::now();
    auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.0f + 1.0f; },
                                pl::ShapeDtype({1024}, pl::f32), {.interpret = true});
    pl::Array x = pl::random::normal({1024}, pl::f32, 3);
    call(x);
    auto t1 = std::chrono::steady_clock::now();
    double steady = median_ms([&] { call(x); }, 101);
    std::printf("%-44s %10.3f\n", "first call (trace + run), tiny kernel", std::chrono::duration<double, std::milli>(t1 - t0).count());
    std::printf("%-44s %10.4f\n", "steady-state call, tiny kernel", steady);
  }
  return 0;
}
