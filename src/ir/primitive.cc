#include "src/ir/primitive.h"

#include <mutex>

namespace pallas::ops {
// Each op family fills its part of the registry (src/ops/*.cc).
void register_elementwise();
void register_shape();
void register_memory();
void register_dot();
void register_reduce();
void register_control();
void register_misc();
}  // namespace pallas::ops

namespace pallas::ir {
namespace {
const char* const kNames[] = {
#define PALLAS_X(id, name) name,
    PALLAS_PRIMITIVES(PALLAS_X)
#undef PALLAS_X
};

std::vector<Primitive>& table() {
  static std::vector<Primitive> t(kNumPrims);
  return t;
}

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int i = 0; i < kNumPrims; ++i) {
      table()[i].id = static_cast<PrimId>(i);
      table()[i].name = kNames[i];
    }
    ops::register_elementwise();
    ops::register_shape();
    ops::register_memory();
    ops::register_dot();
    ops::register_reduce();
    ops::register_control();
    ops::register_misc();
    for (auto& p : table())
      if (!p.abstract_eval) throw Error("internal: primitive '" + p.name + "' has no abstract eval");
  });
}
}  // namespace

void define_primitive(PrimId id, PrimKind kind, AbstractEval eval, bool has_effects) {
  Primitive& p = table()[static_cast<int>(id)];
  p.kind = kind;
  p.abstract_eval = std::move(eval);
  p.has_effects = has_effects;
}

const Primitive& prim(PrimId id) {
  ensure_registered();
  return table()[static_cast<int>(id)];
}

const Primitive* find_primitive(const std::string& name) {
  ensure_registered();
  for (auto& p : table())
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<const Primitive*> all_primitives() {
  ensure_registered();
  std::vector<const Primitive*> v;
  for (auto& p : table()) v.push_back(&p);
  return v;
}

}  // namespace pallas::ir
