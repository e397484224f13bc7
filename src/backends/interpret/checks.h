// The interpreter's checks (CallOptions::interpret_params): races between programs on parallel
// grid axes, reads of elements no program wrote, accesses outside a ref or an array. Each
// access of a ref by load/store/swap/addupdate/atomics is checked element by element against
// a shadow record of the operand while the checks are on; nothing is recorded otherwise.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "src/backends/interpret/value.h"
#include "src/core/pallas_call.h"

namespace pallas::interp {

struct ChecksOn {
  bool races = false, uninitialized = false, out_of_bounds = false, unwritten = false, padding = false;
  bool any() const { return races || uninitialized || out_of_bounds || unwritten || padding; }
  bool shadow() const { return races || uninitialized || unwritten; }
};
// The call's params, with unset fields taken from PALLAS_INTERPRET_CHECKS.
ChecksOn resolve_checks(const InterpretParams& p);

// What the last accesses of one element were: linear program ids (-1: none). w = -2: written
// before the call (an aliased input, an input the kernel writes). Readers and atomic updaters
// keep two programs of different race classes, enough to find any conflict with a third.
struct ShadowElem {
  int32_t w = -1, r1 = -1, r2 = -1, a1 = -1, a2 = -1;
};

enum class RefKind : uint8_t { Prefetch, Input, Output, Scratch };

// Where a kernel ref points: the block of an operand (start and shape in array coordinates,
// which array dim each ref dim is) or a whole scratch / scalar-prefetch ref.
struct RefInfo {
  RefKind kind = RefKind::Input;
  const std::string* what = nullptr;  // "output 0", "scratch 1", ...
  Dims array_shape, start, block;
  int8_t ref_dim_to_array[kMaxRank] = {};
  ShadowElem* shadow = nullptr;       // outputs and written inputs (races / uninitialized)
  uint8_t* scratch_written = nullptr; // scratch: one byte per element, for this program
};

enum class AccessKind : uint8_t { Read, Write, ReadWrite, Atomic };

// Shared by all programs of one call.
struct CheckState {
  ChecksOn on;
  std::vector<int64_t> grid;
  std::vector<bool> parallel;  // per grid axis: !GridMapping::sequential
  std::vector<std::vector<ShadowElem>> shadows;  // per operand (inputs then outputs); empty if none

  // Keeps the report of the lowest program (row-major), so reports do not depend on threads.
  void report(int64_t program, std::string message);
  bool reported(std::string* message) const;
  std::string program_str(int64_t linear) const;       // "(1, 0)"
  int64_t race_class(int64_t linear) const;            // linear index over the parallel axes
  int first_parallel_difference(int64_t a, int64_t b) const;

 private:
  mutable std::mutex mu_;
  int64_t report_program_ = -1;
  std::string report_;
};

std::string coords_str(const int64_t* c, int n);  // "[3, 5]"

// After the grid: which elements of an output no program wrote, from its shadow (w and a1
// still -1), as the report's text; empty when every element was written.
std::string unwritten_report(const std::string& what, const ShapeDtype& array, const std::vector<ShadowElem>& shadow);

}  // namespace pallas::interp
