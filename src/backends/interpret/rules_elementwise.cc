// Interpreter rules for elementwise primitives. One functor per op, applied over whole
// tiles in typed loops (rank-0 operands broadcast); 16-bit floats are computed in float
// and rounded once per op, as the GPU does.
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>

#include "src/backends/interpret/value.h"

namespace pallas::interp {
using ir::PrimId;

namespace {

template <class C>
constexpr bool is_fp = std::is_floating_point_v<C>;
template <class C>
constexpr bool is_int = std::is_integral_v<C> && !std::is_same_v<C, bool>;

template <class C>
using U = std::make_unsigned_t<std::conditional_t<is_int<C>, C, int>>;

template <class C>
C wrap_add(C a, C b) { return static_cast<C>(static_cast<U<C>>(a) + static_cast<U<C>>(b)); }
template <class C>
C wrap_sub(C a, C b) { return static_cast<C>(static_cast<U<C>>(a) - static_cast<U<C>>(b)); }
template <class C>
C wrap_mul(C a, C b) {
  using W = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, U<C>>;  // avoid int promotion UB
  return static_cast<C>(static_cast<W>(static_cast<U<C>>(a)) * static_cast<W>(static_cast<U<C>>(b)));
}

double erf_inv_d(double y) {
  if (std::isnan(y) || y < -1 || y > 1) return std::numeric_limits<double>::quiet_NaN();
  if (y == 1) return std::numeric_limits<double>::infinity();
  if (y == -1) return -std::numeric_limits<double>::infinity();
  // Giles' single-precision approximation, refined by Newton steps on erf.
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) {
    w -= 2.5;
    double p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w; p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w; p = -0.00125372503 + p * w; p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w; p = 1.50140941 + p * w;
    x = p * y;
  } else {
    w = std::sqrt(w) - 3.0;
    double p = -0.000200214257;
    p = 0.000100950558 + p * w; p = 0.00134934322 + p * w; p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w; p = -0.0076224613 + p * w; p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w; p = 2.83297682 + p * w;
    x = p * y;
  }
  for (int k = 0; k < 3; ++k) {
    double err = std::erf(x) - y;
    x -= err / (1.1283791670955126 * std::exp(-x * x));
  }
  return x;
}

// ---- unary functors: static constexpr bool ok<C>, static R f(C) ----
#define FLOAT_UNARY(Name, expr)                     \
  struct Name {                                     \
    template <class C>                              \
    static constexpr bool ok = is_fp<C>;            \
    template <class C>                              \
    static C f(C x) { return expr; }                \
  };
FLOAT_UNARY(OpCeil, std::ceil(x))
FLOAT_UNARY(OpFloor, std::floor(x))
FLOAT_UNARY(OpRound, std::round(x))
FLOAT_UNARY(OpExp, std::exp(x))
FLOAT_UNARY(OpExp2, std::exp2(x))
FLOAT_UNARY(OpExpm1, std::expm1(x))
FLOAT_UNARY(OpLog, std::log(x))
FLOAT_UNARY(OpLog1p, std::log1p(x))
FLOAT_UNARY(OpSqrt, std::sqrt(x))
FLOAT_UNARY(OpCbrt, std::cbrt(x))
FLOAT_UNARY(OpRsqrt, C(1) / std::sqrt(x))
FLOAT_UNARY(OpSin, std::sin(x))
FLOAT_UNARY(OpCos, std::cos(x))
FLOAT_UNARY(OpTan, std::tan(x))
FLOAT_UNARY(OpAsin, std::asin(x))
FLOAT_UNARY(OpAcos, std::acos(x))
FLOAT_UNARY(OpAtan, std::atan(x))
FLOAT_UNARY(OpSinh, std::sinh(x))
FLOAT_UNARY(OpCosh, std::cosh(x))
FLOAT_UNARY(OpTanh, std::tanh(x))
FLOAT_UNARY(OpAsinh, std::asinh(x))
FLOAT_UNARY(OpAcosh, std::acosh(x))
FLOAT_UNARY(OpAtanh, std::atanh(x))
FLOAT_UNARY(OpLogistic, C(1) / (C(1) + std::exp(-x)))
FLOAT_UNARY(OpErf, std::erf(x))
FLOAT_UNARY(OpErfInv, static_cast<C>(erf_inv_d(static_cast<double>(x))))
#undef FLOAT_UNARY

struct OpNeg {
  template <class C>
  static constexpr bool ok = is_fp<C> || is_int<C>;
  template <class C>
  static C f(C x) {
    if constexpr (is_int<C>) return wrap_sub(C(0), x);
    else return -x;
  }
};
struct OpAbs {
  template <class C>
  static constexpr bool ok = is_fp<C> || is_int<C>;
  template <class C>
  static C f(C x) {
    if constexpr (is_fp<C>) return std::fabs(x);
    else if constexpr (std::is_unsigned_v<C>) return x;
    else return x < 0 ? wrap_sub(C(0), x) : x;  // abs(INT_MIN) wraps to INT_MIN, as XLA
  }
};
struct OpSign {
  template <class C>
  static constexpr bool ok = is_fp<C> || is_int<C>;
  template <class C>
  static C f(C x) {
    if constexpr (is_fp<C>) return std::isnan(x) ? x : x > 0 ? C(1) : x < 0 ? C(-1) : x;
    else if constexpr (std::is_unsigned_v<C>) return x > 0 ? C(1) : C(0);
    else return static_cast<C>((x > 0) - (x < 0));
  }
};
struct OpNot {
  template <class C>
  static constexpr bool ok = is_int<C> || std::is_same_v<C, bool>;
  template <class C>
  static C f(C x) {
    if constexpr (std::is_same_v<C, bool>) return !x;
    else return static_cast<C>(~x);
  }
};
struct OpPopcount {
  template <class C>
  static constexpr bool ok = is_int<C>;
  template <class C>
  static C f(C x) { return static_cast<C>(std::popcount(static_cast<U<C>>(x))); }
};
struct OpClz {
  template <class C>
  static constexpr bool ok = is_int<C>;
  template <class C>
  static C f(C x) { return static_cast<C>(std::countl_zero(static_cast<U<C>>(x))); }
};

// ---- binary functors ----
struct OpAdd {
  template <class C> static constexpr bool ok = is_fp<C> || is_int<C>;
  template <class C> static C f(C a, C b) { if constexpr (is_int<C>) return wrap_add(a, b); else return a + b; }
};
struct OpSub {
  template <class C> static constexpr bool ok = is_fp<C> || is_int<C>;
  template <class C> static C f(C a, C b) { if constexpr (is_int<C>) return wrap_sub(a, b); else return a - b; }
};
struct OpMul {
  template <class C> static constexpr bool ok = is_fp<C> || is_int<C>;
  template <class C> static C f(C a, C b) { if constexpr (is_int<C>) return wrap_mul(a, b); else return a * b; }
};
// Integer division and remainder by zero and INT_MIN / -1 follow XLA: x/0 = -1, x%0 = x.
struct OpDiv {
  template <class C> static constexpr bool ok = is_fp<C> || is_int<C>;
  template <class C> static C f(C a, C b) {
    if constexpr (is_int<C>) {
      if (b == 0) return static_cast<C>(-1);
      if constexpr (std::is_signed_v<C>)
        if (a == std::numeric_limits<C>::min() && b == C(-1)) return a;
      return static_cast<C>(a / b);
    } else {
      return a / b;
    }
  }
};
struct OpRem {
  template <class C> static constexpr bool ok = is_fp<C> || is_int<C>;
  template <class C> static C f(C a, C b) {
    if constexpr (is_int<C>) {
      if (b == 0) return a;
      if constexpr (std::is_signed_v<C>)
        if (a == std::numeric_limits<C>::min() && b == C(-1)) return C(0);
      return static_cast<C>(a % b);
    } else {
      return std::fmod(a, b);
    }
  }
};
struct OpPow {
  template <class C> static constexpr bool ok = is_fp<C>;
  template <class C> static C f(C a, C b) { return std::pow(a, b); }
};
struct OpAtan2 {
  template <class C> static constexpr bool ok = is_fp<C>;
  template <class C> static C f(C a, C b) { return std::atan2(a, b); }
};
struct OpMax {
  template <class C> static constexpr bool ok = true;
  template <class C> static C f(C a, C b) {
    if constexpr (is_fp<C>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
      if (a == b) return std::signbit(a) ? b : a;  // max(-0, +0) = +0
    }
    return a > b ? a : b;
  }
};
struct OpMin {
  template <class C> static constexpr bool ok = true;
  template <class C> static C f(C a, C b) {
    if constexpr (is_fp<C>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
      if (a == b) return std::signbit(a) ? a : b;
    }
    return a < b ? a : b;
  }
};
struct OpNextafter {  // 16-bit floats are stepped in their own format (see binary_rule)
  template <class C> static constexpr bool ok = is_fp<C>;
  template <class C> static C f(C a, C b) { return std::nextafter(a, b); }
};
struct OpAnd {
  template <class C> static constexpr bool ok = is_int<C> || std::is_same_v<C, bool>;
  template <class C> static C f(C a, C b) { return static_cast<C>(a & b); }
};
struct OpOr {
  template <class C> static constexpr bool ok = is_int<C> || std::is_same_v<C, bool>;
  template <class C> static C f(C a, C b) { return static_cast<C>(a | b); }
};
struct OpXor {
  template <class C> static constexpr bool ok = is_int<C> || std::is_same_v<C, bool>;
  template <class C> static C f(C a, C b) { return static_cast<C>(a ^ b); }
};
// Shifts by the bit width or more (or negative) give 0, or the sign fill, as XLA.
struct OpShl {
  template <class C> static constexpr bool ok = is_int<C>;
  template <class C> static C f(C a, C b) {
    auto s = static_cast<U<C>>(b);
    if (s >= sizeof(C) * 8) return C(0);
    return static_cast<C>(static_cast<U<C>>(static_cast<U<C>>(a) << s));
  }
};
struct OpShrLogical {
  template <class C> static constexpr bool ok = is_int<C>;
  template <class C> static C f(C a, C b) {
    auto s = static_cast<U<C>>(b);
    if (s >= sizeof(C) * 8) return C(0);
    return static_cast<C>(static_cast<U<C>>(a) >> s);
  }
};
struct OpShrArith {
  template <class C> static constexpr bool ok = is_int<C>;
  template <class C> static C f(C a, C b) {
    using S = std::make_signed_t<C>;
    auto s = static_cast<U<C>>(b);
    S sa = static_cast<S>(a);
    if (s >= sizeof(C) * 8) return static_cast<C>(sa < 0 ? S(-1) : S(0));
    return static_cast<C>(static_cast<S>(sa >> s));
  }
};
#define CMP(Name, op)                                                             \
  struct Name {                                                                   \
    template <class C> static constexpr bool ok = true;                           \
    template <class C> static bool f(C a, C b) { return a op b; }                 \
  };
CMP(OpEq, ==) CMP(OpNe, !=) CMP(OpLt, <) CMP(OpLe, <=) CMP(OpGt, >) CMP(OpGe, >=)
#undef CMP

// nextafter in a packed float format (f16, bf16, f8): steps in its own format, not float's.
template <class T>
T next_packed(T a, T b) {
  using B = decltype(a.bits);
  float fa = packed_to_float(a), fb = packed_to_float(b);
  if (std::isnan(fa) || std::isnan(fb)) return float_to_packed<T>(std::numeric_limits<float>::quiet_NaN());
  if (fa == fb) return b;
  constexpr B sign_bit = static_cast<B>(B(1) << (sizeof(B) * 8 - 1));
  if (fa == 0) return T{static_cast<B>((fb > 0 ? 0 : sign_bit) | 1)};
  bool up = (fa < fb) == (fa > 0);
  return T{static_cast<B>(up ? a.bits + 1 : a.bits - 1)};
}

[[noreturn]] void bad_dtype(const Instr& ins, DType t) {
  throw Error(std::string("interpreter: '") + ins.eqn->prim->name + "' does not take " + dtype_name(t));
}

template <class Op>
void unary_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& a = env[ins.in[0]];
  Val& o = env[ins.out[0]];
  o = ctx.alloc(a.dtype, a.shape);
  int64_t n = a.size();
  dispatch(a.dtype, [&]<class T>() {
    using E = Elem<T>;
    using C = typename E::C;
    if constexpr (Op::template ok<C>) {
      const T* x = a.as<T>();
      T* y = o.as<T>();
      for (int64_t i = 0; i < n; ++i) y[i] = E::put(Op::template f<C>(E::get(x[i])));
    } else {
      bad_dtype(ins, a.dtype);
    }
  });
}

void is_finite_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& a = env[ins.in[0]];
  Val& o = env[ins.out[0]];
  o = ctx.alloc(DType::Bool, a.shape);
  int64_t n = a.size();
  dispatch(a.dtype, [&]<class T>() {
    using E = Elem<T>;
    if constexpr (is_fp<typename E::C>) {
      const T* x = a.as<T>();
      bool* y = o.as<bool>();
      for (int64_t i = 0; i < n; ++i) y[i] = std::isfinite(E::get(x[i]));
    } else {
      bad_dtype(ins, a.dtype);
    }
  });
}

// out[i] = f(a[i*sa], b[i*sb]) with sa, sb in {0, 1}; three loops so each vectorises.
template <class R, class TA, class F>
void loop2(const TA* a, const TA* b, R* o, int64_t n, bool sa, bool sb, F f) {
  if (sa && sb)
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  else if (sa)
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[0]);
  else if (sb)
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[0], b[i]);
  else
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[0], b[0]);
}

template <class Op, bool kCompare>
void binary_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& a = env[ins.in[0]];
  const Val& b = env[ins.in[1]];
  Val& o = env[ins.out[0]];
  const Dims& shape = a.shape.n ? a.shape : b.shape;
  int64_t n = shape.size();
  bool sa = a.shape.n != 0 || n == 1, sb = b.shape.n != 0 || n == 1;
  o = ctx.alloc(kCompare ? DType::Bool : a.dtype, shape);
  dispatch(a.dtype, [&]<class T>() {
    using E = Elem<T>;
    using C = typename E::C;
    if constexpr (Op::template ok<C>) {
      if constexpr (kCompare) {
        loop2(a.as<T>(), b.as<T>(), o.as<bool>(), n, sa, sb,
              [](T x, T y) { return Op::template f<C>(E::get(x), E::get(y)); });
      } else if constexpr (std::is_same_v<Op, OpNextafter> && is_packed_float_v<T>) {
        loop2(a.as<T>(), b.as<T>(), o.as<T>(), n, sa, sb, [](T x, T y) { return next_packed(x, y); });
      } else if constexpr (std::is_same_v<T, C>) {
        loop2(a.as<T>(), b.as<T>(), o.as<T>(), n, sa, sb, [](C x, C y) { return Op::template f<C>(x, y); });
      } else {
        loop2(a.as<T>(), b.as<T>(), o.as<T>(), n, sa, sb,
              [](T x, T y) { return E::put(Op::template f<C>(E::get(x), E::get(y))); });
      }
    } else {
      bad_dtype(ins, a.dtype);
    }
  });
}


void select_n_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& w = env[ins.in[0]];
  size_t ncases = ins.in.size() - 1;
  const Val& c0 = env[ins.in[1]];
  Val& o = env[ins.out[0]];
  o = ctx.alloc(c0.dtype, c0.shape);
  int64_t n = o.size();
  bool sw = w.shape.n != 0;
  by_width(itemsize(c0.dtype), [&]<class B>() {
    B* y = o.as<B>();
    if (w.dtype == DType::Bool && ncases == 2) {
      const bool* p = w.as<bool>();
      const B* f = env[ins.in[1]].as<B>();
      const B* t = env[ins.in[2]].as<B>();
      if (sw)
        for (int64_t i = 0; i < n; ++i) y[i] = p[i] ? t[i] : f[i];
      else
        for (int64_t i = 0; i < n; ++i) y[i] = p[0] ? t[i] : f[i];
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      int64_t k = w.dtype == DType::Bool ? w.as<bool>()[sw ? i : 0] : w.as<int32_t>()[sw ? i : 0];
      k = std::clamp<int64_t>(k, 0, static_cast<int64_t>(ncases) - 1);
      y[i] = env[ins.in[1 + k]].as<B>()[i];
    }
  });
}

void clamp_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& lo = env[ins.in[0]];
  const Val& x = env[ins.in[1]];
  const Val& hi = env[ins.in[2]];
  Val& o = env[ins.out[0]];
  o = ctx.alloc(x.dtype, x.shape);
  int64_t n = x.size();
  bool sl = lo.shape.n != 0, sh = hi.shape.n != 0;
  dispatch(x.dtype, [&]<class T>() {
    using E = Elem<T>;
    using C = typename E::C;
    const T *l = lo.as<T>(), *v = x.as<T>(), *h = hi.as<T>();
    T* y = o.as<T>();
    for (int64_t i = 0; i < n; ++i)
      y[i] = E::put(OpMin::f<C>(OpMax::f<C>(E::get(v[i]), E::get(l[sl ? i : 0])), E::get(h[sh ? i : 0])));
  });
}

void integer_pow_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& x = env[ins.in[0]];
  Val& o = env[ins.out[0]];
  o = ctx.alloc(x.dtype, x.shape);
  int64_t yexp = ins.eqn->params.get_int("y");
  int64_t n = x.size();
  dispatch(x.dtype, [&]<class T>() {
    using E = Elem<T>;
    using C = typename E::C;
    if constexpr (is_fp<C> || is_int<C>) {
      const T* v = x.as<T>();
      T* y = o.as<T>();
      uint64_t e = static_cast<uint64_t>(yexp < 0 ? -yexp : yexp);
      for (int64_t i = 0; i < n; ++i) {
        C base = E::get(v[i]), acc = C(1);
        for (uint64_t k = e; k; k >>= 1) {
          if (k & 1) acc = OpMul::f<C>(acc, base);
          base = OpMul::f<C>(base, base);
        }
        if constexpr (is_fp<C>)
          if (yexp < 0) acc = C(1) / acc;
        y[i] = E::put(acc);
      }
    } else {
      bad_dtype(ins, x.dtype);
    }
  });
}

void convert_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& x = env[ins.in[0]];
  DType t = ins.eqn->params.get<DType>("new_dtype");
  Val& o = env[ins.out[0]];
  o = ctx.alloc(t, x.shape);
  convert_elements(x.dtype, x.data, t, o.data, x.size());
}

void bitcast_rule(const Instr& ins, Val* env, Ctx&) {
  Val v = env[ins.in[0]];
  v.dtype = ins.eqn->params.get<DType>("new_dtype");
  env[ins.out[0]] = v;  // values are immutable: sharing the bytes is safe
}

void identity_rule(const Instr& ins, Val* env, Ctx&) { env[ins.out[0]] = env[ins.in[0]]; }

}  // namespace

void register_elementwise_rules() {
  auto& t = rule_table_for_registration();
  t.set(PrimId::neg, unary_rule<OpNeg>);
  t.set(PrimId::abs, unary_rule<OpAbs>);
  t.set(PrimId::sign, unary_rule<OpSign>);
  t.set(PrimId::ceil, unary_rule<OpCeil>);
  t.set(PrimId::floor, unary_rule<OpFloor>);
  t.set(PrimId::round, unary_rule<OpRound>);
  t.set(PrimId::exp, unary_rule<OpExp>);
  t.set(PrimId::exp2, unary_rule<OpExp2>);
  t.set(PrimId::expm1, unary_rule<OpExpm1>);
  t.set(PrimId::log, unary_rule<OpLog>);
  t.set(PrimId::log1p, unary_rule<OpLog1p>);
  t.set(PrimId::sqrt, unary_rule<OpSqrt>);
  t.set(PrimId::cbrt, unary_rule<OpCbrt>);
  t.set(PrimId::rsqrt, unary_rule<OpRsqrt>);
  t.set(PrimId::sin, unary_rule<OpSin>);
  t.set(PrimId::cos, unary_rule<OpCos>);
  t.set(PrimId::tan, unary_rule<OpTan>);
  t.set(PrimId::asin, unary_rule<OpAsin>);
  t.set(PrimId::acos, unary_rule<OpAcos>);
  t.set(PrimId::atan, unary_rule<OpAtan>);
  t.set(PrimId::sinh, unary_rule<OpSinh>);
  t.set(PrimId::cosh, unary_rule<OpCosh>);
  t.set(PrimId::tanh, unary_rule<OpTanh>);
  t.set(PrimId::asinh, unary_rule<OpAsinh>);
  t.set(PrimId::acosh, unary_rule<OpAcosh>);
  t.set(PrimId::atanh, unary_rule<OpAtanh>);
  t.set(PrimId::logistic, unary_rule<OpLogistic>);
  t.set(PrimId::erf, unary_rule<OpErf>);
  t.set(PrimId::erf_inv, unary_rule<OpErfInv>);
  t.set(PrimId::is_finite, is_finite_rule);
  t.set(PrimId::not_, unary_rule<OpNot>);
  t.set(PrimId::population_count, unary_rule<OpPopcount>);
  t.set(PrimId::clz, unary_rule<OpClz>);

  t.set(PrimId::add, binary_rule<OpAdd, false>);
  t.set(PrimId::sub, binary_rule<OpSub, false>);
  t.set(PrimId::mul, binary_rule<OpMul, false>);
  t.set(PrimId::div, binary_rule<OpDiv, false>);
  t.set(PrimId::rem, binary_rule<OpRem, false>);
  t.set(PrimId::pow, binary_rule<OpPow, false>);
  t.set(PrimId::atan2, binary_rule<OpAtan2, false>);
  t.set(PrimId::max, binary_rule<OpMax, false>);
  t.set(PrimId::min, binary_rule<OpMin, false>);
  t.set(PrimId::nextafter, binary_rule<OpNextafter, false>);
  t.set(PrimId::and_, binary_rule<OpAnd, false>);
  t.set(PrimId::or_, binary_rule<OpOr, false>);
  t.set(PrimId::xor_, binary_rule<OpXor, false>);
  t.set(PrimId::shift_left, binary_rule<OpShl, false>);
  t.set(PrimId::shift_right_arithmetic, binary_rule<OpShrArith, false>);
  t.set(PrimId::shift_right_logical, binary_rule<OpShrLogical, false>);
  t.set(PrimId::eq, binary_rule<OpEq, true>);
  t.set(PrimId::ne, binary_rule<OpNe, true>);
  t.set(PrimId::lt, binary_rule<OpLt, true>);
  t.set(PrimId::le, binary_rule<OpLe, true>);
  t.set(PrimId::gt, binary_rule<OpGt, true>);
  t.set(PrimId::ge, binary_rule<OpGe, true>);

  t.set(PrimId::select_n, select_n_rule);
  t.set(PrimId::clamp, clamp_rule);
  t.set(PrimId::integer_pow, integer_pow_rule);
  t.set(PrimId::convert_element_type, convert_rule);
  t.set(PrimId::bitcast_convert_type, bitcast_rule);
  t.set(PrimId::stop_gradient, identity_rule);
  t.set(PrimId::multiple_of, identity_rule);
  t.set(PrimId::max_contiguous, identity_rule);
}

}  // namespace pallas::interp
