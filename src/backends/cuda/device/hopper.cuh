// Hopper (sm_90a) building blocks: wgmma descriptors, fences and instructions, setmaxnreg
// (mbarriers and TMA tensor copies: tma.cuh).
// Device code only, so NVRTC can compile it; no CUDA headers needed.
#pragma once

#include "tma.cuh"

namespace pallas_dev {

// wgmma shared-memory matrix descriptor with the 128-byte swizzle.
__device__ __forceinline__ u64 wgmma_desc(u32 saddr, u32 lbo_bytes, u32 sbo_bytes) {
  u64 d = 0;
  d |= static_cast<u64>((saddr & 0x3FFFF) >> 4);
  d |= static_cast<u64>((lbo_bytes & 0x3FFFF) >> 4) << 16;
  d |= static_cast<u64>((sbo_bytes & 0x3FFFF) >> 4) << 32;
  d |= static_cast<u64>(1) << 62;
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}

#include "wgmma_ops.inc"

}  // namespace pallas_dev
