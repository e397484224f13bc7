// Ahead-of-time compilation, as Triton's AOT compiler and Halide's generators do it: a small
// generator program (your kernels, linked with Pallas) compiles named calls at build time
// into cubins for the architectures asked for, and writes a C++ header of typed launch
// functions that need only the CUDA driver at run time (include/pallas/aot_runtime.h): no
// tracing and no NVRTC in the deployed program. CMake: pallas_add_aot (cmake/PallasAOT.cmake).
#pragma once
#include <string>
#include <vector>

#include "pallas/pallas_call.h"

namespace pallas::aot {

// One kernel to compile: a call traced for these input shapes (after any dynamic grid
// bounds, which become int parameters of its launch function), under a C++ name.
struct Entry {
  std::string name;
  Call call;
  std::vector<ShapeDtype> inputs;
};

// Compiles every entry for every arch ("sm_90a", "sm_80", ...) with the general lowering
// (no kernel is recognised) and writes `header`: the cubins embedded, and per entry
//   CUresult NAME(CUstream stream, [int bound, ...] const void* in..., void* out...);
// in namespace `ns`. Throws pl::Error naming the entry for anything it cannot compile
// (kernels with pl::check under debug or debug_print need the JIT's host side).
void generate(const std::vector<Entry>& entries, const std::vector<std::string>& archs, const std::string& header, const std::string& ns);

// main() of a generator program: --out HEADER --arch sm_90a,sm_80 --namespace NS.
int generator_main(int argc, char** argv, const std::vector<Entry>& entries);

}  // namespace pallas::aot
