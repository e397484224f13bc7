// Ref primitives: load (masked, with other), store (masked), swap, addupdate, atomics.
//
// Operand layouts (idx_start is the first dynamic-index operand):
//   load       [ref, dyn..., mask?, other?]
//   store/swap [ref, value, dyn..., mask?]
//   addupdate  [ref, value, dyn...]
//   atomic_rmw [ref, value, dyn..., mask?]    param op: an ir::AtomicOp (printed 'add', 'max', ...)
//   atomic_cas [ref, cmp, value, dyn...]
#include "src/ops/op_util.h"

namespace pallas::ops {
using ir::PrimId;

namespace {

const Aval& ref_operand(const std::string& op, const std::vector<Aval>& in) {
  if (in.empty() || !in[0].is_ref) fail(op, "the first operand must be a ref, got " + (in.empty() ? std::string("nothing") : in[0].str()));
  return in[0];
}

struct Layout {
  Shape shape;
  size_t after_dyn;  // position after the dynamic-index operands
};

Layout indexed(const std::string& op, const std::vector<Aval>& in, const Params& p) {
  const Aval& ref = ref_operand(op, in);
  const auto& ix = p.get<ir::NDIndexer>("idx");
  size_t start = static_cast<size_t>(p.get_int("idx_start"));
  size_t n = static_cast<size_t>(num_dynamic_indices(ix));
  if (in.size() < start + n) fail(op, "missing index operands");
  std::vector<Aval> dyn(in.begin() + start, in.begin() + start + n);
  return {indexed_shape(op, ref, ix, dyn, p.get_bool("has_mask")), start + n};
}

void check_value(const std::string& op, const Aval& ref, const Shape& shape, const Aval& v, const char* what) {
  expect_array(op, v, what);
  if (v.dtype != ref.dtype)
    fail(op, std::string(what) + " has dtype " + dtype_name(v.dtype) + " but the ref is " + ref.str() +
                 "; convert it with .astype(" + dtype_name(ref.dtype) + ")");
  if (v.shape != shape)
    fail(op, std::string(what) + " has shape " + shape_str(v.shape) + " but the indexed ref slice is " + shape_str(shape));
}

void check_mask(const std::string& op, const Shape& shape, const Aval& m) {
  expect_array(op, m, "the mask");
  if (m.dtype != DType::Bool) fail(op, "the mask must be bool, got " + m.str());
  if (m.shape != shape) fail(op, "the mask " + m.str() + " does not match the indexed shape " + shape_str(shape));
}

}  // namespace

void register_memory() {
  define_primitive(PrimId::load, ir::PrimKind::Memory, [](const std::vector<Aval>& in, const Params& p) {
    Layout l = indexed("load", in, p);
    size_t k = l.after_dyn;
    if (p.get_bool("has_mask")) check_mask("load", l.shape, in.at(k++));
    if (p.get_bool("has_other")) {
      if (!p.get_bool("has_mask")) fail("load", "other requires mask to be provided");
      check_value("load", in[0], l.shape, in.at(k++), "other");
    }
    if (k != in.size()) fail("load", "has " + std::to_string(in.size() - k) + " unexpected operands");
    return std::vector<Aval>{Aval::array(l.shape, in[0].dtype)};
  });

  auto store_like = [](const char* op, bool returns_old) {
    return [op, returns_old](const std::vector<Aval>& in, const Params& p) {
      Layout l = indexed(op, in, p);
      if (in.size() < 2) fail(op, "needs a value");
      check_value(op, in[0], l.shape, in[1], "the stored value");
      size_t k = l.after_dyn;
      if (p.get_bool("has_mask")) check_mask(op, l.shape, in.at(k++));
      if (k != in.size()) fail(op, "has unexpected operands");
      if (!returns_old) return std::vector<Aval>{};
      return std::vector<Aval>{Aval::array(l.shape, in[0].dtype)};
    };
  };
  define_primitive(PrimId::store, ir::PrimKind::Memory, store_like("store", false), true);
  define_primitive(PrimId::swap, ir::PrimKind::Memory, store_like("swap", true), true);
  define_primitive(PrimId::addupdate, ir::PrimKind::Memory, store_like("addupdate", false), true);

  define_primitive(
      PrimId::atomic_rmw, ir::PrimKind::Memory,
      [](const std::vector<Aval>& in, const Params& p) {
        const ir::AtomicOp kind = p.get<ir::AtomicOp>("op");
        const std::string op = std::string("atomic_") + ir::enum_name(kind);
        Layout l = indexed(op, in, p);
        check_value(op, in[0], l.shape, in.at(1), "the value");
        DType t = in[0].dtype;
        if (t == DType::Bool || t == DType::I8 || t == DType::I16 || t == DType::U8 || t == DType::U16 || t == DType::BF16)
          fail(op, std::string("does not support ") + dtype_name(t));
        bool bitwise = false;
        switch (kind) {
          case ir::AtomicOp::Add: break;
          case ir::AtomicOp::Max:
          case ir::AtomicOp::Min:
          case ir::AtomicOp::Xchg:
            if (t == DType::F16) fail(op, "does not support f16");
            break;
          case ir::AtomicOp::And:
          case ir::AtomicOp::Or:
          case ir::AtomicOp::Xor:
            bitwise = true;
            break;
        }
        if (bitwise && is_float(t)) fail(op, std::string("needs an integer ref, got ") + in[0].str());
        size_t k = l.after_dyn;
        if (p.get_bool("has_mask")) check_mask(op, l.shape, in.at(k++));
        if (k != in.size()) fail(op, "has unexpected operands");
        return std::vector<Aval>{Aval::array(l.shape, t)};
      },
      true);

  define_primitive(
      PrimId::atomic_cas, ir::PrimKind::Memory,
      [](const std::vector<Aval>& in, const Params& p) {
        Layout l = indexed("atomic_cas", in, p);
        if (in.size() < 3) fail("atomic_cas", "needs cmp and value");
        if (in[1].dtype != in[2].dtype || in[1].shape != in[2].shape)
          fail("atomic_cas", "cmp and val must have identical dtypes and shapes, got " + in[1].str() + " and " + in[2].str());
        check_value("atomic_cas", in[0], l.shape, in[1], "cmp");
        DType t = in[0].dtype;
        if (bit_width(t) < 32 || t == DType::Bool)
          fail("atomic_cas", std::string("needs a 32- or 64-bit ref, got ") + dtype_name(t));
        return std::vector<Aval>{Aval::array(l.shape, t)};
      },
      true);
}

}  // namespace pallas::ops
