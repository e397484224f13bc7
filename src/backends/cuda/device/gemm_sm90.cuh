// A warp-specialised GEMM mainloop for sm_90a: C[M,N] = A[M,K] @ B[K,N], bf16 in, f32
// accumulate. One producer warpgroup issues TMA copies into a STAGES-deep ring of shared
// buffers (full/empty mbarriers); two consumer warpgroups run asynchronous wgmma on them
// (each 64 rows x BN), keeping one wgmma group in flight. A is K-major (row-major A), B is
// MN-major (row-major B), both with the 128-byte swizzle.
#pragma once
#include "hopper.cuh"

namespace pallas_dev {

template <int BN>
struct GemmTile {
  static constexpr int BM = 128, BK = 64;
  static constexpr int A_BYTES = BM * BK * 2;             // 16 KiB
  static constexpr int B_BYTES = BK * BN * 2;             // 16 or 32 KiB
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int ACC = BN / 2;                      // f32 accumulators per thread
};

// Runs the mainloop for the tile at (m0, n0) over k tiles [0, k_tiles); consumers end with
// their accumulators in acc (wgmma layout) and return true; the producer returns false.
// ELT is 0 for bf16, 1 for f16.
template <int BN, int STAGES, int ELT>
__device__ __forceinline__ bool gemm_mainloop(const TensorMap* ta, const TensorMap* tb, unsigned char* smem,
                                              u64* full, u64* empty, int m0, int n0, int k_tiles, float* acc) {
  typedef GemmTile<BN> T;
  const int wg = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;
  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (tid == 0) {
      for (int kt = 0; kt < k_tiles; ++kt) {
        int s = kt % STAGES;
        u32 phase = (kt / STAGES) & 1;
        mbar_wait(&empty[s], phase ^ 1);
        unsigned char* a = smem + s * T::STAGE_BYTES;
        unsigned char* b = a + T::A_BYTES;
        mbar_expect_tx(&full[s], T::STAGE_BYTES);
        tma_load_2d(a, ta, &full[s], kt * T::BK, m0);
        for (int j = 0; j < BN / 64; ++j) tma_load_2d(b + j * 8192, tb, &full[s], n0 + 64 * j, kt * T::BK);
      }
    }
    return false;
  }
  setmaxnreg_inc<232>();
  const int c = wg - 1;  // consumer index: rows [64c, 64c + 64)
#pragma unroll
  for (int i = 0; i < T::ACC; ++i) acc[i] = 0.f;
  for (int kt = 0; kt < k_tiles; ++kt) {
    int s = kt % STAGES;
    mbar_wait(&full[s], (kt / STAGES) & 1);
    u32 a = smem_addr(smem + s * T::STAGE_BYTES) + c * 64 * 128;
    u32 b = smem_addr(smem + s * T::STAGE_BYTES + T::A_BYTES);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < T::BK / 16; ++k) {
      u64 da = wgmma_desc(a + k * 32, 16, 1024);
      u64 db = wgmma_desc(b + k * 16 * 128, 8192, 1024);
      if constexpr (ELT == 0 && BN == 256) wgmma_m64n256k16_bf16(acc, da, db);
      else if constexpr (ELT == 0) wgmma_m64n128k16_bf16(acc, da, db);
      else if constexpr (BN == 256) wgmma_m64n256k16_f16(acc, da, db);
      else wgmma_m64n128k16_f16(acc, da, db);
    }
    wgmma_commit();
    wgmma_wait<1>();
    if (kt > 0 && tid == 0) mbar_arrive(&empty[(kt - 1) % STAGES]);
  }
  wgmma_wait<0>();
  if (k_tiles > 0 && tid == 0) mbar_arrive(&empty[(k_tiles - 1) % STAGES]);
  return true;
}

// Tile order that keeps GROUP row-tiles of A and their B column-tiles hot in L2.
__device__ __forceinline__ void grouped_tile(int linear, int tiles_m, int tiles_n, int* tm, int* tn) {
  const int GROUP = 8;
  int per_group = GROUP * tiles_n;
  int g = linear / per_group;
  int first_m = g * GROUP;
  int rows = min(tiles_m - first_m, GROUP);
  int in_group = linear % per_group;
  *tm = first_m + in_group % rows;
  *tn = in_group / rows;
}

// Element (row, col) of the consumer's 64 x BN tile held in acc[i] by this thread.
__device__ __forceinline__ void acc_coord(int i, int* row, int* col) {
  int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  int j = i / 4, r = i % 4;
  *row = warp * 16 + lane / 4 + (r >= 2 ? 8 : 0);
  *col = j * 8 + (lane % 4) * 2 + (r & 1);
}

}  // namespace pallas_dev
