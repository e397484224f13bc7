// What a kernel is compiled for, besides the call itself: the architecture, what the launcher
// can give it, and every environment switch a lowering pass or NVRTC reads. A compiled kernel
// is named (cached in memory and on disk) by the call and this, so two compiles whose code can
// differ never share a key. The switches are read from the environment in one place
// (target_from_env), once per compile request, and the passes read them from here: a switch
// read anywhere else would change the code without changing the key.
#pragma once
#include <string>

namespace pallas::cuda {

struct Target {
  std::string arch;          // "sm_90a"; "" = any sm_80+ GPU (lower() only)
  bool tensor_maps = true;   // the launcher encodes TMA maps (false for AOT kernels)
  bool aligned = true;       // every array starts on a 16-byte boundary
  bool no_tma = false;       // PALLAS_NO_TMA: cp.async only, no grid pipeline
  int vector_width = 0;      // PALLAS_CUDA_VECTOR_WIDTH: the layout's run length (0: the pass's choice)
  bool no_rotation = false;  // PALLAS_NO_ROTATION
  bool pingpong = false;     // PALLAS_PINGPONG: the warpgroups of a rotated loop take turns
  bool spread_small_dots = false;  // PALLAS_SPREAD_SMALL_DOTS: mma.sync dots with fewer tiles than warps take narrower tiles
  bool lineinfo = false;     // PALLAS_LINEINFO (default: a profiler injected itself): NVRTC's -lineinfo
  std::string fast_compile;  // PALLAS_FAST_COMPILE=min|mid|max: NVRTC's --Ofast-compile ("": off)
  // Every field, for keys ("sm_90a tma aligned vec=0 ...").
  std::string text() const;
};

// The target for arch with the switches as the environment has them now. A bad switch value
// is a pl::Error naming `what` (the kernel) and the values allowed.
Target target_from_env(const std::string& what, const std::string& arch, bool tensor_maps = true, bool aligned = true);

}  // namespace pallas::cuda
