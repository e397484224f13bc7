// The compile target and the environment switches (target.h).
#include "src/backends/cuda/target.h"

#include <cstdlib>

#include "pallas/error.h"

namespace pallas::cuda {

namespace {
// Set, non-empty and not "0" (the switches that are off by default).
bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}
}  // namespace

std::string Target::text() const {
  return (arch.empty() ? std::string("any") : arch) + (tensor_maps ? " maps" : " no-maps") + (aligned ? " aligned" : " unaligned") +
         (no_tma ? " no-tma" : "") + " vec=" + std::to_string(vector_width) + (no_rotation ? " no-rotation" : "") + (pingpong ? " pingpong" : "") +
         (spread_small_dots ? " spread-small-dots" : "") + (lineinfo ? " lineinfo" : "") + (fast_compile.empty() ? "" : " fast-compile=" + fast_compile);
}

Target target_from_env(const std::string& what, const std::string& arch, bool tensor_maps, bool aligned) {
  Target t;
  t.arch = arch;
  t.tensor_maps = tensor_maps;
  t.aligned = aligned;
  t.no_tma = std::getenv("PALLAS_NO_TMA") != nullptr;  // set at all, as documented
  // PALLAS_CUDA_VECTOR_WIDTH=n forces the layout's run length (1: the plain cyclic layout, no
  // vector accesses), to tell a layout bug from any other when a kernel misbehaves.
  if (const char* force = std::getenv("PALLAS_CUDA_VECTOR_WIDTH"); force && *force) {
    char* end = nullptr;
    long v = std::strtol(force, &end, 10);
    if (*end || v < 1 || v > 16 || (v & (v - 1)))
      throw Error(what + ": PALLAS_CUDA_VECTOR_WIDTH must be 1, 2, 4, 8 or 16 (got '" + std::string(force) + "'); unset it to let the layout pass choose");
    t.vector_width = static_cast<int>(v);
  }
  t.no_rotation = env_on("PALLAS_NO_ROTATION");
  t.pingpong = env_on("PALLAS_PINGPONG");
  t.spread_small_dots = env_on("PALLAS_SPREAD_SMALL_DOTS");
  // The line table (-lineinfo) maps the cubin's instructions to the #line places of the kernel
  // source, for profilers' source views: with PALLAS_LINEINFO=1, or when a profiler injects
  // itself (Nsight Compute and Systems set CUDA_INJECTION64_PATH); PALLAS_LINEINFO=0 never.
  // It costs NVRTC about a tenth more time.
  const char* li = std::getenv("PALLAS_LINEINFO");
  t.lineinfo = li ? std::string(li) != "0" : std::getenv("CUDA_INJECTION64_PATH") != nullptr;
  // PALLAS_FAST_COMPILE=min|mid|max: NVRTC's --Ofast-compile, less optimisation for shorter
  // first calls. Measured on an H100 (docs/benchmarks.md, 2026-12-07): at mid, first calls a
  // third shorter and matmuls 25-30x slower. For measuring only; never a default.
  if (const char* fc = std::getenv("PALLAS_FAST_COMPILE"); fc && *fc && std::string(fc) != "0") {
    std::string v = fc;
    if (v != "min" && v != "mid" && v != "max")
      throw Error(what + ": PALLAS_FAST_COMPILE must be min, mid or max (got '" + v + "'); unset it for NVRTC's full optimisation");
    t.fast_compile = v;
  }
  return t;
}

}  // namespace pallas::cuda
