// Standalone check and timing of the sm_90a flash-attention mainloop (src/backends/cuda/device).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check_util.cuh"
#include "attention_sm90.cuh"

using namespace pallas_dev;


template <bool CAUSAL, int BN>
__global__ void __launch_bounds__(384, 1) attn_kernel(const __grid_constant__ TensorMap tq,
                                                      const __grid_constant__ TensorMap tk,
                                                      const __grid_constant__ TensorMap tv, bf16raw* out, int seq,
                                                      float scale_log2) {
  extern __shared__ unsigned char smem_raw[];
  typedef AttnTile<BN> T;
  __shared__ u64 bars[T::BARRIERS];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  if (threadIdx.x == 0) {
    mbar_init(&bars[0], 1);
    for (int s = 0; s < T::STAGES; ++s) {
      mbar_init(&bars[1 + s], 1);
      mbar_init(&bars[1 + T::STAGES + s], 1);
      mbar_init(&bars[1 + 2 * T::STAGES + s], 2);
    }
    mbar_fence_init();
  }
  __syncthreads();
  int nqb = seq / 128;
  int q_block = CAUSAL ? nqb - 1 - blockIdx.x : blockIdx.x;
  int bh = blockIdx.y;
  float o[64];
  if (attention_mainloop<0, CAUSAL, BN>(&tq, &tk, &tv, smem, bars, bh * seq, bh * seq, q_block, seq, scale_log2, o)) {
    int tid = threadIdx.x % 128, c = threadIdx.x / 128 - 1, warp = tid / 32, lane = tid % 32;
#pragma unroll
    for (int i = 0; i < 64; i += 2) {
      int row = q_block * 128 + c * 64 + warp * 16 + lane / 4 + ((i % 4) >= 2 ? 8 : 0);
      int col = (i / 4) * 8 + (lane % 4) * 2;
      *reinterpret_cast<unsigned*>(&out[((size_t)bh * seq + row) * 128 + col]) = pack2(o[i], o[i + 1], 0);
    }
  }
}

// One block per checked row: scores in shared memory, then one thread per output dim.
__global__ void ref_attn(const bf16raw* q, const bf16raw* k, const bf16raw* v, float* ref, int seq, float scale,
                         bool causal, int bh, int row_step) {
  extern __shared__ float sc[];
  int row = blockIdx.x * row_step;
  size_t base = (size_t)bh * seq;
  for (int j = threadIdx.x; j < seq; j += blockDim.x) {
    float acc = 0;
    for (int d = 0; d < 128; ++d) acc += bf(q[(base + row) * 128 + d]) * bf(k[(base + j) * 128 + d]);
    sc[j] = (causal && j > row) ? -INFINITY : acc * scale;
  }
  __syncthreads();
  __shared__ float mx, sum;
  if (threadIdx.x == 0) {
    mx = -INFINITY;
    for (int j = 0; j < seq; ++j) mx = fmaxf(mx, sc[j]);
    sum = 0;
    for (int j = 0; j < seq; ++j) sum += expf(sc[j] - mx);
  }
  __syncthreads();
  int d = threadIdx.x;
  float acc = 0;
  for (int j = 0; j < seq; ++j) acc += expf(sc[j] - mx) * bf(v[(base + j) * 128 + d]);
  ref[blockIdx.x * 128 + d] = acc / sum;
}

void make_map(TensorMap* m, void* ptr, unsigned long long rows, unsigned box_rows) {
  cuuint64_t dims[2] = {128, rows};
  cuuint64_t strides[1] = {256};
  cuuint32_t box[2] = {64, box_rows};
  cuuint32_t es[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(m), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ptr, dims,
                                      strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled failed %d\n", (int)r);
    std::exit(1);
  }
}

template <bool CAUSAL, int BN>
void run(int B, int H, int S) {
  size_t n = (size_t)B * H * S * 128;
  bf16raw *q, *k, *v, *o;
  CK(cudaMalloc(&q, n * 2));
  CK(cudaMalloc(&k, n * 2));
  CK(cudaMalloc(&v, n * 2));
  CK(cudaMalloc(&o, n * 2));
  fill<<<(unsigned)((n + 255) / 256), 256>>>(q, n, 1, 2.f);
  fill<<<(unsigned)((n + 255) / 256), 256>>>(k, n, 2, 2.f);
  fill<<<(unsigned)((n + 255) / 256), 256>>>(v, n, 3, 2.f);
  CK(cudaMemset(o, 0xff, n * 2));
  TensorMap tq, tk, tv;
  make_map(&tq, q, (size_t)B * H * S, 128);
  make_map(&tk, k, (size_t)B * H * S, BN);
  make_map(&tv, v, (size_t)B * H * S, BN);
  int smem = AttnTile<BN>::SMEM + 1024;
  CK(cudaFuncSetAttribute(attn_kernel<CAUSAL, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  float scale = 1.0f / std::sqrt(128.f);
  dim3 grid(S / 128, B * H);
  attn_kernel<CAUSAL, BN><<<grid, 384, smem>>>(tq, tk, tv, o, S, scale * 1.4426950408889634f);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  // check rows of two (batch, head) pairs
  double num = 0, den = 0;
  int row_step = S / 64;
  float* ref;
  CK(cudaMalloc(&ref, 64 * 128 * 4));
  CK(cudaFuncSetAttribute(ref_attn, cudaFuncAttributeMaxDynamicSharedMemorySize, S * 4));
  for (int bh : {0, B * H - 1}) {
    ref_attn<<<64, 128, S * 4>>>(q, k, v, ref, S, scale, CAUSAL, bh, row_step);
    CK(cudaDeviceSynchronize());
    std::vector<float> r(64 * 128);
    std::vector<bf16raw> got(64 * 128);
    CK(cudaMemcpy(r.data(), ref, r.size() * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; ++i)
      CK(cudaMemcpy(&got[i * 128], &o[((size_t)bh * S + (size_t)i * row_step) * 128], 256, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64 * 128; ++i) {
      unsigned u = ((unsigned)got[i].x) << 16;
      float g;
      std::memcpy(&g, &u, 4);
      num += (g - r[i]) * (double)(g - r[i]);
      den += (double)r[i] * r[i];
    }
  }
  double err = std::sqrt(num / den);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ts;
  for (int it = 0; it < 15; ++it) {
    cudaEventRecord(e0);
    attn_kernel<CAUSAL, BN><<<grid, 384, smem>>>(tq, tk, tv, o, S, scale * 1.4426950408889634f);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t;
    cudaEventElapsedTime(&t, e0, e1);
    if (it >= 3) ts.push_back(t);
  }
  std::sort(ts.begin(), ts.end());
  double ms = ts[ts.size() / 2];
  double flops = 4.0 * B * H * (double)S * S * 128 / (CAUSAL ? 2 : 1);
  std::printf("attention BN=%d B%d H%d S%d D128 %s: %.3f ms %.1f TFLOP/s rel.err %.2e\n", BN, B, H, S, CAUSAL ? "causal" : "full",
              ms, flops / ms / 1e9, err);
  cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(ref);
}

int main() {
  cuInit(0);
  run<false, 64>(1, 2, 512);
  run<true, 64>(1, 2, 512);
  run<false, 64>(4, 16, 4096);
  run<true, 64>(4, 16, 4096);
  run<false, 128>(1, 2, 512);
  run<false, 128>(4, 16, 4096);
  run<true, 128>(4, 16, 4096);
  return 0;
}
