// The kernel IR: a jaxpr-like SSA form. Shapes and dtypes are static; Refs are values of
// RefType and are read and written by primitives with an indexer param.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "pallas/array.h"
#include "pallas/block_spec.h"
#include "pallas/dtype.h"

namespace pallas::ir {

// ShapedArray (is_ref = false) or RefType (is_ref = true) with its memory space.
struct Aval {
  Shape shape;
  DType dtype = DType::F32;
  bool weak = false;
  bool is_ref = false;
  MemorySpace space = MemorySpace::Default;

  static Aval array(Shape s, DType t, bool weak = false) { return {std::move(s), t, weak, false, MemorySpace::Default}; }
  static Aval ref(Shape s, DType t, MemorySpace ms = MemorySpace::Default) { return {std::move(s), t, false, true, ms}; }
  int ndim() const { return static_cast<int>(shape.size()); }
  int64_t size() const { return shape_size(shape); }
  bool is_scalar() const { return shape.empty() && !is_ref; }
  // Equal shape, dtype and refness (weak-typedness ignored).
  bool same_type(const Aval& o) const { return shape == o.shape && dtype == o.dtype && is_ref == o.is_ref; }
  bool operator==(const Aval& o) const = default;
  std::string str() const;
};

struct Var {
  int64_t id = -1;
  Aval aval;
};

struct Literal {
  DType dtype = DType::I32;
  bool weak = false;
  // Exactly one meaningful, by dtype: floats in f, everything else (bool too) in i.
  double f = 0.0;
  int64_t i = 0;
  static Literal of_int(int64_t v, DType t, bool weak = false) { return {t, weak, static_cast<double>(v), v}; }
  static Literal of_float(double v, DType t, bool weak = false) { return {t, weak, v, static_cast<int64_t>(v)}; }
  double as_double() const { return is_float(dtype) ? f : static_cast<double>(i); }
  int64_t as_int() const { return is_float(dtype) ? static_cast<int64_t>(f) : i; }
  Aval aval() const { return Aval::array({}, dtype, weak); }
  bool operator==(const Literal&) const = default;
};

using Atom = std::variant<Var, Literal>;
inline const Aval atom_aval(const Atom& a) {
  return std::holds_alternative<Var>(a) ? std::get<Var>(a).aval : std::get<Literal>(a).aval();
}
inline bool is_literal(const Atom& a) { return std::holds_alternative<Literal>(a); }

struct Jaxpr;
using JaxprPtr = std::shared_ptr<const Jaxpr>;

// How a ref is indexed, one entry per indexed dimension (trailing dims are taken whole).
// Dynamic parts (a start, an index, an index array) are operands of the equation, in order.
struct IndexDim {
  enum class Kind : uint8_t {
    Slice,       // static start, size, stride
    DynSlice,    // operand start, static size and stride
    Index,       // static integer: the dimension is dropped
    DynIndex,    // operand integer scalar: dropped
    Array,       // operand integer array: gather/scatter (numpy advanced indexing)
  };
  Kind kind = Kind::Slice;
  int64_t start = 0, size = 0, stride = 1;
  int operand = -1;  // index into the equation's dynamic-index operands
  bool operator==(const IndexDim&) const = default;
};
struct NDIndexer {
  std::vector<IndexDim> dims;  // as many as the ref's rank after normalisation
  bool operator==(const NDIndexer&) const = default;
};

// Where the result axes of ref[indexer] come from (NumPy advanced indexing). With an index
// array present, the advanced indices are the index arrays and every integer (static or
// dynamic) of the indexer; their common shape (the index arrays' shape, which all share)
// forms one block of result axes: where the first advanced index is when the advanced
// indices are adjacent, else in front. Slices give the other axes, in order. An index-array
// entry i < 0 addresses i + dim (the tracer has already wrapped static integers).
struct IndexPlacement {
  bool has_array = false;
  int arr_axis0 = 0;            // first result axis of the index-array block
  std::vector<int> slice_axis;  // per indexed dim: its result axis if a slice, else -1
};
IndexPlacement placement(const NDIndexer& ix, int arr_rank);

// Sub-operations and hints carried in params are enums, not strings: every table that takes
// one switches over it without a default (the compiler flags a missing case) and throws a
// pl::Error naming the primitive for a value outside the enum. The printer writes the names
// below in quotes, as the strings were printed before.
enum class AtomicOp : uint8_t { Add, Max, Min, And, Or, Xor, Xchg };
enum class CacheModifier : uint8_t { CA, CG };              // ".ca", ".cg"
enum class EvictionPolicy : uint8_t { EvictFirst, EvictLast };  // "evict_first", "evict_last"
inline constexpr int kNumAtomicOps = 7, kNumCacheModifiers = 2, kNumEvictionPolicies = 2;
const char* enum_name(AtomicOp op);  // "add", "max", ...
const char* enum_name(CacheModifier c);
const char* enum_name(EvictionPolicy e);
// The enum value of a name; throws a pl::Error naming `op` and the accepted names otherwise.
AtomicOp atomic_op_of(const std::string& name, const std::string& op);
CacheModifier cache_modifier_of(const std::string& name, const std::string& op);
EvictionPolicy eviction_policy_of(const std::string& name, const std::string& op);
// For a value outside the enum (a cast of a bad integer): the error every switch ends with.
[[noreturn]] void bad_enum(const std::string& prim, const char* what, int value);

using ParamValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, DType, JaxprPtr,
                                std::vector<JaxprPtr>, NDIndexer, AtomicOp, CacheModifier, EvictionPolicy>;

struct Params {
  std::vector<std::pair<std::string, ParamValue>> items;

  Params() = default;
  Params(std::initializer_list<std::pair<std::string, ParamValue>> l) : items(l) {}
  const ParamValue* find(const std::string& k) const {
    for (auto& [n, v] : items)
      if (n == k) return &v;
    return nullptr;
  }
  bool has(const std::string& k) const { return find(k) != nullptr; }
  template <class T>
  const T& get(const std::string& k) const;
  int64_t get_int(const std::string& k) const { return get<int64_t>(k); }
  // Flags default to false when absent, so only set flags are stored (and printed).
  bool get_bool(const std::string& k) const {
    const ParamValue* v = find(k);
    return v && std::get<bool>(*v);
  }
  void set_flag(const std::string& k, bool on) {
    if (on) set(k, true);
  }
  void set(const std::string& k, ParamValue v) {
    for (auto& [n, old] : items)
      if (n == k) {
        old = std::move(v);
        return;
      }
    items.emplace_back(k, std::move(v));
  }
};

struct Primitive;

struct SrcLoc {
  std::string file;
  int line = 0;
  std::string str() const { return file.empty() ? "" : file + ":" + std::to_string(line); }
};

// Where in the kernel's source an equation was traced (file: a string literal of the
// caller's translation unit; null when unknown). Not part of the printed text or the hash.
struct SourceLoc {
  const char* file = nullptr;
  int line = 0;
  // "matmul.cc:42": the file's last path component, as a kernel's name shows its pallas_call's
  // place; "" when unknown. What error messages print.
  std::string str() const;
};

struct Eqn {
  const Primitive* prim = nullptr;
  Params params;
  std::vector<Atom> in;
  std::vector<Var> out;
  SourceLoc loc;
};

struct Jaxpr {
  std::vector<Var> invars;
  std::vector<Eqn> eqns;
  std::vector<Atom> outvars;
};

// ---- printer, verifier, hash (ir.cc) ----
std::string to_text(const Jaxpr& j);
// Each eqn of j (and of its sub-jaxprs) as to_text prints it, with the same names: one line
// (an eqn holding sub-jaxprs: up to its first sub-jaxpr). The CUDA backend's generated code
// carries them as comments.
std::unordered_map<const Eqn*, std::string> eqn_lines(const Jaxpr& j);
std::string param_text(const ParamValue& v);
// Checks SSA (every use defined before) and re-runs abstract eval on every equation.
void verify(const Jaxpr& j, const std::string& what);
uint64_t structural_hash(const Jaxpr& j);
uint64_t hash_text(const std::string& s, uint64_t seed = 1469598103934665603ull);

// The one walk over nested jaxprs: the jaxprs an eqn holds in its params (loop bodies, cond
// branches), in param order; every eqn of j and, depth first after it, of the jaxprs it holds;
// whether some such eqn satisfies pred (stops at the first).
std::vector<const Jaxpr*> sub_jaxprs(const Eqn& e);
void for_each_eqn(const Jaxpr& j, const std::function<void(const Eqn&)>& f);
bool any_eqn(const Jaxpr& j, const std::function<bool(const Eqn&)>& pred);

// Fresh variable ids, unique within the process.
int64_t new_var_id();
Var new_var(Aval a);

}  // namespace pallas::ir

namespace pallas::ir {
template <class T>
const T& Params::get(const std::string& k) const {
  const ParamValue* v = find(k);
  if (!v) throw Error("internal: missing param '" + k + "'");
  return std::get<T>(*v);
}
}  // namespace pallas::ir
