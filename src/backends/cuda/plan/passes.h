// The CUDA backend's planning passes, in the order they run (plan_kernel): each reads the
// call and the plan so far and fills its part of the KernelPlan; none writes code. The list,
// what each decides and why, is in docs/design.md ("The CUDA backend"). PALLAS_DUMP_PASSES=dir
// writes the plan after every pass, numbered (NAME.01-target.txt, ...), then the printed kernel
// (NAME.NN-print.cu); tests/cuda_passes_test.cc holds golden sections of each pass.
#pragma once
#include <string>
#include <vector>

#include "src/backends/cuda/plan/kernel_plan.h"
#include "src/core/pallas_call.h"

namespace pallas::cuda {

struct PlanPass {
  const char* name;
  void (*run)(const core::PallasCall& call, KernelPlan& plan);
};
const std::vector<PlanPass>& plan_passes();

// Runs the first `up_to` passes (all when up_to < 0) on a fresh plan for target.
// grid_pipeline = false plans the kernel without the grid pipeline (lower.cc: a kernel whose
// body then did not fit in shared memory).
KernelPlan plan_kernel(const core::PallasCall& call, const Target& target, bool grid_pipeline = true, int up_to = -1,
                       int max_stages = 0);

// The passes, one file each.
void plan_target(const core::PallasCall& call, KernelPlan& plan);              // plan/kernel.cc
void plan_blocked_layout(const core::PallasCall& call, KernelPlan& plan);      // layout.cc
void plan_dot_kinds(const core::PallasCall& call, KernelPlan& plan);           // plan/dot_plans.cc
void plan_value_layouts(const core::PallasCall& call, KernelPlan& plan);       // value_layout.cc
void plan_scratch(const core::PallasCall& call, KernelPlan& plan);             // plan/scratch.cc
void plan_resident_outputs(const core::PallasCall& call, KernelPlan& plan);    // plan/resident_outputs.cc
void plan_grid_pipeline_pass(const core::PallasCall& call, KernelPlan& plan);  // grid_pipeline.cc
void plan_shared_memory(const core::PallasCall& call, KernelPlan& plan);       // plan/shared_memory.cc
void plan_refs(const core::PallasCall& call, KernelPlan& plan);                // plan/refs.cc
void plan_loops(const core::PallasCall& call, KernelPlan& plan);               // plan/loops.cc
void plan_dot_operands(const core::PallasCall& call, KernelPlan& plan);        // plan/dot_operands.cc
void plan_loop_shared_memory(const core::PallasCall& call, KernelPlan& plan);  // plan/loop_shared_memory.cc

// PALLAS_DUMP_PASSES's directory ("" when unset): dumps are debugging output, not a switch
// that changes code, so they are not in the Target.
std::string dump_passes_dir();
// Writes dir/NAME.<NN>-<what><suffix> (errors are notes, never failures).
void write_pass_dump(const std::string& dir, const std::string& kernel, int number, const std::string& what, const std::string& suffix,
                     const std::string& text);

// Several programs on parallel grid axes may write this output's blocks (its index map
// ignores such an axis or reads scalar-prefetch data, or its blocks repeat along a
// declared-parallel axis): its accumulation must be atomic, in global memory.
bool shared_by_parallel_programs(const core::GridMapping& gm, const core::BlockMapping& bm);

}  // namespace pallas::cuda
