// Interpreter rules for reductions. Each reduced run of axes is seen as [outer, r, inner];
// 16-bit floats accumulate in f32, integers wrap.
#include <cmath>
#include <limits>

#include "src/backends/interpret/value.h"

namespace pallas::interp {
using ir::PrimId;

namespace {

enum class RedOp { Sum, Max, Min, Prod };

template <class C>
C red_init(RedOp op) {
  switch (op) {
    case RedOp::Sum: return C(0);
    case RedOp::Prod: return C(1);
    case RedOp::Max:
      if constexpr (std::is_floating_point_v<C>) return -std::numeric_limits<C>::infinity();
      else return std::numeric_limits<C>::lowest();
    case RedOp::Min:
      if constexpr (std::is_floating_point_v<C>) return std::numeric_limits<C>::infinity();
      else return std::numeric_limits<C>::max();
  }
  return C(0);
}

template <class C>
C red_step(RedOp op, C acc, C x) {
  if constexpr (std::is_same_v<C, bool>) {
    if (op == RedOp::Max) return acc || x;
    return acc && x;
  } else {
    using W = std::conditional_t<std::is_integral_v<C>, std::make_unsigned_t<std::conditional_t<std::is_integral_v<C>, C, int>>, C>;
    switch (op) {
      case RedOp::Sum: return static_cast<C>(static_cast<W>(acc) + static_cast<W>(x));
      case RedOp::Prod:
        if constexpr (std::is_integral_v<C>) return static_cast<C>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(x));
        else return acc * x;
      case RedOp::Max:
        if constexpr (std::is_floating_point_v<C>) {  // as the elementwise max: NaN sticks, +0 > -0
          if (std::isnan(x) || std::isnan(acc)) return std::numeric_limits<C>::quiet_NaN();
          if (x == acc) return std::signbit(acc) ? x : acc;
        }
        return x > acc ? x : acc;
      case RedOp::Min:
        if constexpr (std::is_floating_point_v<C>) {
          if (std::isnan(x) || std::isnan(acc)) return std::numeric_limits<C>::quiet_NaN();
          if (x == acc) return std::signbit(acc) ? acc : x;
        }
        return x < acc ? x : acc;
    }
    return acc;
  }
}

// Reduce the contiguous axes [a0, a1) of x.
Val reduce_axes(const Val& x, int a0, int a1, RedOp op, Ctx& ctx) {
  int64_t outer = 1, r = 1, inner = 1;
  for (int k = 0; k < a0; ++k) outer *= x.shape[k];
  for (int k = a0; k < a1; ++k) r *= x.shape[k];
  for (int k = a1; k < x.shape.n; ++k) inner *= x.shape[k];
  Dims os;
  for (int k = 0; k < x.shape.n; ++k)
    if (k < a0 || k >= a1) os.d[os.n++] = x.shape[k];
  Val o = ctx.alloc(x.dtype, os);
  dispatch(x.dtype, [&]<class T>() {
    using E = Elem<T>;
    using C = std::conditional_t<std::is_same_v<T, bool>, bool, typename E::C>;
    const T* p = x.as<T>();
    T* q = o.as<T>();
    C* acc = static_cast<C*>(ctx.arena->alloc(sizeof(C) * static_cast<size_t>(inner)));
    for (int64_t a = 0; a < outer; ++a) {
      for (int64_t i = 0; i < inner; ++i) acc[i] = red_init<C>(op);
      const T* base = p + a * r * inner;
      if (inner == 1) {
        C s = red_init<C>(op);
        for (int64_t k = 0; k < r; ++k) s = red_step<C>(op, s, E::get(base[k]));
        acc[0] = s;
      } else {
        for (int64_t k = 0; k < r; ++k)
          for (int64_t i = 0; i < inner; ++i) acc[i] = red_step<C>(op, acc[i], E::get(base[k * inner + i]));
      }
      for (int64_t i = 0; i < inner; ++i) q[a * inner + i] = E::put(acc[i]);
    }
  });
  return o;
}

template <RedOp op>
void reduce_rule(const Instr& ins, Val* env, Ctx& ctx) {
  Val x = env[ins.in[0]];
  auto axes = ins.eqn->params.get<std::vector<int64_t>>("axes");
  std::vector<bool> red(x.shape.n, false);
  for (int64_t a : axes) red[a] = true;
  // Reduce maximal runs of adjacent axes, from the last run to the first.
  for (int k = x.shape.n - 1; k >= 0;) {
    if (!red[k]) {
      --k;
      continue;
    }
    int hi = k + 1;
    while (k >= 0 && red[k]) --k;
    x = reduce_axes(x, k + 1, hi, op, ctx);
  }
  env[ins.out[0]] = x;
}

template <bool kMax>
void arg_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& x = env[ins.in[0]];
  int ax = static_cast<int>(ins.eqn->params.get_int("axis"));
  int64_t outer = 1, r = x.shape[ax], inner = 1;
  for (int k = 0; k < ax; ++k) outer *= x.shape[k];
  for (int k = ax + 1; k < x.shape.n; ++k) inner *= x.shape[k];
  Val& o = env[ins.out[0]];
  o = ctx.alloc(DType::I32, Dims(ins.eqn->out[0].aval.shape));
  int32_t* q = o.as<int32_t>();
  dispatch(x.dtype, [&]<class T>() {
    using E = Elem<T>;
    const T* p = x.as<T>();
    for (int64_t a = 0; a < outer; ++a)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t best = 0;
        auto bv = E::get(p[a * r * inner + i]);
        for (int64_t k = 1; k < r; ++k) {
          auto v = E::get(p[(a * r + k) * inner + i]);
          bool better;
          if constexpr (std::is_floating_point_v<decltype(v)>) {
            if (std::isnan(bv)) break;  // the first NaN wins, as jnp.argmax
            better = std::isnan(v) || (kMax ? v > bv : v < bv);
          } else {
            better = kMax ? v > bv : v < bv;
          }
          if (better) best = k, bv = v;
        }
        q[a * inner + i] = static_cast<int32_t>(best);
      }
  });
}

void cumsum_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& x = env[ins.in[0]];
  int ax = static_cast<int>(ins.eqn->params.get_int("axis"));
  int64_t outer = 1, r = x.shape[ax], inner = 1;
  for (int k = 0; k < ax; ++k) outer *= x.shape[k];
  for (int k = ax + 1; k < x.shape.n; ++k) inner *= x.shape[k];
  Val& o = env[ins.out[0]];
  o = ctx.alloc(x.dtype, x.shape);
  dispatch(x.dtype, [&]<class T>() {
    using E = Elem<T>;
    using C = std::conditional_t<std::is_same_v<T, bool>, int, typename E::C>;
    const T* p = x.as<T>();
    T* q = o.as<T>();
    for (int64_t a = 0; a < outer; ++a)
      for (int64_t i = 0; i < inner; ++i) {
        C s = C(0);
        for (int64_t k = 0; k < r; ++k) {
          int64_t idx = (a * r + k) * inner + i;
          if constexpr (std::is_same_v<T, bool>) {
            s += p[idx];
            q[idx] = s != 0;
          } else {
            s = red_step<C>(RedOp::Sum, s, E::get(p[idx]));
            q[idx] = E::put(s);
          }
        }
      }
  });
}
}  // namespace

void register_reduce_rules() {
  auto& t = rule_table_for_registration();
  t.set(PrimId::reduce_sum, reduce_rule<RedOp::Sum>);
  t.set(PrimId::reduce_max, reduce_rule<RedOp::Max>);
  t.set(PrimId::reduce_min, reduce_rule<RedOp::Min>);
  t.set(PrimId::reduce_prod, reduce_rule<RedOp::Prod>);
  t.set(PrimId::argmax, arg_rule<true>);
  t.set(PrimId::argmin, arg_rule<false>);
  t.set(PrimId::cumsum, cumsum_rule);
}

}  // namespace pallas::interp
