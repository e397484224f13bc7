// Value layouts: how the elements of one tile value are spread over the threads of the block.
// The default is the blocked layout of layout.h (every value of a kernel shares it). Two more
// come from the tensor cores, so that what a dot produces is used where it is:
//  - Mma(grid): a 2-D [M, N] value held as a dot's accumulator fragments. The tiles of
//    grid.rows() x 8*NS go to the workers (warps for mma.sync, warpgroups for wgmma) in turn;
//    slot k = (t * NS + s) * 4 + r of a thread holds element
//      i = m0(t) + g + 8 * (r / 2),  j = n0(t) + 8 * s + 2 * q + r % 2
//    (g = lane / 4, q = lane % 4; m0, n0 the origin of the thread's t-th tile, its warp's 16
//    rows of it for wgmma) — the m16n8 accumulator layout of mma.sync and wgmma alike.
//  - Rows(grid): an [M] (or [M, 1]) value held per fragment row: slot k = 2 * t + h holds row
//    m0(t) + g + 8 * h, the same in the four lanes of a quad. A row reduction of an Mma value
//    is one (shuffles within the quad), and a Rows value broadcast over the columns of an Mma
//    value of the same rows is a register read. Only grids whose tiles span all N columns
//    (TN = 1) have rows, so that one quad holds whole rows.
// The value-layout pass (assign_value_layouts, rules.h) decides every value's layout before
// emission; conversions (through shared memory) are emitted only where two layouts meet.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>

namespace pallas::cuda {

// How the output tiles of a tensor-core dot are spread: with mma.sync, warp w takes tiles w,
// w + W, ... of 16 rows x 8*NS columns; with wgmma, warpgroup g takes tiles g, g + W, ... of 64
// rows x 8*NS columns (its warp w % 4 holding rows 16 (w % 4) ..). TPW tiles per worker.
struct MmaGrid {
  bool wg = false;  // wgmma (warpgroups) rather than mma.sync (warps)
  int64_t W = 1, TM = 1, NS = 1, TN = 1, TPW = 1;
  int64_t rows() const { return wg ? 64 : 16; }
  bool operator==(const MmaGrid&) const = default;
};

struct ValueLayout {
  enum Kind : uint8_t { Blocked, Mma, Rows } kind = Blocked;
  MmaGrid grid;          // Rows: NS = 0 (any number of columns)
  int64_t M = 0, N = 0;  // Mma: the [M, N] value; Rows: M rows (N = 0)
  bool operator==(const ValueLayout& o) const { return kind == o.kind && (kind == Blocked || (grid == o.grid && M == o.M && N == o.N)); }
  int64_t slots() const { return kind == Mma ? grid.TPW * grid.NS * 4 : grid.TPW * 2; }
  // The rows of this Rows layout, of an Mma value's grid.
  static ValueLayout rows_of(const ValueLayout& mma) {
    ValueLayout r = mma;
    r.kind = Rows, r.grid.NS = 0, r.N = 0;
    return r;
  }
  // A Rows value lines up with the rows of an Mma one: same rows, same workers, whole rows.
  bool rows_match(const ValueLayout& mma) const {
    return kind == Rows && mma.kind == Mma && mma.grid.TN == 1 && rows_of(mma) == *this;
  }
  std::string str() const;
};

}  // namespace pallas::cuda
