// The plan of one kernel: every decision the CUDA backend makes about a traced call before it
// writes any code, as plain data. The passes (passes.h) fill it in order, one pass per
// concern; the emitter (lower.h) then prints the kernel from it and decides nothing the plan
// holds. Each part prints itself (section text) for PALLAS_DUMP_PASSES and the golden tests.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "src/backends/cuda/layout.h"
#include "src/backends/cuda/target.h"
#include "src/backends/cuda/value_layout.h"

namespace pallas::cuda {

// A TMA tensor map the kernel takes as a parameter (tm<i>, after the others): the runner
// encodes it at each launch over the array parameter p<param> (its pointer), with zero fill
// outside the array.
struct TensorMapSpec {
  int param = 0;
  DType dtype = DType::BF16;
  Shape array_shape;  // row-major, outermost first (a view of the array: the same bytes)
  Shape box;          // per array dim, outermost first
  // The 128-byte swizzle of wgmma operand tiles (the box's innermost dim is then 128 bytes);
  // else the box lands dense and row-major (grid_pipeline.h).
  bool swizzle = true;
  bool operator==(const TensorMapSpec&) const = default;
};

// The grid pipeline (grid_pipeline.h): input blocks copied by TMA stages - 1 programs ahead.
struct GridPipelinedInput {
  size_t input = 0;            // among the call's block inputs (gm.inputs)
  TensorMapSpec map;           // the array as a view whose box is the whole block
  std::vector<int64_t> split;  // per array dim: f when it is split into (n, f) in the view, else 0
  size_t offset = 0;           // within a stage
  size_t bytes = 0;            // the dense block
};
struct GridPipeline {
  std::vector<GridPipelinedInput> inputs;
  int stages = 0;
  bool persistent = false;  // a loop over parallel programs (else over the sequential axes)
  size_t base = 0;          // dynamic shared memory offset of stage 0
  size_t stage_bytes = 0;
  size_t bars = 0;   // offset of the stages' mbarriers
  size_t end = 0;    // first byte after them
  std::string text;  // the plan (the grid-pipeline section of the dump)
};

// The tensor-core instruction family of a dot's input dtype (mma.sync names; wgmma takes the
// same shapes of K per instruction and accumulator types).
struct MmaKind {
  const char* instr;  // the mma.sync variant
  int k;              // K per instruction
  int per_reg;        // operand elements packed in one 32-bit register
  const char* acc;    // accumulator type
};
// The instruction for a dot of this input dtype and precision, if any (Precision::Highest
// f32 has none: tf32 would round it; the 8-bit floats need fp8 tensor cores, sm_89 and later).
const MmaKind* mma_kind(DType t, bool highest, bool fp8);

// How one dot runs (the dot-kinds pass, dot_plans.cc).
struct DotPlan {
  enum class Kind { Simt, MmaSync, Wgmma } kind = Kind::Simt;
  int64_t M = 0, N = 0, K = 0;
  bool ta = false, tb = false;   // operands transposed
  const MmaKind* mma = nullptr;  // the instruction (tensor-core kinds)
  MmaGrid grid;                  // how the output tiles are spread (tensor-core kinds)
  // The result stays in its accumulator fragments (the Mma value layout) when its dtype is the
  // accumulator's; otherwise it is converted once to the blocked layout.
  std::optional<ValueLayout> result;
  std::string why;  // the reason for the kind
  // Where a wgmma dot reads each operand (the dot-operands pass, after the loop plans).
  enum class Operand : uint8_t { Written, Registers, Stage, Resident };
  Operand a = Operand::Written, b = Operand::Written;
  std::string str() const;
};

// What a ref is, for the plans that copy from it (the refs pass, plan/refs.cc): a block of an
// input array in global memory (param >= 0: the kernel's array parameter p<param>, which the
// loop pipeliner's TMA copies address by coordinates), or anything else (param < 0).
struct RefPlan {
  int param = -1;
  Shape array_shape;           // the array's shape
  std::vector<int> array_dim;  // per ref dim: its array dim (the others are squeezed)
};

// The plans of one fori_loop (the loop-plans pass, plan/loops.h).
struct LoopPlan;

// The grid's programs (the resident-outputs and grid-pipeline passes): which revisited outputs stay in shared memory over the
// sequential loop, and which input blocks the grid pipeline copies ahead.
struct GridPlan {
  std::vector<bool> resident;  // per output
  std::optional<GridPipeline> pipeline;
};

// The 16-byte aligned offset right above `bytes` at `at` (where the next region may start).
inline size_t above(size_t at, size_t bytes) { return (at + bytes + 15) & ~size_t{15}; }

// Shared memory of the kernel's top level, bottom up: scratch, resident outputs, the grid
// pipeline's stages; the body's exchanges and loop buffers start at `body` (shared_memory.cc).
// Each loop's resident operand tiles and stage buffers are placed above the exchange base of
// the scope holding the loop, and its body's exchanges above them (loop_shared_memory.cc):
// `loops_end` is where the highest of those regions ends.
struct SharedPlan {
  struct Region {
    std::string what;
    size_t offset = 0, bytes = 0;
  };
  std::vector<Region> regions;
  std::vector<size_t> scratch;   // per scratch operand: its offset
  std::vector<size_t> resident;  // per output: its offset when resident (else 0)
  size_t body = 0;               // where the body's shared memory starts
  size_t loops_end = 0;          // the end of the highest loop region (0: no loop takes any)
  // The next 16-byte aligned offset after `bytes` more, recorded as a region.
  size_t allocate(const std::string& what, size_t bytes);
  size_t top() const;
};

struct KernelPlan {
  std::string name;  // the kernel's symbol
  Target target;
  int threads = 128;      // num_warps * 32
  int stages = 3;         // compiler_params.num_stages (0: 3, as Triton)
  bool wgmma = false;     // the target has wgmma (sm_90a): dots of 64+ rows use it
  bool tma = false;       // TMA tensor copies are allowed (sm_90a, the launcher encodes maps, aligned arrays)
  bool fp8_mma = false;   // the tensor cores take 8-bit floats (sm_89 and later)
  bool checks = false;    // pl::check outside checkify (debug = true)
  size_t smem_limit = 0;  // dynamic shared memory a CUDA block may take on the target
  // What each shared-memory user may take, decided once here (plan/kernel.cc) until one
  // allocator sees the whole kernel: the rest of smem_limit is left to the body's exchanges.
  struct SharedBudgets {
    size_t resident_outputs = 0;  // revisited output blocks kept over the sequential loop, with scratch below them
    size_t grid_stages = 0;       // the grid pipeline's stages, with everything below them
    size_t loop_stages = 0;       // one loop pipeline's buffers and staged tiles
  } budgets;
  bool grid_pipeline_allowed = true;                 // off when the kernel did not fit with the grid's stages (lower.cc)
  int max_stages = 0;                                // > 0: a cap on stages (lower.cc's retry of a kernel over the limit)
  LayoutPlan layout;                                 // blocked-layout
  std::unordered_map<const ir::Eqn*, DotPlan> dots;  // dot-kinds
  std::unordered_map<int64_t, ValueLayout> values;   // value-layouts (absent, and every scalar: blocked)
  // value-layouts: a vector load whose one use (through reshapes) is a broadcast into a dot's
  // fragments (a row statistic over the columns) is not loaded on its own; the broadcast reads
  // each of its slots' elements from memory (broadcast -> load), and the load and the reshapes
  // it passed through are not printed (folded).
  std::unordered_map<const ir::Eqn*, const ir::Eqn*> fragment_loads;
  std::unordered_set<const ir::Eqn*> folded;
  GridPlan grid;                                     // resident-outputs, grid-pipeline
  SharedPlan smem;                                   // shared-memory
  std::unordered_map<int64_t, RefPlan> refs;         // refs: input blocks in global memory, and the loop and branch refs bound to them
  std::unordered_map<const ir::Eqn*, std::shared_ptr<const LoopPlan>> loops;  // loop-plans: per fori_loop
  // The dump: (pass, its section), in the order the passes ran.
  std::vector<std::pair<std::string, std::string>> sections;
  std::string text() const;  // every section, headed by its pass

  const DotPlan& dot(const ir::Eqn& e) const;       // the dot-kinds pass's plan of dot e
  const LoopPlan& loop(const ir::Eqn& fori) const;  // the loop-plans pass's plan of a fori_loop
  ValueLayout layout_of(const ir::Atom& a) const;   // the value-layouts pass's (blocked for scalars, literals)
};

}  // namespace pallas::cuda
