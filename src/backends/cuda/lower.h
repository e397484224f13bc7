// IR -> CUDA C++ lowering. One CUDA block runs one grid program with num_warps*32 threads.
// Layout (layout.h): a tile of N elements lives in registers as `T v[K]`, thread t holding
// runs of V consecutive flat (row-major) elements, the threads' runs side by side:
// slot k holds e = (k / V) * (T * V) + t * V + k % V, K = ceil(N / (T * V)) * V. V is the
// layout pass's choice for the kernel (1 = plain cyclic). Values of one element are
// replicated scalars. Ops that move data between threads (broadcast, transpose, reductions,
// dot, cumsum, gathers) exchange through shared memory; row reductions shuffle in warps.
#pragma once
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "src/backends/cuda/plan/kernel_plan.h"
#include "src/backends/cuda/target.h"
#include "src/backends/cuda/value_layout.h"
#include "src/core/pallas_call.h"
#include "src/ir/primitive.h"

namespace pallas::cuda {

const char* prelude();
std::string ctype(DType t);      // storage type in generated code
std::string compute_type(DType t);  // arithmetic type (float for f16/bf16)
std::vector<int64_t> row_major_strides(const Shape& s);  // in elements

struct RefInfo {
  std::string base;  // expression of type T* pointing at the view's element 0
  DType dtype = DType::F32;
  Shape shape;
  std::vector<int64_t> strides;
  std::vector<std::string> lim;  // per dim: "" or an expression bounding the coordinate (array edge)
  std::vector<std::string> low;  // per dim: "" or the lowest coordinate inside the array (-origin)
  std::string valid;             // "" or a condition for the whole block (squeezed dims in range)
  // A block of an input array (else param = -1): where the block lies in its array, for TMA
  // tensor copies (pipeline.cc), which address the whole array by coordinates.
  int param = -1;                   // the kernel's array parameter p<param>
  Shape array_shape;                // the array's shape (row-major)
  std::vector<std::string> origin;  // per array dim: the block's origin there (a C expression)
  std::vector<int> array_dim;       // per ref dim: its array dim (the others are squeezed)
  // Several programs on parallel grid axes may write this block (an output whose index map
  // ignores such an axis, or reads scalar-prefetch data): accumulation must be atomic.
  bool shared_by_parallel_programs = false;
};

// One debug_print of the kernel: its format and the avals of its values. On the GPU each
// print appends a record to a log in device memory: [site, program's linear id, then one
// 64-bit print slot per element (src/core/print_format.h)]; the runner formats the records
// after the kernel, in program order, as the interpreter prints.
struct PrintSite {
  std::string fmt;
  std::vector<ir::Aval> values;
  int64_t slots() const;  // record size, header included
};

struct Lowered {
  std::string name;    // kernel symbol
  std::string source;  // complete CUDA C++ translation unit
  int threads = 128;
  size_t smem_bytes = 0;
  size_t smem_limit = 0;  // the target's (KernelPlan::smem_limit)
  // Bytes of global scratch each CUDA block exchanges tiles through (Emitter::put_exchange);
  // the kernel then takes a last parameter, pgx, gridDim.x * gridDim.y times this.
  size_t global_exchange_bytes = 0;
  bool has_check = false;
  std::vector<std::string> check_messages;
  std::vector<PrintSite> print_sites;
  std::string plan_text;  // the plan (KernelPlan::text(): one section per pass)
  std::string section(const std::string& pass) const;  // one pass's section of it ("" if absent)
  std::vector<TensorMapSpec> tensor_maps;
  bool grid_pipelined = false;
  // Each CUDA block loops over parallel programs (blockIdx.x + i * gridDim.x): launch as many
  // as fit on the device at once, not one per program.
  bool persistent = false;
};

class Emitter {
 public:
  // Prints the kernel `plan` describes; `what` names it in errors. `eqn_text`: the kernel's
  // eqns as the jaxpr printer writes them (or none): each one's code starts with it as a
  // comment, so a line of the generated .cu (an NVRTC error, a profiler's source view) leads
  // to the op in the kernel's IR (PallasCall::debug prints it, with the call's source line).
  Emitter(const KernelPlan& plan, std::string what, const std::unordered_map<const ir::Eqn*, std::string>* eqn_text = nullptr)
      : plan(plan), nt(plan.threads), vec(plan.layout.vec), what(std::move(what)), eqn_text_(eqn_text), value_layouts_(plan.values) {}
  const KernelPlan& plan;  // every decision the passes made (passes.h)
  const int nt;            // threads, plan.threads
  const int vec;           // V, the blocked layout's run length (plan.layout.vec)
  std::string what;
  std::vector<std::string> program_ids, grid_sizes;  // per grid axis: C expressions
  std::unordered_map<int64_t, RefInfo> refs;
  size_t xoff = 0;       // where the exchange region starts in dynamic shared memory
  size_t smem_peak = 0;  // the most shared memory used: the loops' regions, then every exchange printed
  std::vector<std::string> check_messages;
  std::vector<PrintSite> print_sites;
  // fori carries kept in MMA fragments (rules_dot.cc): the dot that accumulates into each,
  // and the adds those dots absorb (not emitted).
  std::unordered_map<const ir::Eqn*, std::string> dot_into_fragments;
  std::unordered_map<const ir::Eqn*, ir::Atom> scale_fragments_by_rows;  // such a dot's carry is first scaled by these
  std::unordered_set<const ir::Eqn*> absorbed;
  // Dot operands the loop pipeline keeps in shared memory (pipeline.cc): IR var -> a C
  // expression of the current stage's swizzled tile.
  std::unordered_map<int64_t, std::string> smem_operands;
  // Tiles that are one scalar broadcast (IR var -> the scalar's C expression): a loop carry
  // starting from one fills its fragments directly instead of through shared memory.
  std::unordered_map<int64_t, std::string> uniform;
  // The dot of the loop being emitted whose wgmma wait is deferred to the next iteration
  // (pipeline.h): it waits for all but its latest group and does not sync after.
  const ir::Eqn* wgmma_in_flight = nullptr;
  // A rotated loop's body being emitted (rotation.h): right after the first dot's wgmmas are
  // issued, `between` issues the previous iteration's second dot behind them (ending with a
  // wait for all but that group), and the second dot takes its A operand from `packed_a`, the
  // packed registers carried from the iteration before. `carry_scaled`: the loop scaled the
  // second dot's carry already (its rule does not). `before_first` (right before the first
  // dot's wgmmas) and `after_second` (right after the second dot's commit, before its wait)
  // emit the warpgroups' turn taking, when they take turns (rotation.h).
  struct Rotation {
    const ir::Eqn* first = nullptr;
    const ir::Eqn* second = nullptr;
    std::function<void()> between;
    std::string packed_a;
    bool carry_scaled = false;
    std::function<void()> before_first, after_second;
  };
  const Rotation* rotation = nullptr;
  // Inside a pipelined loop's body (pipeline.h): the stage buffers and resident operand tiles
  // are rewritten only after every warp has reached the next iteration (its barrier, or, in a
  // loop without one, its count out of the stage), so a dot that reads only those (or
  // registers) needs no barrier after it.
  bool operand_tiles_fenced = false;
  // The jaxprs whose eqns are being emitted, innermost last (a rule may look at the users of
  // its result in the same scope).
  std::vector<const ir::Jaxpr*> scopes;
  // The C name of the kernel's tensor-map parameter for `m` (one per distinct map).
  std::string tensor_map(const TensorMapSpec& m);
  // What the printing came to: the kernel body's code, the shared memory it uses (the
  // exchange region's end, or more while loop buffers raised it), the largest tile
  // put_exchange sent to global memory, the kernel's TMA maps (tensor_map's order).
  std::string text() const { return body_.str(); }
  size_t smem_bytes() const;
  size_t global_exchange_bytes() const { return global_exchange_bytes_; }
  const std::vector<TensorMapSpec>& tensor_maps() const { return tensor_maps_; }

  void line(const std::string& s);
  // Braces by scope: E.block("for (...) {") prints its opening line and indents the lines
  // printed while the Block lives; its end (leaving scope, or close()) un-indents and prints
  // `close` ("" prints nothing: a branch the next one's `} else {` ends, a braceless statement).
  class Block {
   public:
    Block(Block&& o) noexcept : E_(std::exchange(o.E_, nullptr)), close_(std::move(o.close_)) {}
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    Block& operator=(Block&&) = delete;
    ~Block() { close(); }
    void close();

   private:
    friend class Emitter;
    Block(Emitter& E, std::string close) : E_(&E), close_(std::move(close)) {}
    Emitter* E_;
    std::string close_;
  };
  [[nodiscard]] Block block(const std::string& open, std::string close = "}");
  std::string fresh(const std::string& prefix = "t");
  [[noreturn]] void fail(const ir::Eqn& e, const std::string& why) const;
  // Names and element expressions.
  std::string name(const ir::Atom& a) const;
  // Binds var v to the C expression `expr`: its name in the code printed from here on.
  void bind_name(const ir::Var& v, std::string expr);
  // v's name if it has one, and the removal of it (for a rule that renames a var for a while).
  std::optional<std::string> bound_name(const ir::Var& v) const;
  void unbind_name(const ir::Var& v);
  static bool scalar_like(const ir::Aval& a) { return a.size() == 1; }
  int64_t per_thread(const Shape& s) const { return (shape_size(s) + int64_t{nt} * vec - 1) / (int64_t{nt} * vec) * vec; }
  std::string elem(const ir::Atom& a, const std::string& k) const;  // k-th element this thread holds
  std::string lit(const ir::Literal& l) const;
  void declare(const ir::Var& v);  // fresh C variable for v, in its layout
  // The value layout of `a` (value_layout.h): the value-layouts pass's (plan.values), and while
  // a rule runs, the layout emit_eqns converted an operand to. Absent (and every scalar) = blocked.
  ValueLayout layout_of(const ir::Atom& a) const;
  int64_t slots(const ir::Var& v) const;  // the C array's length
  // Emits `for each slot this thread holds of a value of shape s in layout L` with k (slot)
  // and e (flat index) in scope, as foreach; for the Mma and Rows layouts also t, s, r, i, j
  // (the element's row and column) and rk (the slot of row i in a Rows value).
  void foreach_in(const ValueLayout& L, const Shape& s, const std::function<void()>& f);
  void foreach_value(const ir::Var& v, const std::function<void()>& f) { foreach_in(layout_of(v), v.aval.shape, f); }
  // The C name of `a` in layout `want`: its own name, or a converted copy (through shared
  // memory). `reuse`: the copy is remembered for the rest of the current emit_eqns scope (only
  // for code emitted at that scope's level, not inside braces a rule opens).
  std::string as_layout(const ir::Atom& a, const ValueLayout& want, bool reuse = false);
  // Emits `for each element this thread holds of a tile of shape s` with k (slot) and e (flat
  // index) in scope; for one-element shapes the body runs once with k = 0, e = 0.
  void foreach(const Shape& s, const std::function<void()>& f);
  // Emits `for each run of V elements this thread holds` (N a multiple of V) with e (flat
  // index of the run's first element) and k0 (its first slot) in scope.
  void foreach_run(const Shape& s, const std::function<void()>& f);
  // Multi-index of flat index `e` in shape s: emits int declarations, returns their names.
  std::vector<std::string> unravel(const std::string& e, const Shape& s);
  // Exchange: writes the atom's tile (in its layout) to shared memory at byte offset off (from
  // the exchange region), row-major, and returns the name of a typed pointer to it. Caller syncs.
  std::string put_shared(const ir::Atom& a, size_t off);
  // The whole-tile exchange of most rules (reserve + put_shared at offset 0): in shared memory
  // when the tile fits below the target's limit above the exchange base, else in this CUDA
  // block's region of global scratch (global_exchange_bytes()), so a tile too large for shared
  // memory is slower, not refused. Caller syncs.
  std::string put_exchange(const ir::Atom& a);
  size_t reserve(size_t off, const ir::Aval& a);  // returns the next free offset
  void sync() {
    line("__syncthreads();");
    unsynced_reads = false;
  }
  // A ref was read since the last barrier: a later write by another thread to an element read
  // there is a write-after-read hazard, so writes first sync (sync_before_write). Conservative
  // across control flow: each sub-block starts and ends with it set.
  bool unsynced_reads = false;
  void sync_before_write() {
    if (unsynced_reads) sync();
  }
  // Lowers a jaxpr's equations in the current scope (invars must already be bound).
  void emit_eqns(const ir::Jaxpr& j);
  // Binds sub-jaxpr invars to outer atoms (values by name, refs by RefInfo).
  void bind(const ir::Var& inner, const ir::Atom& outer);

 private:
  const std::unordered_map<const ir::Eqn*, std::string>* eqn_text_;
  std::unordered_map<int64_t, ValueLayout> value_layouts_;  // var id -> layout (layout_of)
  std::ostringstream body_;
  int depth_ = 1;  // the indentation of line(), in steps of two spaces (Block)
  int name_counter_ = 0;  // fresh(): names independent of tracing history
  std::unordered_map<int64_t, std::string> names_;  // IR var id -> C expression
  size_t xbytes_ = 0;  // the exchange region's size: the most any single exchange needs
  size_t global_exchange_bytes_ = 0;
  std::vector<TensorMapSpec> tensor_maps_;  // the kernel's TMA maps so far
  void foreach_fragments(const ValueLayout& L, const std::function<void()>& f);
  std::string put_tile(const ir::Atom& a, const std::string& at);  // put_shared's writes, at C address `at`
  // as_layout's conversions, one map (var and layout -> name) per C scope open in emit_eqns
  std::vector<std::unordered_map<std::string, std::string>> conversions_;
};

// Atomic `addr += value` on the device (rules_memory.cc). `addr` is an lvalue of the storage
// type of t (a ref element), `value` an expression of that type. Native atomicAdd for f32,
// f64, i32, u32, i64/u64 (as u64: two's complement wraps alike); a CAS loop on the aligned
// 32-bit word holding the element for f16, bf16, bool and 8/16-bit integers (16-bit floats
// add in f32 and round once, as the interpreter). atomic_add_expr yields the old value;
// emit_atomic_add emits the statement, under `guard` when it is not empty.
std::string atomic_add_expr(DType t, const std::string& addr, const std::string& value);
void emit_atomic_add(Emitter& E, DType t, const std::string& addr, const std::string& value, const std::string& guard = "");

using LowerRule = std::function<void(Emitter&, const ir::Eqn&)>;
ir::RuleTable<LowerRule>& lowering_rules();

// Whole call -> translation unit for `arch`: the passes plan it (plan/passes.h), then
// print_kernel writes it. (e.g. "sm_90a"; "" = any sm_80+ GPU).
// tensor_maps: the loop pipeliner may copy with TMA (sm_90a), the kernel then takes tensor maps
// the launcher encodes (not for AOT kernels, whose launch functions pass arrays only).
// aligned: the arrays start at 16-byte boundaries (cudaMalloc's and pl::Array's do; a caller's
// view may not). Vector accesses, cp.async and TMA rely on it; without it every global access
// is one element wide and there are no tensor copies.
// The switches (PALLAS_NO_TMA, ...) are the target's; the overload with an arch reads them from
// the environment (target_from_env).
Lowered lower(const core::PallasCall& call, const Target& target);
Lowered lower(const core::PallasCall& call, const std::string& arch = "", bool tensor_maps = true, bool aligned = true);

}  // namespace pallas::cuda
