// Block pipelining over the programs a CUDA block runs (Pallas' BlockSpec pipelining, as its
// TPU and Mosaic GPU backends do it): an input's block is copied into shared memory by TMA
// `stages - 1` programs ahead of the program that reads it, so the copy of the next block
// overlaps this program's work. Without it a program waits a full memory latency for its
// blocks, and a CUDA block that holds a large block in registers (one CTA an SM) leaves the
// memory idle while it computes (measured: rms norm of 8 rows of 4096 at 0.57x torch, a
// column sum over a sequential grid axis at 0.35x).
//
// Two program loops take it (sm_90a, TMA; not AOT kernels):
//   - a grid with sequential axes: each CUDA block runs one program of the parallel axes and
//     loops over the sequential ones (as without pipelining), one step per program;
//   - a grid of parallel axes only, whose input blocks are large (32 KiB or more): the kernel is
//     persistent, each CUDA block runs programs blockIdx.x, blockIdx.x + gridDim.x, ... (the
//     runner launches as many CUDA blocks as fit on the device at once), one step each.
// An input is pipelined when its block moves along the steps a CUDA block walks (a block the
// same at every step stays in global memory, read through L1/L2), the kernel only loads from
// its ref, at the top level (no write, no loop or branch reads it, no alias to an output), and
// TMA can copy its block in one
// tensor copy: row-major, 1-, 2- or 4-byte elements, rows of whole 16 bytes, every block
// dimension at most 256 after splitting a longer one into (n, f) with f <= 256 dividing both
// the block and the array (a view of the same memory, so the copy lands as the dense
// row-major block), rank 5 at most. The body reads the block from its stage with the same
// bounds checks against the array as from global memory, so elements outside the array
// read poison as before (TMA fills them with zeros, never read).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "src/backends/cuda/lower.h"

namespace pallas::cuda {

// The plan for `call` with shared memory free from `smem_base`; nullopt when nothing is
// pipelined. `tma`: tensor copies are allowed (sm_90a JIT).
std::optional<GridPipeline> plan_grid_pipeline(const core::PallasCall& call, bool tma, size_t smem_base, size_t budget, int stages);

// Emits, in all threads, the evaluation of the pipelined inputs' index maps for the program
// whose ids are `pids`, then (thread 0) the stage's transaction count and tensor copies into
// buffer `buf` (a C expression).
void issue_grid_copies(Emitter& E, const GridPipeline& gp, const core::PallasCall& call, const std::vector<std::string>& pids,
                       const std::string& buf);

}  // namespace pallas::cuda
