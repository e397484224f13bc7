// The primitive registry: what each op is (name, kind, abstract eval). What transforms and
// backends do with it lives in their own rule tables, indexed by PrimId.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "src/ir/ir.h"
#include "src/ir/prim_list.h"

namespace pallas::ir {

enum class PrimId : uint16_t {
#define PALLAS_X(id, name) id,
  PALLAS_PRIMITIVES(PALLAS_X)
#undef PALLAS_X
      kCount
};
inline constexpr int kNumPrims = static_cast<int>(PrimId::kCount);

using AbstractEval = std::function<std::vector<Aval>(const std::vector<Aval>& in, const Params& p)>;

enum class PrimKind : uint8_t { Unary, Binary, Elementwise, Shape, Memory, Dot, Reduce, Control, Misc };

struct Primitive {
  PrimId id;
  std::string name;
  PrimKind kind = PrimKind::Misc;
  AbstractEval abstract_eval;
  bool has_effects = false;  // writes refs, prints or checks: never removed as dead
};

// The registry; filled once, on first use, by the src/ops files.
const Primitive& prim(PrimId id);
const Primitive* find_primitive(const std::string& name);
std::vector<const Primitive*> all_primitives();
// Used by src/ops/*.cc while the registry is being filled.
void define_primitive(PrimId id, PrimKind kind, AbstractEval eval, bool has_effects = false);

// A table from primitive to rule, one per backend or transform. A missing rule is a
// pl::Error naming the primitive and the table.
template <class Rule>
class RuleTable {
 public:
  explicit RuleTable(std::string what) : what_(std::move(what)), rules_(kNumPrims) {}
  void set(PrimId id, Rule r) { rules_[static_cast<int>(id)] = std::move(r); }
  bool has(PrimId id) const { return static_cast<bool>(rules_[static_cast<int>(id)]); }
  const Rule& get(PrimId id) const {
    const Rule& r = rules_[static_cast<int>(id)];
    if (!r) throw Error("no " + what_ + " rule for primitive '" + prim(id).name + "'");
    return r;
  }
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  std::vector<Rule> rules_;
};

}  // namespace pallas::ir
