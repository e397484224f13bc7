// Registration of the CUDA lowering rules, one file per op family.
#pragma once
#include <optional>

#include "src/backends/cuda/lower.h"

namespace pallas::cuda {
void register_elementwise_rules(ir::RuleTable<LowerRule>& t);
void register_shape_rules(ir::RuleTable<LowerRule>& t);   // shape, reduce
void register_dot_rules(ir::RuleTable<LowerRule>& t);     // dot: tensor cores (mma.sync) or SIMT
void register_memory_rules(ir::RuleTable<LowerRule>& t);
void register_control_rules(ir::RuleTable<LowerRule>& t);  // loops, cond, grid queries, print, check

// A fori_loop carry kept in tensor-core fragments across the loop (rules_dot.cc).
struct FragmentCarry {
  const ir::Eqn* dot = nullptr;  // the body's dot whose result is added to the carry
  const ir::Eqn* add = nullptr;  // the body's add (absorbed: the mma accumulates in place)
  std::string frag;              // the fragments' C name
};
std::optional<FragmentCarry> plan_fragment_carry(const Emitter& E, const ir::Jaxpr& body, size_t carry);
void begin_fragment_carry(Emitter& E, const FragmentCarry& fc, const ir::Atom& init);  // declares and fills
void end_fragment_carry(Emitter& E, const FragmentCarry& fc, const ir::Var& out);      // to the blocked layout
}  // namespace pallas::cuda
