// Flash-attention forward mainloop for sm_90a (head dim 128, bf16/f16): one CTA computes 128
// query rows of one (batch, head). A producer warpgroup loads Q once and K/V blocks of 128 keys
// through a 2-deep ring (TMA, 128-byte swizzle, full/empty mbarriers); two consumer warpgroups
// (64 query rows each) compute S = Q K^T with wgmma from shared memory, the online softmax in
// registers, and O += P V with P fed to wgmma straight from registers.
#pragma once
#include "hopper.cuh"

namespace pallas_dev {

// BN keys per KV block (64 keeps S, P and O within the consumers' registers without spills).
template <int BN>
struct AttnTile {
  static constexpr int BM = 128, D = 128;
  static constexpr int Q_HALF = 128 * 128;        // one 64-column swizzle atom column of the Q tile (bytes)
  static constexpr int Q_TILE = 2 * Q_HALF;       // 128 rows x 128 columns
  static constexpr int KV_HALF = BN * 128;
  static constexpr int KV_TILE = 2 * KV_HALF;     // BN rows x 128 columns
  static constexpr int STAGES = BN == 64 ? 4 : 2;
  static constexpr int SMEM = Q_TILE + 2 * STAGES * KV_TILE;
  static constexpr int BARRIERS = 1 + 3 * STAGES;
};

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ u32 pack2(float lo, float hi, int elt) {
  u32 r;
  if (elt == 0)
    asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(r) : "f"(lo), "f"(hi));
  else
    asm("cvt.rn.f16x2.f32 %0, %2, %1;" : "=r"(r) : "f"(lo), "f"(hi));
  return r;
}

// Returns true in consumer threads, with o (64 f32) holding this thread's part of O (already
// divided by the softmax denominator) in the accumulator layout.
// q_row0/kv_row0: first row of this (batch, head) in the 2-D [B*H*S, D] view.
template <int ELT, bool CAUSAL, int BN>
__device__ __forceinline__ bool attention_mainloop(const TensorMap* tq, const TensorMap* tk, const TensorMap* tv,
                                                   unsigned char* smem, u64* bars, int q_row0, int kv_row0,
                                                   int q_block, int seq, float scale_log2, float* o) {
  typedef AttnTile<BN> T;
  unsigned char* sq = smem;
  unsigned char* sk = smem + T::Q_TILE;                  // STAGES tiles
  unsigned char* sv = sk + T::STAGES * T::KV_TILE;       // STAGES tiles
  u64* q_full = bars;
  u64* k_full = bars + 1;
  u64* v_full = k_full + T::STAGES;
  u64* empty = v_full + T::STAGES;
  const int n_kv = CAUSAL ? (q_block + 1) * (T::BM / BN) : seq / BN;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  // No setmaxnreg here: the consumers fit in the 168 registers of a 384-thread CTA, and the
  // producer's loop spills under a 40-register cap.
  if (wg == 0) {
    if (tid == 0) {
      mbar_expect_tx(q_full, T::Q_TILE);
      for (int h = 0; h < 2; ++h) tma_load_2d(sq + h * T::Q_HALF, tq, q_full, 64 * h, q_row0 + q_block * T::BM);
      for (int j = 0; j < n_kv; ++j) {
        int s = j % T::STAGES;
        mbar_wait(&empty[s], ((j / T::STAGES) & 1) ^ 1);
        mbar_expect_tx(&k_full[s], T::KV_TILE);
        for (int h = 0; h < 2; ++h) tma_load_2d(sk + s * T::KV_TILE + h * T::KV_HALF, tk, &k_full[s], 64 * h, kv_row0 + j * BN);
        mbar_expect_tx(&v_full[s], T::KV_TILE);
        for (int h = 0; h < 2; ++h) tma_load_2d(sv + s * T::KV_TILE + h * T::KV_HALF, tv, &v_full[s], 64 * h, kv_row0 + j * BN);
      }
    }
    return false;
  }
  const int c = wg - 1;
  const int warp = tid / 32, lane = tid % 32;
  const int row0 = q_block * T::BM + c * 64 + warp * 16 + lane / 4;  // query index of this thread's first row
  float m[2] = {__int_as_float(0xff800000), __int_as_float(0xff800000)}, l[2] = {0.f, 0.f};
  float s[BN / 2];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  mbar_wait(q_full, 0);
  const u32 qa = smem_addr(sq) + c * 64 * 128;  // this warpgroup's 64 rows in each atom column
  for (int j = 0; j < n_kv; ++j) {
    const int st = j % T::STAGES;
    const u32 phase = (j / T::STAGES) & 1;
    mbar_wait(&k_full[st], phase);
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[i] = 0.f;
    const u32 ka = smem_addr(sk + st * T::KV_TILE);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // D = 128 in steps of 16: atom column k / 4, 32 bytes per step
      u64 da = wgmma_desc(qa + (k / 4) * T::Q_HALF + (k % 4) * 32, 16, 1024);
      u64 db = wgmma_desc(ka + (k / 4) * T::KV_HALF + (k % 4) * 32, 16, 1024);
      if constexpr (ELT == 0 && BN == 128) wgmma_m64n128k16_bf16_kb(s, da, db);
      else if constexpr (ELT == 0) wgmma_m64n64k16_bf16_kb(s, da, db);
      else if constexpr (BN == 128) wgmma_m64n128k16_f16_kb(s, da, db);
      else wgmma_m64n64k16_f16_kb(s, da, db);
    }
    wgmma_commit();
    wgmma_wait<0>();
    // Online softmax over this block, in the log2 domain. Thread rows: row0 and row0 + 8.
    float mx[2] = {m[0], m[1]};
    const bool diag = CAUSAL && (j + 1) * BN > q_block * T::BM + c * 64;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
      int r = (i % 4) >= 2;
      float v = s[i] * scale_log2;
      if (diag) {
        int col = j * BN + (i / 4) * 8 + (lane % 4) * 2 + (i & 1);
        if (col > row0 + 8 * r) v = __int_as_float(0xff800000);
      }
      s[i] = v;
      mx[r] = fmaxf(mx[r], v);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 2));
    }
    float alpha[2], rs[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      alpha[r] = fast_exp2(m[r] - mx[r]);
      m[r] = mx[r];
    }
    u32 p[BN / 4];
#pragma unroll
    for (int i = 0; i < BN / 2; i += 2) {
      int r = (i % 4) >= 2;
      float a = fast_exp2(s[i] - m[r]), b = fast_exp2(s[i + 1] - m[r]);
      rs[r] += a + b;
      p[i / 2] = pack2(a, b, ELT);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + rs[r];  // per-thread partial sums; reduced at the end
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] *= alpha[(i % 4) >= 2];
    mbar_wait(&v_full[st], phase);
    const u32 va = smem_addr(sv + st * T::KV_TILE);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < BN / 16; ++k) {  // BN keys in steps of 16: 16 rows of 128 bytes per step
      // A fragment of keys [16k, 16k + 16): accumulator columns j = 2k and 2k + 1
      u32 a[4] = {p[4 * k], p[4 * k + 1], p[4 * k + 2], p[4 * k + 3]};
      u64 db = wgmma_desc(va + k * 16 * 128, T::KV_HALF, 1024);
      if constexpr (ELT == 0) wgmma_m64n128k16_bf16_rs(o, a, db);
      else wgmma_m64n128k16_f16_rs(o, a, db);
    }
    wgmma_commit();
    wgmma_wait<0>();
    if (tid % 128 == 0) mbar_arrive(&empty[st]);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffff, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffff, l[r], 2);
  }
  const float inv0 = __frcp_rn(l[0]), inv1 = __frcp_rn(l[1]);
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] *= (i % 4) >= 2 ? inv1 : inv0;
  return true;
}

}  // namespace pallas_dev
