// BlockSpec: which block of an operand each program of the grid sees.
#pragma once
#include <functional>
#include <tuple>
#include <utility>
#include <optional>
#include <type_traits>
#include <vector>

#include "pallas/kernel.h"

namespace pallas {

// In a block shape, a dimension of size 1 that the kernel does not see (Pallas' `None`).
inline constexpr int64_t squeezed = -1;
// In a grid, an axis whose size is given when the call runs (one i32 scalar Array each,
// passed before the inputs).
inline constexpr int64_t dynamic = -1;

enum class MemorySpace : uint8_t {
  Default,  // blocked: the backend copies the block in (and out)
  Any,      // the whole array, no automatic copy (Pallas' ANY): block_shape is the array shape
  Smem,     // scalar memory (scalar prefetch operands)
  Scratch,  // scratch buffers
};

// The block indices an index map returns: one per array dimension.
struct BlockIndex {
  std::vector<Value> indices;
  BlockIndex() = default;
  BlockIndex(std::vector<Value> v) : indices(std::move(v)) {}  // NOLINT
};
template <class... V>
BlockIndex idx(V&&... v) {
  return BlockIndex(std::vector<Value>{Value(std::forward<V>(v))...});
}

namespace detail {
using IndexMapFn = std::function<std::vector<Value>(const std::vector<Value>&)>;

template <class F>
struct fn_traits : fn_traits<decltype(&std::remove_cvref_t<F>::operator())> {};
template <class R, class... A>
struct fn_traits<R (*)(A...)> {
  static constexpr int arity = sizeof...(A);
  using result = R;
  using args = std::tuple<std::remove_cvref_t<A>...>;
};
template <class R, class... A>
struct fn_traits<R(A...)> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...)> : fn_traits<R (*)(A...)> {};

template <class T>
std::vector<Value> as_values(T&& r) {
  using R = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<R, BlockIndex>)
    return r.indices;
  else if constexpr (std::is_same_v<R, std::vector<Value>>)
    return r;
  else
    return {Value(r)};
}

// Grid indices arrive as Values, scalar-prefetch operands as Refs.
template <class A>
A as_arg(const Value& v) {
  if constexpr (std::is_same_v<A, Ref>)
    return Ref(v);
  else
    return v;
}

template <class Tr, class F, size_t... I>
std::vector<Value> call_with_values(F& f, const std::vector<Value>& a, std::index_sequence<I...>) {
  return as_values(f(as_arg<std::tuple_element_t<I, typename Tr::args>>(a[I])...));
}

// Wrap a callable of fixed arity; pallas_call checks the arity against the grid.
template <class F>
IndexMapFn wrap_index_map(F f, int* arity_out) {
  using Tr = fn_traits<F>;
  *arity_out = Tr::arity;
  return [f](const std::vector<Value>& a) mutable {
    return call_with_values<Tr>(f, a, std::make_index_sequence<Tr::arity>{});
  };
}
}  // namespace detail

struct BlockSpec {
  std::optional<Shape> block_shape;  // empty: the whole array
  detail::IndexMapFn index_map;      // empty: all block indices zero
  int index_map_arity = -1;          // -1: takes any number of arguments (a vector form)
  MemorySpace memory_space = MemorySpace::Default;

  BlockSpec() = default;
  explicit BlockSpec(Shape shape, MemorySpace ms = MemorySpace::Default)
      : block_shape(std::move(shape)), memory_space(ms) {}
  template <class F>
  BlockSpec(Shape shape, F index_map, MemorySpace ms = MemorySpace::Default)
      : block_shape(std::move(shape)), memory_space(ms) {
    this->index_map = detail::wrap_index_map(std::move(index_map), &index_map_arity);
  }
  // An index map over all grid indices (then scalar-prefetch refs) as one vector.
  static BlockSpec with_vector_map(Shape shape, detail::IndexMapFn f) {
    BlockSpec b(std::move(shape));
    b.index_map = std::move(f);
    b.index_map_arity = -1;
    return b;
  }
};

}  // namespace pallas
