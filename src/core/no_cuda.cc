// Built when the CUDA toolkit is absent: there is no GPU backend.
#include "src/core/backend_registry.h"

namespace pallas::core {
const BackendRunner* cuda_runner() { return nullptr; }
}  // namespace pallas::core
