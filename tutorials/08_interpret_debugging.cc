// Tutorial 08: debugging — interpret mode, its checks, the IR and pl::debug_print.
//
// What it does: three kernels with a deliberate bug each, run in interpret mode with the check
// that catches it; then the fixed kernel, checked against a reference on the default backend;
// then a look inside a kernel with pl::debug_print and its IR.
//
// The Pallas ideas:
//  - Interpret mode (.interpret = true, Backend::Interpret, or PALLAS_BACKEND=interpret) runs a
//    kernel on the CPU, program by program, exactly as traced. A GPU turns a wrong kernel into
//    wrong numbers — sometimes, depending on timing; the interpreter can instead *check* each
//    access and stop at the first bad one with a pl::Error naming the kernel, the programs (grid
//    coordinates), the operand and the element, and saying what to change.
//  - The checks (.interpret_params, or PALLAS_INTERPRET_CHECKS=1 for every call of a program):
//      detect_races          two programs of a parallel grid axis touch one element, one writes;
//      detect_uninitialized  a read of an output element no program has written yet;
//      detect_out_of_bounds  an unmasked access past a ref (a ds or index past the block);
//      detect_unwritten_outputs  output elements no program wrote (a grid a block short);
//      detect_padding_reads  an unmasked load of an edge block's padding — legal (it reads NaN
//                            and the store drops those lanes), so not among "1"/"all": ask for
//                            it ("padding") to find a padded lane that reaches a reduction.
//    They keep a record per element, so they cost time: turn them on while debugging and in
//    tests (`PALLAS_INTERPRET_CHECKS=1 ./build/tutorials/tutorial_05_matmul_k_grid`).
//  - Looking inside: pl::debug_print("fmt {}", {values}) prints from every program, prefixed by
//    its grid coordinates, tiles as "f32[4] [1 2 3 4]" (in program order in the interpreter, on
//    the GPU too). call.jaxpr_text() returns the traced kernel, index maps and grid — the same
//    text .debug = true prints when the call is traced (the GPU backend adds its CUDA source).
//
// Try next: run tutorial 07 with PALLAS_INTERPRET_CHECKS=1 after making its atomic_add a plain
// store; break tutorial 01's mask; print a tile in tutorial 06's loop with pl::debug_print.
#include <cstdio>
#include <functional>
#include <string>

#include <pallas/pallas.h>
#include <pallas/testing.h>

namespace pl = pallas;
using V = pl::Value;

// Runs a call that should fail its check, prints the error and says whether it was caught.
bool caught(const std::string& bug, const std::function<void()>& run, const std::string& phrase) {
  try {
    run();
  } catch (const pl::Error& e) {
    std::printf("--- %s, caught:\n%s\n\n", bug.c_str(), e.what());
    return std::string(e.what()).find(phrase) != std::string::npos;
  }
  std::printf("--- %s: NOT caught\n", bug.c_str());
  return false;
}

// Row sums of x: f32[64, 96] in [16, 32] blocks: the output block of grid axis 0's program i
// is revisited by the programs along axis 1, which accumulate into it (tutorial 07).
pl::Call row_sums(bool zero_first, std::vector<pl::DimensionSemantics> semantics, pl::CallOptions opts) {
  opts.grid = {4, 3};
  opts.dimension_semantics = std::move(semantics);
  opts.in_specs = {pl::BlockSpec({16, 32}, [](V i, V j) { return pl::idx(i, j); })};
  opts.out_specs = {pl::BlockSpec({16}, [](V i, V j) { return pl::idx(i); })};
  return pl::pallas_call(
      [zero_first](pl::Ref x_ref, pl::Ref o_ref) {
        if (zero_first) pl::when(pl::program_id(1) == 0, [&] { o_ref[pl::all] = pl::zeros({16}, pl::f32); });
        o_ref[pl::all] += pl::sum(x_ref[pl::all], 1);
      },
      pl::ShapeDtype({64}, pl::f32), std::move(opts));
}

int main() {
  if (!pl::testing::backend_available()) return 77;  // PALLAS_BACKEND=cuda without a GPU: skipped

  pl::Array x = pl::random::normal({64, 96}, pl::f32, /*seed=*/12);
  bool ok = true;

  // Bug 1: the accumulation axis declared parallel — its programs would add at once and race.
  ok &= caught("race: the accumulation axis declared parallel",
               [&] {
                 row_sums(true, {pl::parallel, pl::parallel},
                          {.interpret = true, .name = "racy_row_sums", .interpret_params = {.detect_races = true}})(x);
               },
               "race on output 0");
  // Bug 2: no program zeroes the output block before adding to it.
  ok &= caught("uninitialised: accumulating into an output nobody zeroed",
               [&] {
                 row_sums(false, {},
                          {.interpret = true, .name = "unzeroed_row_sums",
                           .interpret_params = {.detect_uninitialized = true}})(x);
               },
               "which no program has written");
  // Bug 3: tutorial 01's grid computed as 1000 / 128 = 7 instead of pl::cdiv(1000, 128) = 8:
  // the last 104 elements are never written (NaN here, stale memory on a GPU).
  ok &= caught("unwritten outputs: a grid one block short",
               [&] {
                 pl::BlockSpec spec({128}, [](V i) { return pl::idx(i); });
                 auto add = pl::pallas_call([](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = a[pl::all] + b[pl::all]; },
                                            pl::ShapeDtype({1000}, pl::f32),
                                            {.grid = {1000 / 128}, .in_specs = {spec, spec}, .out_specs = {spec},
                                             .interpret = true, .name = "short_add",
                                             .interpret_params = {.detect_unwritten_outputs = true}});
                 pl::Array v = pl::Array::zeros({1000}, pl::f32);
                 add(v, v);
               },
               "104 of 1000 elements of output 0 f32[1000] were written by no program");

  // The fix of bugs 1 and 2: zero first, and leave the semantics to inference (axis 1
  // sequential). Run on the default backend (the GPU where there is one) and checked.
  pl::Call fixed = row_sums(true, {}, {.name = "row_sums"});
  pl::Array sums = fixed(x);
  std::vector<double> xs = x.to_vector<double>(), expected(64, 0.0);
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < 96; ++c) expected[r] += xs[r * 96 + c];
  auto check = pl::testing::allclose(sums, expected, {.rtol = 1e-5, .atol = 1e-5});
  std::printf("--- the fixed kernel on the %s\n%s\n", fixed.backend_name().c_str(), check.report.c_str());
  ok &= static_cast<bool>(check);

  // Looking inside: each of 4 programs prints its block and that block's sum; then the IR.
  pl::Call peek = pl::pallas_call(
      [](pl::Ref x_ref, pl::Ref o_ref) {
        V block = x_ref[pl::all];
        pl::debug_print("block {} sums to {}", {block, pl::sum(block)});
        o_ref[pl::all] = block * 2;
      },
      pl::ShapeDtype({16}, pl::f32),
      {.grid = {4},
       .in_specs = {pl::BlockSpec({4}, [](V i) { return pl::idx(i); })},
       .out_specs = {pl::BlockSpec({4}, [](V i) { return pl::idx(i); })},
       .name = "peek"});
  std::vector<float> ramp(16);
  for (int k = 0; k < 16; ++k) ramp[k] = static_cast<float>(k);
  pl::Array doubled = peek(pl::Array::from_vector(ramp));
  std::fflush(stdout);
  std::printf("--- the IR of '%s' (.debug = true prints it when traced):\n%s", peek.name().c_str(), peek.jaxpr_text().c_str());
  for (int k = 0; k < 16; ++k) ramp[k] *= 2;
  ok &= static_cast<bool>(pl::testing::allclose(doubled, ramp));
  return ok ? 0 : 1;
}
