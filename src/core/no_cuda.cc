// Built when the CUDA toolkit is absent: there is no GPU backend.
#include "src/core/backend_registry.h"

namespace pallas::core {
const BackendRunner* cuda_runner() { return nullptr; }
}  // namespace pallas::core

#include "pallas/aot.h"

namespace pallas::aot {
void generate(const std::vector<Entry>&, const std::vector<std::string>&, const std::string& header, const std::string&) {
  throw Error("aot::generate(" + header + "): this build of Pallas C++ has no CUDA backend (configure with the CUDA toolkit present)");
}
}  // namespace pallas::aot
