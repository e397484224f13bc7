// checkify of a pallas_call: a rewrite of the kernel that first checks, for its program, that
// every index map puts its block at least partly inside its array (grid-wide: every program
// checks its own blocks), then runs the kernel with its pl::check()s enabled. The checks are
// `check` equations; the interpreter records the first failure in grid order.
#include <sstream>

#include "src/core/backend_registry.h"
#include "src/core/print_format.h"
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
    trace::Here here(SourceLocation{e.loc.file ? e.loc.file : "", e.loc.line});  // keeps its line (a check's message names it)
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
      // (the kernel's name comes first, as in every message: CheckedCall prefixes it)
      std::string fmt = "out-of-bounds block: the index map of " + bm.what + " returned block (" + holes +
                        ") for blocks of (" + dims_str(bm.block_shape) + ") of the array " + bm.array.str() +
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


// ---- errors as outputs: the backend-independent form ----
// Each `check` becomes code that records, per program, the index of the first failing check
// (an i32 output shaped like the grid) and the values of its message (an f64 output).
namespace {
bool has_check(const ir::Jaxpr& j) {
  return ir::any_eqn(j, [](const ir::Eqn& e) { return e.prim->id == PrimId::check; });
}

int64_t payload_size(const ir::Jaxpr& j) {
  int64_t m = 0;
  ir::for_each_eqn(j, [&](const ir::Eqn& e) {
    if (e.prim->id != PrimId::check) return;
    int64_t n = 0;
    for (size_t k = 1; k < e.in.size(); ++k) n += ir::atom_aval(e.in[k]).size();
    m = std::max(m, n);
  });
  return m;
}

struct SlotRewriter {
  std::vector<CheckMeta>* metas;
  using Env = std::unordered_map<int64_t, Value>;

  ir::JaxprPtr sub(const ir::Jaxpr& j, const Ref& err, const Ref& pay) {
    trace::Frame f(&trace::require_frame("checkify").context(), true);
    Env env;
    for (auto& v : j.invars) env[v.id] = trace::make_value(f.add_invar(v.aval));
    Ref e2(trace::make_value(f.add_invar(trace::aval_of(err.value(), "checkify"))));
    Ref p2(trace::make_value(f.add_invar(trace::aval_of(pay.value(), "checkify"))));
    walk(j, env, e2, p2);
    std::vector<ir::Atom> outs;
    for (auto& a : j.outvars) outs.push_back(trace::atom_of(get(env, a), "checkify"));
    return std::make_shared<const ir::Jaxpr>(f.finish(outs, nullptr));
  }
  static Value get(Env& env, const ir::Atom& a) {
    if (auto* v = std::get_if<ir::Var>(&a)) return env.at(v->id);
    return trace::make_value(a);
  }
  void walk(const ir::Jaxpr& j, Env& env, const Ref& err, const Ref& pay) {
    for (const ir::Eqn& e : j.eqns) {
      std::vector<Value> in;
      for (auto& a : e.in) in.push_back(get(env, a));
      trace::Here here(SourceLocation{e.loc.file ? e.loc.file : "", e.loc.line});  // the code replacing it keeps its line
      PrimId id = e.prim->id;
      if (id == PrimId::check) {
        Value ok = in[0].astype(DType::I32);
        if (!ok.shape().empty()) ok = min(ok);
        Value cur = err(0).get();
        Value fail = (ok == 0) & (cur == 0);
        err(0) = where(fail, Value::constant(static_cast<double>(metas->size() + 1), DType::I32), cur);
        CheckMeta m{e.params.get<std::string>("fmt"), {}, e.loc};
        int64_t off = 0;
        for (size_t k = 1; k < in.size(); ++k) {
          int64_t n = in[k].impl()->aval.size();
          m.values.emplace_back(in[k].dtype(), in[k].shape());
          Value flat = reshape(in[k].astype(DType::F64), {n});
          store(pay, {ds(off, n)}, flat, {.mask = broadcast_to(fail, {n})});  // no read of the unwritten slot
          off += n;
        }
        metas->push_back(std::move(m));
        continue;
      }
      ir::Params p = e.params;
      bool nested = (id == PrimId::fori_loop || id == PrimId::while_loop || id == PrimId::cond) && [&] {
        for (const ir::Jaxpr* s : ir::sub_jaxprs(e))
          if (has_check(*s)) return true;
        return false;
      }();
      if (nested) {
        if (id == PrimId::fori_loop) {
          p.set("body", sub(*e.params.get<ir::JaxprPtr>("body"), err, pay));
          in.push_back(err.value()), in.push_back(pay.value());
        } else if (id == PrimId::while_loop) {
          size_t at = static_cast<size_t>(e.params.get_int("num_carry") + e.params.get_int("cond_nconsts"));
          p.set("cond_jaxpr", sub(*e.params.get<ir::JaxprPtr>("cond_jaxpr"), err, pay));
          p.set("body_jaxpr", sub(*e.params.get<ir::JaxprPtr>("body_jaxpr"), err, pay));
          p.set("cond_nconsts", e.params.get_int("cond_nconsts") + 2);
          in.insert(in.begin() + static_cast<long>(at), {err.value(), pay.value()});
          in.push_back(err.value()), in.push_back(pay.value());
        } else {
          std::vector<ir::JaxprPtr> bs;
          for (auto& b : e.params.get<std::vector<ir::JaxprPtr>>("branches")) bs.push_back(sub(*b, err, pay));
          p.set("branches", bs);
          in.push_back(err.value()), in.push_back(pay.value());
        }
      }
      std::vector<Value> out = trace::bind(id, in, p);
      for (size_t k = 0; k < e.out.size(); ++k) env[e.out[k].id] = out[k];
    }
  }
};

core::BlockMapping slot_block(const std::string& what, const core::PallasCall& c, int64_t width, DType t) {
  core::BlockMapping b;
  b.what = what;
  b.array = ShapeDtype(c.grid.grid, t);
  b.array.shape.push_back(width);
  b.block_shape.assign(c.grid.grid.size(), 1);
  b.block_shape.push_back(width);
  b.squeezed.assign(c.grid.grid.size(), true);
  b.squeezed.push_back(false);
  ir::Jaxpr m;
  for (size_t k = 0; k < c.grid.grid.size(); ++k) {
    m.invars.push_back(ir::new_var(ir::Aval::array({}, DType::I32)));
    m.outvars.push_back(m.invars.back());
  }
  for (auto& p : c.grid.prefetch) m.invars.push_back(ir::new_var(ir::Aval::ref(p.shape, p.dtype, MemorySpace::Smem)));
  m.outvars.resize(m.outvars.size() + 1);  // (not push_back of a temporary: GCC 12 warns falsely)
  m.outvars.back() = ir::Literal::of_int(0, DType::I32);
  b.index_map = std::make_shared<const ir::Jaxpr>(std::move(m));
  return b;
}
}  // namespace

SlotCall slot_pallas_call(const core::PallasCall& c0) {
  if (c0.grid.num_dynamic_bounds() > 0)
    throw Error(c0.what + ": checkify with error outputs needs a static grid (the error outputs are shaped like it)");
  core::PallasCall c = checkify_pallas_call(c0);
  SlotCall r;
  r.payload = std::max<int64_t>(1, payload_size(*c.kernel));
  r.num_outputs = c.grid.outputs.size();
  size_t before_scratch = c.kernel->invars.size() - c.grid.scratch.size();
  trace::KernelContext ctx{c.what, c.grid.grid, true};
  ir::Jaxpr kj;
  {
    trace::Frame f(&ctx, false);
    SlotRewriter::Env env;
    auto add = [&](const ir::Var& v) { env[v.id] = trace::make_value(f.add_invar(v.aval)); };
    for (size_t k = 0; k < before_scratch; ++k) add(c.kernel->invars[k]);
    Ref err(trace::make_value(f.add_invar(ir::Aval::ref({1}, DType::I32))));
    Ref pay(trace::make_value(f.add_invar(ir::Aval::ref({r.payload}, DType::F64))));
    for (size_t k = before_scratch; k < c.kernel->invars.size(); ++k) add(c.kernel->invars[k]);
    err(0) = Value::constant(0, DType::I32);
    SlotRewriter w{&r.checks};
    w.walk(*c.kernel, env, err, pay);
    kj = f.finish({}, nullptr);
  }
  r.call = c;
  r.call.kernel = std::make_shared<const ir::Jaxpr>(std::move(kj));
  // A program whose check fails stops there, so its later writes never happen: any output of
  // a checked call may stay partly unwritten, and the error values are written only on failure.
  for (auto& bm : r.call.grid.outputs) bm.may_stay_unwritten = true;
  r.call.grid.outputs.push_back(slot_block("checkify error code", c, 1, DType::I32));
  r.call.grid.outputs.push_back(slot_block("checkify error values", c, r.payload, DType::F64));
  r.call.grid.outputs.back().may_stay_unwritten = true;
  ir::verify(*r.call.kernel, r.call.what);
  return r;
}

std::string format_check(const CheckMeta& m, const double* vals) {
  std::vector<std::string> strs;
  for (auto& entry : m.values) {
    const DType t = entry.first;
    const Shape& shape = entry.second;
    int64_t n = shape_size(shape);
    std::ostringstream os;
    auto one = [&](double x) {
      if (is_float(t)) os << x;
      else if (t == DType::Bool) os << (x != 0 ? "True" : "False");
      else os << static_cast<long long>(x);
    };
    if (shape.empty()) {
      one(vals[0]);
    } else {
      os << "[";
      for (int64_t i = 0; i < n; ++i) {
        if (i) os << " ";
        one(vals[i]);
      }
      os << "]";
    }
    vals += n;
    strs.push_back(os.str());
  }
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i < m.fmt.size(); ++i) {
    if (m.fmt[i] == '{' && i + 1 < m.fmt.size() && m.fmt[i + 1] == '}' && k < strs.size()) {
      out += strs[k++];
      ++i;
    } else {
      out += m.fmt[i];
    }
  }
  return core::check_failure_text(m.loc, out);
}

}  // namespace pallas::transforms

namespace pallas {
using namespace transforms;

namespace detail {
struct CheckSlots {
  std::mutex mu;
  Call inner;
  std::shared_ptr<const SlotCall> call;
};
}  // namespace detail

void CheckError::throw_if_error() const {
  if (!failed_) return;
  std::string pid = "(";
  for (size_t k = 0; k < program_id_.size(); ++k) pid += (k ? ", " : "") + std::to_string(program_id_[k]);
  pid += program_id_.size() == 1 ? ",)" : ")";
  throw Error(message_ + " [first failure at program " + pid + "]");
}

CheckedCall checkify(const Call& call, CheckifyOptions opts) {
  if (!call.state()) throw Error("pl::checkify: empty Call");
  auto build = [call](const std::vector<ShapeDtype>& shapes) { return checkify_pallas_call(pallas_call_of(call, shapes)); };
  Call c = make_transformed(call.state()->what, call.name(), call.state()->opts.grid, call.num_outputs(), build);
  c.state()->opts.num_scalar_prefetch = call.state()->opts.num_scalar_prefetch;
  CheckedCall r(c, opts);
  r.slots_ = std::make_shared<detail::CheckSlots>();
  r.slots_->inner = call;
  return r;
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
  Checked out;
  bool slots = opts_.error_outputs || core::resolve_backend(pc) != Backend::Interpret;
  if (slots && slots_) {
    // Errors come back as outputs: any backend runs it.
    std::shared_ptr<const SlotCall> sc;
    {
      std::lock_guard<std::mutex> g(slots_->mu);
      if (!slots_->call) slots_->call = std::make_shared<const SlotCall>(slot_pallas_call(pallas_call_of(slots_->inner, shapes)));
      sc = slots_->call;
    }
    std::vector<Array> outs = core::execute(sc->call, args);
    auto codes = outs[sc->num_outputs].to_vector<int32_t>();
    for (size_t p = 0; p < codes.size(); ++p) {
      if (codes[p] == 0) continue;
      auto vals = outs[sc->num_outputs + 1].to_vector<double>();
      std::vector<int64_t> pid(pc.grid.grid.size());
      int64_t rem = static_cast<int64_t>(p);
      for (int k = static_cast<int>(pid.size()) - 1; k >= 0; --k) {
        pid[k] = rem % pc.grid.grid[k];
        rem /= pc.grid.grid[k];
      }
      out.error = CheckError(pc.what + ": " + format_check(sc->checks.at(codes[p] - 1), vals.data() + p * sc->payload), pid);
      break;
    }
    outs.resize(sc->num_outputs);
    out.outputs = std::move(outs);
    return out;
  }
  // The interpreter's check rule collects the first failure.
  core::count_run(Backend::Interpret);
  core::CheckedRun r = core::interpret_runner()->run_checked(pc, args);
  if (r.failed) out.error = CheckError(pc.what + ": " + r.message, r.failed_program_id);
  out.outputs = std::move(r.outputs);
  return out;
}

std::string CheckedCall::jaxpr_text(const std::vector<ShapeDtype>& inputs) const {
  return pallas_call_of(call_, inputs).text();
}

namespace detail {
void check_impl(const Operand& pred_at, const std::string& fmt, const std::vector<Value>& values) {
  trace::Here here(pred_at.loc);
  const Value& pred = pred_at.v;
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
