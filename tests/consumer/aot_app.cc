// Runs the consumer's AOT kernel with the installed AOT runtime only. Exits 77 where there is
// no GPU (no driver or no device) or the GPU is of neither built architecture (sm_80, sm_90):
// the check then reports the program as built, not run.
#include <cstdio>
#include <vector>

#include "consumer_kernels.h"

namespace aot = pallas::aot;

#define CHECK(x)                                                                                    \
  do {                                                                                              \
    CUresult r_ = (x);                                                                              \
    if (r_ != CUDA_SUCCESS) {                                                                       \
      std::printf("consumer aot: %s: %s\n", #x, aot::error_string(r_));                             \
      bool no_gpu_ = r_ == CUDA_ERROR_SHARED_OBJECT_INIT_FAILED || r_ == CUDA_ERROR_NO_DEVICE ||    \
                     r_ == CUDA_ERROR_NO_BINARY_FOR_GPU;                                            \
      return no_gpu_ ? 77 : 1;                                                                      \
    }                                                                                               \
  } while (0)

int main() {
  const int n = 1000;
  std::vector<float> x(n), o(n);
  for (int i = 0; i < n; ++i) x[i] = 0.5f * i - 100.f;
  CUdeviceptr dx, dout;
  CHECK(aot::device_alloc(&dx, n * 4));
  CHECK(aot::device_alloc(&dout, n * 4));
  CHECK(aot::copy_to_device(dx, x.data(), n * 4));
  CHECK(consumer_kernels::affine(nullptr, (const void*)dx, (void*)dout));
  CHECK(aot::copy_to_host(o.data(), dout, n * 4));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += o[i] != x[i] * 2.f + 1.f;
  std::printf("consumer aot: affine over %d elements %s\n", n, bad ? "WRONG" : "ok");
  return bad ? 1 : 0;
}
