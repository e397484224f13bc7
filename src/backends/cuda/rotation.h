// Loop rotation: FA3's overlap of the softmax with the tensor cores, within one warpgroup,
// general to any fori_loop body of this shape:
//
//   s = dot(x, y)                      the first dot, its result in fragments
//   ... (anything: a softmax) ...      gives p, in the first dot's fragment layout, and r
//   acc = acc * r[:, None] + dot(p, z) the second dot, into a fragment carry, A from registers
//
// wgmma groups complete in order, so deferring the second dot's wait alone gains nothing: the
// first dot of iteration i + 1 must be issued before the second dot of iteration i. Each
// iteration i of the rotated loop:
//   issue the first dot (i); unless i = lo, scale acc by r(i - 1) and issue the second dot
//   (i - 1); wait for all but the last group (the first dot is done); the rest of iteration
//   i's body (its softmax runs while the tensor cores do the second dot); wait for all;
// and the loop ends with the second dot of iteration hi - 1. The body is emitted once (the
// condition i > lo is uniform, so the wgmmas stay unserialised); emitting iteration lo apart
// made first calls up to twice as slow. p (packed as wgmma reads it) and r are
// carried across the back edge; the second dot's pipelined operand (z: V) is read from the
// stage of the iteration before, which therefore is refilled one iteration later (one more
// buffer: pipeline.h). A loop with no iterations runs none of it (`if (lo < hi)`: the bounds
// are the same in every thread, so the wgmmas stay in uniform control flow).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/backends/cuda/pipeline.h"
#include "src/backends/cuda/rules.h"

namespace pallas::cuda {

struct LoopRotation {
  const ir::Eqn* first = nullptr;   // s = dot(x, y)
  const ir::Eqn* second = nullptr;  // acc (* r) + dot(p, z), into the fragment carry
  const ir::Var* rows = nullptr;    // r when the body computes it (carried); else none or loop-invariant
  std::string frag;                 // the carry's fragments
};

// The body's two dots when the loop can be rotated (before the pipeline is planned; the
// rotation also needs the second dot's B operand pipelined with its stage kept an iteration
// longer, which `rotation_ready` checks after). PALLAS_NO_ROTATION=1: never, to measure it.
std::optional<LoopRotation> plan_rotation(const KernelPlan& P, const ir::Jaxpr& body, const std::vector<std::optional<FragmentCarry>>& carries);
bool rotation_ready(const LoopRotation& r, const LoopPipeline& p);

// How many warpgroups take turns issuing the rotated loop's dots (FA3's ping-pong): all of
// them when there are two or more and the loop has no barrier (its copies are TMA, so warps
// meet only at the stages' mbarriers and the turns order them); else 0, none.
// Opt-in (PALLAS_PINGPONG=1): on an H100 it ran right (the GPU tests with it, no hang) but
// gained nothing consistent, -4% to +3% on the attention rows (docs/benchmarks.md, fourteenth
// session).
int warpgroup_turns(const KernelPlan& P, const LoopPipeline& p);

// The rotated loop over [lo, hi). `bind_carries` names the body's carry invars, `assign_carries`
// assigns the plain (non-fragment) carries from the body's outputs at the end of an iteration.
void emit_rotated_loop(Emitter& E, const LoopRotation& r, const LoopPipeline& p, int turns, const ir::Jaxpr& body, const std::string& index_type,
                       const std::string& lo, const std::string& hi, const std::function<void()>& bind_carries,
                       const std::function<void()>& assign_carries);

}  // namespace pallas::cuda
