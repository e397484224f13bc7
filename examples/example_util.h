// Helpers the examples share: timing, error against a reference, reporting.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <pallas/pallas.h>

namespace examples {

// ||out - ref|| / ||ref||
inline double rel_error(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

template <class F>
double time_ms(F&& f, int reps = 3) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto a = std::chrono::steady_clock::now();
    f();
    auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

inline const char* where_run() { return pallas::cuda_available() ? "GPU" : "interpreter"; }

// Prints one line and returns whether the error is within tol.
inline bool report(const std::string& name, const pallas::Call& call, double err, double tol, double ms) {
  bool ok = err <= tol && std::isfinite(err);
  std::printf("%-42s %-11s rel.err %.2e (tol %.0e)  %9.3f ms  %s\n", name.c_str(), call.backend_name().c_str(), err, tol,
              ms, ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace examples
