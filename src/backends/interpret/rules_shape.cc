// Interpreter rules for shape primitives. Values are immutable, so reshape and squeeze
// share the operand's bytes.
#include "src/backends/interpret/strided.h"
#include "src/backends/interpret/value.h"

namespace pallas::interp {
using ir::PrimId;

namespace {
void iota_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const auto& p = ins.eqn->params;
  Dims shape(p.get<std::vector<int64_t>>("shape"));
  DType t = p.get<DType>("dtype");
  int dim = static_cast<int>(p.get_int("dimension"));
  if (dim < 0) dim += shape.n;  // abstract eval accepts -1 for the last dimension
  Val& o = env[ins.out[0]];
  o = ctx.alloc(t, shape);
  int64_t inner = 1;
  for (int k = dim + 1; k < shape.n; ++k) inner *= shape[k];
  int64_t len = shape[dim], outer = len ? shape.size() / (len * inner) : 0;
  dispatch(t, [&]<class T>() {
    T* y = o.as<T>();
    for (int64_t a = 0; a < outer; ++a)
      for (int64_t v = 0; v < len; ++v) {
        T e = Elem<T>::put(static_cast<typename Elem<T>::C>(v));
        for (int64_t b = 0; b < inner; ++b) *y++ = e;
      }
  });
}

void broadcast_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& x = env[ins.in[0]];
  const auto& p = ins.eqn->params;
  Dims shape(p.get<std::vector<int64_t>>("shape"));
  const auto& bd = p.get<std::vector<int64_t>>("broadcast_dimensions");
  Val& o = env[ins.out[0]];
  o = ctx.alloc(x.dtype, shape);
  Dims xs = contiguous_strides(x.shape), ss;
  ss.n = shape.n;
  for (size_t k = 0; k < bd.size(); ++k) ss[static_cast<int>(bd[k])] = x.shape[static_cast<int>(k)] == 1 ? 0 : xs[static_cast<int>(k)];
  strided_copy(o.data, contiguous_strides(shape), x.data, ss, shape, itemsize(x.dtype));
}

void reshape_rule(const Instr& ins, Val* env, Ctx&) {
  Val v = env[ins.in[0]];
  v.shape = Dims(ins.eqn->out[0].aval.shape);
  env[ins.out[0]] = v;
}

void transpose_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& x = env[ins.in[0]];
  const auto& perm = ins.eqn->params.get<std::vector<int64_t>>("permutation");
  Dims shape, ss, xs = contiguous_strides(x.shape);
  shape.n = ss.n = x.shape.n;
  for (int k = 0; k < x.shape.n; ++k) {
    shape[k] = x.shape[static_cast<int>(perm[k])];
    ss[k] = xs[static_cast<int>(perm[k])];
  }
  Val& o = env[ins.out[0]];
  o = ctx.alloc(x.dtype, shape);
  strided_copy(o.data, contiguous_strides(shape), x.data, ss, shape, itemsize(x.dtype));
}
}  // namespace

void register_shape_rules() {
  auto& t = rule_table_for_registration();
  t.set(PrimId::iota, iota_rule);
  t.set(PrimId::broadcast_in_dim, broadcast_rule);
  t.set(PrimId::reshape, reshape_rule);
  t.set(PrimId::squeeze, reshape_rule);
  t.set(PrimId::transpose, transpose_rule);
}

}  // namespace pallas::interp
