// Printer, verifier and structural hash of the IR.
#include "src/ir/ir.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "src/ir/primitive.h"

namespace pallas::ir {

int64_t new_var_id() {
  static std::atomic<int64_t> next{1};
  return next++;
}
Var new_var(Aval a) { return Var{new_var_id(), std::move(a)}; }

void bad_enum(const std::string& prim, const char* what, int value) {
  throw Error(prim + ": unknown " + what + " " + std::to_string(value) + " (a value outside the enum)");
}

const char* enum_name(AtomicOp op) {
  switch (op) {
    case AtomicOp::Add: return "add";
    case AtomicOp::Max: return "max";
    case AtomicOp::Min: return "min";
    case AtomicOp::And: return "and";
    case AtomicOp::Or: return "or";
    case AtomicOp::Xor: return "xor";
    case AtomicOp::Xchg: return "xchg";
  }
  bad_enum("atomic_rmw", "atomic op", static_cast<int>(op));
}
const char* enum_name(CacheModifier c) {
  switch (c) {
    case CacheModifier::CA: return ".ca";
    case CacheModifier::CG: return ".cg";
  }
  bad_enum("load", "cache modifier", static_cast<int>(c));
}
const char* enum_name(EvictionPolicy e) {
  switch (e) {
    case EvictionPolicy::EvictFirst: return "evict_first";
    case EvictionPolicy::EvictLast: return "evict_last";
  }
  bad_enum("load/store", "eviction policy", static_cast<int>(e));
}

namespace {
// The enumerator whose name is `name`, by walking every value of E (0, 1, ... up to `count`).
template <class E>
E enum_of(const std::string& name, const std::string& op, const char* what, int count) {
  std::string names;
  for (int k = 0; k < count; ++k) {
    const char* n = enum_name(static_cast<E>(k));
    if (name == n) return static_cast<E>(k);
    names += std::string(k ? ", " : "") + "'" + n + "'";
  }
  throw Error(op + ": unsupported " + what + " '" + name + "'; use one of " + names);
}
}  // namespace

AtomicOp atomic_op_of(const std::string& name, const std::string& op) {
  return enum_of<AtomicOp>(name, op, "atomic op", kNumAtomicOps);
}
CacheModifier cache_modifier_of(const std::string& name, const std::string& op) {
  return enum_of<CacheModifier>(name, op, "cache modifier", kNumCacheModifiers);
}
EvictionPolicy eviction_policy_of(const std::string& name, const std::string& op) {
  return enum_of<EvictionPolicy>(name, op, "eviction policy", kNumEvictionPolicies);
}

std::string SourceLoc::str() const {
  if (!file || !*file) return "";
  std::string_view f = file;
  size_t slash = f.find_last_of('/');
  return std::string(slash == std::string_view::npos ? f : f.substr(slash + 1)) + ":" + std::to_string(line);
}

std::string Aval::str() const {
  std::string s = shape_str(shape, dtype);
  if (!is_ref) return s;
  const char* sp = space == MemorySpace::Any ? "any:" : space == MemorySpace::Smem ? "smem:"
                   : space == MemorySpace::Scratch ? "scratch:" : "";
  return std::string("Ref{") + sp + s + "}";
}

namespace {

std::string var_name(int64_t n) {
  // a..z, ba..bz, ca.. like jaxprs
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('a' + n % 26));
    n /= 26;
  } while (n > 0);
  return s;
}

std::string literal_text(const Literal& l) {
  char buf[64];
  if (is_float(l.dtype)) {
    std::snprintf(buf, sizeof buf, "%.17g", l.f);
    if (!std::strpbrk(buf, ".eni")) std::strcat(buf, ".0");  // 2 -> 2.0; keeps nan/inf
  } else if (l.dtype == DType::Bool)
    std::snprintf(buf, sizeof buf, "%s", l.i ? "True" : "False");
  else if (l.dtype == DType::U64)
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(l.i));
  else
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(l.i));
  return std::string(buf) + ":" + dtype_name(l.dtype);
}

struct Printer {
  std::ostringstream os;
  std::unordered_map<int64_t, std::string> names;
  int64_t counter = 0;
  // When set: each eqn's line as printed (its first line, for eqns holding sub-jaxprs).
  std::unordered_map<const Eqn*, std::string>* lines = nullptr;

  const std::string& name(const Var& v) {
    auto it = names.find(v.id);
    if (it != names.end()) return it->second;
    return names[v.id] = var_name(counter++);
  }
  std::string atom(const Atom& a) {
    if (auto* v = std::get_if<Var>(&a)) return name(*v);
    return literal_text(std::get<Literal>(a));
  }
  std::string indexer(const NDIndexer& ix, const std::vector<Atom>* operands, int64_t start) {
    std::string s = "[";
    for (size_t d = 0; d < ix.dims.size(); ++d) {
      const IndexDim& x = ix.dims[d];
      if (d) s += ", ";
      auto op = [&](int k) {
        if (operands && start >= 0 && start + k < static_cast<int64_t>(operands->size()))
          return atom((*operands)[start + k]);
        return "%" + std::to_string(k);
      };
      auto stride = [&] { return x.stride != 1 ? ":" + std::to_string(x.stride) : std::string(); };
      switch (x.kind) {
        case IndexDim::Kind::Slice:
          s += std::to_string(x.start) + ":" + std::to_string(x.start + x.size * x.stride) + stride();
          break;
        case IndexDim::Kind::DynSlice:
          s += "ds(" + op(x.operand) + ", " + std::to_string(x.size) + (x.stride != 1 ? ", " + std::to_string(x.stride) : "") + ")";
          break;
        case IndexDim::Kind::Index: s += std::to_string(x.start); break;
        case IndexDim::Kind::DynIndex: s += op(x.operand); break;
        case IndexDim::Kind::Array: s += "idx(" + op(x.operand) + ")"; break;
      }
    }
    return s + "]";
  }
  std::string param(const std::string& key, const ParamValue& v, const Eqn* e, int indent) {
    if (auto* j = std::get_if<JaxprPtr>(&v)) return "\n" + sub(**j, indent + 4);
    if (auto* js = std::get_if<std::vector<JaxprPtr>>(&v)) {
      std::string s = "(";
      for (auto& j : *js) s += "\n" + sub(*j, indent + 4);
      return s + ")";
    }
    if (auto* ix = std::get_if<NDIndexer>(&v)) {
      int64_t start = -1;
      if (e && e->params.has("idx_start")) start = e->params.get_int("idx_start");
      return indexer(*ix, e ? &e->in : nullptr, start);
    }
    (void)key;
    return param_text(v);
  }
  std::string sub(const Jaxpr& j, int indent) {
    Printer p;  // sub-jaxprs are closed: their own names, but share the counter for readability
    p.counter = counter;
    p.names = names;
    p.lines = lines;
    std::string s = p.jaxpr(j, indent);
    counter = p.counter;
    return s;
  }
  std::string jaxpr(const Jaxpr& j, int indent) {
    std::string pad(indent, ' ');
    std::ostringstream o;
    o << pad << "{ lambda ;";
    for (auto& v : j.invars) o << " " << name(v) << ":" << v.aval.str();
    o << ". let\n";
    for (auto& e : j.eqns) {
      std::ostringstream l;
      for (size_t k = 0; k < e.out.size(); ++k) l << (k ? " " : "") << name(e.out[k]) << ":" << e.out[k].aval.str();
      l << (e.out.empty() ? "" : " = ") << e.prim->name;
      bool first = true;
      std::string ps;
      for (auto& [k, v] : e.params.items) {
        if (k == "idx_start") continue;
        ps += (first ? "" : ", ") + k + "=" + param(k, v, &e, indent + 4);
        first = false;
      }
      if (!ps.empty()) l << "[" << ps << "]";
      for (auto& a : e.in) l << " " << atom(a);
      std::string line = l.str();
      if (lines) (*lines)[&e] = line.find('\n') == std::string::npos ? line : line.substr(0, line.find('\n')) + " ...";
      o << pad << "    " << line << "\n";
    }
    o << pad << "  in (";
    for (size_t k = 0; k < j.outvars.size(); ++k) o << (k ? ", " : "") << atom(j.outvars[k]);
    o << ") }";
    return o.str();
  }
};

}  // namespace

std::string param_text(const ParamValue& v) {
  struct V {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(double x) const {
      char b[40];
      std::snprintf(b, sizeof b, "%.17g", x);
      return b;
    }
    std::string operator()(bool x) const { return x ? "True" : "False"; }
    std::string operator()(const std::string& x) const { return "'" + x + "'"; }
    std::string operator()(const std::vector<int64_t>& x) const {
      std::string s = "(";
      for (size_t i = 0; i < x.size(); ++i) s += (i ? ", " : "") + std::to_string(x[i]);
      return s + (x.size() == 1 ? ",)" : ")");
    }
    std::string operator()(DType t) const { return dtype_name(t); }
    std::string operator()(const JaxprPtr& j) const { return j ? to_text(*j) : "None"; }
    std::string operator()(const std::vector<JaxprPtr>& js) const { return "<" + std::to_string(js.size()) + " jaxprs>"; }
    std::string operator()(const NDIndexer& ix) const {
      Printer p;
      return p.indexer(ix, nullptr, -1);
    }
    std::string operator()(AtomicOp x) const { return std::string("'") + enum_name(x) + "'"; }
    std::string operator()(CacheModifier x) const { return std::string("'") + enum_name(x) + "'"; }
    std::string operator()(EvictionPolicy x) const { return std::string("'") + enum_name(x) + "'"; }
  };
  return std::visit(V{}, v);
}

std::string to_text(const Jaxpr& j) {
  Printer p;
  return p.jaxpr(j, 0);
}

std::unordered_map<const Eqn*, std::string> eqn_lines(const Jaxpr& j) {
  std::unordered_map<const Eqn*, std::string> lines;
  Printer p;
  p.lines = &lines;
  p.jaxpr(j, 0);
  return lines;
}

uint64_t hash_text(const std::string& s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t structural_hash(const Jaxpr& j) { return hash_text(to_text(j)); }

namespace {
void verify_rec(const Jaxpr& j, const std::string& what) {
  std::unordered_set<int64_t> defined;
  auto use = [&](const Atom& a, const Eqn* e) {
    if (auto* v = std::get_if<Var>(&a))
      if (!defined.count(v->id))
        throw Error(what + ": IR verifier: variable used before definition" +
                    (e ? std::string(" in '") + e->prim->name + "'" : std::string(" in outputs")));
  };
  for (auto& v : j.invars) defined.insert(v.id);
  for (auto& e : j.eqns) {
    if (!e.prim) throw Error(what + ": IR verifier: equation without a primitive");
    for (auto& a : e.in) use(a, &e);
    std::vector<Aval> in;
    for (auto& a : e.in) in.push_back(atom_aval(a));
    std::vector<Aval> out = e.prim->abstract_eval(in, e.params);
    if (out.size() != e.out.size())
      throw Error(what + ": IR verifier: '" + e.prim->name + "' has " + std::to_string(e.out.size()) +
                  " outputs, abstract eval gives " + std::to_string(out.size()));
    for (size_t k = 0; k < out.size(); ++k)
      if (!out[k].same_type(e.out[k].aval))
        throw Error(what + ": IR verifier: '" + e.prim->name + "' output " + std::to_string(k) + " is " +
                    e.out[k].aval.str() + ", abstract eval gives " + out[k].str());
    for (auto& [k, v] : e.params.items) {
      if (auto* s = std::get_if<JaxprPtr>(&v)) verify_rec(**s, what);
      if (auto* ss = std::get_if<std::vector<JaxprPtr>>(&v))
        for (auto& s : *ss) verify_rec(*s, what);
    }
    for (auto& v : e.out) defined.insert(v.id);
  }
  for (auto& a : j.outvars) use(a, nullptr);
}
}  // namespace

void verify(const Jaxpr& j, const std::string& what) { verify_rec(j, what); }

IndexPlacement placement(const NDIndexer& ix, int arr_rank) {
  using K = IndexDim::Kind;
  IndexPlacement r;
  r.slice_axis.assign(ix.dims.size(), -1);
  for (auto& d : ix.dims) r.has_array = r.has_array || d.kind == K::Array;
  int first = -1, last = -1;
  bool adjacent = true;
  if (r.has_array)
    for (int d = 0; d < static_cast<int>(ix.dims.size()); ++d) {
      K k = ix.dims[d].kind;
      if (k != K::Array && k != K::Index && k != K::DynIndex) continue;
      if (first < 0) first = d;
      else if (last != d - 1) adjacent = false;
      last = d;
    }
  int axis = 0;
  bool placed = false;
  if (r.has_array && !adjacent) r.arr_axis0 = 0, axis = arr_rank, placed = true;
  for (int d = 0; d < static_cast<int>(ix.dims.size()); ++d) {
    K k = ix.dims[d].kind;
    if (k == K::Slice || k == K::DynSlice) {
      r.slice_axis[d] = axis++;
    } else if (r.has_array && !placed) {  // the first advanced index, adjacent case
      r.arr_axis0 = axis;
      axis += arr_rank;
      placed = true;
    }
  }
  return r;
}

std::vector<const Jaxpr*> sub_jaxprs(const Eqn& e) {
  std::vector<const Jaxpr*> out;
  for (const auto& [name, v] : e.params.items) {
    if (auto* j = std::get_if<JaxprPtr>(&v); j && *j) out.push_back(j->get());
    if (auto* js = std::get_if<std::vector<JaxprPtr>>(&v))
      for (const JaxprPtr& j : *js)
        if (j) out.push_back(j.get());
  }
  return out;
}

void for_each_eqn(const Jaxpr& j, const std::function<void(const Eqn&)>& f) {
  for (const Eqn& e : j.eqns) {
    f(e);
    for (const Jaxpr* s : sub_jaxprs(e)) for_each_eqn(*s, f);
  }
}

bool any_eqn(const Jaxpr& j, const std::function<bool(const Eqn&)>& pred) {
  for (const Eqn& e : j.eqns) {
    if (pred(e)) return true;
    for (const Jaxpr* s : sub_jaxprs(e))
      if (any_eqn(*s, pred)) return true;
  }
  return false;
}

}  // namespace pallas::ir
