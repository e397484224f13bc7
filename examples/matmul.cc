// Matmul: a grid over C's tiles, a fori_loop over K reading pl::ds slices of A and B.
#include "examples/examples.h"
#include "pallas/kernels.h"

namespace pl = pallas;

namespace examples {

bool matmul_one(pl::DType dt, double tol) {
  const int64_t m = 256, n = 256, k = 512;
  pl::Array a = pl::random::normal({m, k}, dt, 3), b = pl::random::normal({k, n}, dt, 4);
  auto call = pl::kernels::matmul(m, n, k, dt, pl::f32, {.block_m = 64, .block_n = 64, .block_k = 64});
  pl::Array c;
  double ms = time_ms([&] { c = call(a, b); });
  auto A = a.to_vector<double>(), B = b.to_vector<double>(), C = c.to_vector<double>();
  std::vector<double> ref(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) ref[i * n + j] += A[i * k + p] * B[p * n + j];
  return report(std::string("matmul ") + pl::dtype_name(dt) + " 256x256x512", call, rel_error(C, ref), tol, ms);
}

bool matmul() {
  bool ok = matmul_one(pl::f32, 2e-3);  // tf32 inputs, as the GPU's default precision
  ok = matmul_one(pl::bf16, 1e-5) && ok;  // bf16 inputs are exact in f32; f32 accumulation (any order)
  return ok;
}

}  // namespace examples
