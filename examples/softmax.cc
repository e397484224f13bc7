// Softmax and layer norm: one row per program, reductions over the row.
#include "examples/examples.h"
#include "pallas/kernels.h"

namespace pl = pallas;

namespace examples {

bool softmax() {
  const int64_t r = 512, c = 1024;
  pl::Array x = pl::random::normal({r, c}, pl::f32, 5);
  auto call = pl::kernels::softmax(r, c, pl::f32);
  pl::Array y;
  double ms = time_ms([&] { y = call(x); });
  auto X = x.to_vector<double>(), Y = y.to_vector<double>();
  std::vector<double> ref(X.size());
  for (int64_t i = 0; i < r; ++i) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, X[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(X[i * c + j] - mx);
    for (int64_t j = 0; j < c; ++j) ref[i * c + j] = std::exp(X[i * c + j] - mx) / s;
  }
  return report("softmax f32[512,1024]", call, rel_error(Y, ref), 1e-5, ms);
}

bool layer_norm() {
  const int64_t r = 512, c = 1024;
  pl::Array x = pl::random::normal({r, c}, pl::f32, 6), w = pl::random::normal({c}, pl::f32, 7),
            b = pl::random::normal({c}, pl::f32, 8);
  auto call = pl::kernels::layer_norm(r, c, pl::f32);
  pl::Array y;
  double ms = time_ms([&] { y = call(x, w, b); });
  auto X = x.to_vector<double>(), W = w.to_vector<double>(), B = b.to_vector<double>(), Y = y.to_vector<double>();
  std::vector<double> ref(X.size());
  for (int64_t i = 0; i < r; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < c; ++j) mean += X[i * c + j];
    mean /= c;
    for (int64_t j = 0; j < c; ++j) var += (X[i * c + j] - mean) * (X[i * c + j] - mean);
    var /= c;
    for (int64_t j = 0; j < c; ++j) ref[i * c + j] = (X[i * c + j] - mean) / std::sqrt(var + 1e-5) * W[j] + B[j];
  }
  return report("layer_norm f32[512,1024]", call, rel_error(Y, ref), 1e-5, ms);
}

}  // namespace examples
