// checkify of a pallas_call: a rewrite of the kernel that first checks, for its program, that
// every index map puts its block at least partly inside its array (grid-wide: every program
// checks its own blocks), then runs the kernel with its pl::check()s enabled. The checks are
// `check` equations; the interpreter records the first failure in grid order.
#include "src/backends/interpret/interpreter.h"
#include "src/trace/trace.h"
#include "src/transforms/transforms.h"

namespace pallas::transforms {
using ir::PrimId;

// Bind j's equations into the current frame with its invars set to args.
std::vector<Value> inline_jaxpr(const ir::Jaxpr& j, const std::vector<Value>& args) {
  std::unordered_map<int64_t, Value> env;
  for (size_t k = 0; k < j.invars.size(); ++k) env[j.invars[k].id] = args.at(k);
  auto get = [&](const ir::Atom& a) {
    if (auto* v = std::get_if<ir::Var>(&a)) return env.at(v->id);
    return trace::make_value(a);
  };
  for (const ir::Eqn& e : j.eqns) {
    std::vector<Value> in;
    for (auto& a : e.in) in.push_back(get(a));
    std::vector<Value> out = trace::bind(e.prim->id, in, e.params);
    for (size_t k = 0; k < e.out.size(); ++k) env[e.out[k].id] = out[k];
  }
  std::vector<Value> outs;
  for (auto& a : j.outvars) outs.push_back(get(a));
  return outs;
}

namespace {
std::string dims_str(const Shape& s) {
  std::string r;
  for (size_t k = 0; k < s.size(); ++k) r += (k ? ", " : "") + std::to_string(s[k]);
  return r;
}
}  // namespace

core::PallasCall checkify_pallas_call(const core::PallasCall& c) {
  trace::KernelContext ctx{c.what, c.grid.grid, true};
  ir::Jaxpr kj;
  {
    trace::Frame f(&ctx, false);
    std::vector<Value> kargs;
    for (auto& v : c.kernel->invars) kargs.push_back(trace::make_value(f.add_invar(v.aval)));
    std::vector<Value> margs;
    for (size_t k = 0; k < c.grid.grid.size(); ++k)
      margs.push_back(trace::bind1(PrimId::program_id, {}, {{"axis", static_cast<int64_t>(k)}}));
    for (size_t k = 0; k < c.grid.prefetch.size(); ++k) margs.push_back(kargs[k]);
    auto check_block = [&](const core::BlockMapping& bm) {
      if (bm.space == MemorySpace::Any) return;
      std::vector<Value> idx = inline_jaxpr(*bm.index_map, margs);
      Value ok;
      std::string holes, ranges;
      for (size_t d = 0; d < idx.size(); ++d) {
        int64_t nblocks = (bm.array.shape[d] + bm.block_shape[d] - 1) / bm.block_shape[d];
        Value okd = (idx[d] >= 0) & (idx[d] < nblocks);
        ok = ok.defined() ? (ok & okd) : okd;
        holes += d ? ", {}" : "{}";
        ranges += (d ? " x " : "") + std::string("[0, ") + std::to_string(nblocks) + ")";
      }
      if (!ok.defined()) return;
      std::string fmt = "out-of-bounds block: the index map of " + bm.what + " of " + c.what + " returned block (" +
                        holes + ") for blocks of (" + dims_str(bm.block_shape) + ") of the array " + bm.array.str() +
                        "; block indices must be in " + ranges;
      std::vector<Value> in{ok};
      in.insert(in.end(), idx.begin(), idx.end());
      trace::bind(PrimId::check, in, {{"fmt", fmt}});
    };
    for (auto& bm : c.grid.inputs) check_block(bm);
    for (auto& bm : c.grid.outputs) check_block(bm);
    inline_jaxpr(*c.kernel, kargs);
    kj = f.finish({}, nullptr);
  }
  core::PallasCall r = c;
  r.kernel = std::make_shared<const ir::Jaxpr>(std::move(kj));
  ir::verify(*r.kernel, r.what);
  return r;
}

}  // namespace pallas::transforms

namespace pallas {
using namespace transforms;

void CheckError::throw_if_error() const {
  if (!failed_) return;
  std::string pid = "(";
  for (size_t k = 0; k < program_id_.size(); ++k) pid += (k ? ", " : "") + std::to_string(program_id_[k]);
  pid += program_id_.size() == 1 ? ",)" : ")";
  throw Error(message_ + " [first failure at program " + pid + "]");
}

CheckedCall checkify(const Call& call) {
  if (!call.state()) throw Error("pl::checkify: empty Call");
  auto build = [call](const std::vector<ShapeDtype>& shapes) { return checkify_pallas_call(pallas_call_of(call, shapes)); };
  Call c = make_transformed(call.state()->what, call.name(), call.state()->opts.grid, call.num_outputs(), build);
  c.state()->opts.num_scalar_prefetch = call.state()->opts.num_scalar_prefetch;
  return CheckedCall(c);
}

Checked CheckedCall::operator()(const std::vector<Array>& args) const {
  int nd = num_dynamic_args(call_);
  if (args.size() < static_cast<size_t>(nd))
    throw Error(call_.state()->what + ": called with too few arguments for its dynamic grid bounds");
  std::vector<ShapeDtype> shapes;
  for (size_t k = static_cast<size_t>(nd); k < args.size(); ++k) {
    if (!args[k].defined()) throw Error(call_.state()->what + ": input " + std::to_string(k - nd) + " is an empty Array");
    shapes.push_back(args[k].shape_dtype());
  }
  const core::PallasCall& pc = pallas_call_of(call_, shapes);
  core::check_arguments(pc, args);
  // Checks are collected by the interpreter (the CUDA backend has no check rule yet).
  std::vector<Array> host;
  for (auto& a : args) host.push_back(a.device().is_host() ? a : a.to_host());
  interp::RunResult r = interp::run_call(pc, host, true);
  Checked out;
  if (r.failed) out.error = CheckError(r.message, r.failed_program_id);
  out.outputs = std::move(r.outputs);
  return out;
}

std::string CheckedCall::jaxpr_text(const std::vector<ShapeDtype>& inputs) const {
  return pallas_call_of(call_, inputs).text();
}

namespace detail {
void check_impl(const Value& pred, const std::string& fmt, const std::vector<Value>& values) {
  size_t holes = 0;
  for (size_t k = 0; k + 1 < fmt.size(); ++k)
    if (fmt[k] == '{' && fmt[k + 1] == '}') ++holes;
  if (holes != values.size())
    throw Error("pl::check: the message \"" + fmt + "\" has " + std::to_string(holes) + " {} placeholders for " +
                std::to_string(values.size()) + " values");
  Value p = pred.dtype() == DType::Bool ? pred : ne(pred, 0);
  std::vector<Value> in{p};
  in.insert(in.end(), values.begin(), values.end());
  trace::bind(PrimId::check, in, {{"fmt", fmt}});
}
}  // namespace detail

}  // namespace pallas
