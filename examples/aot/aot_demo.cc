// A program that runs Pallas kernels compiled ahead of time: it links only the AOT run-time
// (the CUDA driver, loaded at the first launch), not Pallas, NVRTC or the CUDA runtime.
// Exits 77 (CTest: skipped) where there is no GPU.
#include <cmath>
#include <cstdio>
#include <vector>

#include "aot_demo_kernels.h"

namespace aot = pallas::aot;

#define CHECK(x)                                                                                \
  do {                                                                                          \
    CUresult r_ = (x);                                                                          \
    if (r_ != CUDA_SUCCESS) {                                                                   \
      std::printf("%s: %s\n", #x, aot::error_string(r_));                                       \
      return r_ == CUDA_ERROR_SHARED_OBJECT_INIT_FAILED || r_ == CUDA_ERROR_NO_DEVICE ? 77 : 1; \
    }                                                                                           \
  } while (0)

int main() {
  const int n = 5000;
  std::vector<float> x(n), y(n), o(n);
  for (int i = 0; i < n; ++i) x[i] = 0.5f * i, y[i] = 1.f - i;
  CUdeviceptr dx, dy, dout, ds;
  CHECK(aot::device_alloc(&dx, n * 4));
  CHECK(aot::device_alloc(&dy, n * 4));
  CHECK(aot::device_alloc(&dout, n * 4));
  CHECK(aot::device_alloc(&ds, 4));
  CHECK(aot::copy_to_device(dx, x.data(), n * 4));
  CHECK(aot::copy_to_device(dy, y.data(), n * 4));
  CHECK(aot_demo_kernels::add(nullptr, (const void*)dx, (const void*)dy, (void*)dout));
  CHECK(aot::copy_to_host(o.data(), dout, n * 4));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += o[i] != x[i] + 2.f * y[i];
  float s = 3.f;
  CHECK(aot::copy_to_device(ds, &s, 4));
  CHECK(aot_demo_kernels::scale_in_place(nullptr, (const void*)dx, (const void*)ds, (void*)dx));  // in place
  CHECK(aot::copy_to_host(o.data(), dx, n * 4));
  for (int i = 0; i < n; ++i) bad += o[i] != x[i] * 3.f;
  std::printf("aot add and in-place scale over %d elements: %s\n", n, bad ? "WRONG" : "ok");
  return bad ? 1 : 0;
}
