// pallas_call's Call object and backend dispatch.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <system_error>
#include <thread>
#include <unordered_set>

#include "pallas/testing.h"
#include "src/core/backend_registry.h"
#include "src/core/pallas_call.h"

namespace pallas {

namespace detail {

const core::PallasCall& CallState::get(const std::vector<ShapeDtype>& inputs) {
  std::lock_guard<std::mutex> g(mu);
  if (!traced) {
    traced = build ? build(inputs) : core::trace_call(body, out_shapes, opts, what, inputs);
    ready.store(true, std::memory_order_release);
  }
  return *traced;
}

const core::PallasCall& CallState::get_traced() const {
  if (!traced)
    throw Error(what + ": the call has not been traced yet; call it once or call .trace({input shapes}) first");
  return *traced;
}

std::shared_ptr<CallState> make_call(KernelBody body, std::vector<ShapeDtype> out_shapes, CallOptions opts,
                                     bool single_output, SourceLocation loc) {
  auto s = std::make_shared<CallState>();
  std::string file = loc.file;
  size_t slash = file.find_last_of('/');
  if (slash != std::string::npos) file = file.substr(slash + 1);
  s->what = opts.name.empty() ? "kernel at " + file + ":" + std::to_string(loc.line)
                              : "kernel '" + opts.name + "' (" + file + ":" + std::to_string(loc.line) + ")";
  s->body = std::move(body);
  s->out_shapes = std::move(out_shapes);
  s->opts = std::move(opts);
  s->single_output = single_output;
  return s;
}

}  // namespace detail

namespace {
std::string plural(size_t n, const char* w) { return std::to_string(n) + " " + w + (n == 1 ? "" : "s"); }

// How many arrays a pallas_call takes is known before its first call traces it: the grid's
// dynamic bounds, num_scalar_prefetch operands, then one input per in_spec (or, without
// in_specs, one per kernel ref that is not an output or scratch). Checked first, so that a
// wrong count is reported as what it is, not as a spec count or kernel arity that does not
// match (those are checked when it is traced, against the arrays given).
void check_argument_count(const detail::CallState& st, size_t given) {
  if (st.build) return;  // a transformed call: its build checks
  const CallOptions& o = st.opts;
  size_t nd = 0;
  for (int64_t g : o.grid) {
    if (g < 0 && g != dynamic) return;  // a negative size: tracing reports it
    nd += g == dynamic;
  }
  if (o.num_scalar_prefetch < 0) return;  // tracing reports it
  size_t np = static_cast<size_t>(o.num_scalar_prefetch);
  // The inputs the kernel's refs leave room for (-1: any number, a kernel over a vector of refs).
  size_t others = np + st.out_shapes.size() + o.scratch_shapes.size();
  int64_t by_kernel = st.body.arity < 0 ? -1 : static_cast<int64_t>(st.body.arity) - static_cast<int64_t>(others);
  size_t nin;
  std::string why;
  if (!o.in_specs.empty()) {
    nin = o.in_specs.size();
    why = "one per in_spec";
    if (by_kernel >= 0 && static_cast<size_t>(by_kernel) != nin)
      why += "; but the kernel's " + plural(static_cast<size_t>(st.body.arity), "ref") + " leave room for " +
             std::to_string(by_kernel) + ": the specs or the kernel are wrong too";
  } else if (by_kernel >= 0) {
    nin = static_cast<size_t>(by_kernel);
    why = "the kernel takes " + plural(static_cast<size_t>(st.body.arity), "ref") + ": " +
          (np ? plural(np, "scalar-prefetch ref") + ", " : "") + plural(nin, "input") + ", " +
          plural(st.out_shapes.size(), "output") +
          (o.scratch_shapes.empty() ? "" : ", " + plural(o.scratch_shapes.size(), "scratch buffer"));
  } else {
    return;  // any number of inputs (or a kernel arity that tracing reports as wrong)
  }
  if (given != nd + np + nin) throw core::wrong_argument_count(st.what, given, nd, np, nin, why);
}

// The traced call for these arguments (tracing on first use), the arguments checked against it.
const core::PallasCall& traced_for(detail::CallState& st, const std::vector<Array>& args) {
  if (!st.ready.load(std::memory_order_acquire)) {
    check_argument_count(st, args.size());
    int nd = 0;
    for (int64_t g : st.opts.grid) nd += g < 0;
    if (args.size() < static_cast<size_t>(nd))
      throw Error(st.what + ": called with " + std::to_string(args.size()) + " arguments but the grid has " +
                  std::to_string(nd) + (nd == 1 ? " dynamic bound" : " dynamic bounds") + ", passed first");
    std::vector<ShapeDtype> ins;
    for (size_t k = nd; k < args.size(); ++k) {
      if (!args[k].defined()) throw Error(st.what + ": input " + std::to_string(k - nd) + " is an empty Array");
      ins.push_back(args[k].shape_dtype());
    }
    st.get(ins);
  }
  const core::PallasCall& c = st.get_traced();
  core::check_arguments(c, args);
  return c;
}
}  // namespace

std::vector<Array> Call::operator()(const std::vector<Array>& args) const {
  if (!state_) throw Error("Call: calling an empty Call");
  if (state_->run) return state_->run(args);
  return core::execute(traced_for(*state_, args), args, nullptr);
}

void Call::into(const std::vector<Array>& outs, const std::vector<Array>& args) const {
  if (!state_) throw Error("Call: calling an empty Call");
  auto& st = *state_;
  if (outs.size() != st.out_shapes.size())
    throw Error(st.what + ": into() got " + std::to_string(outs.size()) + " output arrays for " + std::to_string(st.out_shapes.size()) +
                " outputs");
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!outs[k].defined()) throw Error(st.what + ": into(): output " + std::to_string(k) + " is an empty Array");
    if (outs[k].dtype() != st.out_shapes[k].dtype || outs[k].shape() != st.out_shapes[k].shape)
      throw Error(st.what + ": into(): output " + std::to_string(k) + " is " + outs[k].shape_dtype().str() + " but the call returns " +
                  st.out_shapes[k].str());
  }
  if (st.run) {  // a transformed call: run it, then copy
    std::vector<Array> r = st.run(args);
    for (size_t k = 0; k < r.size(); ++k) outs[k].copy_from(r[k]);
    return;
  }
  core::execute(traced_for(st, args), args, &outs);
}

Array Call::single(const std::vector<Array>& args) const {
  // checked before running, so a call without exactly one output has no effects here
  if (state_ && state_->out_shapes.size() != 1)
    throw Error(state_->what + ": the call has " + std::to_string(state_->out_shapes.size()) +
                " outputs; use the vector form, call({args...}), to get all of them");
  std::vector<Array> outs = (*this)(args);
  if (outs.size() != 1)
    throw Error(state_->what + ": the call has " + std::to_string(outs.size()) +
                " outputs; use the vector form, call({args...}), to get all of them");
  return std::move(outs[0]);
}

const Call& Call::trace(const std::vector<ShapeDtype>& inputs) const {
  if (!state_) throw Error("Call: tracing an empty Call");
  state_->get(inputs);
  return *this;
}

std::string Call::jaxpr_text() const {
  if (!state_) throw Error("Call: empty Call");
  return state_->get_traced().text();
}

std::string Call::name() const { return state_ ? state_->opts.name : std::string(); }

std::string Call::backend_name() const {
  if (!state_) throw Error("Call: empty Call");
  return core::resolve_backend(state_->get_traced()) == Backend::Cuda ? "cuda" : "interpreter";
}

void Call::compile_for(const std::string& arch) const {
  if (!state_) throw Error("Call: empty Call");
  const core::BackendRunner* gpu = core::cuda_runner();
  if (!gpu)
    throw Error(state_->what + ": compile_for(" + arch + "): this build of Pallas C++ has no CUDA backend "
                "(configure with the CUDA toolkit present)");
  core::PallasCall c = state_->get_traced();
  c.compiler_params.arch = arch;
  gpu->compile_check(c);
}

void compile_for(const std::vector<Call>& calls, const std::string& arch, int num_threads) {
  if (num_threads < 0) throw Error("compile_for: num_threads is " + std::to_string(num_threads) + "; pass 0 (automatic) or a positive count");
  if (!core::cuda_runner())
    throw Error("compile_for(" + arch + "): this build of Pallas C++ has no CUDA backend (configure with the CUDA toolkit present)");
  // Each call once (by its state: copies of a Call share one), in the list's order.
  std::vector<const Call*> todo;
  std::unordered_set<const detail::CallState*> seen;
  for (const Call& c : calls)
    if (!c.state() || seen.insert(c.state().get()).second) todo.push_back(&c);
  if (todo.empty()) return;
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n = std::min(todo.size(), num_threads > 0 ? static_cast<size_t>(num_threads) : hw);
  std::vector<std::exception_ptr> failed(todo.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
      try {
        todo[i]->compile_for(arch);
      } catch (...) {
        failed[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads now: the ones started and this one do the rest
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  size_t first = todo.size(), count = 0;
  for (size_t i = 0; i < todo.size(); ++i)
    if (failed[i]) first = std::min(first, i), ++count;
  if (!count) return;
  if (count == 1) std::rethrow_exception(failed[first]);
  try {
    std::rethrow_exception(failed[first]);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "\n(compile_for: " + std::to_string(count - 1) + " other of the " + std::to_string(todo.size()) +
                " calls failed too; each call's compile_for(\"" + arch + "\") names its own error)");
  }
}

int Call::num_outputs() const { return state_ ? static_cast<int>(state_->out_shapes.size()) : 0; }
std::vector<ShapeDtype> Call::out_shapes() const { return state_ ? state_->out_shapes : std::vector<ShapeDtype>{}; }

namespace core {

std::string program_id_text(const std::vector<int64_t>& pid) {
  std::string s = "(";
  for (size_t k = 0; k < pid.size(); ++k) s += (k ? ", " : "") + std::to_string(pid[k]);
  return s + (pid.size() == 1 ? ",)" : ")");
}

std::atomic<int64_t> runs_interpreter{0}, runs_cuda{0};

void count_run(Backend b) { (b == Backend::Cuda ? runs_cuda : runs_interpreter).fetch_add(1, std::memory_order_relaxed); }

// PALLAS_BACKEND: the backend of calls left to Backend::Auto.
Backend default_backend() {
  static const Backend b = [] {
    const char* e = std::getenv("PALLAS_BACKEND");
    std::string v = e ? e : "";
    if (v.empty() || v == "auto") return Backend::Auto;
    if (v == "interpret" || v == "interpreter") return Backend::Interpret;
    if (v == "cuda" || v == "gpu") return Backend::Cuda;
    throw Error("PALLAS_BACKEND is '" + v + "'; set it to interpret, cuda or auto (or unset it)");
  }();
  return b;
}

Backend resolve_backend(const PallasCall& call) {
  Backend asked = call.backend == Backend::Auto ? default_backend() : call.backend;
  if (asked == Backend::Interpret) return Backend::Interpret;
  const BackendRunner* gpu = cuda_runner();
  bool have_gpu = gpu && gpu->available();
  if (asked == Backend::Cuda) {
    if (!gpu)
      throw Error(call.what + ": backend Cuda was asked for but this build of Pallas C++ has no CUDA backend "
                              "(configure with the CUDA toolkit present), or use Backend::Interpret");
    if (!have_gpu)
      throw Error(call.what + ": backend Cuda was asked for but no CUDA device is usable here (" + gpu->why_unavailable() +
                  ")" + (call.backend == Backend::Auto ? " (PALLAS_BACKEND=cuda is set)" : "") + "; use Backend::Auto or Backend::Interpret");
    return Backend::Cuda;
  }
  return have_gpu && gpu->can_run(call) ? Backend::Cuda : Backend::Interpret;
}

// With `outs`, the outputs are written there and the result may be empty (Call::into ignores
// it; the CUDA runner returns nothing, to spare a copy of the vector on every call).
std::vector<Array> execute(const PallasCall& call, const std::vector<Array>& args, const std::vector<Array>* outs) {
  Backend backend = resolve_backend(call);
  // A grid with an axis of size 0 runs no program on any backend, so none is asked to compile
  // a kernel that never runs (its blocks may have no elements): every output is empty or
  // aliased to an input (trace_call.cc refuses the others), and an aliased one keeps its input.
  if (call.grid.num_programs_static() == 0) {
    size_t nd = static_cast<size_t>(call.grid.num_dynamic_bounds());
    std::vector<Array> result;
    for (size_t o = 0; o < call.grid.outputs.size(); ++o) {
      const ShapeDtype& sd = call.grid.outputs[o].array;
      Array r;
      for (auto [i, oo] : call.aliases)
        if (oo == static_cast<int>(o)) r = args[nd + static_cast<size_t>(i)];
      if (outs) {
        if (r.defined()) (*outs)[o].copy_from(r);
        continue;
      }
      if (r.defined()) result.push_back(r.copy());
      else result.push_back(Array(sd.shape, sd.dtype, backend == Backend::Cuda ? Device::cuda(0) : Device::host()));
    }
    return result;
  }
  if (backend == Backend::Cuda) {
    count_run(Backend::Cuda);
    return cuda_runner()->run(call, args, outs);
  }
  count_run(Backend::Interpret);
  // CI without a GPU: every interpreted call is also lowered and compiled for the GPU.
  // =lower: plan and print only, no NVRTC (scripts/source_corpus.sh).
  static const int compile_check = [] {
    const char* e = std::getenv("PALLAS_CUDA_COMPILE_CHECK");
    return !e || !*e || *e == '0' ? 0 : std::string(e) == "lower" ? 2 : 1;
  }();
  if (compile_check && cuda_runner()) cuda_runner()->compile_check(call, /*lower_only=*/compile_check == 2);
  return interpret_runner()->run(call, args, outs);
}

}  // namespace core

RunCounts run_counts() { return {core::runs_interpreter.load(), core::runs_cuda.load()}; }

bool cuda_available() {
  const core::BackendRunner* gpu = core::cuda_runner();
  return gpu && gpu->available();
}

bool testing::backend_available() { return core::default_backend() != Backend::Cuda || cuda_available(); }

int cuda_device_count() {
  const core::BackendRunner* gpu = core::cuda_runner();
  return gpu && gpu->available() ? gpu->device_count() : 0;
}

}  // namespace pallas
