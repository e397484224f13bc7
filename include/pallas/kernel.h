// What a kernel is written in: Values (traced tiles and scalars), Refs and the in-kernel ops.
//
// A Value is a handle to a variable of the kernel being traced (or a C++ constant). Every
// function here appends one or more equations to the trace; nothing is computed until the
// kernel runs on a backend.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "pallas/array.h"
#include "pallas/dtype.h"

namespace pallas {

// The caller's file and line (std::source_location is missing from clang 14 with libstdc++).
// The named ops below take one as a defaulted last parameter: each equation of a trace keeps
// the place in the kernel's source that made it, errors made while tracing it name that line,
// and the CUDA backend's generated code points back there (#line), so an NVRTC message or a
// profiler's source view leads to the kernel. Operators cannot take an extra parameter; they
// get the place through their operands' conversions instead (detail::Operand, and Indexer for
// ref[...] and ref(i, j)), which the compiler makes at the expression that uses them. The
// elementwise functions (pl::exp, pl::add) take none: they stay plain functions, so that they
// can be passed as function pointers; their equations take the place of the named op they are
// part of, if any, and their errors name the last place recorded before them ("at or after").
struct SourceLocation {
  const char* file = "";
  int line = 0;
  static constexpr SourceLocation current(const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return {f, l}; }
};

namespace detail {
struct ValueImpl;
}
class RefView;
struct Filled;

class Value {
 public:
  Value() = default;
  // C++ scalars are weak-typed constants, like Python scalars in JAX: `x + 1` keeps x's dtype.
  // bool is not weak.
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Value(T v) {  // NOLINT(google-explicit-constructor)
    if constexpr (std::is_same_v<T, bool>)
      init_bool(v);
    else if constexpr (std::is_floating_point_v<T>)
      init_float(static_cast<double>(v));
    else
      init_int(static_cast<int64_t>(v));
  }
  // A typed (not weak) constant.
  static Value constant(double v, DType t);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  DType dtype() const;
  int ndim() const { return static_cast<int>(shape().size()); }
  bool weak_type() const;
  std::string str() const;  // "f32[128,64]"

  Value astype(DType t, SourceLocation loc = SourceLocation::current()) const;
  Value reshape(Shape s, SourceLocation loc = SourceLocation::current()) const;
  Value T(SourceLocation loc = SourceLocation::current()) const;  // reverse the axes

  explicit Value(std::shared_ptr<const detail::ValueImpl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<const detail::ValueImpl>& impl() const { return impl_; }

 private:
  void init_bool(bool v);
  void init_float(double v);
  void init_int(int64_t v);
  std::shared_ptr<const detail::ValueImpl> impl_;
};

// ---- indexing ----
struct AllT {};
inline constexpr AllT all{};

// A slice of `size` elements from `start` (a Value or integer) with a static stride.
struct DSlice {
  Value start;
  int64_t size;
  int64_t stride = 1;
};
inline DSlice ds(Value start, int64_t size, int64_t stride = 1) { return {std::move(start), size, stride}; }
// Static Python-style slice [start, stop) with a step.
// (step must be positive; an empty or reversed range has size 0)
DSlice slice(int64_t start, int64_t stop, int64_t step = 1);

// One entry of ref[...] / ref(i, j) / pl::load(ref, {...}). It is made by an implicit
// conversion where the kernel writes the index, so its defaulted SourceLocation is the line of
// the ref access: the load or store it becomes (and its errors) name that line.
struct Indexer {
  enum class Kind : uint8_t { All, Index, Slice };
  Kind kind = Kind::All;
  Value index;  // Kind::Index: an integer scalar, or an integer array (gather/scatter indexing)
  DSlice slice{Value(0), 0, 1};
  SourceLocation loc;

  Indexer(AllT, SourceLocation l = SourceLocation::current()) : kind(Kind::All), loc(l) {}  // NOLINT
  Indexer(DSlice s, SourceLocation l = SourceLocation::current()) : kind(Kind::Slice), slice(std::move(s)), loc(l) {}  // NOLINT
  Indexer(Value v, SourceLocation l = SourceLocation::current()) : kind(Kind::Index), index(std::move(v)), loc(l) {}  // NOLINT
  Indexer(const RefView& v, SourceLocation l = SourceLocation::current());  // NOLINT: an index read from a ref
  template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  Indexer(T v, SourceLocation l = SourceLocation::current())  // NOLINT
      : kind(Kind::Index), index(Value(static_cast<int64_t>(v))), loc(l) {}
};
using Indexers = std::vector<Indexer>;

struct LoadOptions {
  Value mask;   // bool, broadcastable to the loaded shape; masked-off lanes are not read
  Value other;  // value of masked-off lanes (needs mask)
  std::string cache_modifier;   // hints for the GPU: "", ".ca", ".cg"
  std::string eviction_policy;  // "", "evict_first", "evict_last"
  bool is_volatile = false;
};
struct StoreOptions {
  Value mask;
  std::string eviction_policy;
};

class Ref;

// `ref[...]` / `ref(i, j)`: reads when used as a Value, writes when assigned; the load or store
// takes the place of its indexers (the line of the access).
class RefView {
 public:
  RefView(const Ref& r, Indexers idx);
  operator Value() const { return get(); }  // NOLINT
  Value get() const;
  const RefView& operator=(const Value& v) const;
  const RefView& operator=(const RefView& v) const;  // o[all] = x[all]
  const RefView& operator+=(const Value& v) const;   // addupdate
  // Conveniences so a view can be used like the Value it reads.
  Value astype(DType t, SourceLocation loc = SourceLocation::current()) const;  // the load and the conversion
  Shape shape() const { return get().shape(); }

 private:
  std::shared_ptr<const detail::ValueImpl> ref_;
  Indexers idx_;
  SourceLocation loc_;
};

class Ref {
 public:
  Ref() = default;
  explicit Ref(Value v);
  const Shape& shape() const { return value_.shape(); }
  DType dtype() const { return value_.dtype(); }
  int ndim() const { return value_.ndim(); }
  RefView operator[](Indexer i) const { return RefView(*this, {std::move(i)}); }
  // One overload per rank (up to the 8 dimensions an array may have), not a variadic template:
  // the indexers are then converted where the kernel writes ref(i, j), which gives them its line.
  RefView operator()() const { return RefView(*this, {}); }
  RefView operator()(Indexer a) const { return RefView(*this, {std::move(a)}); }
  RefView operator()(Indexer a, Indexer b) const { return RefView(*this, {std::move(a), std::move(b)}); }
  RefView operator()(Indexer a, Indexer b, Indexer c) const { return RefView(*this, {std::move(a), std::move(b), std::move(c)}); }
  RefView operator()(Indexer a, Indexer b, Indexer c, Indexer d) const {
    return RefView(*this, {std::move(a), std::move(b), std::move(c), std::move(d)});
  }
  RefView operator()(Indexer a, Indexer b, Indexer c, Indexer d, Indexer e) const {
    return RefView(*this, {std::move(a), std::move(b), std::move(c), std::move(d), std::move(e)});
  }
  RefView operator()(Indexer a, Indexer b, Indexer c, Indexer d, Indexer e, Indexer f) const {
    return RefView(*this, {std::move(a), std::move(b), std::move(c), std::move(d), std::move(e), std::move(f)});
  }
  RefView operator()(Indexer a, Indexer b, Indexer c, Indexer d, Indexer e, Indexer f, Indexer g) const {
    return RefView(*this, {std::move(a), std::move(b), std::move(c), std::move(d), std::move(e), std::move(f), std::move(g)});
  }
  RefView operator()(Indexer a, Indexer b, Indexer c, Indexer d, Indexer e, Indexer f, Indexer g, Indexer h) const {
    return RefView(*this, {std::move(a), std::move(b), std::move(c), std::move(d), std::move(e), std::move(f), std::move(g),
                           std::move(h)});
  }
  RefView at(Indexers idx) const { return RefView(*this, std::move(idx)); }
  const Value& value() const { return value_; }

 private:
  Value value_;
};

// ---- memory ----
Value load(const Ref& ref, Indexers idx, LoadOptions opts = {}, SourceLocation loc = SourceLocation::current());
void store(const Ref& ref, Indexers idx, const Value& v, StoreOptions opts = {}, SourceLocation loc = SourceLocation::current());
Value swap(const Ref& ref, Indexers idx, const Value& v, StoreOptions opts = {}, SourceLocation loc = SourceLocation::current());
// Atomic read-modify-write; returns the previous values. (They stay plain functions, to be
// passed as pointers: their place is their indexers'.)
Value atomic_add(const Ref& ref, Indexers idx, const Value& v, const Value& mask = {});
Value atomic_max(const Ref& ref, Indexers idx, const Value& v, const Value& mask = {});
Value atomic_min(const Ref& ref, Indexers idx, const Value& v, const Value& mask = {});
Value atomic_and_(const Ref& ref, Indexers idx, const Value& v, const Value& mask = {});
Value atomic_or_(const Ref& ref, Indexers idx, const Value& v, const Value& mask = {});
Value atomic_xor_(const Ref& ref, Indexers idx, const Value& v, const Value& mask = {});
Value atomic_xchg(const Ref& ref, Indexers idx, const Value& v, const Value& mask = {});
Value atomic_cas(const Ref& ref, Indexers idx, const Value& cmp, const Value& v);

// ---- grid ----
Value program_id(int axis, SourceLocation loc = SourceLocation::current());
Value num_programs(int axis, SourceLocation loc = SourceLocation::current());

namespace detail {
// An operand of an operator (a + b, x < 0, -x, acc += v) or the predicate of cond / when /
// check: every kind of value those accept converts to it implicitly, and the compiler makes
// that conversion at the expression, so its defaulted SourceLocation is the operator's line.
// (Operators cannot take a defaulted parameter of their own.)
struct Operand {
  Value v;
  SourceLocation loc;
  Operand(const Value& x, SourceLocation l = SourceLocation::current()) : v(x), loc(l) {}  // NOLINT
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Operand(T x, SourceLocation l = SourceLocation::current()) : v(x), loc(l) {}  // NOLINT: a weak-typed constant
  Operand(const RefView& r, SourceLocation l = SourceLocation::current());  // NOLINT: reads the ref
  Operand(const Filled& f, SourceLocation l = SourceLocation::current());   // NOLINT
};
}  // namespace detail

// ---- elementwise (jnp-like: operands are promoted and broadcast; ints to float ops become f32) ----
#define PALLAS_API_UNARY(X)                                                                        \
  X(neg) X(abs) X(sign) X(ceil) X(floor) X(round) X(exp) X(exp2) X(expm1) X(log) X(log1p) X(sqrt) \
  X(cbrt) X(rsqrt) X(sin) X(cos) X(tan) X(asin) X(acos) X(atan) X(sinh) X(cosh) X(tanh) X(asinh)  \
  X(acosh) X(atanh) X(logistic) X(erf) X(erf_inv) X(is_finite) X(population_count) X(clz)          \
  X(logical_not) X(bitwise_not)
#define PALLAS_X(name) Value name(const Value& x);
PALLAS_API_UNARY(PALLAS_X)
#undef PALLAS_X
inline Value sigmoid(const Value& x) { return logistic(x); }

#define PALLAS_API_BINARY(X)                                                                      \
  X(add) X(sub) X(mul) X(div) X(rem) X(pow) X(atan2) X(maximum) X(minimum) X(nextafter)          \
  X(bitwise_and) X(bitwise_or) X(bitwise_xor) X(shift_left) X(shift_right_arithmetic)             \
  X(shift_right_logical) X(eq) X(ne) X(lt) X(le) X(gt) X(ge)
#define PALLAS_X(name) Value name(const Value& x, const Value& y);
PALLAS_API_BINARY(PALLAS_X)
#undef PALLAS_X

Value where(const Value& cond, const Value& x, const Value& y, SourceLocation loc = SourceLocation::current());
Value select_n(const Value& which, const std::vector<Value>& cases, SourceLocation loc = SourceLocation::current());
Value clamp(const Value& lo, const Value& x, const Value& hi, SourceLocation loc = SourceLocation::current());
Value integer_pow(const Value& x, int n, SourceLocation loc = SourceLocation::current());
Value square(const Value& x);
Value bitcast(const Value& x, DType t, SourceLocation loc = SourceLocation::current());  // same bit width
Value stop_gradient(const Value& x);

// The operators take detail::Operand (a Value, a C++ scalar, a ref view or pl::zeros/full) so
// that each knows its line; they behave as the functions they name (pl::add, pl::lt, ...).
Value operator+(detail::Operand a, detail::Operand b);
Value operator-(detail::Operand a, detail::Operand b);
Value operator*(detail::Operand a, detail::Operand b);
Value operator/(detail::Operand a, detail::Operand b);  // integers: truncating, as C++ (lax.div)
Value operator%(detail::Operand a, detail::Operand b);  // sign of the dividend, as C++ (lax.rem)
Value operator&(detail::Operand a, detail::Operand b);
Value operator|(detail::Operand a, detail::Operand b);
Value operator^(detail::Operand a, detail::Operand b);
Value operator<<(detail::Operand a, detail::Operand b);
Value operator>>(detail::Operand a, detail::Operand b);  // arithmetic for signed, logical for unsigned
Value operator==(detail::Operand a, detail::Operand b);
Value operator!=(detail::Operand a, detail::Operand b);
Value operator<(detail::Operand a, detail::Operand b);
Value operator<=(detail::Operand a, detail::Operand b);
Value operator>(detail::Operand a, detail::Operand b);
Value operator>=(detail::Operand a, detail::Operand b);
Value operator-(detail::Operand a);
Value operator!(detail::Operand a);
Value operator~(detail::Operand a);
// (b's conversion is at the kernel's `acc += x`, so the add takes that line)
inline Value& operator+=(Value& a, detail::Operand b) { return a = detail::Operand(a, b.loc) + std::move(b); }
inline Value& operator-=(Value& a, detail::Operand b) { return a = detail::Operand(a, b.loc) - std::move(b); }
inline Value& operator*=(Value& a, detail::Operand b) { return a = detail::Operand(a, b.loc) * std::move(b); }
inline Value& operator/=(Value& a, detail::Operand b) { return a = detail::Operand(a, b.loc) / std::move(b); }

// ---- integer helpers ----
// Ceiling division (Triton's tl.cdiv, JAX's pl.cdiv): how many blocks of b cover a, e.g. the
// grid over n elements in blocks of 128 is {pl::cdiv(n, 128)}, the last block overhanging.
// On C++ integers it is exact for every a (negative too) and b > 0; b <= 0 is a pl::Error
// (a compile error in a constant expression).
constexpr int64_t cdiv(int64_t a, int64_t b) {
  if (b <= 0) throw Error("pl::cdiv(" + std::to_string(a) + ", " + std::to_string(b) + "): the divisor must be positive");
  return a / b + (a % b > 0 ? 1 : 0);
}
// On traced integer Values (in a kernel or an index map, scalars or tiles) it is traced as
// (a + b - 1) / b: right for a >= 0 and b > 0 (integer division truncates toward zero, so a
// negative a rounds the wrong way), and a + b - 1 must fit the dtype. Floats are an error.
inline Value cdiv(const Value& a, const Value& b) {
  if (!is_integer(a.dtype()) || !is_integer(b.dtype()))
    throw Error("pl::cdiv takes integers, got " + a.str() + " and " + b.str() + "; for floats use pl::ceil(a / b)");
  return (a + b - 1) / b;
}
inline Value cdiv(const Value& a, int64_t b) {
  if (b <= 0) throw Error("pl::cdiv(" + a.str() + ", " + std::to_string(b) + "): the divisor must be positive");
  return cdiv(a, Value(b));
}

// ---- shapes ----
// Axes for reductions and squeeze: one int or a list.
struct Axes {
  std::vector<int> axes;
  bool all = false;
  Axes() : all(true) {}
  Axes(int a) : axes{a} {}  // NOLINT
  Axes(std::initializer_list<int> a) : axes(a) {}  // NOLINT
  Axes(std::vector<int> a) : axes(std::move(a)) {}  // NOLINT
};

Value broadcast_to(const Value& x, const Shape& shape, SourceLocation loc = SourceLocation::current());
Value broadcast_in_dim(const Value& x, const Shape& shape, const std::vector<int>& broadcast_dims,
                       SourceLocation loc = SourceLocation::current());
Value reshape(const Value& x, const Shape& shape, SourceLocation loc = SourceLocation::current());
Value squeeze(const Value& x, Axes axes = {}, SourceLocation loc = SourceLocation::current());
Value expand_dims(const Value& x, int axis, SourceLocation loc = SourceLocation::current());
Value transpose(const Value& x, std::vector<int> perm = {}, SourceLocation loc = SourceLocation::current());
Value iota(DType dtype, const Shape& shape, int dimension = 0, SourceLocation loc = SourceLocation::current());
Value arange(int64_t stop, SourceLocation loc = SourceLocation::current());                 // i32[stop]
Value arange(int64_t start, int64_t stop, SourceLocation loc = SourceLocation::current());  // i32[stop-start]
Value convert_element_type(const Value& x, DType t, SourceLocation loc = SourceLocation::current());

// pl::full / pl::zeros: a Value inside a kernel, an Array outside (both conversions exist).
struct Filled {
  Shape shape;
  double value;
  DType dtype;
  operator Value() const;  // NOLINT
  operator Array() const { return Array::full(shape, value, dtype); }  // NOLINT
  Value value_() const { return static_cast<Value>(*this); }
};
inline Filled full(Shape shape, double value, DType dtype = DType::F32) { return {std::move(shape), value, dtype}; }
inline Filled zeros(Shape shape, DType dtype = DType::F32) { return {std::move(shape), 0.0, dtype}; }
inline Filled ones(Shape shape, DType dtype = DType::F32) { return {std::move(shape), 1.0, dtype}; }
Value full_like(const Value& x, double value, SourceLocation loc = SourceLocation::current());
Value zeros_like(const Value& x, SourceLocation loc = SourceLocation::current());

// ---- dot ----
enum class Precision : uint8_t { Default, High, Highest };
struct DotOptions {
  bool trans_a = false;
  bool trans_b = false;
  // f32: Default/High use tf32 on the GPU, Highest is IEEE f32. 8-bit floats: at Highest a K
  // loop adds each dot into its f32 carry outside the tensor cores (docs/dtypes.md).
  Precision precision = Precision::Default;
  std::optional<DType> preferred_type;       // accumulator/result; default f32 (i32 for ints, f64 for f64)
};
Value dot(const Value& a, const Value& b, DotOptions opts = {}, SourceLocation loc = SourceLocation::current());

// ---- reductions ----
Value sum(const Value& x, Axes axes = {}, bool keepdims = false, SourceLocation loc = SourceLocation::current());
Value max(const Value& x, Axes axes = {}, bool keepdims = false, SourceLocation loc = SourceLocation::current());
Value min(const Value& x, Axes axes = {}, bool keepdims = false, SourceLocation loc = SourceLocation::current());
Value prod(const Value& x, Axes axes = {}, bool keepdims = false, SourceLocation loc = SourceLocation::current());
Value argmax(const Value& x, int axis, bool keepdims = false, SourceLocation loc = SourceLocation::current());
Value argmin(const Value& x, int axis, bool keepdims = false, SourceLocation loc = SourceLocation::current());
Value cumsum(const Value& x, int axis, SourceLocation loc = SourceLocation::current());

// ---- control flow (bodies are traced once into sub-jaxprs) ----
namespace detail {
using LoopBody = std::function<std::vector<Value>(const Value&, const std::vector<Value>&)>;
using CondFn = std::function<std::vector<Value>(const std::vector<Value>&)>;
using Branch = std::function<std::vector<Value>(const std::vector<Value>&)>;
std::vector<Value> fori_loop_impl(const Value& lo, const Value& hi, const std::vector<Value>& init,
                                  const LoopBody& body, int unroll, SourceLocation loc);
std::vector<Value> while_loop_impl(const std::vector<Value>& init, const CondFn& cond, const Branch& body,
                                   SourceLocation loc);
std::vector<Value> switch_impl(const Value& index, const std::vector<Branch>& branches,
                               const std::vector<Value>& operands);
// 0 or 1 from a predicate scalar: integers are true when non-zero, as lax.cond. The predicate's
// place (an Operand made where the kernel calls cond / when) is the conditional's.
std::vector<Value> cond_impl(const Operand& pred, const std::vector<Branch>& branches, const std::vector<Value>& operands);
}  // namespace detail

// fori_loop(lo, hi, init, body): body(i, carry) -> carry; carry is one Value or a vector.
template <class Body>
Value fori_loop(const Value& lo, const Value& hi, const Value& init, Body&& body, int unroll = 1, SourceLocation loc = SourceLocation::current()) {
  return detail::fori_loop_impl(
      lo, hi, {init},
      [&](const Value& i, const std::vector<Value>& c) { return std::vector<Value>{body(i, c[0])}; },
      unroll, loc)[0];
}
template <class Body>
std::vector<Value> fori_loop(const Value& lo, const Value& hi, const std::vector<Value>& init, Body&& body,
                             int unroll = 1, SourceLocation loc = SourceLocation::current()) {
  return detail::fori_loop_impl(
      lo, hi, init,
      [&](const Value& i, const std::vector<Value>& c) { return std::vector<Value>(body(i, c)); }, unroll, loc);
}
// Loop for its effects only: body(i).
template <class Body>
void fori_loop(const Value& lo, const Value& hi, Body&& body, int unroll = 1, SourceLocation loc = SourceLocation::current()) {
  detail::fori_loop_impl(
      lo, hi, {},
      [&](const Value& i, const std::vector<Value>&) {
        body(i);
        return std::vector<Value>{};
      },
      unroll, loc);
}

template <class Cond, class Body>
Value while_loop(const Value& init, Cond&& cond, Body&& body, SourceLocation loc = SourceLocation::current()) {
  return detail::while_loop_impl(
      {init}, [&](const std::vector<Value>& c) { return std::vector<Value>{cond(c[0])}; },
      [&](const std::vector<Value>& c) { return std::vector<Value>{body(c[0])}; }, loc)[0];
}
template <class Cond, class Body>
std::vector<Value> while_loop(const std::vector<Value>& init, Cond&& cond, Body&& body,
                              SourceLocation loc = SourceLocation::current()) {
  return detail::while_loop_impl(
      init, [&](const std::vector<Value>& c) { return std::vector<Value>{cond(c)}; },
      [&](const std::vector<Value>& c) { return std::vector<Value>(body(c)); }, loc);
}

namespace detail {
template <class F>
Branch as_branch(F&& f) {
  return [f](const std::vector<Value>& ops) -> std::vector<Value> {
    using R = decltype(f(ops));
    if constexpr (std::is_void_v<R>) {
      f(ops);
      return {};
    } else if constexpr (std::is_convertible_v<R, Value>) {
      return {Value(f(ops))};
    } else {
      return std::vector<Value>(f(ops));
    }
  };
}
template <class F>
Branch as_branch0(F&& f) {
  return as_branch([f](const std::vector<Value>&) { return f(); });
}
}  // namespace detail

// cond(pred, then_fn, else_fn, operands): both fns take the operands and return the same
// kind of result (nothing, a Value or a vector of Values).
template <class T, class E>
std::vector<Value> cond(const detail::Operand& pred, T&& then_fn, E&& else_fn, const std::vector<Value>& operands) {
  return detail::cond_impl(pred, {detail::as_branch(std::forward<E>(else_fn)), detail::as_branch(std::forward<T>(then_fn))},
                           operands);
}
// cond(pred, then_fn, else_fn) with closures of no arguments.
template <class T, class E>
auto cond(const detail::Operand& pred, T&& then_fn, E&& else_fn) {
  using R = decltype(then_fn());
  auto outs = detail::cond_impl(pred, {detail::as_branch0(std::forward<E>(else_fn)), detail::as_branch0(std::forward<T>(then_fn))},
                                {});
  if constexpr (std::is_void_v<R>)
    return;
  else if constexpr (std::is_convertible_v<R, Value>)
    return outs[0];
  else
    return outs;
}
// switch_case(index, branches, operands): lax.switch; index is clamped to the branch range.
std::vector<Value> switch_case(const Value& index, const std::vector<detail::Branch>& branches,
                               const std::vector<Value>& operands, SourceLocation loc = SourceLocation::current());
// when(pred, fn): run fn (for its effects) where pred holds.
template <class F>
void when(const detail::Operand& pred, F&& fn) {
  detail::cond_impl(pred, {detail::Branch([](const std::vector<Value>&) { return std::vector<Value>{}; }),
                           detail::as_branch0(std::forward<F>(fn))},
                    {});
}

// ---- hints and debugging ----
Value multiple_of(const Value& x, std::vector<int64_t> values, SourceLocation loc = SourceLocation::current());
Value max_contiguous(const Value& x, std::vector<int64_t> values, SourceLocation loc = SourceLocation::current());
// Prints fmt with each "{}" replaced by the next value, once per program, prefixed by the program id.
void debug_print(const std::string& fmt, const std::vector<Value>& values = {}, SourceLocation loc = SourceLocation::current());

}  // namespace pallas
