#include "src/ir/scalar_eval.h"

#include <algorithm>
#include <unordered_map>

#include "src/ir/primitive.h"

namespace pallas::ir {

namespace {
int width(DType t) {
  if (t == DType::Bool) return 1;
  if (!is_signed_int(t)) return 0;  // unsigned and floats are not evaluated
  return static_cast<int>(itemsize(t) * 8);
}
// v wrapped to a signed integer of `bits` bits (bool: 0 or 1).
int64_t wrap(int64_t v, int bits) {
  if (bits == 1) return v != 0;
  if (bits >= 64) return v;
  uint64_t m = (uint64_t{1} << bits) - 1, u = static_cast<uint64_t>(v) & m;
  return (u >> (bits - 1)) ? static_cast<int64_t>(u | ~m) : static_cast<int64_t>(u);
}
bool supported(PrimId id) {
  switch (id) {
    case PrimId::add: case PrimId::sub: case PrimId::mul: case PrimId::div: case PrimId::rem:
    case PrimId::neg: case PrimId::abs: case PrimId::sign: case PrimId::max: case PrimId::min:
    case PrimId::eq: case PrimId::ne: case PrimId::lt: case PrimId::le: case PrimId::gt: case PrimId::ge:
    case PrimId::and_: case PrimId::or_: case PrimId::xor_: case PrimId::not_:
    case PrimId::select_n: case PrimId::clamp: case PrimId::convert_element_type:
    case PrimId::multiple_of: case PrimId::max_contiguous: case PrimId::stop_gradient:
      return true;
    default: return false;
  }
}
}  // namespace

std::optional<ScalarProgram> ScalarProgram::compile(const Jaxpr& j, size_t num_invars) {
  ScalarProgram p;
  p.num_invars_ = num_invars;
  std::unordered_map<int64_t, int> slot;
  auto fresh = [&](int64_t v) {
    p.init_.push_back(v);
    return static_cast<int>(p.init_.size() - 1);
  };
  for (size_t k = 0; k < num_invars && k < j.invars.size(); ++k) {
    if (!j.invars[k].aval.shape.empty() || width(j.invars[k].aval.dtype) == 0) return std::nullopt;
    slot[j.invars[k].id] = fresh(0);
  }
  auto atom = [&](const Atom& a) -> std::optional<int> {
    if (auto* l = std::get_if<Literal>(&a)) {
      if (width(l->dtype) == 0) return std::nullopt;
      return fresh(wrap(l->i, width(l->dtype)));
    }
    auto it = slot.find(std::get<Var>(a).id);
    if (it == slot.end()) return std::nullopt;  // an invar past num_invars (a ref) or unknown
    return it->second;
  };
  for (const Eqn& e : j.eqns) {
    if (!supported(e.prim->id) || e.out.size() != 1 || !e.out[0].aval.shape.empty()) return std::nullopt;
    int bits = width(e.out[0].aval.dtype);
    if (bits == 0) return std::nullopt;
    // select_n on an integer: both backends clamp an index out of range, but the GPU took the
    // last case for a negative one until 2026-12-07; kept off the host until that has been
    // checked on a GPU across sessions (the axis it reads then stays sequential)
    if (e.prim->id == PrimId::select_n && (atom_aval(e.in[0]).dtype != DType::Bool || e.in.size() != 3)) return std::nullopt;
    Op op{e.prim->id, bits, {}, 0};
    for (const Atom& a : e.in) {
      if (!atom_aval(a).shape.empty()) return std::nullopt;
      auto s = atom(a);
      if (!s) return std::nullopt;
      op.in.push_back(*s);
    }
    op.out = fresh(0);
    slot[e.out[0].id] = op.out;
    p.ops_.push_back(std::move(op));
  }
  for (const Atom& a : j.outvars) {
    auto s = atom(a);
    if (!s) return std::nullopt;
    p.outs_.push_back(*s);
  }
  return p;
}

void ScalarProgram::run(const int64_t* invars, int64_t* outvars, std::vector<int64_t>& v) const {
  v = init_;
  for (size_t k = 0; k < num_invars_; ++k) v[k] = invars[k];
  for (const Op& op : ops_) {
    auto x = [&](size_t k) { return v[static_cast<size_t>(op.in[k])]; };
    int64_t r = 0;
    switch (op.id) {
      case PrimId::add: r = static_cast<int64_t>(static_cast<uint64_t>(x(0)) + static_cast<uint64_t>(x(1))); break;
      case PrimId::sub: r = static_cast<int64_t>(static_cast<uint64_t>(x(0)) - static_cast<uint64_t>(x(1))); break;
      case PrimId::mul: r = static_cast<int64_t>(static_cast<uint64_t>(x(0)) * static_cast<uint64_t>(x(1))); break;
      case PrimId::div: r = x(1) == 0 ? -1 : (x(1) == -1 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x(0))) : x(0) / x(1)); break;
      case PrimId::rem: r = x(1) == 0 ? x(0) : (x(1) == -1 ? 0 : x(0) % x(1)); break;
      case PrimId::neg: r = static_cast<int64_t>(0 - static_cast<uint64_t>(x(0))); break;
      case PrimId::abs: r = x(0) < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x(0))) : x(0); break;
      case PrimId::sign: r = (x(0) > 0) - (x(0) < 0); break;
      case PrimId::max: r = std::max(x(0), x(1)); break;
      case PrimId::min: r = std::min(x(0), x(1)); break;
      case PrimId::eq: r = x(0) == x(1); break;
      case PrimId::ne: r = x(0) != x(1); break;
      case PrimId::lt: r = x(0) < x(1); break;
      case PrimId::le: r = x(0) <= x(1); break;
      case PrimId::gt: r = x(0) > x(1); break;
      case PrimId::ge: r = x(0) >= x(1); break;
      case PrimId::and_: r = x(0) & x(1); break;
      case PrimId::or_: r = x(0) | x(1); break;
      case PrimId::xor_: r = x(0) ^ x(1); break;
      case PrimId::not_: r = op.bits == 1 ? !x(0) : ~x(0); break;
      case PrimId::select_n: r = x(x(0) ? 2 : 1); break;  // a bool predicate (compile): two cases
      case PrimId::clamp: r = std::min(std::max(x(1), x(0)), x(2)); break;
      default: r = x(0);  // convert_element_type (wrapped below), the hints, stop_gradient
    }
    v[static_cast<size_t>(op.out)] = wrap(r, op.bits);
  }
  for (size_t k = 0; k < outs_.size(); ++k) outvars[k] = v[static_cast<size_t>(outs_[k])];
}

}  // namespace pallas::ir
