// CUDA C++ -> cubin with NVRTC, cached in memory and on disk.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace pallas::cuda {

struct Cubin {
  std::string arch;
  std::vector<char> image;
  double compile_ms = 0;  // 0 when it came from a cache
};

// Compiles `source` for `arch` (e.g. "sm_90a"). `what` names the kernel in errors, which show
// the generated source around the failing line. The cache key is the source, the arch, the
// options and the NVRTC version; the disk cache lives in $PALLAS_CACHE_DIR (default
// ~/.cache/pallas) and is written atomically, so processes can share it. With debug or
// $PALLAS_DUMP_DIR the source and PTX are written out.
std::shared_ptr<const Cubin> compile(const std::string& source, const std::string& entry, const std::string& arch,
                                     const std::string& what, bool debug);

std::string nvrtc_version();

}  // namespace pallas::cuda
