// Refs: indexing into NDIndexers, loads, stores, atomics.
#include <optional>

#include "pallas/kernel.h"
#include "src/ops/op_util.h"
#include "src/trace/api_util.h"
#include "src/trace/trace.h"

namespace pallas {
using ir::IndexDim;
using ir::Literal;
using ir::PrimId;

DSlice slice(int64_t start, int64_t stop, int64_t step) {
  if (step < 1) throw Error("pl::slice: step " + std::to_string(step) + " must be positive (reversed slices are not supported)");
  return {Value(start), stop > start ? (stop - start + step - 1) / step : 0, step};
}

Ref::Ref(Value v) : value_(std::move(v)) {
  if (value_.defined() && !value_.impl()->aval.is_ref)
    throw Error("pl::Ref: " + value_.str() + " is a value, not a ref");
}

namespace {

struct Indexed {
  ir::NDIndexer ix;
  std::vector<Value> dyn;
  Shape shape;
};

// masked: the access has a mask, so static slices may reach past the ref.
Indexed make_indexer(const char* op, const Value& ref, const Indexers& idx_in, bool masked) {
  const ir::Aval& a = trace::aval_of(ref, op);
  if (!a.is_ref) throw Error(std::string("pl::") + op + ": " + a.str() + " is not a ref");
  // ref[pl::all] on a rank-0 ref is the whole ref, as ref[...] in Pallas
  static const Indexers kNone;
  const Indexers& idx = a.ndim() == 0 && idx_in.size() == 1 && idx_in[0].kind == Indexer::Kind::All ? kNone : idx_in;
  if (idx.size() > static_cast<size_t>(a.ndim()))
    throw Error(std::string("pl::") + op + ": " + std::to_string(idx.size()) + " indexers for the rank-" +
                std::to_string(a.ndim()) + " ref " + a.str());
  Indexed r;
  auto dyn_operand = [&](const Value& v) {
    r.dyn.push_back(v);
    return static_cast<int>(r.dyn.size() - 1);
  };
  for (int d = 0; d < a.ndim(); ++d) {
    IndexDim x;
    if (d >= static_cast<int>(idx.size()) || idx[d].kind == Indexer::Kind::All) {
      x.kind = IndexDim::Kind::Slice;
      x.start = 0;
      x.size = a.shape[d];
    } else if (idx[d].kind == Indexer::Kind::Slice) {
      const DSlice& s = idx[d].slice;
      x.size = s.size;
      x.stride = s.stride;
      if (auto* l = std::get_if<Literal>(&trace::atom_of(s.start, op)); l && !is_float(l->dtype)) {
        x.kind = IndexDim::Kind::Slice;
        x.start = l->i;
      } else {
        if (!is_integer(s.start.dtype()))
          throw Error(std::string("pl::") + op + ": ds() start must be an integer, got " + s.start.str());
        x.kind = IndexDim::Kind::DynSlice;
        x.operand = dyn_operand(api::convert(s.start, DType::I32, false));
      }
    } else {
      const Value& v = idx[d].index;
      const ir::Aval& va = trace::aval_of(v, op);
      if (!is_integer(va.dtype))
        throw Error(std::string("pl::") + op + ": index " + va.str() + " must be an integer");
      if (auto* l = std::get_if<Literal>(&trace::atom_of(v, op))) {
        x.kind = IndexDim::Kind::Index;
        x.start = l->i < 0 ? l->i + a.shape[d] : l->i;  // negative indices count from the end
      } else if (va.shape.empty()) {
        x.kind = IndexDim::Kind::DynIndex;
        x.operand = dyn_operand(api::convert(v, DType::I32, false));
      } else {
        x.kind = IndexDim::Kind::Array;
        x.operand = dyn_operand(api::convert(v, DType::I32, false));
      }
    }
    r.ix.dims.push_back(x);
  }
  // Index arrays broadcast against each other (numpy); the primitive takes them all in the
  // broadcast shape.
  std::optional<Shape> arr_shape;
  const std::string bop = std::string("pl::") + op + ": index arrays";
  for (auto& x : r.ix.dims)
    if (x.kind == IndexDim::Kind::Array) {
      const Shape& s = r.dyn[static_cast<size_t>(x.operand)].shape();
      arr_shape = arr_shape ? api::broadcast_shapes(bop.c_str(), *arr_shape, s) : s;
    }
  if (arr_shape)
    for (auto& x : r.ix.dims)
      if (x.kind == IndexDim::Kind::Array && r.dyn[static_cast<size_t>(x.operand)].shape() != *arr_shape)
        r.dyn[static_cast<size_t>(x.operand)] = api::broadcast(r.dyn[static_cast<size_t>(x.operand)], *arr_shape);
  std::vector<ir::Aval> dav;
  for (auto& v : r.dyn) dav.push_back(v.impl()->aval);
  r.shape = ops::indexed_shape(op, a, r.ix, dav, masked);
  return r;
}

// "output 0[:, 0:64]": the ref as its kernel parameter is known, indexed as the kernel wrote
// it (dynamic parts by their kind), for messages about a load or store.
std::string slice_text(const Value& ref, const Indexed& ix) {
  const trace::Frame* f = trace::current_frame();
  std::string s = (f ? f->context().ref_name(ref) : std::string("the ref")) + "[";
  const Shape& rs = ref.shape();
  for (size_t d = 0; d < ix.ix.dims.size(); ++d) {
    const IndexDim& x = ix.ix.dims[d];
    std::string stride = x.stride != 1 ? ":" + std::to_string(x.stride) : "";
    s += d ? ", " : "";
    switch (x.kind) {
      case IndexDim::Kind::Slice:
        s += x.start == 0 && x.size == rs[d] && x.stride == 1
                 ? ":"
                 : std::to_string(x.start) + ":" + std::to_string(x.start + x.size * x.stride) + stride;
        break;
      case IndexDim::Kind::DynSlice: s += "ds(start, " + std::to_string(x.size) + ")" + stride; break;
      case IndexDim::Kind::Index: s += std::to_string(x.start); break;
      case IndexDim::Kind::DynIndex: s += "i"; break;
      case IndexDim::Kind::Array: s += "index array " + ix.dyn[static_cast<size_t>(x.operand)].str(); break;
    }
  }
  return s + "]";
}

// "store to output 0[:]", "load from input 1[0:4]": how a message names the access.
std::string access_text(const std::string& op, const Value& ref, const Indexed& ix) {
  const char* verb = op == "load" ? "load from " : op == "store" ? "store to " : op == "swap" ? "swap with "
                   : op == "addupdate" ? "+= into " : nullptr;
  return (verb ? std::string(verb) : op + " on ") + slice_text(ref, ix);
}

// A stored value (or load's `other`, an atomic's operand): weak scalars take the ref's dtype;
// scalars and tiles that broadcast widen to the slice. `which`: "the value", "other", ...
Value fit_value(const std::string& op, const char* which, const Value& v, const Value& ref, const Indexed& ix) {
  DType t = ref.dtype();
  const Shape& s = ix.shape;
  Value c = v.weak_type() ? api::convert(v, t, false) : v;
  if (c.dtype() != t)
    throw Error(access_text(op, ref, ix) + ": " + which + " " + v.str() + " does not match the ref dtype " + dtype_name(t) +
                "; convert it with .astype(" + dtype_name(t) + ")");
  if (c.shape() == s) return c;
  if (!api::broadcastable(c.shape(), s))
    throw Error(access_text(op, ref, ix) + ": " + which + " has shape " + shape_str(c.shape()) + " (" + v.str() +
                ") but the slice " + slice_text(ref, ix) + " has shape " + shape_str(s) +
                "; they must match (a scalar, or size-1 dimensions, broadcast): index a slice of the value's shape, "
                "or reshape the value");
  return api::broadcast(c, s);
}

Value fit_mask(const std::string& op, const Value& m, const Value& ref, const Indexed& ix) {
  if (m.dtype() != DType::Bool)
    throw Error(access_text(op, ref, ix) + ": the mask must be bool, got " + m.str() + "; compare to make one (e.g. i < n)");
  if (m.shape() == ix.shape) return m;
  if (!api::broadcastable(m.shape(), ix.shape))
    throw Error(access_text(op, ref, ix) + ": the mask " + m.str() + " does not broadcast to the slice " + slice_text(ref, ix) +
                " of shape " + shape_str(ix.shape) + "; give a mask of the slice's shape (or one that broadcasts to it)");
  return api::broadcast(m, ix.shape);
}

ir::Params index_params(const Indexed& ix, int64_t start) {
  return {{"idx", ix.ix}, {"idx_start", start}};
}

Value atomic(ir::AtomicOp kind, const Ref& ref, const Indexers& idx, const Value& v, const Value& mask) {
  trace::Here here(api::loc_of(idx));
  std::string op = std::string("atomic_") + ir::enum_name(kind);
  Indexed ix = make_indexer(op.c_str(), ref.value(), idx, mask.defined());
  std::vector<Value> in{ref.value(), fit_value(op, "the value", v, ref.value(), ix)};
  in.insert(in.end(), ix.dyn.begin(), ix.dyn.end());
  ir::Params p = index_params(ix, 2);
  p.set("op", kind);
  p.set_flag("has_mask", mask.defined());
  if (mask.defined()) in.push_back(fit_mask(op, mask, ref.value(), ix));
  return trace::bind1(PrimId::atomic_rmw, in, p);
}

}  // namespace

Value load(const Ref& ref, Indexers idx, LoadOptions o, SourceLocation loc) {
  trace::Here here(loc);
  Indexed ix = make_indexer("load", ref.value(), idx, o.mask.defined());
  std::vector<Value> in{ref.value()};
  in.insert(in.end(), ix.dyn.begin(), ix.dyn.end());
  ir::Params p = index_params(ix, 1);
  p.set_flag("has_mask", o.mask.defined());
  p.set_flag("has_other", o.other.defined());
  if (o.other.defined() && !o.mask.defined()) throw Error("pl::load: other requires mask to be provided");
  if (o.mask.defined()) in.push_back(fit_mask("load", o.mask, ref.value(), ix));
  if (o.other.defined()) in.push_back(fit_value("load", "other", o.other, ref.value(), ix));
  if (!o.cache_modifier.empty()) p.set("cache_modifier", ir::cache_modifier_of(o.cache_modifier, "pl::load"));
  if (!o.eviction_policy.empty()) p.set("eviction_policy", ir::eviction_policy_of(o.eviction_policy, "pl::load"));
  if (o.is_volatile) p.set("is_volatile", true);
  return trace::bind1(PrimId::load, in, p);
}

namespace {
std::vector<Value> store_operands(const char* op, const Ref& ref, const Indexers& idx, const Value& v,
                                  const Value& mask, ir::Params* p) {
  Indexed ix = make_indexer(op, ref.value(), idx, mask.defined());
  std::vector<Value> in{ref.value(), fit_value(op, "the value", v, ref.value(), ix)};
  in.insert(in.end(), ix.dyn.begin(), ix.dyn.end());
  *p = index_params(ix, 2);
  p->set_flag("has_mask", mask.defined());
  if (mask.defined()) in.push_back(fit_mask(op, mask, ref.value(), ix));
  return in;
}
}  // namespace

void store(const Ref& ref, Indexers idx, const Value& v, StoreOptions o, SourceLocation loc) {
  trace::Here here(loc);
  ir::Params p;
  auto in = store_operands("store", ref, idx, v, o.mask, &p);
  if (!o.eviction_policy.empty()) p.set("eviction_policy", ir::eviction_policy_of(o.eviction_policy, "pl::store"));
  trace::bind(PrimId::store, in, p);
}

Value swap(const Ref& ref, Indexers idx, const Value& v, StoreOptions o, SourceLocation loc) {
  trace::Here here(loc);
  ir::Params p;
  auto in = store_operands("swap", ref, idx, v, o.mask, &p);
  return trace::bind1(PrimId::swap, in, p);
}

Value atomic_add(const Ref& r, Indexers i, const Value& v, const Value& m) { return atomic(ir::AtomicOp::Add, r, i, v, m); }
Value atomic_max(const Ref& r, Indexers i, const Value& v, const Value& m) { return atomic(ir::AtomicOp::Max, r, i, v, m); }
Value atomic_min(const Ref& r, Indexers i, const Value& v, const Value& m) { return atomic(ir::AtomicOp::Min, r, i, v, m); }
Value atomic_and_(const Ref& r, Indexers i, const Value& v, const Value& m) { return atomic(ir::AtomicOp::And, r, i, v, m); }
Value atomic_or_(const Ref& r, Indexers i, const Value& v, const Value& m) { return atomic(ir::AtomicOp::Or, r, i, v, m); }
Value atomic_xor_(const Ref& r, Indexers i, const Value& v, const Value& m) { return atomic(ir::AtomicOp::Xor, r, i, v, m); }
Value atomic_xchg(const Ref& r, Indexers i, const Value& v, const Value& m) { return atomic(ir::AtomicOp::Xchg, r, i, v, m); }
Value atomic_cas(const Ref& ref, Indexers idx, const Value& cmp, const Value& v) {
  trace::Here here(api::loc_of(idx));
  Indexed ix = make_indexer("atomic_cas", ref.value(), idx, false);
  std::vector<Value> in{ref.value(), fit_value("atomic_cas", "cmp", cmp, ref.value(), ix),
                        fit_value("atomic_cas", "the value", v, ref.value(), ix)};
  in.insert(in.end(), ix.dyn.begin(), ix.dyn.end());
  return trace::bind1(PrimId::atomic_cas, in, index_params(ix, 3));
}

Indexer::Indexer(const RefView& v, SourceLocation l) : kind(Kind::Index), index(v.get()), loc(l) {}

namespace api {
SourceLocation loc_of(const Indexers& idx) {
  for (auto& i : idx)
    if (i.loc.file && *i.loc.file) return i.loc;
  return {};
}
}  // namespace api

RefView::RefView(const Ref& r, Indexers idx) : ref_(r.value().impl()), idx_(std::move(idx)), loc_(api::loc_of(idx_)) {}
Value RefView::get() const { return load(Ref(Value(ref_)), idx_, {}, loc_); }
Value RefView::astype(DType t, SourceLocation loc) const {
  trace::Here here(loc);
  return get().astype(t);
}
const RefView& RefView::operator=(const Value& v) const {
  store(Ref(Value(ref_)), idx_, v, {}, loc_);
  return *this;
}
const RefView& RefView::operator=(const RefView& v) const { return *this = v.get(); }
const RefView& RefView::operator+=(const Value& v) const {
  trace::Here here(loc_);
  ir::Params p;
  auto in = store_operands("addupdate", Ref(Value(ref_)), idx_, v, Value(), &p);
  p = ir::Params{{"idx", p.get<ir::NDIndexer>("idx")}, {"idx_start", int64_t{2}}};
  trace::bind(PrimId::addupdate, in, p);
  return *this;
}

}  // namespace pallas
