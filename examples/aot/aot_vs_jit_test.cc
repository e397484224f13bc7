// The same kernels through the JIT (pallas_call) and through AOT launches give the same bits
// (both take the general lowering, the only one). Exits 77 (CTest: skipped) without a GPU.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "aot_demo_kernels.h"
#include "examples/aot/aot_kernels.h"

namespace pl = pallas;

int main() {
  if (!pl::cuda_available()) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  using namespace aot_example;
  int bad = 0;
  auto same = [&](const char* what, const pl::Array& jit, const pl::Array& aot) {
    pl::synchronize();
    auto a = jit.to_host(), b = aot.to_host();
    bool eq = std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
    std::printf("%s: JIT and AOT %s\n", what, eq ? "agree bit for bit" : "DIFFER");
    bad += !eq;
  };
  pl::Device g = pl::Device::cuda(0);
  pl::Array x = pl::random::normal({kN}, pl::f32, 1).to(g), y = pl::random::normal({kN}, pl::f32, 2).to(g);
  pl::Array out(pl::Shape{kN}, pl::f32, g);
  if (aot_demo_kernels::add(nullptr, x.raw_data(), y.raw_data(), out.raw_data()) != CUDA_SUCCESS) return 1;
  same("add", add(kN)(x, y), out);
  pl::Array s = pl::Array::from_vector(std::vector<float>{-1.5f}).to(g);
  pl::Array jit = scale_in_place(kN)(x, s);
  if (aot_demo_kernels::scale_in_place(nullptr, x.raw_data(), s.raw_data(), x.raw_data()) != CUDA_SUCCESS) return 1;
  same("scale_in_place", jit, x);
  pl::Array a = pl::random::normal({kM, kM}, pl::bf16, 3).to(g), b = pl::random::normal({kM, kM}, pl::bf16, 4).to(g);
  pl::Array c(pl::Shape{kM, kM}, pl::bf16, g);
  if (aot_demo_kernels::matmul_relu(nullptr, a.raw_data(), b.raw_data(), c.raw_data()) != CUDA_SUCCESS) return 1;
  same("matmul_relu", matmul_relu(kM)(a, b), c);
  return bad ? 1 : 0;
}
