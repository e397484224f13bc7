// Shared by the standalone sm_90a checks: error checking, bf16 bits, deterministic fills.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

struct bf16raw {
  unsigned short x;
};

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t e = (x);                                                                     \
    if (e != cudaSuccess) {                                                                  \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__);    \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

__device__ inline float hash_val(unsigned i, unsigned seed) {
  unsigned x = i * 2654435761u ^ (seed * 0x9e3779b9u);
  x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16;
  return (x & 0xffff) / 32768.0f - 1.0f;
}
// p[i] = bf16(scale * uniform(-1, 1)), deterministic in (i, seed).
__global__ inline void fill(bf16raw* p, size_t n, unsigned seed, float scale) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned u = __float_as_uint(hash_val((unsigned)i, seed) * scale);
    u += 0x7fff + ((u >> 16) & 1);
    p[i].x = (unsigned short)(u >> 16);
  }
}
__device__ inline float bf(bf16raw h) { return __uint_as_float(((unsigned)h.x) << 16); }
