// custom_vjp: reverse mode of a pallas_call through a hand-written backward call, as
// jax.custom_vjp is used with Pallas. No kernel is rewritten: the pair runs as two calls, and
// the residuals live between them as Arrays (inputs and outputs handed over without copies).
// Automatic reverse mode (transposing a kernel) is not built: pl::vjp of a plain Call says so.
#include <algorithm>

#include "src/transforms/transforms.h"

namespace pallas {
using namespace transforms;

struct CustomVjp::State {
  Call fwd, bwd;  // bwd empty: bwd_fn
  BwdFn bwd_fn;
  int num_outputs = 0;
  CustomVjpOptions opts;
  std::string what;  // "custom_vjp of kernel 'f' (f.cc:3) with backward kernel 'b' (b.cc:9)"
};

struct VjpFn::State {
  std::shared_ptr<const CustomVjp::State> f;
  std::vector<Array> residuals;
  std::vector<std::string> residual_names;  // "residual input 0 (input 2)", ... for messages
  std::vector<ShapeDtype> inputs, outputs;  // the primal inputs and outputs
  std::vector<bool> diff;                   // inputs that get a cotangent
};

namespace {

std::string plural(size_t n, const std::string& one) { return std::to_string(n) + " " + one + (n == 1 ? "" : "s"); }

std::string list_ints(const std::vector<int>& v) {
  std::string s;
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s;
}

const CustomVjp::State& state_of(const std::shared_ptr<const CustomVjp::State>& s) {
  if (!s) throw Error("pl::custom_vjp: an empty CustomVjp (make one with pl::custom_vjp(fwd, bwd, num_outputs))");
  return *s;
}

// Runs `call` on args, prefixing any pl::Error raised while its arguments are checked or it is
// traced with what the custom_vjp passed it (errors from the run itself already name the kernel).
const core::PallasCall& traced_for(const CustomVjp::State& f, const Call& call, const char* role,
                                   const std::vector<Array>& args, const std::vector<std::string>& names) {
  std::vector<ShapeDtype> shapes;
  for (auto& a : args) shapes.push_back(a.shape_dtype());
  try {
    const core::PallasCall& pc = pallas_call_of(call, shapes);
    core::check_arguments(pc, args);
    return pc;
  } catch (const Error& e) {
    std::string given;
    for (size_t k = 0; k < args.size(); ++k)
      given += (k ? ", " : "") + (k < names.size() ? names[k] + " " : "") + args[k].shape_dtype().str();
    throw Error(f.what + ": the " + role + " call does not take the arrays it is given (" +
                plural(args.size(), "array") + ": " + given + "): " + e.what());
  }
}

}  // namespace

namespace {
CustomVjp::State make_state(const Call& fwd, const std::string& bwd_what, int num_outputs, CustomVjpOptions opts) {
  CustomVjp::State st;
  CustomVjp::State* s = &st;
  s->fwd = fwd;
  s->num_outputs = num_outputs;
  s->what = "custom_vjp of " + fwd.state()->what + " with backward " + bwd_what;
  const std::string& what = s->what;
  for (const Call* c : {&fwd})
    if (num_dynamic_args(*c) > 0)
      throw Error(what + ": " + c->state()->what +
                  " has dynamic grid bounds (pl::dynamic); custom_vjp needs static grids: give every axis a size");
  int nf = fwd.num_outputs();
  if (num_outputs < 1 || num_outputs > nf)
    throw Error(what + ": num_outputs is " + std::to_string(num_outputs) + " but the forward call has " +
                plural(static_cast<size_t>(nf), "output") +
                "; num_outputs counts its first outputs that are the primal outputs (1 to " + std::to_string(nf) +
                "), the rest are residuals");
  for (int k : opts.residual_inputs)
    if (k < 0) throw Error(what + ": residual_inputs holds " + std::to_string(k) + "; list input indices (0, 1, ...)");
  for (int k : opts.nondiff_inputs)
    if (k < 0) throw Error(what + ": nondiff_inputs holds " + std::to_string(k) + "; list input indices (0, 1, ...)");
  for (int k : opts.residual_outputs)
    if (k < 0 || k >= num_outputs)
      throw Error(what + ": residual_outputs holds " + std::to_string(k) + " but the primal outputs are 0 to " +
                  std::to_string(num_outputs - 1) + " (num_outputs = " + std::to_string(num_outputs) +
                  "); fwd's other outputs are residuals already and reach bwd anyway");
  if (opts.primal.state()) {
    if (num_dynamic_args(opts.primal) > 0)
      throw Error(what + ": the primal call " + opts.primal.state()->what + " has dynamic grid bounds; give every axis a size");
    if (opts.primal.num_outputs() != num_outputs)
      throw Error(what + ": the primal call " + opts.primal.state()->what + " has " +
                  plural(static_cast<size_t>(opts.primal.num_outputs()), "output") + " but num_outputs is " +
                  std::to_string(num_outputs) + "; it must return exactly the forward's primal outputs");
  }
  s->opts = std::move(opts);
  return st;
}
}  // namespace

CustomVjp custom_vjp(const Call& fwd, const Call& bwd, int num_outputs, CustomVjpOptions opts) {
  if (!fwd.state()) throw Error("pl::custom_vjp: the forward Call is empty");
  if (!bwd.state()) throw Error("pl::custom_vjp: the backward Call is empty (forward: " + fwd.state()->what + ")");
  auto s = std::make_shared<CustomVjp::State>(make_state(fwd, bwd.state()->what, num_outputs, std::move(opts)));
  if (num_dynamic_args(bwd) > 0)
    throw Error(s->what + ": " + bwd.state()->what +
                " has dynamic grid bounds (pl::dynamic); custom_vjp needs static grids: give every axis a size");
  s->bwd = bwd;
  CustomVjp r;
  r.s_ = std::move(s);
  return r;
}

CustomVjp custom_vjp(const Call& fwd, BwdFn bwd, int num_outputs, CustomVjpOptions opts, std::string bwd_name) {
  if (!fwd.state()) throw Error("pl::custom_vjp: the forward Call is empty");
  std::string bw = bwd_name.empty() ? "function" : "function '" + bwd_name + "'";
  if (!bwd) throw Error("pl::custom_vjp: the backward " + bw + " is empty (forward: " + fwd.state()->what + ")");
  auto s = std::make_shared<CustomVjp::State>(make_state(fwd, bw, num_outputs, std::move(opts)));
  s->bwd_fn = std::move(bwd);
  CustomVjp r;
  r.s_ = std::move(s);
  return r;
}

const Call& CustomVjp::fwd() const { return state_of(s_).fwd; }
const Call& CustomVjp::bwd() const { return state_of(s_).bwd; }
const BwdFn& CustomVjp::bwd_fn() const { return state_of(s_).bwd_fn; }
int CustomVjp::num_outputs() const { return state_of(s_).num_outputs; }
const CustomVjpOptions& CustomVjp::options() const { return state_of(s_).opts; }
std::string CustomVjp::name() const { return state_of(s_).what; }

std::vector<Array> CustomVjp::operator()(const std::vector<Array>& args) const {
  const State& f = state_of(s_);
  if (!f.opts.primal.state()) {
    std::vector<Array> outs = f.fwd(args);
    outs.resize(static_cast<size_t>(f.num_outputs));
    return outs;
  }
  // The primal call must compute fwd's primal outputs: compare their shapes (both traced).
  std::vector<std::string> names;
  for (size_t k = 0; k < args.size(); ++k) names.push_back("input " + std::to_string(k));
  const core::PallasCall& pp = traced_for(f, f.opts.primal, "primal", args, names);
  const core::PallasCall& pf = traced_for(f, f.fwd, "forward", args, names);
  auto ps = pp.output_shapes(), fs = pf.output_shapes();
  for (size_t k = 0; k < ps.size(); ++k)
    if (!(ps[k] == fs.at(k)))
      throw Error(f.what + ": the primal call's output " + std::to_string(k) + " is " + ps[k].str() +
                  " but the forward's is " + fs[k].str() + "; the primal call must return the forward's primal outputs");
  return f.opts.primal(args);
}

Array CustomVjp::single(const std::vector<Array>& args) const {
  const State& f = state_of(s_);
  if (f.num_outputs != 1)
    throw Error(f.what + ": it has " + plural(static_cast<size_t>(f.num_outputs), "primal output") +
                "; use the vector form, f({args...}), to get all of them");
  return std::move((*this)(args).at(0));
}

VjpResult vjp(const CustomVjp& fn, const std::vector<Array>& primals) {
  auto st = std::make_shared<VjpFn::State>();
  st->f = fn.s_;
  const CustomVjp::State& f = state_of(fn.s_);
  for (size_t k = 0; k < primals.size(); ++k) {
    if (!primals[k].defined()) throw Error(f.what + ": vjp: primal " + std::to_string(k) + " is an empty Array");
    st->inputs.push_back(primals[k].shape_dtype());
  }
  const size_t n = primals.size();
  for (int k : f.opts.residual_inputs)
    if (static_cast<size_t>(k) >= n)
      throw Error(f.what + ": residual_inputs holds " + std::to_string(k) + " but the call was given " +
                  plural(n, "input") + " (residual_inputs: " + list_ints(f.opts.residual_inputs) + ")");
  for (int k : f.opts.nondiff_inputs)
    if (static_cast<size_t>(k) >= n)
      throw Error(f.what + ": nondiff_inputs holds " + std::to_string(k) + " but the call was given " +
                  plural(n, "input") + " (nondiff_inputs: " + list_ints(f.opts.nondiff_inputs) + ")");
  std::vector<Array> outs = f.fwd(primals);
  const size_t no = static_cast<size_t>(f.num_outputs);
  if (outs.size() < no)
    throw Error(f.what + ": the forward call returned " + plural(outs.size(), "array") + " but num_outputs is " +
                std::to_string(no));
  for (int k : f.opts.residual_inputs) {
    st->residuals.push_back(primals[static_cast<size_t>(k)]);
    st->residual_names.push_back("residual input " + std::to_string(k));
  }
  for (int k : f.opts.residual_outputs) {
    st->residuals.push_back(outs[static_cast<size_t>(k)]);
    st->residual_names.push_back("residual output " + std::to_string(k));
  }
  for (size_t k = no; k < outs.size(); ++k) {
    st->residuals.push_back(outs[k]);
    st->residual_names.push_back("residual " + std::to_string(k - no) + " (forward output " + std::to_string(k) + ")");
  }
  outs.resize(no);
  for (auto& o : outs) st->outputs.push_back(o.shape_dtype());
  st->diff.resize(n);
  for (size_t k = 0; k < n; ++k)
    st->diff[k] = is_float(primals[k].dtype()) &&
                  std::find(f.opts.nondiff_inputs.begin(), f.opts.nondiff_inputs.end(), static_cast<int>(k)) ==
                      f.opts.nondiff_inputs.end();
  VjpFn pullback;
  pullback.s_ = std::move(st);
  return {std::move(outs), std::move(pullback)};
}

const std::vector<Array>& VjpFn::residuals() const {
  if (!s_) throw Error("pl::VjpFn: empty (get one from pl::vjp)");
  return s_->residuals;
}

std::vector<Array> VjpFn::operator()(const std::vector<Array>& cotangents) const {
  if (!s_) throw Error("pl::VjpFn: empty (get one from pl::vjp)");
  const State& st = *s_;
  const CustomVjp::State& f = *st.f;
  if (cotangents.size() != st.outputs.size())
    throw Error(f.what + ": the pullback got " + plural(cotangents.size(), "cotangent") + " but the call has " +
                plural(st.outputs.size(), "primal output") + "; give one per output (pl::zero_tangent() for a zero one)");
  std::vector<Array> args = st.residuals;
  std::vector<std::string> names = st.residual_names;
  for (size_t k = 0; k < cotangents.size(); ++k) {
    const ShapeDtype& o = st.outputs[k];
    const Array& c = cotangents[k];
    if (!is_float(o.dtype)) {
      if (c.defined())
        throw Error(f.what + ": output " + std::to_string(k) + " is " + o.str() +
                    ", which has no cotangent; pass pl::zero_tangent() (an empty Array) for it");
      continue;
    }
    if (c.defined() && !(c.shape_dtype() == o))
      throw Error(f.what + ": the cotangent of output " + std::to_string(k) + " is " + c.shape_dtype().str() +
                  " but the output is " + o.str() + "; a cotangent has its output's shape and dtype");
    args.push_back(c.defined() ? c : Array::zeros(o.shape, o.dtype));
    names.push_back("cotangent of output " + std::to_string(k));
  }
  // bwd must return one cotangent per differentiable input, each of that input's shape and dtype:
  // a bwd Call is checked before it runs (traced), a BwdFn after.
  std::vector<ShapeDtype> got;
  std::vector<Array> outs;
  if (f.bwd.state()) {
    got = traced_for(f, f.bwd, "backward", args, names).output_shapes();
  } else {
    outs = f.bwd_fn(args);
    for (size_t j = 0; j < outs.size(); ++j) {
      if (!outs[j].defined())
        throw Error(f.what + ": the backward function's result " + std::to_string(j) +
                    " is an empty Array; it returns only the cotangents of inputs that have one");
      got.push_back(outs[j].shape_dtype());
    }
  }
  const char* who = f.bwd.state() ? "call" : "function";
  std::vector<size_t> want;
  for (size_t k = 0; k < st.diff.size(); ++k)
    if (st.diff[k]) want.push_back(k);
  auto rule = [&] {
    std::string w;
    for (size_t j = 0; j < want.size(); ++j) w += (j ? ", " : "") + st.inputs[want[j]].str() + " (input " + std::to_string(want[j]) + ")";
    return "bwd returns one cotangent per floating input not in nondiff_inputs, in input order" +
           (want.empty() ? std::string(" (none here)") : ": " + w) + "; integer and bool inputs get none";
  };
  if (got.size() != want.size())
    throw Error(f.what + ": the backward " + who + " returns " + plural(got.size(), "array") + " but " +
                plural(want.size(), "input") + " take a cotangent; " + rule());
  for (size_t j = 0; j < want.size(); ++j)
    if (!(got[j] == st.inputs[want[j]]))
      throw Error(f.what + ": the backward " + who + "'s output " + std::to_string(j) + " is " + got[j].str() +
                  " but it is the cotangent of input " + std::to_string(want[j]) + ", which is " +
                  st.inputs[want[j]].str() + "; " + rule());
  if (f.bwd.state()) outs = f.bwd(args);
  std::vector<Array> r(st.diff.size());
  for (size_t j = 0; j < want.size(); ++j) r[want[j]] = std::move(outs[j]);
  return r;
}

}  // namespace pallas
