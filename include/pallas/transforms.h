// Transformations of a pallas_call: jvp, vmap, checkify. Each rewrites the call's
// PallasCall (kernel IR + grid mapping) into a new one, so the result runs on every backend.
// See docs/transforms.md.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pallas/array.h"
#include "pallas/kernel.h"
#include "pallas/pallas_call.h"

namespace pallas {

// ---- jvp (forward-mode differentiation) ----

// A tangent that is symbolically zero: its computation is pruned from the kernel. (Any
// empty Array means the same; integer inputs always have zero tangents.)
inline Array zero_tangent() { return Array(); }

// first: the primal outputs; second: one tangent per output (zeros for integer outputs).
using JvpResult = std::pair<std::vector<Array>, std::vector<Array>>;

// outputs and output tangents of `call` at `primals` along `tangents` (one per input).
// auto [outs, tans] = pl::jvp(call, {x, w}, {dx, pl::zero_tangent()});
JvpResult jvp(const Call& call, const std::vector<Array>& primals, const std::vector<Array>& tangents);

// The jvp as a Call, for composing with other transformations: it takes the primal inputs,
// then one tangent per input with with_tangent[i] set (empty: every floating input), and
// returns the primal outputs, then one tangent per output.
Call jvp_call(const Call& call, std::vector<bool> with_tangent = {});

// ---- vmap (batching) ----

// A Call over a batch: in_axes has one entry per argument of `call` (dynamic grid bounds
// first, then inputs); std::nullopt: not batched, else the batch axis of that argument
// (negative counts from the end). Outputs are batched at axis 0.
Call vmap(const Call& call, std::vector<std::optional<int>> in_axes);

// Ragged batching: a batch whose elements have different lengths along one dimension, stored
// padded. The grid axis `grid_axis` (of the unbatched call) walks that dimension in steps of
// `block` elements.
struct RaggedSpec {
  int grid_axis = 0;
  int64_t block = 0;
};
// vmap over a ragged batch: the new call takes lengths (an i32[B] array) first, then the
// arguments of `call` batched as in_axes. For element b, programs whose block starts at or
// past lengths[b] are skipped, and every index map clamps that grid index to b's last block,
// so no block past the end is fetched. Output blocks past an element's length are not
// written (their contents are unspecified).
Call vmap_ragged(const Call& call, std::vector<std::optional<int>> in_axes, RaggedSpec spec);

// ---- checkify ----

// The error a checked call returns: the first failing check in grid (row-major) order;
// out-of-bounds block checks of the index maps come before the user checks of a program.
class CheckError {
 public:
  CheckError() = default;
  CheckError(std::string message, std::vector<int64_t> program_id)
      : failed_(true), message_(std::move(message)), program_id_(std::move(program_id)) {}
  bool ok() const { return !failed_; }
  explicit operator bool() const { return failed_; }  // true when a check failed
  const std::string& message() const { return message_; }
  // The program id (one entry per grid axis) of the first failure; empty when ok().
  const std::vector<int64_t>& program_id() const { return program_id_; }
  void throw_if_error() const;  // throws pl::Error with the message and program id

 private:
  bool failed_ = false;
  std::string message_;
  std::vector<int64_t> program_id_;
};

struct Checked {
  CheckError error;
  std::vector<Array> outputs;
};

namespace detail {
struct CheckSlots;
}

struct CheckifyOptions {
  // Report failures through extra outputs of the rewritten call (an error code and the
  // message's values per program), so the check runs on any backend. Off: the interpreter's
  // check rule collects them. Chosen automatically when the call runs on the GPU.
  bool error_outputs = false;
};

class CheckedCall;
// A checked version of `call`: index maps are checked for blocks outside their arrays
// (for every program of the grid) and pl::check()s in the kernel are enabled.
CheckedCall checkify(const Call& call, CheckifyOptions opts = {});

class CheckedCall {
 public:
  explicit CheckedCall(Call call, CheckifyOptions opts = {}) : call_(std::move(call)), opts_(opts) {}
  // auto [err, outs] = checked({x, y});
  Checked operator()(const std::vector<Array>& args) const;
  template <class... A, std::enable_if_t<(std::is_convertible_v<const A&, const Array&> && ...), int> = 0>
  Checked operator()(const A&... args) const {
    return (*this)(std::vector<Array>{args...});
  }
  const Call& call() const { return call_; }
  std::string jaxpr_text(const std::vector<ShapeDtype>& inputs) const;  // the checked PallasCall

 private:
  Call call_;
  CheckifyOptions opts_;
  std::shared_ptr<detail::CheckSlots> slots_;
  friend CheckedCall checkify(const Call& call, CheckifyOptions opts);
};

// In a kernel: a check that pred holds (every element, for a tile). Under checkify a failure
// is reported with fmt's "{}"s replaced by the values, after the kernel's name and the check's
// line (the predicate is a detail::Operand, made where the kernel calls check, so it knows the
// line); elsewhere it does nothing.
namespace detail {
void check_impl(const Operand& pred, const std::string& fmt, const std::vector<Value>& values);
}
template <class... V>
void check(const detail::Operand& pred, const std::string& fmt, const V&... values) {
  detail::check_impl(pred, fmt, std::vector<Value>{Value(values)...});
}

}  // namespace pallas
