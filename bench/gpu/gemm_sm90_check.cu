// Standalone check and timing of the sm_90a wgmma/TMA GEMM mainloop (src/backends/cuda/device).
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I../../src/backends/cuda/device
//        gemm_sm90_check.cu -lcuda -o gemm_sm90_check
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "check_util.cuh"
#include "gemm_sm90.cuh"

using namespace pallas_dev;


template <int BN, int STAGES>
__global__ void __launch_bounds__(384, 1)
    gemm_kernel(const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb, float* C, int M, int N,
                int K) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ u64 full[STAGES], empty[STAGES];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 2);
    }
    mbar_fence_init();
  }
  __syncthreads();
  int tm, tn;
  grouped_tile(blockIdx.x, M / 128, N / BN, &tm, &tn);
  int m0 = tm * 128, n0 = tn * BN;
  float acc[BN / 2];
  if (gemm_mainloop<BN, STAGES, 0>(&ta, &tb, smem, full, empty, m0, n0, K / 64, acc)) {
    int c = threadIdx.x / 128 - 1;
#pragma unroll
    for (int i = 0; i < BN / 2; i += 2) {
      int r, col;
      acc_coord(i, &r, &col);
      *reinterpret_cast<float2*>(&C[(size_t)(m0 + 64 * c + r) * N + n0 + col]) = make_float2(acc[i], acc[i + 1]);
    }
  }
}

// Reference: one thread per output element, f32 accumulation (only sampled rows are checked).
__global__ void ref_gemm(const bf16raw* A, const bf16raw* B, float* C, int M, int N, int K, int row_step) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int row = blockIdx.y * row_step;
  if (col >= N || row >= M) return;
  float s = 0;
  for (int k = 0; k < K; ++k) s += bf(A[(size_t)row * K + k]) * bf(B[(size_t)k * N + col]);
  C[(size_t)row * N + col] = s;
}

void make_map(TensorMap* m, void* ptr, unsigned long long inner, unsigned long long outer, unsigned box_inner,
              unsigned box_outer) {
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {inner * 2};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t es[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(m), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ptr, dims,
                                      strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled failed: %d\n", (int)r);
    std::exit(1);
  }
}

template <int BN, int STAGES>
double run(int M, int N, int K, bool time_it, double* err_out) {
  bf16raw *A, *B;
  float *C, *R;
  CK(cudaMalloc(&A, (size_t)M * K * 2));
  CK(cudaMalloc(&B, (size_t)K * N * 2));
  CK(cudaMalloc(&C, (size_t)M * N * 4));
  CK(cudaMalloc(&R, (size_t)M * N * 4));
  fill<<<(unsigned)(((size_t)M * K + 255) / 256), 256>>>(A, (size_t)M * K, 1, 1.f);
  fill<<<(unsigned)(((size_t)K * N + 255) / 256), 256>>>(B, (size_t)K * N, 2, 1.f);
  CK(cudaMemset(C, 0xff, (size_t)M * N * 4));
  TensorMap ta, tb;
  make_map(&ta, A, K, M, 64, 128);
  make_map(&tb, B, N, K, 64, 64);
  int smem = STAGES * GemmTile<BN>::STAGE_BYTES + 1024;
  CK(cudaFuncSetAttribute(gemm_kernel<BN, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  dim3 grid((N / BN) * (M / 128));
  gemm_kernel<BN, STAGES><<<grid, 384, smem>>>(ta, tb, C, M, N, K);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  int row_step = std::max(1, M / 64);
  ref_gemm<<<dim3((N + 127) / 128, (M + row_step - 1) / row_step), 128>>>(A, B, R, M, N, K, row_step);
  CK(cudaDeviceSynchronize());
  std::vector<float> c((size_t)M * N), r((size_t)M * N);
  CK(cudaMemcpy(c.data(), C, c.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.data(), R, r.size() * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (int row = 0; row < M; row += row_step)
    for (int col = 0; col < N; ++col) {
      double d = c[(size_t)row * N + col] - r[(size_t)row * N + col];
      num += d * d;
      den += (double)r[(size_t)row * N + col] * r[(size_t)row * N + col];
    }
  *err_out = std::sqrt(num / den);
  double ms = 0;
  if (time_it) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ts;
    for (int it = 0; it < 25; ++it) {
      cudaEventRecord(e0);
      gemm_kernel<BN, STAGES><<<grid, 384, smem>>>(ta, tb, C, M, N, K);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float t;
      cudaEventElapsedTime(&t, e0, e1);
      if (it >= 5) ts.push_back(t);
    }
    std::sort(ts.begin(), ts.end());
    ms = ts[ts.size() / 2];
  }
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  cudaFree(R);
  return ms;
}

int main() {
  cuInit(0);
  {
    double err;
    run<128, 6>(256, 256, 256, false, &err);
    std::printf("256^3 check: rel.err %.3e\n", err);
    if (!(err < 1e-3)) return 1;
  }
  for (int s : {4096, 8192}) {
    double err;
    double ms = run<128, 6>(s, s, s, true, &err);
    std::printf("BN=128 %d^3: %.3f ms %.1f TFLOP/s rel.err %.2e\n", s, ms, 2.0 * s * s * (double)s / ms / 1e9, err);
    ms = run<256, 4>(s, s, s, true, &err);
    std::printf("BN=256 %d^3: %.3f ms %.1f TFLOP/s rel.err %.2e\n", s, ms, 2.0 * s * s * (double)s / ms / 1e9, err);
  }
  return 0;
}
