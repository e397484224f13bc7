// NVRTC compile of a lowered kernel to a cubin, with an in-memory and on-disk cache
// (PALLAS_CACHE_DIR, default ~/.cache/pallas-cpp) keyed by source hash, arch and NVRTC
// version. debug or PALLAS_DUMP_DIR writes the source and PTX.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "src/backends/cuda/lower.h"

namespace pallas::cuda {

struct Compiled {
  Lowered lowered;
  std::string arch;
  std::string cubin;
  double compile_ms = 0;  // 0 when it came from a cache
  bool from_disk = false;
};

// The lowered, compiled kernel of a call (cached in memory by call hash + arch). tensor_maps and
// aligned: as lower()'s (tensor_maps false for AOT kernels; aligned false for a call given an
// array that is not 16-byte aligned).
std::shared_ptr<const Compiled> compile_call(const core::PallasCall& call, const std::string& arch, bool tensor_maps = true,
                                             bool aligned = true);
std::string nvrtc_version();
// The options every generated kernel is compiled with (bench/compile_bench uses them too):
// straight to a cubin for arch (a virtual arch such as compute_90a gives PTX only).
std::vector<std::string> nvrtc_options(const std::string& arch, bool lineinfo, bool ptxas_report);
// The generated source around the first error of an NVRTC log: at the line the log names in
// the generated file (cu_name), or, for a kernel source's line (the emitter's #line
// directives), where the code generated for it starts.
std::string explain_nvrtc_error(const std::string& log, const std::string& src, const std::string& cu_name);

}  // namespace pallas::cuda
