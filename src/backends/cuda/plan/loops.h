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

// Where a loop's regions go when the scope holding it has its exchange base at `base`: its
// resident operand tiles, then its stage buffers, then its body's exchange base (and its nested
// loops'). The loop-plans pass sizes a nested loop's stages above its enclosing loops' regions
// with it; the loop-shared-memory pass places the regions with it.
struct LoopRegions {
  size_t resident_at = 0, resident_bytes = 0, pipeline_at = 0, pipeline_bytes = 0, body_at = 0;
};
LoopRegions loop_regions(const ResidentOperands& resident, const LoopPipeline& pipeline, size_t base);

struct LoopPlan {
  std::vector<std::optional<FragmentCarry>> carries;  // per carry (frag: "" here, the printer names it)
  ResidentOperands resident;
  std::optional<LoopRotation> rotation;  // planned (rotated only when `rotated`)
  LoopPipeline pipeline;
  bool rotated = false;  // the rotation and the pipeline agree (rotation_ready)
  int turns = 0;         // warpgroups taking turns in the rotated loop (warpgroup_turns)
};

}  // namespace pallas::cuda
