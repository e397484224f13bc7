// The installed package's library in interpret mode (the same result with or without a GPU):
// a kernel of the consumer's own, and one from the kernel library.
#include <cmath>
#include <cstdio>
#include <vector>

#include <pallas/kernels.h>
#include <pallas/pallas.h>
namespace pl = pallas;

int main() {
  const int n = 256;
  std::vector<float> xv(n);
  for (int i = 0; i < n; ++i) xv[i] = 0.25f * i - 7.f;
  auto block = pl::BlockSpec({128}, [](pl::Value i) { return pl::idx(i); });
  auto affine = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.f + 1.f; },
                                pl::ShapeDtype({n}, pl::f32),
                                {.grid = {2}, .in_specs = {block}, .out_specs = {block}, .interpret = true});
  std::vector<float> out = affine(pl::Array::from_vector(xv)).to_vector<float>();
  for (int i = 0; i < n; ++i)
    if (out[i] != xv[i] * 2.f + 1.f) {
      std::printf("consumer: affine wrong at %d: %g\n", i, out[i]);
      return 1;
    }

  // softmax rows sum to one
  const int rows = 4, cols = 64;
  std::vector<float> sv(rows * cols);
  for (int i = 0; i < rows * cols; ++i) sv[i] = std::sin(0.1f * i);
  auto softmax = pl::kernels::softmax(rows, cols, pl::f32, {.interpret = true});
  std::vector<float> p = softmax(pl::Array::from_vector(sv, {rows, cols})).to_vector<float>();
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += p[r * cols + c];
    if (std::fabs(sum - 1.0) > 1e-5) {
      std::printf("consumer: softmax row %d sums to %g\n", r, sum);
      return 1;
    }
  }
  std::printf("consumer: interpret kernel ok, kernels::softmax ok\n");
  return 0;
}
