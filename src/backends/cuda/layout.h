// The layout pass of the CUDA backend: before any code is emitted it decides how a kernel's
// tiles are spread over the threads of a CUDA block, and which memory accesses move 16 bytes
// per thread at once. Its result (LayoutPlan) is plain data the emitter reads, printed by
// text() (PALLAS_DUMP_PASSES, golden tests in tests/cuda_layout_test.cc).
//
// The layout is Triton's blocked layout over a tile's row-major elements with one parameter,
// the vector width V: thread t holds runs of V consecutive elements, the runs of the threads
// side by side, and the pattern repeats over the tile. Slot k of thread t holds flat element
//   e = (k / V) * (T * V) + t * V + k % V          (T threads; runs of V never straddle a
// repeat). V is chosen per kernel, so every value of the kernel shares one layout and
// elementwise ops, loops and branches never convert. With V = 1 it is the plain cyclic
// layout. An access (load, store) is vectorised when each run of V elements is contiguous in
// memory, 16-byte aligned and inside or outside the array as a whole; this follows from a
// divisibility analysis of the ref's strides and origin (block shapes, array shapes) and of
// the index (static starts, `multiple_of` on dynamic starts, products and sums of those).
#pragma once
#include <string>
#include <unordered_map>

#include "src/core/pallas_call.h"
#include "src/ir/primitive.h"

namespace pallas::cuda {

struct LayoutPlan {
  int vec = 1;  // V: elements per run of one thread
  struct Access {
    int width = 1;     // elements per vector access (V split into 16-byte pieces); 1 = scalar
    std::string why;   // when scalar: the first condition that failed
  };
  std::unordered_map<const ir::Eqn*, Access> access;  // loads, stores, swaps, addupdates
  std::unordered_map<int64_t, int64_t> divisor;       // integer scalar var -> a known divisor
  std::string text;                                   // the dump
  const Access* find(const ir::Eqn& e) const {
    auto it = access.find(&e);
    return it == access.end() ? nullptr : &it->second;
  }
};

// aligned: as lower()'s; false makes every access to an array (not scratch) one element wide.
// force_vec > 0: V is that (Target::vector_width, PALLAS_CUDA_VECTOR_WIDTH).
LayoutPlan plan_layout(const core::PallasCall& call, int threads, bool aligned = true, int force_vec = 0);

}  // namespace pallas::cuda
