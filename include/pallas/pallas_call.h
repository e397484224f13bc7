// pallas_call: run a kernel over a grid, with BlockSpecs saying which block each program sees.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "pallas/array.h"
#include "pallas/block_spec.h"
#include "pallas/kernel.h"

namespace pallas {

enum class Backend : uint8_t {
  Auto,       // the GPU where one is present, else the interpreter
  Interpret,  // the CPU interpreter
  Cuda,       // NVIDIA GPU; fails clearly where there is none
};

// How the programs along one grid axis may run (Pallas TPU's and Mosaic GPU's
// dimension_semantics). Parallel: in any order, at once (on the GPU, spread over the SMs).
// Sequential: in increasing order, each seeing the previous one's writes (on the GPU, a loop
// inside one CUDA block) — what a grid axis needs when programs along it revisit an output
// block, e.g. to accumulate over a K axis.
enum class DimensionSemantics : uint8_t {
  Parallel,
  Sequential,
  Arbitrary = Sequential,  // Pallas TPU's name for the same thing
};

inline constexpr DimensionSemantics parallel = DimensionSemantics::Parallel;
inline constexpr DimensionSemantics sequential = DimensionSemantics::Sequential;
inline constexpr DimensionSemantics arbitrary = DimensionSemantics::Arbitrary;

struct CompilerParams {
  int num_warps = 0;   // 0: the backend's default (4, as Triton)
  int num_stages = 0;  // 0: the backend's default (3, as Triton)
  std::string arch;    // "": the device's own (e.g. "sm_90a")
};

struct CostEstimate {
  int64_t flops = 0;
  int64_t transcendentals = 0;
  int64_t bytes_accessed = 0;
};

// Checks the interpreter can make while it runs a call (Pallas TPU's interpret-mode
// `detect_races`, and more). Each finds a bug the GPU would turn into a wrong answer, and is
// reported as a pl::Error that names the kernel, the program(s) (grid coordinates), the
// operand ("output 0") and the element (array coordinates). They cost a shadow record per
// element of every output (and of inputs the kernel writes) while on; off by default.
// Unset (std::nullopt) fields follow PALLAS_INTERPRET_CHECKS: "1" or "all" turns on every check a
// correct kernel never trips (races, uninitialized, out_of_bounds, unwritten_outputs), or a comma
// list of those names and "padding"; set a field to force it.
// The GPU backend ignores them.
struct InterpretParams {
  // Two programs that differ along a parallel grid axis touch the same element and one of
  // them writes it (plain loads and stores; atomics only race with plain accesses).
  // Programs that differ only along sequential axes run in order and never race.
  std::optional<bool> detect_races;
  // A read (load, swap, addupdate, atomic) of an output or scratch element that no program
  // has written yet (outputs aliased to an input start written).
  std::optional<bool> detect_uninitialized;
  // An unmasked access outside the ref (a ds or index past a block's end, an index array
  // entry out of range: the interpreter reads poison there and drops the write), and an
  // unmasked read of a block that its index map put wholly outside the array (never an edge
  // block: the map is wrong). Masked-off lanes are never reported.
  std::optional<bool> detect_out_of_bounds;
  // Output elements that no program wrote by the end of the call (they come back as poison on
  // the interpreter and as stale memory on the GPU): a grid a block short, an index map that
  // skips blocks, a store masked too tightly. Outputs aliased to an input start written.
  std::optional<bool> detect_unwritten_outputs;
  // An unmasked load of an overhanging edge block's padding (the part of the block beyond the
  // array). Legal — the padding reads NaN (integers: poison) and a kernel whose out-of-array
  // lanes are then dropped by the store is correct — so not among "all": turn it on ("padding")
  // to find a padded lane that reaches a reduction or an in-bounds element.
  std::optional<bool> detect_padding_reads;
};

struct CallOptions {
  std::vector<int64_t> grid;  // any rank; pl::dynamic for a size given at call time
  // One entry per grid axis, or empty: inferred (an axis along which two programs may write one
  // block of some output — its index map ignores the axis, or reads it as i / 2, i + j, ... —
  // is Sequential; one that every output's map keeps one-to-one is Parallel).
  std::vector<DimensionSemantics> dimension_semantics;
  std::vector<BlockSpec> in_specs;   // empty: every input whole
  std::vector<BlockSpec> out_specs;  // empty: every output whole
  std::vector<ShapeDtype> scratch_shapes;  // extra refs after the outputs
  int num_scalar_prefetch = 0;  // leading i32 operands handed to every index map and the kernel
  std::map<int, int> input_output_aliases;  // input index -> output index
  bool interpret = false;
  bool debug = false;  // print the IR; on the GPU also write the generated code to PALLAS_DUMP_DIR or <cache>/dump
  std::string name;
  CompilerParams compiler_params;
  std::optional<CostEstimate> cost_estimate;
  Backend backend = Backend::Auto;
  InterpretParams interpret_params;  // checks made by the interpreter (above)
};

// The interpreter runs the programs of a call on a process-wide pool of threads (the calling
// thread included), created once. n = 0: PALLAS_NUM_THREADS when set, else the number of
// hardware threads; n = 1 runs every call on the calling thread.
void set_interpret_num_threads(int n);
int interpret_num_threads();

namespace detail {
struct CallState;
using KernelFn = std::function<void(const std::vector<Ref>&)>;
struct KernelBody {
  KernelFn fn;
  int arity = -1;  // -1: takes a vector of Refs
  bool returns_value = false;
};

template <class Tr, class F, size_t... I>
void call_kernel(F& f, const std::vector<Ref>& r, std::index_sequence<I...>) {
  f(r[I]...);
}

template <class F>
KernelBody wrap_kernel(F f) {
  using Tr = fn_traits<F>;
  KernelBody k;
  k.returns_value = !std::is_void_v<typename Tr::result>;
  if constexpr (Tr::arity == 1 && std::is_same_v<std::tuple_element_t<0, typename Tr::args>, std::vector<Ref>>) {
    k.arity = -1;
    k.fn = [f](const std::vector<Ref>& r) mutable { f(r); };
  } else {
    k.arity = Tr::arity;
    k.fn = [f](const std::vector<Ref>& r) mutable { call_kernel<Tr>(f, r, std::make_index_sequence<Tr::arity>{}); };
  }
  return k;
}

std::shared_ptr<CallState> make_call(KernelBody body, std::vector<ShapeDtype> out_shapes, CallOptions opts,
                                     bool single_output, SourceLocation loc);
}  // namespace detail

// A kernel bound to its grid and specs. Traced on its first call (or by trace()) for the
// shapes of those arguments; later calls must pass the same shapes and dtypes.
class Call {
 public:
  Call() = default;
  explicit Call(std::shared_ptr<detail::CallState> s) : state_(std::move(s)) {}

  std::vector<Array> operator()(const std::vector<Array>& args) const;
  template <class... A, std::enable_if_t<(std::is_convertible_v<const A&, const Array&> && ...), int> = 0>
  Array operator()(const A&... args) const {
    return single(std::vector<Array>{args...});
  }

  // Runs the call with its outputs written into `outs` (one array per output, of its shape and
  // dtype, e.g. views of the caller's memory: Array::view, dlpack::from_dlpack) instead of new
  // arrays. On the GPU, outputs on the call's device are written in place (zero-copy); an
  // output aliased to an input (input_output_aliases) may be that input's own array, which the
  // call then updates in place. The interpreter computes in its own buffers and copies.
  void into(const std::vector<Array>& outs, const std::vector<Array>& args) const;

  // Trace for these input shapes without running (the IR is then available).
  const Call& trace(const std::vector<ShapeDtype>& inputs) const;
  std::string jaxpr_text() const;  // the kernel, index maps and grid, as debug=true prints
  std::string name() const;
  int num_outputs() const;
  // The outputs' shapes and dtypes, as given to pallas_call (a framework's meta function reads them).
  std::vector<ShapeDtype> out_shapes() const;
  // Where a call of the traced kernel runs: "cuda" or "interpreter" (Backend::Auto: the GPU
  // where one is usable, else the interpreter).
  std::string backend_name() const;
  // Lowers the traced kernel with the CUDA backend and compiles it with NVRTC for `arch`
  // (e.g. "sm_90a") without running it; needs the CUDA toolkit at build time, not a GPU.
  // Thread-safe; results are cached like any compiled kernel. Throws pl::Error when the
  // build has no CUDA backend or lowering/compiling fails (the differential fuzzer uses it).
  void compile_for(const std::string& arch) const;
  const std::shared_ptr<detail::CallState>& state() const { return state_; }

 private:
  Array single(const std::vector<Array>& args) const;
  std::shared_ptr<detail::CallState> state_;
};

template <class F>
Call pallas_call(F kernel, std::vector<ShapeDtype> out_shapes, CallOptions opts = {},
                 SourceLocation loc = SourceLocation::current()) {
  return Call(detail::make_call(detail::wrap_kernel(std::move(kernel)), std::move(out_shapes), std::move(opts),
                                false, loc));
}
template <class F>
Call pallas_call(F kernel, ShapeDtype out_shape, CallOptions opts = {},
                 SourceLocation loc = SourceLocation::current()) {
  return Call(detail::make_call(detail::wrap_kernel(std::move(kernel)), {std::move(out_shape)}, std::move(opts),
                                true, loc));
}

// Lowers and compiles several traced calls for `arch` at once, on up to num_threads threads (the
// calling thread is one; 0: as many as there are calls, at most the hardware threads), as
// Call::compile_for does one by one: each NVRTC compile runs on one core, so a model's kernels
// compile in about the time of the slowest few instead of their sum. A call listed twice is
// compiled once. Every call is attempted; then the first failure in the list's order is thrown
// (a pl::Error names its call and how many others failed). Thread-safe; the kernels land in the
// in-memory and disk caches, so a later run (or compile_for) of any of them does not compile.
void compile_for(const std::vector<Call>& calls, const std::string& arch, int num_threads = 0);

// Whether a CUDA device is usable in this process (driver found, device present).
bool cuda_available();
// How many CUDA devices this process can use (0 without one). A call runs on the device its
// arguments live on (Device::cuda(n); host arguments are copied there), else where into()'s
// outputs live, else cuda:0; each device has its own context, loaded modules and memory pool.
int cuda_device_count();

// How many calls ran on each backend in this process (every pallas_call and transformed call;
// the test suite reports these, so it shows where its kernels ran).
struct RunCounts {
  int64_t interpreter = 0;
  int64_t cuda = 0;
};
RunCounts run_counts();

// The environment variable PALLAS_BACKEND (interpret | cuda | auto) chooses the backend of
// every call whose options leave it to Backend::Auto (and do not set interpret = true), as
// JAX_PLATFORMS does for JAX: the test suite runs once per backend this way.

}  // namespace pallas
