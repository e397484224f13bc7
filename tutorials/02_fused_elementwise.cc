// Tutorial 02: a fused elementwise kernel — bias + GELU over 2-D blocks that overhang.
//
// What it does: out = gelu(x + bias) for x: bf16[200, 130] and bias: bf16[130], one pass over
// memory (the point of fusing: an unfused framework would write x + bias out and read it back).
// gelu(v) = v / 2 * (1 + erf(v / sqrt(2))).
//
// The Pallas ideas:
//  - A 2-D grid of 2-D blocks: program (i, j) sees the [64, 32] block (i, j) of x and out, and
//    block j of bias — index maps take one argument per grid axis. pl::cdiv sizes the grid:
//    4 x 5 = 20 programs, and the blocks of the last row and the last column overhang.
//  - Masks in 2-D: pl::iota numbers the rows (dimension 0) or columns (dimension 1) of a tile.
//    Loads are masked (`.other = 0` fills the lanes outside the array, so the padding is never
//    read); the store needs no mask, since writes outside the array are dropped.
//  - Compute in f32, store bf16: v.astype(pl::f32) widens the loaded tile; .astype(pl::bf16)
//    rounds the result once. Arithmetic on bf16 values would round after every op.
//  - Weak-typed scalars, as in JAX: C++ numbers take the tile's dtype, so `0.5 * v` is f32
//    (not f64 as C++ would make a double times a float), and `x + 1` on a bf16 tile stays bf16.
//
// Try next: set the block to {200, 130} (one program, no masks needed) or {16, 16}; swap the
// GELU for pl::tanh's approximation; print a program's tile with pl::debug_print (tutorial 08).
#include <cmath>
#include <cstdio>
#include <numbers>

#include <pallas/pallas.h>
#include <pallas/testing.h>

namespace pl = pallas;

int main() {
  if (!pl::testing::backend_available()) return 77;  // PALLAS_BACKEND=cuda without a GPU: skipped

  const int64_t rows = 200, cols = 130, bm = 64, bn = 32;
  pl::Array x = pl::random::normal({rows, cols}, pl::bf16, /*seed=*/3);
  pl::Array bias = pl::random::normal({cols}, pl::bf16, /*seed=*/4);

  auto kernel = [=](pl::Ref x_ref, pl::Ref b_ref, pl::Ref o_ref) {
    pl::Value row = pl::program_id(0) * bm + pl::iota(pl::i32, {bm, bn}, 0);  // global row of each lane
    pl::Value col = pl::program_id(1) * bn + pl::iota(pl::i32, {bm, bn}, 1);  // global column
    pl::Value inside = (row < rows) & (col < cols);
    pl::Value col_inside = pl::program_id(1) * bn + pl::arange(bn) < cols;
    pl::Value v = pl::load(x_ref, {pl::all, pl::all}, {.mask = inside, .other = 0}).astype(pl::f32);
    pl::Value b = pl::load(b_ref, {pl::all}, {.mask = col_inside, .other = 0}).astype(pl::f32);
    v = v + b;  // [64, 32] + [32]: broadcasts along the rows, as NumPy
    pl::Value gelu = 0.5 * v * (1 + pl::erf(v / std::numbers::sqrt2));
    o_ref[pl::all] = gelu.astype(pl::bf16);
  };
  pl::Call call = pl::pallas_call(
      kernel, pl::ShapeDtype({rows, cols}, pl::bf16),
      {.grid = {pl::cdiv(rows, bm), pl::cdiv(cols, bn)},
       .in_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); }),
                    pl::BlockSpec({bn}, [](pl::Value i, pl::Value j) { return pl::idx(j); })},
       .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
       .name = "bias_gelu"});
  pl::Array out = call(x, bias);

  // The reference in double from the same bf16 inputs; the kernel's result is rounded to bf16,
  // which allclose's default bf16 tolerance (rtol 1.6e-2) allows for.
  std::vector<double> xs = x.to_vector<double>(), bs = bias.to_vector<double>(), expected(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double v = xs[r * cols + c] + bs[c];
      expected[r * cols + c] = 0.5 * v * (1 + std::erf(v / std::numbers::sqrt2));
    }
  auto check = pl::testing::allclose(out, expected);
  std::printf("%s: %lld programs on the %s\n%s", call.name().c_str(),
              static_cast<long long>(pl::cdiv(rows, bm) * pl::cdiv(cols, bn)), call.backend_name().c_str(),
              check.report.c_str());
  return check ? 0 : 1;
}
