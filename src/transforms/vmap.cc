// vmap of a pallas_call: a new leading grid axis of the batch size; each batched operand's
// block mapping gets a squeezed dim at its batch axis, indexed by the new grid axis; the
// kernel is unchanged except that grid queries move one axis up. Batched dynamic grid bounds
// or scalar prefetch fall back to an explicit loop over the batch; a batch of one squeezes.
#include <atomic>
#include <cstring>

#include "src/trace/trace.h"
#include "src/transforms/transforms.h"

namespace pallas::transforms {
using ir::PrimId;

// ---- calls built by transformations ----
const core::PallasCall& pallas_call_of(const Call& c, const std::vector<ShapeDtype>& inputs) {
  if (!c.state()) throw Error("transformation of an empty Call");
  return c.state()->get(inputs);
}

int num_dynamic_args(const Call& c) {
  int n = 0;
  for (int64_t g : c.state()->opts.grid) n += g < 0;
  return n;
}

Call make_transformed(std::string what, std::string name, std::vector<int64_t> grid_for_args, int num_outputs,
                      std::function<core::PallasCall(const std::vector<ShapeDtype>&)> build,
                      std::function<std::vector<Array>(const std::vector<Array>&)> run) {
  auto s = std::make_shared<detail::CallState>();
  s->what = std::move(what);
  s->opts.name = std::move(name);
  s->opts.grid = std::move(grid_for_args);
  s->out_shapes.resize(static_cast<size_t>(num_outputs));
  s->build = std::move(build);
  s->run = std::move(run);
  return Call(s);
}

// ---- host helpers ----
Array move_axis_to_front(const Array& a0, int axis) {
  Array a = a0.device().is_host() ? a0 : a0.to_host();
  if (axis == 0) return a;
  // [P, X, Q] (P: the dims before the axis, X: the axis, Q: the dims after) -> [X, P, Q]
  const Shape& s = a.shape();
  int64_t P = 1, Q = 1, X = s[static_cast<size_t>(axis)];
  for (int d = 0; d < axis; ++d) P *= s[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) Q *= s[d];
  Shape ps{X};
  for (size_t d = 0; d < s.size(); ++d)
    if (static_cast<int>(d) != axis) ps.push_back(s[d]);
  Array r(ps, a.dtype());
  size_t row = static_cast<size_t>(Q) * itemsize(a.dtype());
  const auto* src = static_cast<const unsigned char*>(a.raw_data());
  auto* dst = static_cast<unsigned char*>(r.raw_data());
  for (int64_t x = 0; x < X; ++x)
    for (int64_t p = 0; p < P; ++p)
      std::memcpy(dst + static_cast<size_t>(x * P + p) * row, src + static_cast<size_t>(p * X + x) * row, row);
  return r;
}

Array take(const Array& a, int axis, int64_t i) {
  Array m = move_axis_to_front(a, axis);
  Shape rest(m.shape().begin() + 1, m.shape().end());
  Array r(rest, m.dtype());
  size_t bytes = r.nbytes();
  std::memcpy(r.raw_data(), static_cast<const unsigned char*>(m.raw_data()) + static_cast<size_t>(i) * bytes, bytes);
  return r;
}

Array stack(const std::vector<Array>& xs) {
  Shape s = xs.at(0).shape();
  s.insert(s.begin(), static_cast<int64_t>(xs.size()));
  Array r(s, xs[0].dtype());
  size_t bytes = xs[0].nbytes();
  for (size_t k = 0; k < xs.size(); ++k) {
    Array h = xs[k].device().is_host() ? xs[k] : xs[k].to_host();
    std::memcpy(static_cast<unsigned char*>(r.raw_data()) + k * bytes, h.raw_data(), bytes);
  }
  return r;
}

// ---- batching rules ----
namespace {
ir::Eqn batch_subjaxprs(const ir::Eqn& e, int shift) {
  ir::Eqn n = e;
  for (auto& [k, v] : n.params.items) {
    if (auto* j = std::get_if<ir::JaxprPtr>(&v)) v = batch_kernel(**j, shift);
    if (auto* js = std::get_if<std::vector<ir::JaxprPtr>>(&v))
      for (auto& j : *js) j = batch_kernel(*j, shift);
  }
  return n;
}
ir::Eqn shift_axis(const ir::Eqn& e, int shift) {
  ir::Eqn n = e;
  n.params.set("axis", e.params.get_int("axis") + shift);
  return n;
}
ir::RuleTable<BatchRule> make_batch_rules() {
  ir::RuleTable<BatchRule> t("batching");
  // The batch lives in the grid: a batched operand's block has the batch dim squeezed, so
  // the kernel sees the same refs and every equation is kept; sub-jaxprs are rewritten.
#define PALLAS_X(id, name) t.set(PrimId::id, batch_subjaxprs);
  PALLAS_PRIMITIVES(PALLAS_X)
#undef PALLAS_X
  // User grid axes move up past the new leading axes, so program_id(k) keeps its meaning.
  t.set(PrimId::program_id, shift_axis);
  t.set(PrimId::num_programs, shift_axis);
  return t;
}

// The index map under the new leading grid axis b: b is inserted at `axis` (batched) or
// ignored (unbatched).
ir::JaxprPtr batch_index_map(const ir::Jaxpr& m, std::optional<int> axis) {
  ir::Jaxpr n = m;
  ir::Var b = ir::new_var(ir::Aval::array({}, DType::I32));
  n.invars.insert(n.invars.begin(), b);
  if (axis) n.outvars.insert(n.outvars.begin() + *axis, b);
  return std::make_shared<const ir::Jaxpr>(std::move(n));
}

void batch_block(core::BlockMapping& bm, std::optional<int> axis, int64_t batch) {
  if (axis) {
    bm.array.shape.insert(bm.array.shape.begin() + *axis, batch);
    bm.block_shape.insert(bm.block_shape.begin() + *axis, 1);
    bm.squeezed.insert(bm.squeezed.begin() + *axis, true);
  }
  bm.index_map = batch_index_map(*bm.index_map, axis);
}
}  // namespace

const ir::RuleTable<BatchRule>& batch_rules() {
  static const ir::RuleTable<BatchRule> t = make_batch_rules();
  return t;
}

const std::map<PrimId, std::string>& unbatchable() {
  static const std::map<PrimId, std::string> m{};
  return m;
}

ir::JaxprPtr batch_kernel(const ir::Jaxpr& j, int shift) {
  ir::Jaxpr n = j;
  for (auto& e : n.eqns) e = batch_rules().get(e.prim->id)(e, shift);
  return std::make_shared<const ir::Jaxpr>(std::move(n));
}

core::PallasCall vmap_pallas_call(const core::PallasCall& c, const std::vector<std::optional<int>>& in_axes,
                                  int64_t batch) {
  core::PallasCall r = c;
  size_t np = c.grid.prefetch.size();
  for (size_t k = 0; k < np; ++k)
    if (in_axes[k]) throw Error(c.what + ": internal: batched scalar prefetch reached the grid rule");
  r.grid.grid.insert(r.grid.grid.begin(), batch);
  r.grid.semantics.insert(r.grid.semantics.begin(), DimensionSemantics::Parallel);  // batch elements never share blocks
  for (size_t k = 0; k < r.grid.inputs.size(); ++k) batch_block(r.grid.inputs[k], in_axes[np + k], batch);
  for (auto& o : r.grid.outputs) batch_block(o, 0, batch);
  for (auto [i, o] : c.aliases)
    if (in_axes[i] != 0) throw Error(c.what + ": internal: aliased input not batched at axis 0");
  r.kernel = batch_kernel(*c.kernel, 1);
  if (r.cost_estimate) {
    r.cost_estimate->flops *= batch;
    r.cost_estimate->transcendentals *= batch;
    r.cost_estimate->bytes_accessed *= batch;
  }
  return r;
}

}  // namespace pallas::transforms

namespace pallas {
using namespace transforms;

namespace {
struct VmapPlan {
  std::string what;
  int nd = 0;  // dynamic grid bounds before the inputs
  std::vector<std::optional<int>> axes;  // per argument, normalised (after shapes are known)
  int64_t batch = -1;
};

VmapPlan plan_for(const std::string& what, int nd, const std::vector<std::optional<int>>& in_axes,
                  const std::vector<ShapeDtype>& args) {
  if (args.size() != in_axes.size())
    throw Error(what + ": called with " + std::to_string(args.size()) + " arguments but in_axes has " +
                std::to_string(in_axes.size()) + " entries (one per argument: dynamic grid bounds, then inputs)");
  VmapPlan p{what, nd, in_axes, -1};
  for (size_t k = 0; k < args.size(); ++k) {
    if (!in_axes[k]) continue;
    int rank = static_cast<int>(args[k].shape.size());
    int a = *in_axes[k] < 0 ? *in_axes[k] + rank : *in_axes[k];
    if (a < 0 || a >= rank)
      throw Error(what + ": in_axes[" + std::to_string(k) + "] = " + std::to_string(*in_axes[k]) +
                  " is out of range for argument " + std::to_string(k) + " " + args[k].str());
    p.axes[k] = a;
    int64_t b = args[k].shape[a];
    if (p.batch >= 0 && b != p.batch)
      throw Error(what + ": batched arguments have different batch sizes (" + std::to_string(p.batch) + " and " +
                  std::to_string(b) + " for argument " + std::to_string(k) + ")");
    p.batch = b;
  }
  if (p.batch < 0) throw Error(what + ": no argument is batched (every in_axes entry is std::nullopt)");
  return p;
}

ShapeDtype unbatched(const ShapeDtype& s, std::optional<int> a) {
  if (!a) return s;
  ShapeDtype r = s;
  r.shape.erase(r.shape.begin() + *a);
  return r;
}

std::vector<ShapeDtype> shapes_of(const std::vector<Array>& args, const std::string& what) {
  std::vector<ShapeDtype> r;
  for (size_t k = 0; k < args.size(); ++k) {
    if (!args[k].defined()) throw Error(what + ": argument " + std::to_string(k) + " is an empty Array");
    r.push_back(args[k].shape_dtype());
  }
  return r;
}
}  // namespace

Call vmap(const Call& call, std::vector<std::optional<int>> in_axes) {
  if (!call.state()) throw Error("pl::vmap: empty Call");
  const detail::CallState& in = *call.state();
  std::string what = "vmap of " + in.what;
  int nd = num_dynamic_args(call);
  int np = in.traced ? static_cast<int>(in.traced->grid.prefetch.size()) : in.opts.num_scalar_prefetch;
  // Batched dynamic grid bounds or scalar prefetch: the blocks of one batch element depend on
  // its own values, so the batch becomes an explicit loop of calls (as Pallas does).
  bool loop = false;
  for (int k = 0; k < nd + np && k < static_cast<int>(in_axes.size()); ++k) loop = loop || in_axes[k].has_value();

  // The grid rule for input shapes (no dynamic bounds in `shapes`).
  auto build = [call, in_axes, nd, loop, what](const std::vector<ShapeDtype>& shapes) {
    if (loop)
      throw LoopOnly(what + ": batched dynamic grid bounds or scalar prefetch make the vmap an explicit loop of calls, "
                            "not one pallas_call, so it cannot be transformed further");
    std::vector<ShapeDtype> all(static_cast<size_t>(nd), ShapeDtype({}, DType::I32));
    all.insert(all.end(), shapes.begin(), shapes.end());
    VmapPlan p = plan_for(what, nd, in_axes, all);
    std::vector<ShapeDtype> inner;
    std::vector<std::optional<int>> axes;
    for (size_t k = static_cast<size_t>(nd); k < all.size(); ++k) {
      inner.push_back(unbatched(all[k], p.axes[k]));
      axes.push_back(p.axes[k]);
    }
    const core::PallasCall& pc = pallas_call_of(call, inner);
    for (auto [i, o] : pc.aliases) axes[i] = 0;  // the runner moves or broadcasts aliased inputs
    core::PallasCall r = vmap_pallas_call(pc, axes, p.batch);
    r.what = what;
    return r;
  };

  Call result = make_transformed(what, call.name(), in.opts.grid, call.num_outputs(), build);
  result.state()->opts.grid.insert(result.state()->opts.grid.begin(), 0);  // the batch axis is static
  result.state()->opts.num_scalar_prefetch = np;
  std::weak_ptr<detail::CallState> weak = result.state();  // the state owns this closure
  // 1: an explicit loop (here, or because the inner call is one)
  auto mode = std::make_shared<std::atomic<int>>(loop ? 1 : 0);
  result.state()->run = [call, in_axes, nd, mode, what, weak](const std::vector<Array>& args) -> std::vector<Array> {
    VmapPlan p = plan_for(what, nd, in_axes, shapes_of(args, what));
    auto st = weak.lock();
    const core::PallasCall* pcp = nullptr;
    if (p.batch != 1 && *mode == 0) {
      try {
        pcp = &st->get(shapes_of(std::vector<Array>(args.begin() + nd, args.end()), what));
      } catch (const LoopOnly&) {
        *mode = 1;
      }
    }
    if (!pcp) {  // a batch of one squeezes; the loop fallback calls per element
      std::vector<std::vector<Array>> per;
      for (int64_t b = 0; b < p.batch; ++b) {
        std::vector<Array> ab;
        for (size_t k = 0; k < args.size(); ++k) {
          if (!p.axes[k]) ab.push_back(args[k]);
          else if (p.batch == 1) ab.push_back(args[k].reshape(unbatched(args[k].shape_dtype(), p.axes[k]).shape));
          else ab.push_back(take(args[k], *p.axes[k], b));
        }
        per.push_back(call(ab));
      }
      std::vector<Array> outs;
      for (size_t o = 0; o < per[0].size(); ++o) {
        if (p.batch == 1) {
          Shape s = per[0][o].shape();
          s.insert(s.begin(), 1);
          outs.push_back(per[0][o].reshape(s));
        } else {
          std::vector<Array> xs;
          for (auto& r : per) xs.push_back(r[o]);
          outs.push_back(stack(xs));
        }
      }
      return outs;
    }
    const core::PallasCall& pc = *pcp;
    // Aliased inputs are batched at axis 0 in the batched call: move or broadcast them.
    std::vector<Array> a = args;
    for (auto [i, o] : pc.aliases) {
      size_t k = static_cast<size_t>(nd + i);
      if (!p.axes[k]) a[k] = stack(std::vector<Array>(static_cast<size_t>(p.batch), a[k]));
      else if (*p.axes[k] != 0) a[k] = move_axis_to_front(a[k], *p.axes[k]);
    }
    core::check_arguments(pc, a);
    return core::execute(pc, a);
  };
  return result;
}

}  // namespace pallas

// ---- ragged batching ----

namespace pallas::transforms {

core::PallasCall ragged_pallas_call(const core::PallasCall& r, int grid_axis, int64_t block) {
  int ga = grid_axis + 1;
  if (grid_axis < 0 || ga >= static_cast<int>(r.grid.grid.size()))
    throw Error(r.what + ": ragged grid_axis " + std::to_string(grid_axis) + " is not an axis of the grid");
  if (block <= 0) throw Error(r.what + ": ragged block must be positive, got " + std::to_string(block));
  if (r.grid.num_dynamic_bounds() > 0) throw Error(r.what + ": ragged vmap of a call with dynamic grid bounds is not supported");
  int64_t B = r.grid.grid[0];
  core::PallasCall n = r;
  n.grid.prefetch.insert(n.grid.prefetch.begin(), ShapeDtype({B}, DType::I32));
  ir::Aval len_aval = ir::Aval::ref({B}, DType::I32, MemorySpace::Smem);
  auto rewrite_map = [&](const ir::Jaxpr& m) {
    trace::KernelContext ctx{r.what, r.grid.grid, false};
    trace::Frame f(&ctx, false);
    size_t g = r.grid.grid.size();
    std::vector<Value> grid_args, pre;
    for (size_t k = 0; k < g; ++k) grid_args.push_back(trace::make_value(f.add_invar(ir::Aval::array({}, DType::I32))));
    Ref lens(trace::make_value(f.add_invar(len_aval)));
    for (size_t k = g; k < m.invars.size(); ++k) pre.push_back(trace::make_value(f.add_invar(m.invars[k].aval)));
    Value nblk = (lens[grid_args[0]].get() + (block - 1)) / block;
    grid_args[ga] = minimum(grid_args[ga], maximum(nblk - 1, 0));
    grid_args.insert(grid_args.end(), pre.begin(), pre.end());
    std::vector<ir::Atom> outs;
    for (auto& v : inline_jaxpr(m, grid_args)) outs.push_back(trace::atom_of(v, "ragged index map"));
    return std::make_shared<const ir::Jaxpr>(f.finish(outs, nullptr));
  };
  for (auto& bm : n.grid.inputs) bm.index_map = rewrite_map(*bm.index_map);
  for (auto& bm : n.grid.outputs) {
    bm.index_map = rewrite_map(*bm.index_map);
    bm.may_stay_unwritten = true;  // rows past each length
  }
  trace::KernelContext ctx{r.what, r.grid.grid, true};
  ir::Jaxpr kj;
  {
    trace::Frame f(&ctx, false);
    Ref lens(trace::make_value(f.add_invar(len_aval)));
    std::vector<Value> kargs;
    for (auto& v : r.kernel->invars) kargs.push_back(trace::make_value(f.add_invar(v.aval)));
    Value b = trace::bind1(PrimId::program_id, {}, {{"axis", int64_t{0}}});
    Value i = trace::bind1(PrimId::program_id, {}, {{"axis", static_cast<int64_t>(ga)}});
    when(i * block < lens[b].get(), [&] { inline_jaxpr(*r.kernel, kargs); });
    kj = f.finish({}, nullptr);
  }
  n.kernel = std::make_shared<const ir::Jaxpr>(std::move(kj));
  ir::verify(*n.kernel, n.what);
  n.aliases.clear();
  for (auto [in, out] : r.aliases) n.aliases[in + 1] = out;
  return n;
}

}  // namespace pallas::transforms

namespace pallas {
Call vmap_ragged(const Call& call, std::vector<std::optional<int>> in_axes, RaggedSpec spec) {
  if (!call.state()) throw Error("pl::vmap_ragged: empty Call");
  if (transforms::num_dynamic_args(call) > 0)
    throw Error(call.state()->what + ": ragged vmap of a call with dynamic grid bounds is not supported");
  Call vm = vmap(call, in_axes);
  std::string what = "ragged vmap of " + call.state()->what;
  auto build = [vm, spec, what](const std::vector<ShapeDtype>& shapes) {
    if (shapes.empty() || shapes[0].shape.size() != 1 || shapes[0].dtype != DType::I32)
      throw Error(what + ": the first argument must be the lengths, an i32[batch] array");
    core::PallasCall r = vm.state()->get(std::vector<ShapeDtype>(shapes.begin() + 1, shapes.end()));
    if (r.grid.grid[0] != shapes[0].shape[0])
      throw Error(what + ": lengths has " + std::to_string(shapes[0].shape[0]) + " entries for a batch of " +
                  std::to_string(r.grid.grid[0]));
    r.what = what;
    return transforms::ragged_pallas_call(r, spec.grid_axis, spec.block);
  };
  Call c = transforms::make_transformed(what, call.name(), {}, call.num_outputs(), build);
  c.state()->opts.num_scalar_prefetch = 1 + vm.state()->opts.num_scalar_prefetch;
  return c;
}
}  // namespace pallas
