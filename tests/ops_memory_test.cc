// Ref reads and writes: every kind of indexer (static and strided slices, ds with static and
// dynamic starts, static / negative / dynamic integers, integer arrays for gather and
// scatter), masked loads with and without `other` (poison), out-of-bounds accesses (poison
// reads, dropped writes), masked stores, swap, addupdate and every atomic, duplicates included.
#include "tests/test_util.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace pt {
namespace {

std::vector<float> iota_f(int n, float scale = 1.f, float off = 0.5f) {
  std::vector<float> v;
  for (int k = 0; k < n; ++k) v.push_back(off + scale * static_cast<float>(k));
  return v;
}

TEST(MemoryOps, StaticSlicesAndIndices) {
  auto xs = iota_f(8 * 16);
  pl::Array x = pl::Array::from_vector(xs, {8, 16});
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4, pl::Ref o5, pl::Ref o6) {
        o1[pl::all] = xr(pl::slice(2, 6), pl::slice(4, 12));        // [4, 8]
        o2[pl::all] = xr(pl::slice(1, 8, 2), pl::slice(0, 16, 4));  // strided [4, 4]
        o3[pl::all] = xr(3);                                        // row 3: [16], trailing dims whole
        o4[pl::all] = xr(-1, pl::slice(0, 16, 2));                  // last row, even columns: [8]
        o5[pl::all] = xr(pl::all, 5);                               // column 5: [8]
        pl::store(o6, {}, xr(7, 15).get());                         // a single element, rank 0
      },
      {pl::ShapeDtype({4, 8}, pl::f32), pl::ShapeDtype({4, 4}, pl::f32), pl::ShapeDtype({16}, pl::f32),
       pl::ShapeDtype({8}, pl::f32), pl::ShapeDtype({8}, pl::f32), pl::ShapeDtype({}, pl::f32)});
  auto outs = call({x});
  auto X = [&](int i, int j) { return xs[i * 16 + j]; };
  auto o1 = outs[0].to_vector<float>(), o2 = outs[1].to_vector<float>(), o3 = outs[2].to_vector<float>();
  auto o4 = outs[3].to_vector<float>(), o5 = outs[4].to_vector<float>(), o6 = outs[5].to_vector<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) ASSERT_EQ(o1[i * 8 + j], X(2 + i, 4 + j));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) ASSERT_EQ(o2[i * 4 + j], X(1 + 2 * i, 4 * j));
  for (int j = 0; j < 16; ++j) ASSERT_EQ(o3[j], X(3, j));
  for (int j = 0; j < 8; ++j) ASSERT_EQ(o4[j], X(7, 2 * j));
  for (int i = 0; i < 8; ++i) ASSERT_EQ(o5[i], X(i, 5));
  EXPECT_EQ(o6[0], X(7, 15));
}

// ds with a dynamic start (from program_id) and a stride; dynamic integer index.
TEST(MemoryOps, DynamicSlicesAndIndices) {
  auto xs = iota_f(8 * 16, 0.25f);
  pl::Array x = pl::Array::from_vector(xs, {8, 16});
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2, pl::Ref o3) {
        pl::Value i = pl::program_id(0);
        o1(pl::ds(i * 2, 2), pl::all) = xr(pl::ds(i * 2, 2), pl::all);  // rows 2i, 2i+1
        o2(i) = xr(7 - i, pl::ds(i, 8, 1));                             // dynamic index + dynamic ds
        o3(i) = xr(i, pl::ds(1, 8, 2));                                 // static ds with stride 2
      },
      {pl::ShapeDtype({8, 16}, pl::f32), pl::ShapeDtype({4, 8}, pl::f32), pl::ShapeDtype({4, 8}, pl::f32)},
      {.grid = {4}, .name = "dyn"});
  auto outs = call({x});
  auto o1 = outs[0].to_vector<float>(), o2 = outs[1].to_vector<float>(), o3 = outs[2].to_vector<float>();
  EXPECT_EQ(o1, xs);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) {
      ASSERT_EQ(o2[i * 8 + j], xs[(7 - i) * 16 + i + j]);
      ASSERT_EQ(o3[i * 8 + j], xs[i * 16 + 1 + 2 * j]);
    }
}

// Integer-array indexing gathers (numpy advanced indexing), and scatters on store.
TEST(MemoryOps, GatherAndScatter) {
  auto xs = iota_f(8 * 16);
  pl::Array x = pl::Array::from_vector(xs, {8, 16});
  std::vector<int32_t> rows{7, 0, 3, 3, 5, 1}, cols{15, 0, 2, 9, 4, 4};
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref rr, pl::Ref cr, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4) {
        pl::Value r = rr[pl::all], c = cr[pl::all];
        o1[pl::all] = xr(r, c);         // pointwise pairs: [6]
        o2[pl::all] = xr(r);            // whole rows: [6, 16]
        o3[pl::all] = xr(pl::all, c);   // columns: [8, 6]
        o4[pl::all] = pl::zeros({8, 16});
        pl::store(o4, {r, c}, pl::arange(6).astype(pl::f32) + 1);  // scatter (duplicates: last write wins)
      },
      {pl::ShapeDtype({6}, pl::f32), pl::ShapeDtype({6, 16}, pl::f32), pl::ShapeDtype({8, 6}, pl::f32),
       pl::ShapeDtype({8, 16}, pl::f32)});
  auto outs = call({x, pl::Array::from_vector(rows), pl::Array::from_vector(cols)});
  auto o1 = outs[0].to_vector<float>(), o2 = outs[1].to_vector<float>(), o3 = outs[2].to_vector<float>();
  auto o4 = outs[3].to_vector<float>();
  std::vector<float> want4(128, 0.f);
  for (int k = 0; k < 6; ++k) {
    ASSERT_EQ(o1[k], xs[rows[k] * 16 + cols[k]]);
    for (int j = 0; j < 16; ++j) ASSERT_EQ(o2[k * 16 + j], xs[rows[k] * 16 + j]);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(o3[i * 6 + k], xs[i * 16 + cols[k]]);
    want4[rows[k] * 16 + cols[k]] = static_cast<float>(k + 1);
  }
  EXPECT_EQ(o4, want4);
}

// Non-adjacent index arrays put the index dimensions first (numpy).
TEST(MemoryOps, NonAdjacentIndexArrays) {
  std::vector<float> xs = iota_f(2 * 3 * 4);
  pl::Array x = pl::Array::from_vector(xs, {2, 3, 4});
  std::vector<int32_t> a{1, 0}, c{3, 1};
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref ar, pl::Ref cr, pl::Ref o) { o[pl::all] = xr(ar[pl::all], pl::all, cr[pl::all]); },
      {pl::ShapeDtype({2, 3}, pl::f32)});
  auto o = call({x, pl::Array::from_vector(a), pl::Array::from_vector(c)})[0].to_vector<float>();
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(o[k * 3 + j], xs[(a[k] * 3 + j) * 4 + c[k]]);
}

// Masked loads: `other` fills masked-off lanes; without it they read poison (NaN for
// floats, int min for signed, the max for unsigned).
template <class T>
void check_masked_load(T other_value, T poison) {
  SCOPED_TRACE(pl::dtype_name(pl::dtype_of<T>()));
  std::vector<T> xs;
  for (int k = 0; k < 32; ++k) xs.push_back(static_cast<T>(k + 1));
  auto call = interp_call(
      [other_value](pl::Ref xr, pl::Ref o1, pl::Ref o2) {
        pl::Value m = pl::arange(32) < 20;
        o1[pl::all] = pl::load(xr, {pl::all}, {.mask = m, .other = pl::Value::constant(double(other_value), xr.dtype())});
        o2[pl::all] = pl::load(xr, {pl::all}, {.mask = m});
      },
      {pl::ShapeDtype({32}, pl::dtype_of<T>()), pl::ShapeDtype({32}, pl::dtype_of<T>())});
  auto outs = call({pl::Array::from_vector(xs)});
  auto o1 = outs[0].template to_vector<T>(), o2 = outs[1].template to_vector<T>();
  for (int k = 0; k < 32; ++k) {
    ASSERT_EQ(o1[k], k < 20 ? xs[k] : other_value) << k;
    if (k < 20) ASSERT_EQ(o2[k], xs[k]);
    else if constexpr (std::is_floating_point_v<T>) ASSERT_TRUE(std::isnan(o2[k])) << k;
    else ASSERT_EQ(o2[k], poison) << k;
  }
}
TEST(MemoryOps, MaskedLoad) {
  check_masked_load<float>(-3.f, 0.f);
  check_masked_load<double>(7.0, 0.0);
  check_masked_load<int32_t>(-9, INT32_MIN);
  check_masked_load<int8_t>(5, INT8_MIN);
  check_masked_load<int64_t>(-1, INT64_MIN);
  check_masked_load<uint8_t>(9, UINT8_MAX);
  check_masked_load<uint32_t>(9, UINT32_MAX);
}

// A weak scalar `other` and a mask broadcast from a row; f16 poison is NaN.
TEST(MemoryOps, MaskedLoadBroadcastMaskAndWeakOther) {
  pl::Array x = make_array(normal(4 * 8, 1), {4, 8}, pl::f16);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2) {
        pl::Value m = pl::arange(8) % 2 == 0;  // [8], broadcast to [4, 8]
        o1[pl::all] = pl::load(xr, {pl::all, pl::all}, {.mask = m, .other = 0.5});
        o2[pl::all] = pl::load(xr, {pl::all, pl::all}, {.mask = m});
      },
      {pl::ShapeDtype({4, 8}, pl::f16), pl::ShapeDtype({4, 8}, pl::f16)});
  auto outs = call({x});
  auto xv = to_doubles(x), o1 = to_doubles(outs[0]), o2 = to_doubles(outs[1]);
  for (int k = 0; k < 32; ++k) {
    bool on = (k % 8) % 2 == 0;
    EXPECT_EQ(o1[k], on ? xv[k] : 0.5);
    if (on) EXPECT_EQ(o2[k], xv[k]);
    else EXPECT_TRUE(std::isnan(o2[k]));
  }
}

// A dynamic slice that runs past the end of the ref reads poison there and drops the writes.
TEST(MemoryOps, OutOfBoundsDynamicSlice) {
  auto xs = iota_f(32);
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2) {
        pl::Value start = pl::program_id(0) + 28;  // 28: lanes 32..35 are outside
        o1[pl::all] = xr(pl::ds(start, 8));
        o2[pl::all] = pl::full({32}, -1.0);
        o2(pl::ds(start, 8)) = pl::full({8}, 2.0);  // only 28..31 land
      },
      {pl::ShapeDtype({8}, pl::f32), pl::ShapeDtype({32}, pl::f32)}, {.grid = {1}, .name = "oob", .interpret_params = kNoBoundsCheck});
  auto outs = call({pl::Array::from_vector(xs)});
  auto o1 = outs[0].to_vector<float>(), o2 = outs[1].to_vector<float>();
  for (int k = 0; k < 8; ++k) {
    if (28 + k < 32) EXPECT_EQ(o1[k], xs[28 + k]);
    else EXPECT_TRUE(std::isnan(o1[k])) << k;
  }
  for (int k = 0; k < 32; ++k) EXPECT_EQ(o2[k], k >= 28 ? 2.f : -1.f) << k;
}

// Gathers with out-of-range indices read poison; scatters there are dropped. A negative
// entry counts from the end (numpy): -1 is the last element.
TEST(MemoryOps, OutOfBoundsGatherScatter) {
  std::vector<int32_t> xs{10, 11, 12, 13};
  std::vector<int32_t> idx{0, 4, -1, 3, 100, 2};
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref ir, pl::Ref o1, pl::Ref o2) {
        o1[pl::all] = xr(ir[pl::all]);
        o2[pl::all] = pl::zeros({4}, pl::i32);
        pl::store(o2, {ir[pl::all].get()}, pl::full({6}, 7.0, pl::i32));
      },
      {pl::ShapeDtype({6}, pl::i32), pl::ShapeDtype({4}, pl::i32)}, "test", kNoBoundsCheck);
  auto outs = call({pl::Array::from_vector(xs), pl::Array::from_vector(idx)});
  EXPECT_EQ(outs[0].to_vector<int32_t>(), (std::vector<int32_t>{10, INT32_MIN, 13, 13, INT32_MIN, 12}));
  EXPECT_EQ(outs[1].to_vector<int32_t>(), (std::vector<int32_t>{7, 0, 7, 7}));
}

// Masked stores leave masked-off elements as they were (the output is aliased to an input).
TEST(MemoryOps, MaskedStore) {
  auto xs = iota_f(32), ys = iota_f(32, -1.f, 100.f);
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref yr, pl::Ref o) {
        pl::Value m = (pl::arange(32) % 3) == 1;
        pl::store(o, {pl::all}, xr[pl::all], {.mask = m});
        (void)yr;
      },
      pl::ShapeDtype({32}, pl::f32), {.input_output_aliases = {{1, 0}}, .name = "mstore"});
  pl::Array y = pl::Array::from_vector(ys);
  auto o = call(pl::Array::from_vector(xs), y).to_vector<float>();
  for (int k = 0; k < 32; ++k) EXPECT_EQ(o[k], k % 3 == 1 ? xs[k] : ys[k]) << k;
  EXPECT_EQ(y.to_vector<float>(), ys);  // the caller's array is not changed
}

// swap returns the old values and writes the new; masked swap only touches the mask.
TEST(MemoryOps, Swap) {
  auto xs = iota_f(16), ys = iota_f(16, 2.f, -7.f);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref yr, pl::Ref o, pl::Ref old, pl::Ref o2, pl::Ref old2) {
        o[pl::all] = xr[pl::all];
        old[pl::all] = pl::swap(o, {pl::all}, yr[pl::all]);
        o2[pl::all] = xr[pl::all];
        pl::Value m = pl::arange(16) < 4;
        old2[pl::all] = pl::swap(o2, {pl::all}, yr[pl::all], {.mask = m});  // masked-off lanes: the operand
      },
      std::vector<pl::ShapeDtype>(4, pl::ShapeDtype({16}, pl::f32)));
  auto outs = call({pl::Array::from_vector(xs), pl::Array::from_vector(ys)});
  EXPECT_EQ(outs[0].to_vector<float>(), ys);
  EXPECT_EQ(outs[1].to_vector<float>(), xs);
  auto o2 = outs[2].to_vector<float>(), old2 = outs[3].to_vector<float>();
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(o2[k], k < 4 ? ys[k] : xs[k]);
    EXPECT_EQ(old2[k], k < 4 ? xs[k] : ys[k]);
  }
}

// ref[...] += v (addupdate), with an index and a slice, float and int.
TEST(MemoryOps, AddUpdate) {
  auto xs = iota_f(4 * 8, 0.5f);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref o, pl::Ref oi) {
        o[pl::all] = xr[pl::all];
        o[pl::all] += xr[pl::all];
        o(1) += pl::full({8}, 100.0);
        o(pl::all, pl::slice(0, 2)) += 1.0;  // weak scalar broadcast to the slice
        oi[pl::all] = pl::full({4}, 2147483647.0, pl::i32);
        oi[pl::all] += 1;  // wraps
      },
      {pl::ShapeDtype({4, 8}, pl::f32), pl::ShapeDtype({4}, pl::i32)});
  auto outs = call({pl::Array::from_vector(xs, {4, 8})});
  auto o = outs[0].to_vector<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ(o[i * 8 + j], 2 * xs[i * 8 + j] + (i == 1 ? 100.f : 0.f) + (j < 2 ? 1.f : 0.f));
  EXPECT_EQ(outs[1].to_vector<int32_t>(), std::vector<int32_t>(4, INT32_MIN));
}

// Load hints are accepted and do not change results.
TEST(MemoryOps, LoadHints) {
  auto xs = iota_f(16);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref o) {
        o[pl::all] = pl::load(xr, {pl::all}, {.cache_modifier = ".cg", .eviction_policy = "evict_last", .is_volatile = true});
      },
      {pl::ShapeDtype({16}, pl::f32)});
  EXPECT_EQ(call({pl::Array::from_vector(xs)})[0].to_vector<float>(), xs);
  EXPECT_THAT(call.jaxpr_text(), HasSubstr("cache_modifier='.cg'"));
}

// ---- atomics ----
// One atomic op whose lanes hit the same address more than once: the interpreter applies the
// lanes in order; the GPU in an order it does not specify (as Triton). Both must give the
// results of *some* order of each address's lanes; the interpreter the lane order.
template <class T, class Op>
::testing::AssertionResult atomic_results_of_some_order(const std::vector<T>& init, const std::vector<int32_t>& idx,
                                                       const std::vector<T>& vals, const std::vector<bool>& mask, Op op,
                                                       const std::vector<T>& got_final, const std::vector<T>& got_old) {
  bool lane_order_required = !(std::getenv("PALLAS_BACKEND") && std::string(std::getenv("PALLAS_BACKEND")) == "cuda");
  for (size_t a = 0; a < init.size(); ++a) {
    std::vector<size_t> lanes;
    for (size_t k = 0; k < idx.size(); ++k)
      if (mask[k] && static_cast<size_t>(idx[k]) == a) lanes.push_back(k);
    bool found = false;
    do {
      T cur = init[a];
      bool ok = true;
      for (size_t k : lanes) {
        ok = ok && got_old[k] == cur;
        cur = op(cur, vals[k]);
      }
      found = ok && cur == got_final[a];
      if (lane_order_required) break;  // the first permutation is the lane order
    } while (!found && std::next_permutation(lanes.begin(), lanes.end()));
    if (!found)
      return ::testing::AssertionFailure() << "address " << a << ": final " << double(got_final[a]) << " and the old values are not those of "
                                           << (lane_order_required ? "the lane order" : "any order of its lanes");
  }
  return ::testing::AssertionSuccess();
}

// atomic_add with duplicate indices accumulates every contribution and returns, for each
// lane, the value before its own update (in the interpreter, lanes applied in order).
template <class T>
void check_atomic_add_duplicates() {
  SCOPED_TRACE(pl::dtype_name(pl::dtype_of<T>()));
  std::vector<int32_t> idx{0, 0, 1, 3, 3, 3, 2, 0};
  std::vector<double> vals;
  for (int k = 0; k < 8; ++k) vals.push_back(k + 1);
  auto call = interp_call(
      [](pl::Ref ir, pl::Ref vr, pl::Ref o, pl::Ref old) {
        o[pl::all] = pl::full({4}, 10.0, o.dtype());
        old[pl::all] = pl::atomic_add(o, {ir[pl::all].get()}, vr[pl::all]);
      },
      {pl::ShapeDtype({4}, pl::dtype_of<T>()), pl::ShapeDtype({8}, pl::dtype_of<T>())});
  auto outs = call({pl::Array::from_vector(idx), make_array(vals, {8}, pl::dtype_of<T>())});
  EXPECT_TRUE(atomic_results_of_some_order(std::vector<double>(4, 10.0), idx, vals, std::vector<bool>(8, true),
                                           [](double a, double b) { return a + b; }, to_doubles(outs[0]), to_doubles(outs[1])));
}
TEST(Atomics, AddWithDuplicateIndices) {
  check_atomic_add_duplicates<int32_t>();
  check_atomic_add_duplicates<uint32_t>();
  check_atomic_add_duplicates<int64_t>();
  check_atomic_add_duplicates<uint64_t>();
  check_atomic_add_duplicates<float>();
  check_atomic_add_duplicates<double>();
  check_atomic_add_duplicates<pl::f16_t>();
}

// Every programme of a grid adds into the same output block: the sum over the grid.
TEST(Atomics, AddAcrossPrograms) {
  auto xs = normal(8 * 16, 3);
  pl::Array x = make_array(xs, {8, 16}, pl::f32);
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        pl::when(pl::program_id(0) == 0, [&] { o[pl::all] = pl::zeros({16}); });
        pl::atomic_add(o, {pl::all}, xr[pl::all]);
      },
      pl::ShapeDtype({16}, pl::f32),
      {.grid = {8},
       .in_specs = {pl::BlockSpec({pl::squeezed, 16}, [](pl::Value i) { return pl::idx(i, 0); })},
       .out_specs = {pl::BlockSpec({16}, [](pl::Value) { return pl::idx(0); })},
       .name = "atomic_sum"});
  auto o = to_doubles(call(x));
  auto xv = to_doubles(x);
  std::vector<double> want(16, 0.0);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 16; ++j) want[j] += xv[i * 16 + j];
  EXPECT_TRUE(close(o, want, 1e-6));
}

// max, min, and, or, xor, xchg: results against a sequential reference, with a mask.
template <class T>
void check_atomic_ops() {
  SCOPED_TRACE(pl::dtype_name(pl::dtype_of<T>()));
  std::vector<int32_t> idx{2, 0, 2, 1, 0, 3, 2, 1};
  std::vector<T> init{T(5), T(100), T(7), T(9)};
  std::vector<T> vals{T(9), T(3), T(1), T(50), T(12), T(2), T(6), T(77)};
  std::vector<bool> mask{true, true, false, true, true, true, true, false};
  struct Case {
    const char* name;
    pl::Value (*op)(const pl::Ref&, pl::Indexers, const pl::Value&, const pl::Value&);
    T (*ref)(T, T);
    bool ints_only;
  };
  const Case cases[] = {
      {"max", pl::atomic_max, [](T a, T b) { return a > b ? a : b; }, false},
      {"min", pl::atomic_min, [](T a, T b) { return a < b ? a : b; }, false},
      {"and", pl::atomic_and_, [](T a, T b) { if constexpr (std::is_integral_v<T>) return static_cast<T>(a & b); else return a; }, true},
      {"or", pl::atomic_or_, [](T a, T b) { if constexpr (std::is_integral_v<T>) return static_cast<T>(a | b); else return a; }, true},
      {"xor", pl::atomic_xor_, [](T a, T b) { if constexpr (std::is_integral_v<T>) return static_cast<T>(a ^ b); else return a; }, true},
      {"xchg", pl::atomic_xchg, [](T, T b) { return b; }, false},
  };
  for (const Case& c : cases) {
    if (c.ints_only && !std::is_integral_v<T>) continue;
    SCOPED_TRACE(c.name);
    auto op = c.op;
    auto call = interp_call(
        [op](pl::Ref initr, pl::Ref ir, pl::Ref vr, pl::Ref mr, pl::Ref o, pl::Ref old) {
          o[pl::all] = initr[pl::all];
          pl::Value prev = op(o, {ir[pl::all].get()}, vr[pl::all], mr[pl::all]);
          old[pl::all] = pl::where(mr[pl::all], prev, 0);
        },
        {pl::ShapeDtype({4}, pl::dtype_of<T>()), pl::ShapeDtype({8}, pl::dtype_of<T>())});
    auto outs = call({pl::Array::from_vector(init), pl::Array::from_vector(idx), pl::Array::from_vector(vals),
                      pl::Array::from_vector(mask)});
    EXPECT_TRUE(atomic_results_of_some_order(init, idx, vals, mask, c.ref, outs[0].template to_vector<T>(), outs[1].template to_vector<T>()));
  }
}
TEST(Atomics, MaxMinAndOrXorXchg) {
  check_atomic_ops<int32_t>();
  check_atomic_ops<uint32_t>();
  check_atomic_ops<int64_t>();
  check_atomic_ops<uint64_t>();
  check_atomic_ops<float>();
  check_atomic_ops<double>();
}

// Float atomic max/min propagate NaN (from either side) and put -0 below +0, as lax.max/min:
// then programs on parallel axes that combine into one element give one result whatever
// their order (found by the fuzzer: a NaN that a later program's max overwrote on the GPU).
TEST(Atomics, MaxMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> init{nan, 1.f, 5.f, 0.f, -0.f};
  std::vector<float> vals{2.f, nan, 3.f, -0.f, 0.f};
  for (bool mx : {true, false}) {
    SCOPED_TRACE(mx ? "max" : "min");
    auto call = pl::pallas_call(
        [mx](pl::Ref initr, pl::Ref vr, pl::Ref o) {
          o[pl::all] = initr[pl::all];
          (mx ? pl::atomic_max : pl::atomic_min)(o, {pl::all}, vr[pl::all], {});
        },
        pl::ShapeDtype({5}, pl::f32), {.name = "atomic_nan"});
    auto o = call(pl::Array::from_vector(init), pl::Array::from_vector(vals)).to_vector<float>();
    EXPECT_TRUE(std::isnan(o[0]));
    EXPECT_TRUE(std::isnan(o[1]));
    EXPECT_EQ(o[2], mx ? 5.f : 3.f);
    EXPECT_EQ(std::signbit(o[3]), !mx);  // max(0, -0) = +0, min(0, -0) = -0
    EXPECT_EQ(std::signbit(o[4]), !mx);
  }
}

// Atomics on a single scalar location (no indexers on a rank-0 ref) and on a tile slice.
TEST(Atomics, ScalarAndSlice) {
  auto call = pl::pallas_call(
      [](pl::Ref o, pl::Ref t) {
        pl::Value i = pl::program_id(0);
        pl::when(i == 0, [&] {
          pl::store(o, {}, pl::Value::constant(0, pl::i32));
          t[pl::all] = pl::zeros({8}, pl::i32);
        });
        pl::atomic_add(o, {}, i + 1);
        pl::atomic_max(t, {pl::slice(0, 4)}, pl::full({4}, 1.0, pl::i32) * i);
      },
      {pl::ShapeDtype({}, pl::i32), pl::ShapeDtype({8}, pl::i32)}, {.grid = {5}, .name = "scalar_atomic"});
  auto outs = call(std::vector<pl::Array>{});
  EXPECT_EQ(outs[0].to_vector<int32_t>(), std::vector<int32_t>{15});
  EXPECT_EQ(outs[1].to_vector<int32_t>(), (std::vector<int32_t>{4, 4, 4, 4, 0, 0, 0, 0}));
}

// atomic_cas: swaps in v where the current value equals cmp, returns the old values.
TEST(Atomics, CompareAndSwap) {
  std::vector<int32_t> init{1, 2, 3, 4}, cmp{1, 0, 3, 0}, val{10, 20, 30, 40};
  auto call = interp_call(
      [](pl::Ref ir, pl::Ref cr, pl::Ref vr, pl::Ref o, pl::Ref old) {
        o[pl::all] = ir[pl::all];
        old[pl::all] = pl::atomic_cas(o, {pl::all}, cr[pl::all], vr[pl::all]);
      },
      {pl::ShapeDtype({4}, pl::i32), pl::ShapeDtype({4}, pl::i32)});
  auto outs = call({pl::Array::from_vector(init), pl::Array::from_vector(cmp), pl::Array::from_vector(val)});
  EXPECT_EQ(outs[0].to_vector<int32_t>(), (std::vector<int32_t>{10, 2, 30, 4}));
  EXPECT_EQ(outs[1].to_vector<int32_t>(), init);
  // on f32 (compared bitwise) and a scalar location with a spin-lock style loop
  auto f = interp_call(
      [](pl::Ref o, pl::Ref old) {
        pl::store(o, {}, pl::Value::constant(1.5, pl::f32));
        pl::store(old, {}, pl::atomic_cas(o, {}, 1.5, 2.5));
      },
      {pl::ShapeDtype({}, pl::f32), pl::ShapeDtype({}, pl::f32)});
  auto fo = f(std::vector<pl::Array>{});
  EXPECT_EQ(fo[0].to_vector<float>()[0], 2.5f);
  EXPECT_EQ(fo[1].to_vector<float>()[0], 1.5f);
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// The Triton idiom: a block of offsets that runs past the end, masked by offs < n, with
// `other` for the masked lanes; the masked store drops the same lanes.
TEST(MemoryOps, MaskedOutOfBoundsTail) {
  const int n = 10;
  std::vector<float> xs(n);
  for (int k = 0; k < n; ++k) xs[k] = static_cast<float>(k + 1);
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        pl::Value start = pl::program_id(0) * 4;
        pl::Value offs = start + pl::arange(4);
        pl::Value m = offs < n;
        pl::Value v = pl::load(xr, {pl::ds(start, 4)}, {.mask = m, .other = 0.0});
        pl::store(o, {pl::ds(start, 4)}, v * 2.0 + pl::sum(v), {.mask = m});
      },
      pl::ShapeDtype({n}, pl::f32), {.grid = {3}, .name = "tail"});
  auto o = call(pl::Array::from_vector(xs)).to_vector<float>();
  for (int k = 0; k < n; ++k) {
    int b = k / 4;
    float s = 0;
    for (int j = b * 4; j < std::min(n, b * 4 + 4); ++j) s += xs[j];
    EXPECT_EQ(o[k], 2 * xs[k] + s) << k;
  }
}

// ref[pl::all] on a rank-0 ref reads and writes the whole ref (as ref[...] in Pallas).
TEST(MemoryOps, AllOnRankZeroRef) {
  auto call = interp_call(
      [](pl::Ref x, pl::Ref o, pl::Ref p) {
        o[pl::all] = x[pl::all] * 3;
        p[pl::all] = 7;
        p[pl::all] += x[pl::all];
      },
      {pl::ShapeDtype({}, pl::i32), pl::ShapeDtype({}, pl::i32)});
  auto outs = call({pl::Array::scalar<int32_t>(5)});
  EXPECT_EQ(outs[0].to_vector<int32_t>(), std::vector<int32_t>{15});
  EXPECT_EQ(outs[1].to_vector<int32_t>(), std::vector<int32_t>{12});
}

// pl::full of a value outside an integer dtype's range converts as Array::full does.
TEST(MemoryOps, FullConvertsLikeArrayFull) {
  const double vals[] = {300.0, -1.0, 2.7, -2.7, 1e12, NAN};
  for (pl::DType t : {pl::u8, pl::i8, pl::u32, pl::i32, pl::bool_}) {
    SCOPED_TRACE(pl::dtype_name(t));
    std::vector<pl::ShapeDtype> outs(6, pl::ShapeDtype({2}, t));
    auto call = interp_call(
        [t, &vals](const std::vector<pl::Ref>& refs) {
          for (int k = 0; k < 6; ++k) refs[k][pl::all] = pl::full({2}, vals[k], t);
        },
        outs, "full");
    auto got = call(std::vector<pl::Array>{});
    for (int k = 0; k < 6; ++k) EXPECT_EQ(to_doubles(got[k]), to_doubles(pl::Array::full({2}, vals[k], t))) << vals[k];
  }
}

// An index map may point a block entirely outside the array: reads are poison, writes dropped.
TEST(MemoryOps, BlockEntirelyOutside) {
  std::vector<float> xs(8);
  for (int k = 0; k < 8; ++k) xs[k] = static_cast<float>(k);
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o, pl::Ref seen) {
        o[pl::all] = xr[pl::all] + 1.0;
        seen(pl::program_id(0)) = pl::sum(pl::where(xr[pl::all] != xr[pl::all], 1, 0));
      },
      {pl::ShapeDtype({8}, pl::f32), pl::ShapeDtype({3}, pl::i32)},
      {.grid = {3},
       .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i - 1); })},
       .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i - 1); }), pl::BlockSpec({3}, [](pl::Value) { return pl::idx(0); })},
       .name = "outside",
       .interpret_params = kNoBoundsCheck});
  auto outs = call({pl::Array::from_vector(xs)});
  auto o = outs[0].to_vector<float>();
  for (int k = 0; k < 8; ++k) EXPECT_EQ(o[k], xs[k] + 1);
  EXPECT_EQ(outs[1].to_vector<int32_t>(), (std::vector<int32_t>{4, 0, 0}));  // program 0's block is block -1
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// Index arrays in a rank-3 ref: adjacent arrays after a slice, arrays around a slice, and a
// 2-D index array (its shape replaces the indexed dimension).
TEST(MemoryOps, GatherRank3AndIndexArrayShapes) {
  std::vector<int32_t> xs(3 * 4 * 5);
  for (int k = 0; k < 60; ++k) xs[k] = k;
  auto X = [&](int a, int b, int c) { return xs[(a * 4 + b) * 5 + c]; };
  std::vector<int32_t> r{3, 0, 1}, c{4, 4, 0}, i2{2, 0, 1, 1, 2, 0};
  auto call = interp_call(
      [](pl::Ref x, pl::Ref rr, pl::Ref cr, pl::Ref ir, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4) {
        pl::Value rv = rr[pl::all], cv = cr[pl::all], iv = ir[pl::all];
        o1[pl::all] = x(pl::all, rv, cv);               // [3, 3]: adjacent arrays stay in place
        o2[pl::all] = x(rv.astype(pl::i32) % 3, pl::all, cv);  // [3, 4]: separated arrays go first
        o3[pl::all] = x(iv);                            // [2, 3, 4, 5]
        o4[pl::all] = x(1, pl::slice(1, 3), iv.reshape({6}).astype(pl::i32) + 1);  // [6, 2]: 1 and the array are apart
        pl::Value zero = pl::zeros({2, 3}, pl::i32);
        pl::store(o3, {iv, zero, zero, zero}, pl::full({2, 3}, -1.0, pl::i32));  // scatter with a 2-D index
      },
      {pl::ShapeDtype({3, 3}, pl::i32), pl::ShapeDtype({3, 4}, pl::i32), pl::ShapeDtype({2, 3, 4, 5}, pl::i32),
       pl::ShapeDtype({6, 2}, pl::i32)},
      "test", kNoBoundsCheck);  // the scatter's index 2 on o3's dim of 2 is dropped on purpose
  auto outs = call({pl::Array::from_vector(xs, {3, 4, 5}), pl::Array::from_vector(r), pl::Array::from_vector(c),
                    pl::Array::from_vector(i2, {2, 3})});
  auto o1 = outs[0].to_vector<int32_t>(), o2 = outs[1].to_vector<int32_t>(), o3 = outs[2].to_vector<int32_t>();
  auto o4 = outs[3].to_vector<int32_t>();
  for (int a = 0; a < 3; ++a)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(o1[a * 3 + k], X(a, r[k], c[k]));
  for (int k = 0; k < 3; ++k)
    for (int b = 0; b < 4; ++b) EXPECT_EQ(o2[k * 4 + b], X(r[k] % 3, b, c[k]));
  // o3 = x[i2] ([2,3] index -> [2,3,4,5]), then o3[i2[p], 0, 0, 0] = -1 for every p: i2 holds
  // 0, 1 and 2 but o3's dim 0 has size 2, so index 2 is dropped and only [0,0,0,0] and
  // [1,0,0,0] (flat 0 and 60) become -1
  ASSERT_EQ(o3.size(), 120u);
  for (int p = 0; p < 6; ++p)
    for (int b = 0; b < 4; ++b)
      for (int e = 0; e < 5; ++e) {
        int f = (p * 4 + b) * 5 + e;
        int want = (f == 0 || f == 60) ? -1 : X(i2[p], b, e);
        EXPECT_EQ(o3[f], want) << p << "," << b << "," << e;
      }
  for (int a = 0; a < 2; ++a)
    for (int p = 0; p < 6; ++p) EXPECT_EQ(o4[p * 2 + a], X(1, 1 + a, i2[p] + 1));
}

}  // namespace
}  // namespace pt
