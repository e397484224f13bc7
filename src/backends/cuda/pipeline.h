// Software pipelining of a fori_loop's loads that feed tensor-core dots (Triton's loop
// pipeliner, in this backend's terms). A load in the loop body whose only users are tensor-core
// dot operands (wgmma, or mma.sync reading the tile where it is: mma_sync_operand_tile; one, or
// several reading one 16-bit tile: PipelinedLoad::also), whose indices follow
// from the loop index alone and whose ref no op of the body
// writes, goes global -> shared straight into the dot's swizzled operand tile, num_stages - 1
// iterations ahead, through num_stages buffers: the copies of the next iterations overlap this
// one's tensor-core work, and the operand never passes through registers.
//
// The copy is a TMA tensor copy where the block allows (an input's block, 16-bit or 8-bit
// elements, rows of whole 128-byte boxes, unit strides): one thread issues it and every thread
// waits on the stage's mbarrier. Otherwise every thread issues 16-byte cp.async pieces and
// waits for its own copy groups.
//
// wgmma reads f32 (tf32) and 8-bit operands from K-major tiles only. f32 operands are rounded to
// tf32 between
// the copy's wait and the barrier at the top of the iteration that uses them (no extra
// barrier). By TMA: a K-major operand lands in its tile and every thread rounds a share of it
// in place; an operand whose rows are K (B of x·W, N contiguous) lands as loaded in a staging
// region of the stage, and every thread rounds a share of it into the stage's K-major tile,
// transposing (16-byte reads, 4-byte writes, both free of bank conflicts). By cp.async (no
// TMA: AOT kernels, PALLAS_NO_TMA, blocks TMA cannot take): each thread rounds the words it
// copied itself; an operand whose rows are K is copied word by word into its transposed
// place, in an order that keeps both the global reads (32-byte sectors) and the shared writes
// (no bank conflicts) whole, and that gives each thread whole 16-byte chunks of the tile to
// round. Shapes neither covers go through a row-major staging tile and a rounding pass.
// An 8-bit operand whose rows are K (B of x·W in i8) lands by TMA in a staging region too; every
// thread then moves 4 x 4-byte blocks of it into the stage's K-major tile, transposing each in
// registers (byte permutes): four 4-byte reads, four 4-byte writes, both free of bank conflicts.
//
// When the body's one dot is such a wgmma, with both operands pipelined, accumulating into a
// loop carry kept in fragments, its wait is deferred one iteration (wgmma.wait_group 1):
// the tensor cores run iteration i's instructions while the warps issue the next copies and
// wait for the next stage. The stage being refilled at iteration i is then the one iteration
// i - 2 read, so such a loop takes one more buffer than num_stages (as Triton's pipeliner
// does for an asynchronous dot) and keeps the copies num_stages - 1 iterations ahead.
#pragma once
#include <string>
#include <vector>

#include "src/backends/cuda/rules.h"

namespace pallas::cuda {

struct PipelinedLoad {
  const ir::Eqn* load = nullptr;
  const ir::Eqn* dot = nullptr;
  int operand = 0;                          // of the dot: 0 = A, 1 = B
  // Further dots that read the same stage tile (a load with several dot users, as the query
  // block of an attention backward: A of Q·K^T and B of dS^T·Q). Each reads it through its own
  // descriptor: a 16-bit tile copied as loaded (rows of the load as tile rows, its columns
  // contiguous) is one memory image whether a dot reads it K-major (the columns are K) or
  // MN-major (the columns are MN), when the tiles have the same rows.
  struct Reader {
    const ir::Eqn* dot = nullptr;
    int operand = 0;
  };
  std::vector<Reader> also;
  std::vector<const ir::Eqn*> index_eqns;  // body eqns computing the load's indices, in order
  SwizzledTile tile;                        // the dot's operand tile, one per stage
  bool rows_are_mn = true;
  size_t off = 0;                           // within a stage
  // How the copy lands in the dot's tile. f32 operands (tf32 dots) are rounded to tf32 after
  // the copy (to nearest, as the interpreter; wgmma would truncate).
  enum class Landing {
    Straight,    // copied straight into the tile (16- or 8-bit, laid out as the tile)
    InPlace,     // f32, copied straight into the tile, rounded there
    Transposed,  // f32, copied word by word into the K-major tile (transposing), rounded likewise
    Staged,      // f32, copied as loaded into a row-major staging tile; each iteration rounds it
                 // into the dot's tile, transposing as needed (shapes the others do not take)
    TmaStaged,   // f32 or 8-bit, copied by TMA as loaded into a staging region of the stage;
                 // every thread then moves its share into the stage's own K-major tile,
                 // transposing (f32 rounded to tf32)
  };
  Landing landing = Landing::Straight;
  bool staged() const { return landing == Landing::Staged; }
  // Copied by TMA (sm_90a): one thread issues the tile's boxes (128 bytes of the contiguous
  // dimension by all the rows each), completing on the stage's mbarrier, instead of every
  // thread issuing 16-byte cp.async with its own address and bounds arithmetic.
  bool tma = false;
  TensorMapSpec map;
  int col_dim = 0, row_dim = 0;  // the array dims of the load's columns (contiguous) and rows
  size_t tile_off = 0;  // Staged: the swizzled tile, after the stage buffers; TmaStaged: within the stage
};

struct LoopPipeline {
  int stages = 0;   // 0: nothing to pipeline
  int buffers = 0;  // stage buffers: stages, or stages + 1 with the dot in flight
  int ahead = 0;    // iterations the copies run ahead of their use
  const ir::Eqn* dot_in_flight = nullptr;  // the dot whose wgmma wait is deferred an iteration
  const ir::Eqn* rotated_dot = nullptr;    // a rotated loop's second dot: its stage is read an iteration later
  std::vector<PipelinedLoad> loads;
  size_t stage_bytes = 0;
  size_t tiles_bytes = 0;  // the staged loads' swizzled tiles (one each, after the buffers)
  size_t tma_bytes = 0;    // bytes a stage's TMA copies bring (the mbarrier's transaction count)
  bool any_cp_async = false;
  // No barrier per iteration (every load by TMA, none rounded to tf32): each warp, at the top
  // of an iteration, counts itself out of the stage that iteration's refill overwrites (it has
  // finished the dots that read it), and the warp that counts last issues the refill. Warps
  // then meet only at the stages' mbarriers and drift apart by up to ahead iterations, so one
  // warpgroup's softmax or epilogue runs while another's dots keep the tensor cores busy
  // (with a barrier per iteration they run in lockstep and the tensor cores wait for both).
  bool barrier_free = false;
  // Where the buffers, mbarriers and counters sit in dynamic shared memory (1024-aligned at run
  // time within it): the loop-shared-memory pass places them.
  size_t at = 0, bytes = 0;
  // emission state
  std::string base;   // C name of the (1024-aligned) buffers
  std::string bars;   // C name of the stages' mbarriers (TMA), one per buffer
  std::string counts; // barrier_free: C name of the warps' counters, one per buffer
  size_t saved_xoff = 0;
  bool saved_fenced = false;
};

// The dots of a jaxpr, those inside its ops' jaxprs included.
int count_dots(const ir::Jaxpr& j);

// Which loads of the body to pipeline, and how deep (E.num_stages, fewer when shared memory
// would not hold them). `read_next_iteration`: a dot that reads its pipelined operands in the
// iteration after theirs (a rotated loop's second dot, rotation.h): their stage is refilled
// one iteration later, so the loop takes one more buffer (none, and no rotation, if it does
// not fit).
// `fragment_dots`: the body's dots that accumulate into fragment carries (plan_fragment_carry).
// `below`: shared memory the loop's buffers go above (the kernel's below the body, the loop's
// resident operand tiles): with it, the buffers must also fit the target's limit, so a loop
// that keeps large tiles resident takes fewer stages instead of a kernel that cannot launch.
LoopPipeline plan_pipeline(const KernelPlan& P, const ir::Jaxpr& body, size_t num_carry, const std::vector<const ir::Eqn*>& fragment_dots,
                           const ir::Eqn* read_next_iteration = nullptr, size_t below = 0);

// The plan as the dump and the generated code's comment say it.
std::string pipeline_text(const LoopPipeline& p);
// Before the loop: reserves the buffers and issues the first stages - 1 iterations' copies.
void begin_pipeline(Emitter& E, LoopPipeline& p, const ir::Jaxpr& body, const std::string& lo, const std::string& hi);
// At the top of each iteration `it`: waits for iteration it's copies, then (after the barrier,
// when the stage refilled is free) issues iteration it + ahead's, and points the dots' operands
// at its stage.
void pipeline_iteration(Emitter& E, const LoopPipeline& p, const ir::Jaxpr& body, const std::string& it, const std::string& lo, const std::string& hi);
// The stage tile of pipelined load result `v` for iteration `it` ("" when v is not pipelined).
std::string pipelined_operand_at(const LoopPipeline& p, const ir::Var& v, const std::string& it, const std::string& lo);
// After the loop: waits for the dot in flight, drains the copies and frees the buffers.
void end_pipeline(Emitter& E, const LoopPipeline& p);

// Operands of the body's wgmma dots that the loop does not change (a value from outside the
// loop, as flash attention's Q block) are written to their swizzled tiles once, before the
// loop, and read there by every iteration, instead of being written again each time.
struct ResidentOperand {
  const ir::Var* var = nullptr;  // the body's invar holding the value
  SwizzledTile tile;
  bool rows_are_mn = true;
  DType dtype = DType::BF16;
};
struct ResidentOperands {
  std::vector<ResidentOperand> ops;
  size_t at = 0, bytes = 0;  // placed by the loop-shared-memory pass (1024-aligned at run time within it)
  size_t saved_xoff = 0;
  bool saved_fenced = false;
};
ResidentOperands plan_resident_operands(const KernelPlan& P, const ir::Jaxpr& body, size_t num_carry);
// The shared memory a loop's resident operand tiles take (begin_resident_operands).
size_t resident_bytes(const ResidentOperands& r);
// A loop pipeline's shared memory from its (1024-aligned) base: the stage buffers and staged
// tiles, then the mbarriers (TMA) at `bars`, the warps' counters (barrier-free) at `counts`;
// `bytes` in all, with the 1024 the alignment may skip (0 without a pipeline).
struct PipelineOffsets {
  size_t bars = 0, counts = 0, bytes = 0;
};
PipelineOffsets pipeline_offsets(const LoopPipeline& p);
size_t pipeline_bytes(const LoopPipeline& p);  // pipeline_offsets(p).bytes
void begin_resident_operands(Emitter& E, ResidentOperands& r);  // after the body's invars are bound
void end_resident_operands(Emitter& E, const ResidentOperands& r);

}  // namespace pallas::cuda
