// A lowering of blockwise elementwise kernels to CUDA C++: kernels whose body loads whole
// blocks, combines them with elementwise primitives (and scalars: program ids, literals) and
// stores whole blocks. Each grid program is one CUDA block; its threads stride over the
// block's elements; index maps are evaluated on the device; elements of an edge block outside
// the array read poison and are not written, as in the interpreter.
#pragma once
#include <optional>
#include <string>

#include "src/core/pallas_call.h"

namespace pallas::cuda {

struct ElementwisePlan {
  std::string entry = "pallas_elementwise";
  std::string source;
  int threads = 128;
  int64_t programs = 0;  // launch grid (x), row-major over the Pallas grid
  int64_t block_elems = 0;
};

std::optional<ElementwisePlan> lower_elementwise(const core::PallasCall& call, std::string* why_not = nullptr);

}  // namespace pallas::cuda
