// The unit every stage takes: a PallasCall (kernel IR + GridMapping + call parameters).
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "pallas/pallas_call.h"
#include "src/ir/ir.h"

namespace pallas::core {

// How one operand is split into blocks.
struct BlockMapping {
  std::string what;        // "input 1", "output 0" (for messages)
  ShapeDtype array;        // the whole operand
  Shape block_shape;       // squeezed dims have size 1 here
  std::vector<bool> squeezed;
  MemorySpace space = MemorySpace::Default;
  // Index map: invars are the grid indices (i32 scalars) then the scalar-prefetch refs;
  // outvars are one block index per array dim (i32).
  ir::JaxprPtr index_map;
  // Elements of this output may stay unwritten by design, so the interpreter's unwritten-outputs
  // check skips it: the outputs of a checkified call (a failing program stops early; its error
  // values are written only then) and a ragged batch's rows past each length (unspecified,
  // docs/transforms.md).
  bool may_stay_unwritten = false;
  Shape ref_shape() const;  // the kernel's view: block_shape without the squeezed dims
  // Element offset of the block with these block indices.
  bool index_map_is_constant_zero() const;
  // Whether the block index depends on any grid axis with axes[a] set, or (with prefetch) on
  // scalar-prefetch data: a conservative taint over the index map (src/ir/dependence.cc).
  bool index_map_reads(const std::vector<bool>& axes, bool prefetch) const;
};

struct GridMapping;
// The grid axes along which two programs may write one block of output o (grid_semantics.cc:
// proven apart by the map's affine form, else by running the map over a static grid, else
// assumed). The inferred semantics make these sequential; with declared semantics, a parallel
// one among them makes o's blocks shared by programs that run at once.
std::vector<bool> revisit_axes(const GridMapping& g, const BlockMapping& o);

struct GridMapping {
  std::vector<int64_t> grid;  // pl::dynamic (-1) for call-time sizes
  // One per grid axis, always resolved (declared, or inferred by resolve_semantics).
  std::vector<DimensionSemantics> semantics;
  std::vector<ShapeDtype> prefetch;  // scalar-prefetch operands (passed whole, in SMEM)
  std::vector<BlockMapping> inputs;  // the other inputs
  std::vector<BlockMapping> outputs;
  std::vector<ShapeDtype> scratch;
  int num_dynamic_bounds() const;
  int64_t num_programs_static() const;  // -1 with dynamic bounds
  bool sequential(size_t axis) const { return axis < semantics.size() && semantics[axis] == DimensionSemantics::Sequential; }
  bool any_sequential() const;
};

// What a backend binds to one PallasCall on its first run and reuses on every later one (the
// CUDA runner's loaded kernel and launch layout: src/backends/cuda/runner.cc), so that a
// cached call does no lookups. Immutable once installed.
struct BoundState {
  virtual ~BoundState() = default;
};

// A PallasCall's slot for its BoundState: set at most once (the first installer wins, with
// no lock on the read side), dropped with the call. A copy of a PallasCall starts empty, and
// assigning one empties it: the copy may be changed before it runs (compile_for's arch, a
// transformation's rewrite), and the state describes the call it was bound to only.
class BoundSlot {
 public:
  BoundSlot() = default;
  BoundSlot(const BoundSlot&) noexcept {}
  BoundSlot& operator=(const BoundSlot&) noexcept {
    delete p_.exchange(nullptr, std::memory_order_acq_rel);
    return *this;
  }
  ~BoundSlot() { delete p_.load(std::memory_order_relaxed); }
  const BoundState* get() const { return p_.load(std::memory_order_acquire); }
  // Installs s unless another thread got there first (then s is dropped); the state installed.
  const BoundState* install(std::unique_ptr<BoundState> s) const {
    BoundState* expected = nullptr;
    if (p_.compare_exchange_strong(expected, s.get(), std::memory_order_acq_rel, std::memory_order_acquire)) return s.release();
    return expected;
  }

 private:
  mutable std::atomic<BoundState*> p_{nullptr};
};

struct PallasCall {
  std::string name;  // user's name (may be empty)
  std::string what;  // "kernel 'name'" or "kernel at file:line": prefix of every error
  ir::JaxprPtr kernel;  // invars: prefetch refs, input refs, output refs, scratch refs
  GridMapping grid;
  std::map<int, int> aliases;  // call input index (prefetch included) -> output index
  CompilerParams compiler_params;
  std::optional<CostEstimate> cost_estimate;
  Backend backend = Backend::Auto;
  bool debug = false;
  InterpretParams interpret_params;  // not part of text() or hash(): the GPU ignores them
  BoundSlot bound;  // the CUDA runner's pre-bound launch (not part of text() or hash())

  std::vector<ShapeDtype> input_shapes() const;  // prefetch, then inputs
  std::vector<ShapeDtype> output_shapes() const;
  std::string text() const;  // grid, block mappings and kernel, readable and stable
  uint64_t hash() const;
};

// Trace a user kernel into a PallasCall for these input shapes (validating everything).
PallasCall trace_call(const detail::KernelBody& body, const std::vector<ShapeDtype>& out_shapes,
                      const CallOptions& opts, const std::string& what, const std::vector<ShapeDtype>& inputs);

// Fills grid.semantics from the declared ones (empty: infer them), validating both; see
// grid_semantics.cc.
void resolve_semantics(GridMapping& grid, const std::vector<DimensionSemantics>& declared, const std::string& what);

// The number of programs of a grid whose sizes are all known; a pl::Error naming the kernel
// when an axis exceeds program_id's i32 range or the product overflows int64.
int64_t checked_num_programs(const std::vector<int64_t>& grid, const std::string& what);

// Check a call's arguments (dynamic bounds, then inputs) against the PallasCall.
void check_arguments(const PallasCall& call, const std::vector<Array>& args);
// A dynamic grid bound's value, checked by each backend as it reads it: negative is an error,
// and so is 0 when an output would come back unwritten (as a static axis of size 0 is).
void check_dynamic_bound(const PallasCall& call, size_t k, int64_t v);
// The first output a call that runs no program would leave unwritten ("output 0 f32[8]"):
// one neither empty nor aliased to an input; "" if none.
std::string output_left_unwritten(const PallasCall& call);
// The error for a call with `given` arrays where it takes `dynamic` grid bounds, then
// `prefetch` scalar-prefetch operands, then `inputs` inputs (`why`: how that is known, e.g.
// "one per in_spec"; may be empty).
Error wrong_argument_count(const std::string& what, size_t given, size_t dynamic, size_t prefetch, size_t inputs,
                           const std::string& why);

// Run on the chosen backend. args: dynamic grid bounds (i32 scalars), then inputs. With
// `outs`, the outputs are written into them and the result may be empty.
std::vector<Array> execute(const PallasCall& call, const std::vector<Array>& args, const std::vector<Array>* outs = nullptr);

// The backend a call runs on: its own choice, else PALLAS_BACKEND, else the GPU where one is
// present and can run it.
Backend resolve_backend(const PallasCall& call);
// "(i, j)": a program id as messages print it.
std::string program_id_text(const std::vector<int64_t>& pid);
// Counts a run for pallas::run_counts() (every path that runs a PallasCall calls this).
void count_run(Backend b);

}  // namespace pallas::core

namespace pallas::detail {
// What a Call holds: either a user kernel to trace on first use, or a ready PallasCall
// (from a transformation).
struct CallState {
  KernelBody body;
  std::vector<ShapeDtype> out_shapes;
  CallOptions opts;
  bool single_output = false;
  std::string what;
  std::optional<core::PallasCall> traced;
  // Set (under mu) once `traced` is complete: calls read it without the lock, and a thread
  // tracing the call's first run must not be seen half done by another calling it.
  std::atomic<bool> ready{false};
  // Set by transformations (src/transforms): builds the PallasCall for these input shapes
  // instead of tracing `body`; and, where the result is not one PallasCall (vmap's explicit
  // loop, a batch of one), runs the call instead of executing `traced`.
  std::function<core::PallasCall(const std::vector<ShapeDtype>& inputs)> build;
  std::function<std::vector<Array>(const std::vector<Array>& args)> run;
  std::mutex mu;
  const core::PallasCall& get(const std::vector<ShapeDtype>& inputs);
  const core::PallasCall& get_traced() const;
};
}  // namespace pallas::detail
