// Transformations of a pallas_call: jvp, vmap, checkify. Each rewrites the call's
// PallasCall (kernel IR + grid mapping) into a new one, so the result runs on every backend.
// See docs/transforms.md.
#pragma once
#include <functional>
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

// ---- vjp (reverse mode) through custom_vjp ----
//
// A forward call paired with a hand-written backward call, as jax.custom_vjp is used with
// Pallas (docs/transforms.md, "custom_vjp"):
//
//   fwd: inputs -> num_outputs primal outputs, then residuals
//   bwd: residual inputs, residual outputs, fwd's residuals, then one cotangent per floating
//        primal output -> one cotangent per differentiable input (in input order)
//
//   pl::CustomVjp f = pl::custom_vjp(fwd, bwd, /*num_outputs=*/1, {.residual_inputs = {0}});
//   pl::Array y = f(x, w);                           // the primal outputs only
//   auto [outs, pullback] = pl::vjp(f, {x, w});
//   std::vector<pl::Array> grads = pullback({dy});   // {dx, dw}

struct CustomVjpOptions {
  // Inputs handed to bwd as residuals, in this order, before the rest (the arrays themselves:
  // no kernel copies them). JAX's fwd commonly returns x as a residual; here list its index.
  std::vector<int> residual_inputs;
  // Primal outputs handed to bwd as residuals, after the residual inputs (softmax's backward
  // needs y, which is already an output: no second copy is written).
  std::vector<int> residual_outputs;
  // Floating inputs that get no cotangent (bwd returns none for them), as nondiff_argnums.
  // Integer and bool inputs never get one.
  std::vector<int> nondiff_inputs;
  // Optional: a call run when only the primal outputs are wanted (CustomVjp::operator()),
  // e.g. a forward that does not write the residuals. Its outputs must be fwd's first
  // num_outputs outputs. Empty: fwd is run and its residuals dropped.
  Call primal;
};

class CustomVjp;
// A backward written as host code over Arrays, as JAX's bwd is a Python function: it may run
// several calls (a kernel, then a reduction of per-program partial sums). It receives the
// residuals then the cotangents, as a bwd Call would, and returns one cotangent per
// differentiable input; its results are checked after it returns.
using BwdFn = std::function<std::vector<Array>(const std::vector<Array>& residuals_then_cotangents)>;

// Pairs fwd with bwd. num_outputs: how many of fwd's outputs (the first ones) are the primal
// outputs; the rest are residuals. Checked here: counts and indices; at the first vjp: that
// bwd takes the arguments it is given and returns one cotangent of each differentiable
// input's shape and dtype.
CustomVjp custom_vjp(const Call& fwd, const Call& bwd, int num_outputs, CustomVjpOptions opts = {});
// The same with a backward function; bwd_name names it in messages ("backward function" if empty).
CustomVjp custom_vjp(const Call& fwd, BwdFn bwd, int num_outputs, CustomVjpOptions opts = {},
                     std::string bwd_name = {});

// Maps output cotangents to input cotangents (the pullback of a vjp). Holds the residuals.
class VjpFn {
 public:
  VjpFn() = default;
  // One cotangent per primal output, of its shape and dtype (pl::zero_tangent(), an empty
  // Array, for zero; integer outputs take only that). Returns one cotangent per input: an
  // empty Array for inputs without one (integer, bool and nondiff inputs).
  std::vector<Array> operator()(const std::vector<Array>& cotangents) const;
  template <class... A, std::enable_if_t<(std::is_convertible_v<const A&, const Array&> && ...), int> = 0>
  std::vector<Array> operator()(const A&... cotangents) const {
    return (*this)(std::vector<Array>{cotangents...});
  }
  // The arrays bwd receives before the cotangents (residual inputs, residual outputs, fwd's
  // residuals), e.g. to check what is saved.
  const std::vector<Array>& residuals() const;

 private:
  struct State;
  std::shared_ptr<const State> s_;
  friend std::pair<std::vector<Array>, VjpFn> vjp(const CustomVjp& f, const std::vector<Array>& primals);
};

class CustomVjp {
 public:
  CustomVjp() = default;
  // The primal outputs (the `primal` call's, else fwd's first num_outputs).
  std::vector<Array> operator()(const std::vector<Array>& args) const;
  template <class... A, std::enable_if_t<(std::is_convertible_v<const A&, const Array&> && ...), int> = 0>
  Array operator()(const A&... args) const {
    return single(std::vector<Array>{args...});
  }
  const Call& fwd() const;
  const Call& bwd() const;    // empty when the backward is a BwdFn
  const BwdFn& bwd_fn() const;  // empty when the backward is a Call
  int num_outputs() const;  // primal outputs
  const CustomVjpOptions& options() const;
  std::string name() const;  // "custom_vjp of kernel 'f' (f.cc:3) with backward kernel 'b' (b.cc:9)"

  struct State;

 private:
  Array single(const std::vector<Array>& args) const;
  std::shared_ptr<const State> s_;
  friend CustomVjp custom_vjp(const Call&, const Call&, int, CustomVjpOptions);
  friend CustomVjp custom_vjp(const Call&, BwdFn, int, CustomVjpOptions, std::string);
  friend std::pair<std::vector<Array>, VjpFn> vjp(const CustomVjp& f, const std::vector<Array>& primals);
};

using VjpResult = std::pair<std::vector<Array>, VjpFn>;
// The primal outputs of f at primals, and the pullback: auto [outs, f_vjp] = pl::vjp(f, {x});
VjpResult vjp(const CustomVjp& f, const std::vector<Array>& primals);
// How the transposed kernel gets the carries a loop that carries state (an online softmax, a
// recurrence) had entering each step, as jax.checkpoint chooses between saving and
// recomputing:
//   Saved: the replayed forward writes them per step to a tape in global memory (per program:
//     the steps times the carries' bytes), and the reverse loop reads them back; for loops at
//     the kernel's top level with static bounds (others are recomputed);
//   Recomputed: each step of the reverse loop runs the forward loop again from its start (no
//     memory; T steps cost T (T + 1) / 2 body evaluations instead of 2 T).
enum class VjpCarries { Saved, Recomputed };
struct VjpOptions {
  VjpCarries carries = VjpCarries::Saved;
};
// Reverse mode of a plain pallas_call, automatic: the kernel is transposed into a second
// pallas_call over the same grid (its primal values recomputed there, nothing saved but the
// inputs and, by default, the carries of loops that carry state), which the pullback runs.
// Every floating input gets a cotangent; an input block several programs read gets the sum of
// their contributions. It takes loads of inputs, stores of outputs (masked or not),
// elementwise, shape, reduction and dot primitives, fori_loops (accumulating or carrying state)
// and conds; a while_loop, a ref written inside a loop or branch, an output read back or
// accumulated, an atomic, scratch, scalar prefetch or a primitive without a rule is refused
// with a pl::Error that names it and points to custom_vjp (docs/transforms.md, "vjp").
VjpResult vjp(const Call& f, const std::vector<Array>& primals, VjpOptions opts = {});

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
