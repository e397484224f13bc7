// Evaluating a jaxpr of signed-integer and bool scalars on the host, with the interpreter's
// semantics (wrap-around at the dtype's width, division truncating toward zero, x / 0 = -1,
// x % 0 = x). Index maps are such jaxprs: the grid semantics inference runs them over the grid
// at trace time where their form alone does not say whether they revisit blocks.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "src/ir/ir.h"
#include "src/ir/primitive.h"

namespace pallas::ir {

// A jaxpr prepared for evaluation: nullopt when it holds anything but integer and bool scalars
// and the elementwise ops on them (a ref read, a loop, a float, an unsigned integer).
class ScalarProgram {
 public:
  static std::optional<ScalarProgram> compile(const Jaxpr& j, size_t num_invars);
  // The outvars for these values of the first num_invars invars; `slots` is scratch, reused
  // across runs so that a run allocates nothing.
  void run(const int64_t* invars, int64_t* outvars, std::vector<int64_t>& slots) const;
  size_t num_outputs() const { return outs_.size(); }

 private:
  struct Op {
    PrimId id;
    int bits;  // the result's width (1: bool)
    std::vector<int> in;  // slots
    int out;
  };
  std::vector<int64_t> init_;  // slot values before a run: literals (invars are written per run)
  std::vector<Op> ops_;
  std::vector<int> outs_;
  size_t num_invars_ = 0;
};

}  // namespace pallas::ir
