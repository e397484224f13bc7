// pl::do_bench (include/pallas/bench.h): runs, statistics and errors, on whichever timer the
// machine has (CUDA events with a GPU, the host clock without).
#include <algorithm>
#include <chrono>
#include <thread>

#include "tests/test_util.h"

namespace {
namespace pl = pallas;
using pt::throws_error;

TEST(DoBench, RunsWarmupThenTimedRunsAndReportsTheirStatistics) {
  int calls = 0;
  pl::BenchResult r = pl::do_bench([&] { ++calls; }, {.warmup = 2, .reps = 7});
  EXPECT_EQ(calls, 9);
  ASSERT_EQ(r.times_ms.size(), 7u);
  EXPECT_EQ(r.timer, pl::cuda_available() ? "cuda events" : "host clock");
  std::vector<double> s = r.times_ms;
  std::sort(s.begin(), s.end());
  EXPECT_EQ(r.min_ms, s.front());
  EXPECT_EQ(r.max_ms, s.back());
  EXPECT_EQ(r.median_ms, s[3]);
  EXPECT_LE(r.min_ms, r.mean_ms);
  EXPECT_LE(r.mean_ms, r.max_ms);
  EXPECT_GE(r.min_ms, 0.0);
}

TEST(DoBench, TimesAKernelCall) {
  auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::exp(x[pl::all]); }, pl::ShapeDtype({1 << 16}, pl::f32),
                           {.grid = {64}, .in_specs = {pl::BlockSpec({1024}, [](pl::Value i) { return pl::idx(i); })},
                            .out_specs = {pl::BlockSpec({1024}, [](pl::Value i) { return pl::idx(i); })}, .name = "bench_exp"});
  pl::Array x = pl::random::normal({1 << 16}, pl::f32, 1);
  pl::Array out;
  pl::BenchResult r = pl::do_bench([&] { out = k(x); }, {.warmup = 1, .reps = 5, .flush_l2 = true});
  EXPECT_GT(r.median_ms, 0.0);
  pl::synchronize();
  EXPECT_EQ(out.shape(), (pl::Shape{1 << 16}));
}

TEST(DoBench, HostClockSeesTheTimeWithoutAGpuOnly) {
  if (pl::cuda_available()) GTEST_SKIP() << "with a GPU, do_bench times device work with events; this checks the host clock";
  pl::BenchResult r = pl::do_bench([] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }, {.warmup = 0, .reps = 3});
  EXPECT_GE(r.min_ms, 1.9);
}

TEST(DoBench, BadOptionsAreErrors) {
  EXPECT_TRUE(throws_error([] { pl::do_bench([] {}, {.reps = 0}); }, {"do_bench", "reps must be at least 1", "got reps 0"}));
  EXPECT_TRUE(throws_error([] { pl::do_bench([] {}, {.warmup = -1}); }, {"warmup at least 0"}));
}

}  // namespace
