// Tutorial 01: vector add — the grid, BlockSpecs, program_id and masking the last block.
//
// What it does: out = x + y for vectors of n = 1000 floats, in blocks of 128 elements.
//
// The Pallas ideas:
//  - A kernel is a C++ function over Refs. pallas_call runs it once per *program* of a grid;
//    here the grid has pl::cdiv(1000, 128) = 8 programs (ceiling division: 7 blocks would
//    leave 104 elements out).
//  - A BlockSpec says which block of an array each program sees: block shape {128}, and an
//    index map from the program's grid index i to a *block* index (the block starts at element
//    i * 128). Inside the kernel the refs are just that block, 128 elements long.
//  - The last block overhangs the array: elements 896..1023 of which only 896..999 exist.
//    Writes past the end are dropped, but reads there see padding: poison (NaN) in Pallas C++,
//    unspecified values in JAX Pallas or Triton — never data. So the kernel masks: it computes
//    the global index of each lane from pl::program_id(0) and loads and stores only the lanes
//    below n (Triton's idiom).
//  - Values inside a kernel are whole tiles: `a + b` adds 128 lanes at once.
//
// Try next: drop the masks (`o[pl::all] = x[pl::all] + y[pl::all]`): the answer is still right
// here, since the writes past the end are dropped; now run it with PALLAS_INTERPRET_CHECKS=1 and
// the interpreter reports the read of the padding (tutorial 08). Change n to 1024 and no block
// overhangs.
#include <cstdio>
#include <iostream>

#include <pallas/pallas.h>
#include <pallas/testing.h>

namespace pl = pallas;

int main() {
  // CTest runs each tutorial twice, with PALLAS_BACKEND=interpret and =cuda; without a GPU the
  // second has nothing to run on and reports itself skipped (exit code 77).
  if (!pl::testing::backend_available()) return 77;

  const int64_t n = 1000, block = 128;
  pl::Array x = pl::random::normal({n}, pl::f32, /*seed=*/1);
  pl::Array y = pl::random::normal({n}, pl::f32, /*seed=*/2);

  auto kernel = [=](pl::Ref x_ref, pl::Ref y_ref, pl::Ref o_ref) {
    // This program's elements: block i holds x[i * block : (i + 1) * block].
    pl::Value offsets = pl::program_id(0) * block + pl::arange(block);
    pl::Value in_bounds = offsets < n;  // a bool[128] mask, false past the end of the array
    pl::Value a = pl::load(x_ref, {pl::all}, {.mask = in_bounds});
    pl::Value b = pl::load(y_ref, {pl::all}, {.mask = in_bounds});
    pl::store(o_ref, {pl::all}, a + b, {.mask = in_bounds});
  };
  // Program i sees block i of every operand (the index map returns block indices, not offsets).
  pl::BlockSpec spec({block}, [](pl::Value i) { return pl::idx(i); });
  pl::Call add = pl::pallas_call(kernel, pl::ShapeDtype({n}, pl::f32),
                                 {.grid = {pl::cdiv(n, block)}, .in_specs = {spec, spec}, .out_specs = {spec},
                                  .name = "vector_add"});
  pl::Array out = add(x, y);

  std::cout << "out = " << out << "\n";  // shape, dtype, device and the first and last values
  std::vector<float> xs = x.to_vector<float>(), ys = y.to_vector<float>(), expected(n);
  for (int64_t k = 0; k < n; ++k) expected[k] = xs[k] + ys[k];
  auto check = pl::testing::allclose(out, expected);
  std::printf("ran %lld programs on the %s\n%s", static_cast<long long>(pl::cdiv(n, block)), add.backend_name().c_str(),
              check.report.c_str());
  return check ? 0 : 1;
}
