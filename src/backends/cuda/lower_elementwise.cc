#include "src/backends/cuda/lower_elementwise.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "src/backends/cuda/sm90/device_sources.inc"
#include "src/ir/primitive.h"

namespace pallas::cuda {
using ir::PrimId;

namespace {

struct NoLowering {
  std::string why;
};
[[noreturn]] void refuse(const std::string& why) { throw NoLowering{why}; }

const char* storage_type(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::I8: return "signed char";
    case DType::I16: return "short";
    case DType::I32: return "int";
    case DType::I64: return "long long";
    case DType::U8: return "unsigned char";
    case DType::U16: return "unsigned short";
    case DType::U32: return "unsigned";
    case DType::U64: return "unsigned long long";
    case DType::F16: case DType::BF16: return "unsigned short";
    case DType::F32: return "float";
    case DType::F64: return "double";
  }
  return "void";
}
// 16-bit floats are computed in float registers.
const char* reg_type(DType t) { return t == DType::F16 || t == DType::BF16 ? "float" : storage_type(t); }

std::string round16(DType t, const std::string& e) {
  if (t == DType::F16) return "pl_round_f16(" + e + ")";
  if (t == DType::BF16) return "pl_round_bf16(" + e + ")";
  return e;
}

std::string literal(const ir::Literal& l) {
  char b[64];
  switch (l.dtype) {
    case DType::F64: {
      double d = l.f;
      long long bits;
      std::memcpy(&bits, &d, 8);
      std::snprintf(b, sizeof b, "__longlong_as_double(%lldll)", bits);
      return b;
    }
    case DType::F32: case DType::F16: case DType::BF16: {
      float f = static_cast<float>(l.f);
      if (l.dtype != DType::F32) {
        uint16_t h = l.dtype == DType::F16 ? float_to_f16(f) : float_to_bf16(f);
        f = l.dtype == DType::F16 ? f16_to_float(h) : bf16_to_float(h);
      }
      int bits;
      std::memcpy(&bits, &f, 4);
      std::snprintf(b, sizeof b, "__int_as_float(%d)", bits);
      return b;
    }
    case DType::Bool: return l.i ? "true" : "false";
    default:
      std::snprintf(b, sizeof b, "((%s)%lldll)", storage_type(l.dtype), static_cast<long long>(l.i));
      return b;
  }
}

std::string poison(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: return "__int_as_float(0x7fc00000)";
    case DType::F64: return "__longlong_as_double(0x7ff8000000000000ll)";
    case DType::Bool: return "true";
    case DType::I8: return "((signed char)-128)";
    case DType::I16: return "((short)-32768)";
    case DType::I32: return "((int)0x80000000)";
    case DType::I64: return "((long long)0x8000000000000000ull)";
    default: return std::string("((") + storage_type(t) + ")~0ull)";
  }
}

std::string load_conv(DType t, const std::string& e) {
  if (t == DType::F16) return "pl_f16_to_f32(" + e + ")";
  if (t == DType::BF16) return "pl_bf16_to_f32(" + e + ")";
  return e;
}
std::string store_conv(DType t, const std::string& e) {
  if (t == DType::F16) return "pl_f32_to_f16(" + e + ")";
  if (t == DType::BF16) return "pl_f32_to_bf16(" + e + ")";
  return e;
}

struct Emitter {
  std::ostringstream pre, body;  // loop-invariant code, per-element code
  std::unordered_map<int64_t, std::string> names;
  std::set<int64_t> variant;  // values that depend on the element
  Shape tile;

  std::string atom(const ir::Atom& a) {
    if (auto* v = std::get_if<ir::Var>(&a)) {
      auto it = names.find(v->id);
      if (it == names.end()) refuse("internal: unnamed value");
      return it->second;
    }
    return literal(std::get<ir::Literal>(a));
  }
  bool is_variant(const ir::Atom& a) {
    auto* v = std::get_if<ir::Var>(&a);
    return v && variant.count(v->id);
  }
  void define(const ir::Var& v, const std::string& expr, bool var) {
    std::string n = "v" + std::to_string(v.id);
    names[v.id] = n;
    if (var) variant.insert(v.id);
    (var ? body : pre) << "  " << reg_type(v.aval.dtype) << " " << n << " = " << expr << ";\n";
  }
};

const std::unordered_map<int, std::string>& op_names() {
  static const std::unordered_map<int, std::string> m = [] {
    std::unordered_map<int, std::string> r;
#define PALLAS_X(id, name) r[static_cast<int>(PrimId::id)] = "pl_" #id;
    PALLAS_UNARY_PRIMS(PALLAS_X)
    PALLAS_BINARY_PRIMS(PALLAS_X)
#undef PALLAS_X
    r[static_cast<int>(PrimId::not_)] = "pl_not";
    r[static_cast<int>(PrimId::and_)] = "pl_and";
    r[static_cast<int>(PrimId::or_)] = "pl_or";
    r[static_cast<int>(PrimId::xor_)] = "pl_xor";
    return r;
  }();
  return m;
}

const char* comparison(PrimId id) {
  switch (id) {
    case PrimId::eq: return "==";
    case PrimId::ne: return "!=";
    case PrimId::lt: return "<";
    case PrimId::le: return "<=";
    case PrimId::gt: return ">";
    case PrimId::ge: return ">=";
    default: return nullptr;
  }
}

// Emits one elementwise or scalar equation; refs and memory ops are handled by the caller.
void emit_value_eqn(Emitter& em, const ir::Eqn& e) {
  PrimId id = e.prim->id;
  bool var = false;
  for (auto& a : e.in) var = var || em.is_variant(a);
  const ir::Var& out = e.out.at(0);
  DType ot = out.aval.dtype;
  if (!out.aval.shape.empty() && out.aval.shape != em.tile)
    refuse("'" + e.prim->name + "' makes a " + out.aval.str() + " tile, not the block shape " + shape_str(em.tile));
  auto arg = [&](size_t k) { return em.atom(e.in[k]); };
  auto in_t = [&](size_t k) { return ir::atom_aval(e.in[k]).dtype; };
  if (e.prim->kind == ir::PrimKind::Unary || e.prim->kind == ir::PrimKind::Binary) {
    std::string x;
    if (const char* c = comparison(id)) {
      x = "(" + arg(0) + " " + c + " " + arg(1) + ")";
    } else {
      const std::string& f = op_names().at(static_cast<int>(id));
      x = f + "(" + arg(0) + (e.in.size() > 1 ? ", " + arg(1) : std::string()) + ")";
      if (id == PrimId::nextafter && (ot == DType::F16 || ot == DType::BF16))
        refuse("nextafter of 16-bit floats is not lowered");
    }
    em.define(out, round16(ot, x), var);
    return;
  }
  switch (id) {
    case PrimId::select_n: {
      std::string x = arg(e.in.size() - 1);
      if (in_t(0) == DType::Bool) {
        x = "(" + arg(0) + " ? " + arg(2) + " : " + arg(1) + ")";
      } else {
        for (size_t k = e.in.size() - 1; k-- > 1;)
          x = "(" + arg(0) + " <= " + std::to_string(k - 1) + " ? " + arg(k) + " : " + x + ")";
      }
      em.define(out, x, var);
      return;
    }
    case PrimId::clamp: em.define(out, "pl_clamp(" + arg(0) + ", " + arg(1) + ", " + arg(2) + ")", var); return;
    case PrimId::integer_pow:
      em.define(out, round16(ot, "pl_integer_pow(" + arg(0) + ", " + std::to_string(e.params.get_int("y")) + "ll)"), var);
      return;
    case PrimId::convert_element_type: {
      DType from = in_t(0);
      std::string x = arg(0);
      if (ot == DType::F16 || ot == DType::BF16) x = round16(ot, "(float)" + x);
      else if (is_float(from) && !is_float(ot))
        x = std::string("pl_convert<") + storage_type(ot) + ", " + reg_type(from) + ">(" + x + ")";
      else x = std::string("(") + reg_type(ot) + ")" + x;
      em.define(out, x, var);
      return;
    }
    case PrimId::stop_gradient: case PrimId::multiple_of: case PrimId::max_contiguous:
      em.define(out, arg(0), var);
      return;
    case PrimId::broadcast_in_dim:
      if (!ir::atom_aval(e.in[0]).shape.empty()) refuse("broadcast of a tile");
      em.define(out, arg(0), var);
      return;
    case PrimId::program_id: em.define(out, "g" + std::to_string(e.params.get_int("axis")), false); return;
    case PrimId::iota: {
      int dim = static_cast<int>(e.params.get_int("dimension"));
      em.define(out, std::string("(") + reg_type(ot) + ")r" + std::to_string(dim), true);
      return;
    }
    default: refuse("'" + e.prim->name + "' is not an elementwise primitive");
  }
}

bool whole(const ir::Eqn& e, const Shape& ref_shape) {
  if (e.params.get_bool("has_mask")) return false;
  const auto& ix = e.params.get<ir::NDIndexer>("idx");
  for (size_t d = 0; d < ix.dims.size(); ++d) {
    const auto& x = ix.dims[d];
    if (x.kind != ir::IndexDim::Kind::Slice || x.start != 0 || x.stride != 1 || x.size != ref_shape[d]) return false;
  }
  return true;
}

ElementwisePlan lower(const core::PallasCall& c) {
  const core::GridMapping& g = c.grid;
  if (!g.prefetch.empty() || !g.scratch.empty() || !c.aliases.empty())
    refuse("scalar prefetch, scratch and aliases are not lowered");
  for (int64_t s : g.grid)
    if (s < 0) refuse("dynamic grid bounds are not lowered");
  const ir::Jaxpr& k = *c.kernel;
  std::vector<const core::BlockMapping*> bms;
  for (auto& b : g.inputs) bms.push_back(&b);
  for (auto& b : g.outputs) bms.push_back(&b);
  Shape tile = bms[0]->ref_shape();
  for (auto* b : bms) {
    if (b->ref_shape() != tile) refuse("operands' blocks differ in shape");
    if (b->space != MemorySpace::Default && b->space != MemorySpace::Any) refuse("memory space");
  }
  ElementwisePlan p;
  p.programs = g.num_programs_static();
  p.block_elems = shape_size(tile);
  if (p.programs <= 0 || p.programs > 0x7fffffff) refuse("grid size");
  Emitter em;
  em.tile = tile;
  std::ostringstream src;
  src << kElementwiseCuh << "\nusing namespace pallas_dev;\n";
  src << "extern \"C\" __global__ void __launch_bounds__(" << p.threads << ") pallas_elementwise(";
  for (size_t r = 0; r < bms.size(); ++r)
    src << (r ? ", " : "") << (r < g.inputs.size() ? "const " : "") << storage_type(bms[r]->array.dtype) << "* __restrict__ p" << r;
  src << ") {\n  long long rest = blockIdx.x;\n";
  for (int a = static_cast<int>(g.grid.size()) - 1; a >= 0; --a)
    src << "  const int g" << a << " = (int)(rest % " << g.grid[a] << "); rest /= " << g.grid[a] << ";\n";
  // Index maps: block indices of every operand.
  for (size_t r = 0; r < bms.size(); ++r) {
    const ir::Jaxpr& im = *bms[r]->index_map;
    Emitter ie;
    for (size_t a = 0; a < im.invars.size(); ++a) ie.names[im.invars[a].id] = "g" + std::to_string(a);
    for (auto& e : im.eqns) emit_value_eqn(ie, e);
    src << "  long long bi" << r << "[" << std::max<size_t>(1, im.outvars.size()) << "];\n  {\n" << ie.pre.str();
    for (size_t d = 0; d < im.outvars.size(); ++d) src << "    bi" << r << "[" << d << "] = " << ie.atom(im.outvars[d]) << ";\n";
    src << "  }\n";
  }
  // Kernel: refs are operands; loads and stores address the element of this thread.
  std::unordered_map<int64_t, size_t> ref_of;
  for (size_t r = 0; r < bms.size(); ++r) ref_of[k.invars[r].id] = r;
  std::set<size_t> loaded_outputs, stored;
  for (auto& e : k.eqns) {
    PrimId id = e.prim->id;
    if (id == PrimId::load || id == PrimId::store) {
      auto* rv = std::get_if<ir::Var>(&e.in[0]);
      if (!rv || !ref_of.count(rv->id)) refuse("access to a ref that is not an operand");
      size_t r = ref_of[rv->id];
      if (!whole(e, tile)) refuse("a load or store that is not of the whole block");
      if (id == PrimId::load) {
        if (r >= g.inputs.size()) refuse("a load of an output");
        DType t = bms[r]->array.dtype;
        em.define(e.out[0], "in" + std::to_string(r) + " ? " + load_conv(t, "p" + std::to_string(r) + "[off" + std::to_string(r) + "]") +
                               " : " + poison(t), true);
      } else {
        if (r < g.inputs.size()) refuse("a store to an input");
        DType t = bms[r]->array.dtype;
        std::string v = em.atom(e.in[1]);
        em.body << "  if (in" << r << ") p" << r << "[off" << r << "] = " << store_conv(t, v) << ";\n";
        stored.insert(r);
      }
      continue;
    }
    if (e.prim->has_effects) refuse("'" + e.prim->name + "' is not lowered");
    if (e.prim->kind == ir::PrimKind::Control || e.prim->kind == ir::PrimKind::Reduce || e.prim->kind == ir::PrimKind::Dot ||
        e.prim->kind == ir::PrimKind::Memory)
      refuse("'" + e.prim->name + "' is not an elementwise primitive");
    if (id == PrimId::num_programs) refuse("dynamic num_programs");
    emit_value_eqn(em, e);
  }
  src << em.pre.str();
  src << "  for (long long e = threadIdx.x; e < " << p.block_elems << "ll; e += blockDim.x) {\n    long long t = e;\n";
  for (int d = static_cast<int>(tile.size()) - 1; d >= 0; --d)
    src << "    const long long r" << d << " = t % " << tile[d] << "; t /= " << tile[d] << ";\n";
  for (size_t r = 0; r < bms.size(); ++r) {
    const core::BlockMapping& b = *bms[r];
    Shape strides(b.array.shape.size(), 1);
    for (int d = static_cast<int>(strides.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * b.array.shape[d + 1];
    src << "    bool in" << r << " = true; long long off" << r << " = 0;\n";
    int j = 0;
    for (size_t d = 0; d < b.array.shape.size(); ++d) {
      std::string coord = "bi" + std::to_string(r) + "[" + std::to_string(d) + "] * " + std::to_string(b.block_shape[d]);
      if (!b.squeezed[d]) coord += " + r" + std::to_string(j++);
      src << "    { long long c = " << coord << "; in" << r << " = in" << r << " && c >= 0 && c < " << b.array.shape[d]
          << "; off" << r << " += c * " << strides[d] << "; }\n";
    }
  }
  src << em.body.str() << "  }\n}\n";
  p.source = src.str();
  return p;
}

}  // namespace

std::optional<ElementwisePlan> lower_elementwise(const core::PallasCall& call, std::string* why_not) {
  try {
    return lower(call);
  } catch (const NoLowering& n) {
    if (why_not) *why_not = n.why;
    return std::nullopt;
  }
}

}  // namespace pallas::cuda
