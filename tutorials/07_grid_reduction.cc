// Tutorial 07: a reduction across programs — column sums of a tall matrix, two ways.
//
// What it does: sums[c] = sum_r x[r, c] for x: f32[2048, 96]. No one program should read all
// 2048 rows, so the rows are split into 8 blocks of 256 and the programs' partial sums combined.
//
// The Pallas ideas:
//  1. A sequential grid axis. Grid (column block j, row block r) = 3 x 8; program (j, r) reads
//     x's block (r, j) ([256, 32]) and adds its column sums into output block j. The output's
//     index map (j, r) -> (j) ignores r, so the 8 programs along r revisit one output block:
//     Pallas infers that axis sequential (they run in order; tutorial 05) and the axis of j
//     parallel. Program (j, 0) initialises the block with pl::when.
//  2. Atomics on a parallel grid. Grid (r) = 8, declared parallel: every program sums all 96
//     columns of its 256 rows and adds the result into the one output block with
//     pl::atomic_add, which makes concurrent read-add-writes safe. Programs may run in any
//     order, so no program can be "first" to zero the output: it arrives zeroed instead, as an
//     input aliased to the output (input_output_aliases {1: 0}: input 1's buffer is output 0's).
//     The sums are added in an order that may change from run to run on a GPU, so the last
//     bits may too — the price of atomics on floats.
//  Both are compared with a double reference, allowing for f32 rounding of sums of 2048 terms.
//
// Try next: drop .dimension_semantics from the atomic call (the constant output index map
// makes the axis inferred sequential: correct, but one program at a time on a GPU); replace
// atomic_add by `o_ref[pl::all] += ...` (on a parallel axis `+=` into a shared block is atomic
// too); run both with PALLAS_INTERPRET_CHECKS=1 — then make call 2 store instead of add.
#include <cstdio>
#include <iostream>

#include <pallas/pallas.h>
#include <pallas/testing.h>

namespace pl = pallas;
using V = pl::Value;

int main() {
  if (!pl::testing::backend_available()) return 77;  // PALLAS_BACKEND=cuda without a GPU: skipped

  const int64_t R = 2048, C = 96, br = 256, bc = 32;
  pl::Array x = pl::random::normal({R, C}, pl::f32, /*seed=*/11);

  // 1. The row-block axis sequential (inferred), each output block accumulated in order.
  pl::Call sequential = pl::pallas_call(
      [=](pl::Ref x_ref, pl::Ref o_ref) {
        pl::when(pl::program_id(1) == 0, [&] { o_ref[pl::all] = pl::zeros({bc}, pl::f32); });
        o_ref[pl::all] += pl::sum(x_ref[pl::all], 0);  // [256, 32] -> [32]
      },
      pl::ShapeDtype({C}, pl::f32),
      {.grid = {C / bc, R / br},
       .in_specs = {pl::BlockSpec({br, bc}, [](V j, V r) { return pl::idx(r, j); })},
       .out_specs = {pl::BlockSpec({bc}, [](V j, V r) { return pl::idx(j); })},
       .name = "column_sums_sequential"});

  // 2. A parallel axis, partial sums combined with atomics into a zeroed, aliased output.
  pl::Call atomic = pl::pallas_call(
      [](pl::Ref x_ref, pl::Ref zeros_ref, pl::Ref o_ref) {
        pl::atomic_add(o_ref, {pl::all}, pl::sum(x_ref[pl::all], 0));  // [256, 96] -> [96]
      },
      pl::ShapeDtype({C}, pl::f32),
      {.grid = {R / br},
       .dimension_semantics = {pl::parallel},
       .in_specs = {pl::BlockSpec({br, C}, [](V r) { return pl::idx(r, 0); }),
                    pl::BlockSpec({C}, [](V r) { return pl::idx(0); })},
       .out_specs = {pl::BlockSpec({C}, [](V r) { return pl::idx(0); })},
       .input_output_aliases = {{1, 0}},
       .name = "column_sums_atomic"});

  pl::Array by_sequential = sequential(x);
  pl::Array by_atomics = atomic(x, pl::Array::zeros({C}, pl::f32));

  std::vector<double> xs = x.to_vector<double>(), expected(C, 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) expected[c] += xs[r * C + c];
  pl::testing::AllcloseOptions tolerance{.rtol = 1e-5, .atol = 1e-4};
  auto check1 = pl::testing::allclose(by_sequential, expected, tolerance);
  auto check2 = pl::testing::allclose(by_atomics, expected, tolerance);
  std::printf("%s on the %s\n%s", sequential.name().c_str(), sequential.backend_name().c_str(), check1.report.c_str());
  std::printf("%s on the %s\n%s", atomic.name().c_str(), atomic.backend_name().c_str(), check2.report.c_str());
  std::cout << "sums = " << by_sequential << "\n";
  return check1 && check2 ? 0 : 1;
}
