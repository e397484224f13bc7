// NVRTC compile of a lowered kernel to a cubin, with an in-memory and an on-disk cache.
// In memory a kernel is found by the call and everything else that changes its code (the
// compiler params, debug, the Target: arch and every environment switch a pass reads); on disk
// (core::private_cache_dir, default ~/.cache/pallas-cpp) by the generated source, NVRTC's
// version and options, in entries that are checked whole before the driver sees them
// (disk_cache.h). debug or PALLAS_DUMP_DIR writes the source and PTX.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "src/backends/cuda/lower.h"

namespace pallas::cuda {

struct Compiled {
  Lowered lowered;
  std::string arch;
  Target target;  // what it was lowered and compiled for
  std::string cubin;
  double compile_ms = 0;  // 0 when it came from a cache
  bool from_disk = false;
  std::string disk_entry;  // its file in the disk cache ("" when there is none)
};

// The lowered, compiled kernel of a call for arch, with the environment's switches
// (target_from_env). tensor_maps and aligned: as lower()'s (tensor_maps false for AOT kernels;
// aligned false for a call given an array that is not 16-byte aligned). Calls that differ in
// anything that changes the code (num_stages, num_warps, debug, a switch) get different kernels.
std::shared_ptr<const Compiled> compile_call(const core::PallasCall& call, const std::string& arch, bool tensor_maps = true,
                                             bool aligned = true);
// A kernel whose cubin came from the disk cache and that the driver refused to load: compiled
// again, its disk entry replaced, and the memory cache's entries pointed at the new one.
std::shared_ptr<const Compiled> recompile_refused(const std::shared_ptr<const Compiled>& refused, const std::string& what);

// The parts of the memory cache's keys: the call's identity (its jaxpr objects' addresses, not
// their text) and everything besides the call's text that changes the code.
std::string identity_key(const core::PallasCall& call);
std::string compile_params_key(const core::PallasCall& call, const Target& target);

// The disk cache's half of compile_call: the cubin of a lowered kernel, from a valid entry of
// the disk cache (unless read_disk is false or dump_dir is set) or compiled by NVRTC and stored
// (replacing a damaged entry). With dump_dir, the source and PTX are kept there.
struct CompiledCubin {
  std::string cubin;
  bool from_disk = false;
  double compile_ms = 0;
  std::string entry;  // the disk cache's file for it ("" without a usable cache directory)
};
CompiledCubin cubin_for(const Lowered& L, const Target& target, const std::string& what, const std::string& dump_dir = "",
                        bool read_disk = true);

std::string nvrtc_version();
// The options every generated kernel is compiled with (bench/compile_bench uses them too):
// straight to a cubin for arch (a virtual arch such as compute_90a gives PTX only).
std::vector<std::string> nvrtc_options(const Target& target, bool ptxas_report);
// The generated source around the first error of an NVRTC log: at the line the log names in
// the generated file (cu_name), or, for a kernel source's line (the emitter's #line
// directives), where the code generated for it starts.
std::string explain_nvrtc_error(const std::string& log, const std::string& src, const std::string& cu_name);

}  // namespace pallas::cuda
