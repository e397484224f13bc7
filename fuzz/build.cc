// Builds a fuzz kernel description into a pallas_call, through the public API only.
// print.cc prints the same calls as C++; keep the two in step (the emitted-test check in
// fuzz/CMakeLists.txt compares their traced IR).
#include <stdexcept>
#include <unordered_map>

#include "fuzz/fuzz_check.h"
#include "fuzz/kernel.h"

namespace fuzz {

pl::Shape ArrayDesc::view() const {
  if (whole) return shape;
  pl::Shape v;
  for (int64_t b : block)
    if (b != pl::squeezed) v.push_back(b);
  return v;
}

namespace {

using UnaryFn = pl::Value (*)(const pl::Value&);
using BinaryFn = pl::Value (*)(const pl::Value&, const pl::Value&);

const std::unordered_map<std::string, UnaryFn>& unary_fns() {
  static const std::unordered_map<std::string, UnaryFn> m = {
#define PALLAS_X(n) {#n, &pl::n},
      PALLAS_API_UNARY(PALLAS_X)
#undef PALLAS_X
      {"square", &pl::square},
      {"stop_gradient", &pl::stop_gradient},
  };
  return m;
}
const std::unordered_map<std::string, BinaryFn>& binary_fns() {
  static const std::unordered_map<std::string, BinaryFn> m = {
#define PALLAS_X(n) {#n, &pl::n},
      PALLAS_API_BINARY(PALLAS_X)
#undef PALLAS_X
  };
  return m;
}

[[noreturn]] void bad(const std::string& m) { throw std::logic_error("fuzz builder: " + m); }

pl::Axes axes_of(const std::vector<int64_t>& p) {
  if (p.empty()) return pl::Axes();
  std::vector<int> a;
  for (int64_t x : p) a.push_back(static_cast<int>(x));
  return pl::Axes(a);
}

}  // namespace

pl::Value& Builder::val(int id) {
  if (id < 0 || static_cast<size_t>(id) >= vals.size() || !vals[static_cast<size_t>(id)].defined())
    bad("value v" + std::to_string(id) + " is not defined");
  return vals[static_cast<size_t>(id)];
}

void Builder::set(int id, const pl::Value& v) {
  if (static_cast<size_t>(id) >= vals.size()) vals.resize(static_cast<size_t>(id) + 1), types.resize(static_cast<size_t>(id) + 1);
  vals[static_cast<size_t>(id)] = v;
  types[static_cast<size_t>(id)] = {v.shape(), v.dtype(), v.weak_type(), true};
}

void Builder::run_kernel(const std::vector<pl::Ref>& r) {
  refs = r;
  run_program(k_.body);
}

void Builder::run_program(Program& prog) {
  for (size_t i = 0; i < prog.ops.size(); ++i) apply(prog.ops[i]);
}

std::vector<pl::Value> Builder::run_body(Op& op, size_t b, const std::vector<pl::Value>& params) {
  Program& p = op.body[b];
  if (params.size() != p.params.size()) bad("body parameter count");
  for (size_t i = 0; i < params.size(); ++i) set(p.params[i], params[i]);
  run_program(p);
  std::vector<pl::Value> y;
  for (int id : p.yields) y.push_back(val(id));
  return y;
}

void Builder::apply(Op& op) {
  auto V = [&](size_t i) -> pl::Value& { return val(op.in.at(i)); };
  auto shape = [&](size_t from) { return pl::Shape(op.p.begin() + static_cast<long>(from), op.p.end()); };
  auto indexers = [&]() {
    pl::Indexers ix;
    for (const Idx& x : op.idx) {
      switch (x.kind) {
        case Idx::All: ix.emplace_back(pl::all); break;
        case Idx::Static: ix.emplace_back(x.start); break;
        case Idx::Dyn: ix.emplace_back(val(x.v)); break;
        case Idx::Slice: ix.emplace_back(pl::ds(pl::Value(x.start), x.size, x.stride)); break;
        case Idx::DynSlice: ix.emplace_back(pl::ds(val(x.v), x.size, x.stride)); break;
        case Idx::Array: ix.emplace_back(val(x.v)); break;
      }
    }
    return ix;
  };
  auto ref = [&]() -> const pl::Ref& { return refs.at(static_cast<size_t>(op.ref)); };
  auto mask = [&]() { return op.mask >= 0 ? val(op.mask) : pl::Value(); };
  auto one = [&](const pl::Value& v) { set(op.out.at(0), v); };
  auto many = [&](const std::vector<pl::Value>& v) {
    if (v.size() != op.out.size()) bad("result count");
    for (size_t i = 0; i < v.size(); ++i) set(op.out[i], v[i]);
  };
  switch (op.k) {
    case K::ProgramId: return one(pl::program_id(static_cast<int>(op.p.at(0))));
    case K::NumPrograms: return one(pl::num_programs(static_cast<int>(op.p.at(0))));
    case K::Const: return one(pl::Value::constant(op.c, op.dt));
    case K::Weak: return one(op.f1 ? pl::Value(op.c) : pl::Value(static_cast<int64_t>(op.c)));
    case K::Full: return one(pl::full(shape(0), op.c, op.dt).value_());
    case K::Iota: return one(pl::iota(op.dt, shape(1), static_cast<int>(op.p.at(0))));
    case K::Unary: {
      auto it = unary_fns().find(op.fn);
      if (it == unary_fns().end()) bad("unary " + op.fn);
      return one(it->second(V(0)));
    }
    case K::Binary: {
      auto it = binary_fns().find(op.fn);
      if (it == binary_fns().end()) bad("binary " + op.fn);
      return one(it->second(V(0), V(1)));
    }
    case K::Where: return one(pl::where(V(0), V(1), V(2)));
    case K::SelectN: {
      std::vector<pl::Value> cases;
      for (size_t i = 1; i < op.in.size(); ++i) cases.push_back(V(i));
      return one(pl::select_n(V(0), cases));
    }
    case K::Clamp: return one(pl::clamp(V(0), V(1), V(2)));
    case K::IntPow: return one(pl::integer_pow(V(0), static_cast<int>(op.p.at(0))));
    case K::Convert: return one(V(0).astype(op.dt));
    case K::Bitcast: return one(pl::bitcast(V(0), op.dt));
    case K::StopGrad: return one(pl::stop_gradient(V(0)));
    case K::Hint:
      return one(op.fn == "multiple_of" ? pl::multiple_of(V(0), op.p) : pl::max_contiguous(V(0), op.p));
    case K::Broadcast: return one(pl::broadcast_to(V(0), shape(0)));
    case K::Reshape: return one(pl::reshape(V(0), shape(0)));
    case K::Transpose: {
      std::vector<int> perm(op.p.begin(), op.p.end());
      return one(pl::transpose(V(0), perm));
    }
    case K::ExpandDims: return one(pl::expand_dims(V(0), static_cast<int>(op.p.at(0))));
    case K::Squeeze: return one(pl::squeeze(V(0), axes_of(op.p)));
    case K::Reduce: {
      pl::Axes ax = axes_of(op.p);
      if (op.fn == "sum") return one(pl::sum(V(0), ax, op.f1));
      if (op.fn == "max") return one(pl::max(V(0), ax, op.f1));
      if (op.fn == "min") return one(pl::min(V(0), ax, op.f1));
      if (op.fn == "prod") return one(pl::prod(V(0), ax, op.f1));
      bad("reduce " + op.fn);
    }
    case K::ArgReduce:
      return one(op.fn == "argmax" ? pl::argmax(V(0), static_cast<int>(op.p.at(0)), op.f1)
                                   : pl::argmin(V(0), static_cast<int>(op.p.at(0)), op.f1));
    case K::Cumsum: return one(pl::cumsum(V(0), static_cast<int>(op.p.at(0))));
    case K::Dot: {
      pl::DotOptions o;
      o.trans_a = op.f1;
      o.trans_b = op.f2;
      o.precision = op.prec == 2 ? pl::Precision::Highest : op.prec == 1 ? pl::Precision::High : pl::Precision::Default;
      if (op.pref >= 0) o.preferred_type = static_cast<pl::DType>(op.pref);
      return one(pl::dot(V(0), V(1), o));
    }
    case K::Load: {
      pl::LoadOptions o;
      o.mask = mask();
      if (op.other >= 0) o.other = val(op.other);
      return one(pl::load(ref(), indexers(), o));
    }
    case K::Store: {
      pl::StoreOptions o;
      o.mask = mask();
      pl::store(ref(), indexers(), V(0), o);
      return;
    }
    case K::AddUpdate: ref().at(indexers()) += V(0); return;
    case K::Swap: {
      pl::StoreOptions o;
      o.mask = mask();
      return one(pl::swap(ref(), indexers(), V(0), o));
    }
    case K::Atomic: {
      pl::Value m = mask();
      const std::string& f = op.fn;
      if (f == "add") return one(pl::atomic_add(ref(), indexers(), V(0), m));
      if (f == "max") return one(pl::atomic_max(ref(), indexers(), V(0), m));
      if (f == "min") return one(pl::atomic_min(ref(), indexers(), V(0), m));
      if (f == "and") return one(pl::atomic_and_(ref(), indexers(), V(0), m));
      if (f == "or") return one(pl::atomic_or_(ref(), indexers(), V(0), m));
      if (f == "xor") return one(pl::atomic_xor_(ref(), indexers(), V(0), m));
      if (f == "xchg") return one(pl::atomic_xchg(ref(), indexers(), V(0), m));
      bad("atomic " + f);
    }
    case K::AtomicCas: return one(pl::atomic_cas(ref(), indexers(), V(0), V(1)));
    case K::Fori: {
      // p = {lo, hi, unroll} (static bounds) or in = {lo, hi, carries...} with f1 (dynamic)
      size_t first = op.f1 ? 2 : 0;
      pl::Value lo = op.f1 ? V(0) : pl::Value(op.p.at(0));
      pl::Value hi = op.f1 ? V(1) : pl::Value(op.p.at(1));
      std::vector<pl::Value> init;
      for (size_t i = first; i < op.in.size(); ++i) init.push_back(V(i));
      int unroll = static_cast<int>(op.p.at(2));
      auto outs = pl::fori_loop(
          lo, hi, init,
          [&](const pl::Value& i, const std::vector<pl::Value>& c) {
            std::vector<pl::Value> ps{i};
            ps.insert(ps.end(), c.begin(), c.end());
            return run_body(op, 0, ps);
          },
          unroll);
      return many(outs);
    }
    case K::While: {
      std::vector<pl::Value> init;
      for (size_t i = 0; i < op.in.size(); ++i) init.push_back(V(i));
      auto outs = pl::while_loop(
          init, [&](const std::vector<pl::Value>& c) { return run_body(op, 0, c).at(0); },
          [&](const std::vector<pl::Value>& c) { return run_body(op, 1, c); });
      return many(outs);
    }
    case K::Cond: {
      std::vector<pl::Value> operands;
      for (size_t i = 1; i < op.in.size(); ++i) operands.push_back(V(i));
      auto outs = pl::cond(
          V(0), [&](const std::vector<pl::Value>& a) { return run_body(op, 0, a); },
          [&](const std::vector<pl::Value>& a) { return run_body(op, 1, a); }, operands);
      return many(outs);
    }
    case K::Switch: {
      std::vector<pl::Value> operands;
      for (size_t i = 1; i < op.in.size(); ++i) operands.push_back(V(i));
      std::vector<pl::detail::Branch> br;
      for (size_t b = 0; b < op.body.size(); ++b)
        br.push_back([this, &op, b](const std::vector<pl::Value>& a) { return run_body(op, b, a); });
      return many(pl::switch_case(V(0), br, operands));
    }
    case K::When: pl::when(V(0), [&] { run_body(op, 0, {}); }); return;
  }
  bad("unknown op");
}

pl::CallOptions call_options(const Kernel& k, pl::Backend backend) {
  pl::CallOptions o;
  o.grid = k.grid;
  for (int d : k.dim_sem) o.dimension_semantics.push_back(d ? pl::sequential : pl::parallel);
  for (size_t a = 0; a < k.dynamic.size(); ++a)
    if (k.dynamic[a]) o.grid[a] = pl::dynamic;
  std::vector<int64_t> grid = k.grid;
  int64_t plen = k.num_prefetch() ? k.ins[0].shape.at(0) : 1;
  auto spec = [&](const ArrayDesc& a) {
    if (a.any) return pl::BlockSpec(a.shape, pl::MemorySpace::Any);
    if (a.whole) return pl::BlockSpec();
    std::vector<DimMap> map = a.map;
    return pl::BlockSpec::with_vector_map(a.block, [map, grid, plen](const std::vector<pl::Value>& g) {
      std::vector<pl::Value> r;
      for (const DimMap& m : map) {
        switch (m.kind) {
          case MapKind::Zero: r.push_back(pl::Value(0)); break;
          case MapKind::Axis: r.push_back(g.at(static_cast<size_t>(m.axis))); break;
          case MapKind::Rev: r.push_back(pl::Value(grid.at(static_cast<size_t>(m.axis)) - 1) - g.at(static_cast<size_t>(m.axis))); break;
          case MapKind::Mod: r.push_back(g.at(static_cast<size_t>(m.axis)) % pl::Value(m.mod)); break;
          case MapKind::Pref: {
            pl::Value s = pl::load(pl::Ref(g.at(grid.size())), {g.at(static_cast<size_t>(m.axis)) % pl::Value(plen)});
            r.push_back(((s % pl::Value(m.mod)) + pl::Value(m.mod)) % pl::Value(m.mod));
            break;
          }
        }
      }
      return r;
    });
  };
  for (auto& a : k.ins)
    if (!a.prefetch) o.in_specs.push_back(spec(a));
  o.num_scalar_prefetch = k.num_prefetch();
  for (auto& a : k.outs) o.out_specs.push_back(spec(a));
  o.scratch_shapes = k.scratch;
  o.input_output_aliases = k.aliases;
  o.name = k.name();
  o.compiler_params.num_warps = k.num_warps;
  o.backend = backend;
  return o;
}

std::vector<pl::ShapeDtype> out_shapes(const Kernel& k) {
  std::vector<pl::ShapeDtype> r;
  for (auto& a : k.outs) r.emplace_back(a.shape, a.dtype);
  return r;
}

std::vector<pl::Array> make_inputs(const Kernel& k) {
  std::vector<pl::Array> r;
  for (size_t a = 0; a < k.dynamic.size(); ++a)
    if (k.dynamic[a]) r.push_back(pl::Array::scalar(static_cast<int32_t>(k.grid[a])));
  for (size_t i = 0; i < k.ins.size(); ++i)
    r.push_back(input(k.ins[i].shape, k.ins[i].dtype, k.in_seeds.at(i), i < k.in_edges.size() ? k.in_edges[i] : -1));
  return r;
}

pl::Call make_call(const Kernel& kin, pl::Backend backend, std::vector<ValueType>* types) {
  auto kp = std::make_shared<Kernel>(kin);
  pl::Call c = pl::pallas_call(
      [kp, types](const std::vector<pl::Ref>& r) {
        Builder b(*kp);
        b.run_kernel(r);
        if (types) *types = b.types;
      },
      out_shapes(kin), call_options(kin, backend));
  std::vector<pl::ShapeDtype> ins;
  for (auto& a : kin.ins) ins.emplace_back(a.shape, a.dtype);
  c.trace(ins);
  return c;
}

std::string ir_text(const pl::Call& c) { return ir_without_location(c.jaxpr_text()); }

void collect_uses(const Program& p, std::vector<int>& uses) {
  for (const Op& op : p.ops) {
    uses.insert(uses.end(), op.in.begin(), op.in.end());
    if (op.mask >= 0) uses.push_back(op.mask);
    if (op.other >= 0) uses.push_back(op.other);
    for (const Idx& x : op.idx)
      if (x.v >= 0) uses.push_back(x.v);
    for (const Program& b : op.body) collect_uses(b, uses);
  }
  uses.insert(uses.end(), p.yields.begin(), p.yields.end());
}

}  // namespace fuzz
