// Tutorial 03: row softmax — a whole row per program, reductions, and why subtract the max.
//
// What it does: softmax over each row of x: f32[100, 781], out[r, c] = e^x[r,c] / sum_c e^x[r,c].
//
// The Pallas ideas:
//  - One program per row: the block shape {pl::squeezed, 781} takes one row and drops that
//    size-1 dimension (JAX Pallas' `None`), so the kernel sees a 1-D ref of the whole row and
//    can reduce over it in one go — no masks, since a block that spans the row never overhangs.
//  - Reductions: pl::max(v) and pl::sum(e) reduce every axis to a scalar (pl::sum(v, axis) and
//    keepdims reduce some); scalars broadcast against tiles, so `v - m` subtracts m from each lane.
//  - Numerical stability: softmax(x) = softmax(x - m) for any m. With m = max(x) every exponent
//    is <= 0 and e^(x - m) <= 1, so nothing overflows. Rows of large logits (here every tenth row
//    is scaled by 100) overflow f32's e^x beyond x = 88.7: the naive kernel returns inf / inf =
//    NaN there, as this program shows.
//
// Try next: take several rows per program (block {8, 781}, reduce with pl::max(v, 1, true));
// read bf16 input and compute in f32 (v = x_ref[pl::all].astype(pl::f32)); a layer norm is the
// same shape of kernel (mean and variance instead of max and sum).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <pallas/pallas.h>
#include <pallas/testing.h>

namespace pl = pallas;

pl::Call softmax_call(int64_t rows, int64_t cols, bool stable) {
  auto kernel = [stable](pl::Ref x_ref, pl::Ref o_ref) {
    pl::Value v = x_ref[pl::all];  // f32[781]: this program's row
    if (stable) v = v - pl::max(v);
    pl::Value e = pl::exp(v);
    o_ref[pl::all] = e / pl::sum(e);
  };
  pl::BlockSpec row({pl::squeezed, cols}, [](pl::Value r) { return pl::idx(r, 0); });
  return pl::pallas_call(kernel, pl::ShapeDtype({rows, cols}, pl::f32),
                         {.grid = {rows}, .in_specs = {row}, .out_specs = {row}, .name = stable ? "softmax" : "naive_softmax"});
}

int main() {
  if (!pl::testing::backend_available()) return 77;  // PALLAS_BACKEND=cuda without a GPU: skipped

  const int64_t rows = 100, cols = 781;
  std::vector<float> xs = pl::random::normal({rows, cols}, pl::f32, /*seed=*/5).to_vector<float>();
  for (int64_t r = 0; r < rows; r += 10)
    for (int64_t c = 0; c < cols; ++c) xs[r * cols + c] *= 100;  // logits up to a few hundred
  pl::Array x = pl::Array::from_vector(xs, {rows, cols});

  pl::Call softmax = softmax_call(rows, cols, /*stable=*/true);
  pl::Array out = softmax(x);

  // The naive kernel on the same input: rows whose e^x overflowed hold NaN.
  std::vector<float> naive = softmax_call(rows, cols, /*stable=*/false)(x).to_vector<float>();
  int64_t nan_rows = 0;
  for (int64_t r = 0; r < rows; ++r)
    nan_rows += std::any_of(naive.begin() + r * cols, naive.begin() + (r + 1) * cols, [](float v) { return std::isnan(v); });
  std::printf("naive softmax (no max subtraction): %lld of %lld rows are NaN\n", static_cast<long long>(nan_rows),
              static_cast<long long>(rows));

  std::vector<double> expected(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = &xs[r * cols];
    double m = *std::max_element(row, row + cols), s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(row[c] - m);
    for (int64_t c = 0; c < cols; ++c) expected[r * cols + c] = std::exp(row[c] - m) / s;
  }
  auto check = pl::testing::allclose(out, expected);
  std::printf("%s: %lld programs on the %s\n%s", softmax.name().c_str(), static_cast<long long>(rows),
              softmax.backend_name().c_str(), check.report.c_str());
  return check && nan_rows == 10 ? 0 : 1;
}
