// Registration of the CUDA lowering rules, one file per op family.
#pragma once
#include "src/backends/cuda/lower.h"

namespace pallas::cuda {
void register_elementwise_rules(ir::RuleTable<LowerRule>& t);
void register_shape_rules(ir::RuleTable<LowerRule>& t);   // shape, reduce
void register_dot_rules(ir::RuleTable<LowerRule>& t);     // dot: tensor cores (mma.sync) or SIMT
void register_memory_rules(ir::RuleTable<LowerRule>& t);
void register_control_rules(ir::RuleTable<LowerRule>& t);  // loops, cond, grid queries, print, check
}  // namespace pallas::cuda
