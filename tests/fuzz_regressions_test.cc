// Regression tests found by the differential fuzzer (fuzz/, docs/fuzzing.md).
//
// To add one: paste the test that pallas_fuzz prints after "paste into
// tests/fuzz_regressions_test.cc" below, and keep its comment (the seed and index that found
// it, and what failed). Each test runs its kernel on the interpreter (under ctest also
// compiled for sm_90a, PALLAS_CUDA_COMPILE_CHECK=1) and, where a GPU is present, on the GPU,
// comparing the outputs with the fuzzer's tolerances (fuzz::run_and_compare). Inputs come
// from fuzz::input(shape, dtype, seed), deterministic on every machine.
#include <gtest/gtest.h>

#include <limits>

#include <pallas/pallas.h>

#include "fuzz/fuzz_check.h"

namespace pl = pallas;

// pallas_fuzz --seed 13 --index 252 (the matmul family, tiles reduced from 128 x 256 to 64 x 64):
// a K loop of bf16 dots with a relu epilogue, so the general (SIMT) lowering rather than the
// sm_90a fast path. NVRTC took 272 s for the 128 x 256 tile and 7.6 s for this one, because
// the dot's K loop was unrolled inside the unrolled loop over each thread's elements; with
// it rolled: 11.5 s and 0.4 s.
TEST(FuzzRegression, Seed13Kernel252MatmulEpilogueCompilesQuickly) {
  auto kernel = [](const std::vector<pl::Ref>& r) {
    pl::Value v0 = pl::full(pl::Shape{64, 64}, 0, pl::f32).value_();
    std::vector<pl::Value> r9 = pl::fori_loop(0, 2, std::vector<pl::Value>{v0}, [&](const pl::Value& v1, const std::vector<pl::Value>& c1) {
      pl::Value v2 = c1[0];
      pl::Value v3 = pl::Value(int64_t{32});
      pl::Value v4 = pl::mul(v1, v3);
      pl::Value v5 = pl::load(r[0], {pl::all, pl::ds(v4, 32)});
      pl::Value v6 = pl::load(r[1], {pl::ds(v4, 32), pl::all});
      pl::Value v7 = pl::dot(v5, v6);
      pl::Value v8 = pl::add(v2, v7);
      return std::vector<pl::Value>{v8};
    });
    pl::Value v9 = r9[0];
    pl::Value v10 = pl::Value(0.0);
    pl::Value v11 = pl::maximum(v9, v10);
    pl::Value v12 = v11.astype(pl::bf16);
    pl::store(r[2], {pl::all, pl::all}, v12);
  };
  pl::CallOptions opts{.grid = {2, 2},
                       .in_specs = {pl::BlockSpec({64, 64}, [](pl::Value i, pl::Value j) { return pl::idx(i, 0); }),
                                    pl::BlockSpec({64, 64}, [](pl::Value i, pl::Value j) { return pl::idx(0, j); })},
                       .out_specs = {pl::BlockSpec({64, 64}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
                       .name = "fuzz_13_252"};
  std::vector<pl::ShapeDtype> outs = {pl::ShapeDtype(pl::Shape{128, 128}, pl::bf16)};
  std::vector<pl::Array> ins = {fuzz::input(pl::Shape{128, 64}, pl::bf16, 2534154123680882849u, 0),
                                fuzz::input(pl::Shape{64, 128}, pl::bf16, 10919488471153287596u, 0)};
  EXPECT_EQ(fuzz::run_and_compare(kernel, outs, opts, ins, {0.1}), "");
}
