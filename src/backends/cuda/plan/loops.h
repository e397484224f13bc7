// The loop-plans pass (loops.cc): for every fori_loop, before any code is written, which
// carries stay in tensor-core fragments, which operands stay in shared memory for the whole
// loop, whether the loop is rotated, and which loads the pipeliner copies ahead, how deep.
// The fori rule (rules_control.cc) prints the loop from it.
#pragma once
#include <optional>
#include <vector>

#include "src/backends/cuda/pipeline.h"
#include "src/backends/cuda/rotation.h"

namespace pallas::cuda {

struct LoopPlan {
  std::vector<std::optional<FragmentCarry>> carries;  // per carry (frag: "" here, the printer names it)
  ResidentOperands resident;
  std::optional<LoopRotation> rotation;  // planned (rotated only when `rotated`)
  LoopPipeline pipeline;
  bool rotated = false;  // the rotation and the pipeline agree (rotation_ready)
  int turns = 0;         // warpgroups taking turns in the rotated loop (warpgroup_turns)
};

}  // namespace pallas::cuda
