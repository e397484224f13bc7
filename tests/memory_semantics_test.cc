// Memory semantics shared by both backends (docs/ops.md "Refs", docs/design.md "Decisions"):
// masked accesses through static slices that reach past the ref, NumPy advanced indexing
// (broadcast index arrays, negative entries, integers beside index arrays) for loads,
// stores and `+=` against an independent NumPy reference, masked swap, calls with no
// outputs, and the enum-typed sub-operations (atomic op, load hints) of the IR. Every call
// here also lowers and compiles for sm_90a (PALLAS_CUDA_COMPILE_CHECK, set by ctest).
#include "tests/test_util.h"

#include <algorithm>
#include <cstdio>

#include "src/backends/interpret/interpreter.h"
#include "src/core/pallas_call.h"
#include "src/ir/ir.h"
#ifdef PALLAS_TEST_HAVE_CUDA
#include "src/backends/cuda/lower.h"
#endif

namespace pt {
namespace {

// ---- 1. masked accesses through static slices past the ref ----

// Pallas' GPU softmax: each program loads its row of n = 125 through ds(0, 128) with a mask
// and other = -inf, and stores through the same masked slice.
TEST(MaskedStaticSlices, SoftmaxRowPastTheEnd) {
  const int rows = 6, n = 125, block = 128;
  pl::Array x = make_array(normal(rows * n, 11), {rows, n}, pl::f32);
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        pl::Value m = pl::arange(block) < n;
        pl::Value row = pl::load(xr, {pl::ds(0, block)}, {.mask = m, .other = -INFINITY});
        pl::Value e = pl::exp(row - pl::max(row));
        pl::store(o, {pl::ds(0, block)}, e / pl::sum(e), {.mask = m});
      },
      pl::ShapeDtype({rows, n}, pl::f32),
      {.grid = {rows},
       .in_specs = {pl::BlockSpec({pl::squeezed, n}, [](pl::Value i) { return pl::idx(i, 0); })},
       .out_specs = {pl::BlockSpec({pl::squeezed, n}, [](pl::Value i) { return pl::idx(i, 0); })},
       .name = "softmax"});
  auto got = to_doubles(call(x));
  auto xv = to_doubles(x);
  std::vector<double> want(xv.size());
  for (int r = 0; r < rows; ++r) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < n; ++j) mx = std::max(mx, xv[r * n + j]);
    for (int j = 0; j < n; ++j) s += std::exp(xv[r * n + j] - mx);
    for (int j = 0; j < n; ++j) want[r * n + j] = round_to(std::exp(xv[r * n + j] - mx) / s, pl::f32);
  }
  EXPECT_TRUE(close(got, want, 1e-5));  // exp and the sums round differently on the GPU
}

// Mask-true lanes outside the ref read poison and their writes are dropped, per dimension:
// a row slice past the end of row 1 never reaches row 2. Masked-off lanes read `other`.
TEST(MaskedStaticSlices, MaskTrueLanesOutsideReadPoisonAndDropWrites) {
  std::vector<int32_t> xs(3 * 5);
  for (int k = 0; k < 15; ++k) xs[k] = 100 + k;
  auto call = interp_call(
      [](pl::Ref x, pl::Ref a, pl::Ref b, pl::Ref o) {
        pl::Value all = pl::arange(8) >= 0, even = pl::arange(8) % 2 == 0;
        a[pl::all] = pl::load(x, {1, pl::ds(0, 8)}, {.mask = all});                // lanes 5..7 poison
        b[pl::all] = pl::load(x, {1, pl::ds(-2, 8)}, {.mask = even, .other = -1});  // start before the ref
        o[pl::all] = x[pl::all];
        pl::store(o, {1, pl::ds(2, 8)}, pl::full({8}, 7.0, pl::i32), {.mask = all});  // 2..4 land, the rest dropped
        pl::store(o, {pl::ds(1, 4), 4}, pl::full({4}, 9.0, pl::i32), {.mask = pl::arange(4) != 0});  // rows 2, 3(out)
      },
      {pl::ShapeDtype({8}, pl::i32), pl::ShapeDtype({8}, pl::i32), pl::ShapeDtype({3, 5}, pl::i32)}, "test", kNoBoundsCheck);
  auto outs = call({pl::Array::from_vector(xs, {3, 5})});
  const int32_t P = INT32_MIN;
  EXPECT_EQ(outs[0].to_vector<int32_t>(), (std::vector<int32_t>{105, 106, 107, 108, 109, P, P, P}));
  // coords -2..5: even lanes are -2 (poison), 0, 2, 4; odd lanes take other
  EXPECT_EQ(outs[1].to_vector<int32_t>(), (std::vector<int32_t>{P, -1, 105, -1, 107, -1, 109, -1}));
  std::vector<int32_t> want = xs;
  for (int j = 2; j < 5; ++j) want[5 + j] = 7;
  want[2 * 5 + 4] = 9;  // lane 1 of ds(1, 4) is row 2; lane 0 is masked off, lanes 2, 3 outside
  EXPECT_EQ(outs[2].to_vector<int32_t>(), want);
}

// Masked atomics through a static slice past the ref; a ds() larger than the dimension is
// allowed with a mask as well.
TEST(MaskedStaticSlices, AtomicsAndLargeDynamicSlice) {
  auto call = pl::pallas_call(
      [](pl::Ref x, pl::Ref o, pl::Ref old, pl::Ref g) {
        pl::when(pl::program_id(0) == 0, [&] { o[pl::all] = pl::zeros({6}, pl::i32); });
        pl::Value m = pl::arange(8) < 6;
        pl::Value prev = pl::atomic_add(o, {pl::ds(0, 8)}, pl::full({8}, 1.0, pl::i32), m);
        pl::when(pl::program_id(0) == 2, [&] { old[pl::all] = pl::where(m, prev, -5); });
        pl::Value s = pl::minimum(pl::program_id(0), 0);  // a dynamic start (0)
        g[pl::all] = pl::load(x, {pl::ds(s, 8)}, {.mask = m, .other = 0.5});
      },
      {pl::ShapeDtype({6}, pl::i32), pl::ShapeDtype({8}, pl::i32), pl::ShapeDtype({8}, pl::f32)},
      {.grid = {3}, .name = "matomic"});
  std::vector<float> xs{1, 2, 3, 4, 5, 6};
  auto outs = call({pl::Array::from_vector(xs)});
  EXPECT_EQ(outs[0].to_vector<int32_t>(), std::vector<int32_t>(6, 3));
  EXPECT_EQ(outs[1].to_vector<int32_t>(), (std::vector<int32_t>{2, 2, 2, 2, 2, 2, -5, -5}));
  EXPECT_EQ(outs[2].to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6, 0.5f, 0.5f}));
}

TEST(MaskedStaticSlices, UnmaskedOutOfRangeIsStillAnError) {
  pl::Array x = pl::Array::from_vector(std::vector<float>(125, 1.f));
  auto run = [&](auto kernel) {
    return [=] { pl::pallas_call(kernel, pl::ShapeDtype({128}, pl::f32), {.name = "oob"})(x); };
  };
  EXPECT_TRUE(throws_error(run([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::load(x, {pl::ds(0, 128)}); }),
                           {"kernel 'oob'", "load", "static slice 0:128 is out of bounds", "f32[125]", "pass a mask"}));
  EXPECT_TRUE(throws_error(run([](pl::Ref x, pl::Ref o) {
                             o[pl::all] = pl::zeros({128});
                             x.at({pl::ds(0, 128)}) += o[pl::all];
                           }),
                           {"kernel 'oob'", "addupdate", "static slice 0:128", "f32[125]", "pass a mask"}));
  EXPECT_TRUE(throws_error(run([](pl::Ref x, pl::Ref o) {
                             o[pl::all] = pl::zeros({128});
                             pl::store(x, {pl::ds(0, 128)}, o[pl::all]);
                           }),
                           {"kernel 'oob'", "store", "static slice 0:128", "pass a mask"}));
  EXPECT_TRUE(throws_error(run([](pl::Ref x, pl::Ref o) {
                             pl::Value s = x(0).astype(pl::i32);
                             o[pl::all] = pl::load(x, {pl::ds(s, 128)});
                           }),
                           {"kernel 'oob'", "ds(start, 128) is larger than dimension 0", "pass a mask"}));
  // an integer index out of range stays an error, mask or not
  EXPECT_TRUE(throws_error(run([](pl::Ref x, pl::Ref o) {
                             o[pl::all] = pl::zeros({128});
                             pl::store(o, {200}, x(0).get(), {.mask = pl::Value(true)});
                           }),
                           {"kernel 'oob'", "index 200 is out of bounds"}));
}

// ---- 2. NumPy advanced indexing against an independent reference ----

// One indexer entry of the reference: a static slice, a static integer, a dynamic integer
// (a rank-0 Value), or an integer index array. Dims past the entries are taken whole.
struct Entry {
  enum Kind { Slice, Int, DynInt, Arr } kind;
  int64_t start = 0, size = 0, stride = 1;  // Slice
  int64_t i = 0;                            // Int, DynInt
  std::vector<int32_t> vals;                // Arr
  pl::Shape shape;                          // Arr
};

pl::Shape np_broadcast(const std::vector<pl::Shape>& shapes) {
  size_t n = 0;
  for (auto& s : shapes) n = std::max(n, s.size());
  pl::Shape r(n, 1);
  for (auto& s : shapes)
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t& d = r[n - s.size() + k];
      if (s[k] != 1) d = s[k];
    }
  return r;
}

// NumPy's rules, written out: returns the result shape and, per result element (row-major),
// the flat offset into the ref, or -1 where the element is outside it.
struct NpIndex {
  pl::Shape shape;
  std::vector<int64_t> offsets;
};
NpIndex np_index(const pl::Shape& ref, const std::vector<Entry>& entries) {
  size_t n = ref.size();
  std::vector<Entry> es = entries;
  for (size_t d = es.size(); d < n; ++d) es.push_back({Entry::Slice, 0, ref[d], 1});
  std::vector<pl::Shape> arr_shapes;
  std::vector<size_t> adv;
  bool any_arr = false;
  for (auto& e : es) any_arr = any_arr || e.kind == Entry::Arr;
  for (size_t d = 0; d < n; ++d) {
    if (es[d].kind == Entry::Arr) arr_shapes.push_back(es[d].shape);
    if (any_arr && es[d].kind != Entry::Slice) adv.push_back(d);
  }
  pl::Shape B = any_arr ? np_broadcast(arr_shapes) : pl::Shape{};
  bool contiguous = adv.empty() || adv.back() - adv.front() + 1 == adv.size();
  // result axes: ("B", k) or ("S", dim)
  std::vector<std::pair<char, size_t>> axes;
  if (any_arr && !contiguous)
    for (size_t k = 0; k < B.size(); ++k) axes.push_back({'B', k});
  for (size_t d = 0; d < n; ++d) {
    if (es[d].kind == Entry::Slice) axes.push_back({'S', d});
    else if (any_arr && contiguous && d == adv.front())
      for (size_t k = 0; k < B.size(); ++k) axes.push_back({'B', k});
  }
  NpIndex r;
  for (auto& [c, k] : axes) r.shape.push_back(c == 'B' ? B[k] : es[k].size);
  int64_t total = 1;
  for (int64_t s : r.shape) total *= s;
  std::vector<int64_t> strides(n, 1);
  for (int d = static_cast<int>(n) - 2; d >= 0; --d) strides[d] = strides[d + 1] * ref[d + 1];
  for (int64_t f = 0; f < total; ++f) {
    std::vector<int64_t> idx(r.shape.size());
    int64_t rem = f;
    for (int a = static_cast<int>(r.shape.size()) - 1; a >= 0; --a) idx[a] = rem % r.shape[a], rem /= r.shape[a];
    std::vector<int64_t> bidx(B.size()), coord(n);
    for (size_t a = 0; a < axes.size(); ++a)
      if (axes[a].first == 'B') bidx[axes[a].second] = idx[a];
    for (size_t a = 0; a < axes.size(); ++a)
      if (axes[a].first == 'S') {
        const Entry& e = es[axes[a].second];
        coord[axes[a].second] = e.start + e.stride * idx[a];
      }
    bool inside = true;
    for (size_t d = 0; d < n; ++d) {
      const Entry& e = es[d];
      if (e.kind == Entry::Int) coord[d] = e.i < 0 ? e.i + ref[d] : e.i;  // static: counts from the end
      if (e.kind == Entry::DynInt) coord[d] = e.i;                        // dynamic scalar: an offset
      if (e.kind == Entry::Arr) {
        // broadcast: the array's own index from the trailing part of bidx
        int64_t off = 0;
        size_t lead = B.size() - e.shape.size();
        for (size_t k = 0; k < e.shape.size(); ++k) off = off * e.shape[k] + (e.shape[k] == 1 ? 0 : bidx[lead + k]);
        int64_t v = e.vals[off];
        coord[d] = v < 0 ? v + ref[d] : v;
      }
      if (coord[d] < 0 || coord[d] >= ref[d]) inside = false;
    }
    int64_t off = 0;
    for (size_t d = 0; d < n; ++d) off += coord[d] * strides[d];
    r.offsets.push_back(inside ? off : -1);
  }
  return r;
}

// A random indexer over `ref`: slices (whole, offset, strided), static integers (negative
// too), dynamic integers, and index arrays whose shapes broadcast to a common shape.
std::vector<Entry> random_entries(const pl::Shape& ref, std::mt19937_64& g, bool oob) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); };
  pl::Shape B;
  for (int64_t r = uni(1, 2); r > 0; --r) B.push_back(uni(1, 4));
  size_t n = static_cast<size_t>(uni(1, static_cast<int64_t>(ref.size())));  // fewer entries: the rest whole
  std::vector<Entry> es;
  bool have_arr = false;
  for (size_t d = 0; d < n; ++d) {
    int64_t dim = ref[d];
    Entry e{};
    int64_t kind = uni(0, 9);
    if (kind <= 2) {
      e.kind = Entry::Slice;
      e.stride = uni(1, 2);
      e.start = uni(0, dim - 1);
      e.size = std::max<int64_t>(1, uni(1, (dim - 1 - e.start) / e.stride + 1));
    } else if (kind <= 4) {
      e.kind = Entry::Int;
      e.i = uni(-dim, dim - 1);
    } else if (kind == 5) {
      e.kind = Entry::DynInt;
      e.i = uni(0, dim - 1);
    } else {
      e.kind = Entry::Arr;
      // B with some dims set to 1 and some leading dims dropped
      size_t drop = static_cast<size_t>(uni(0, static_cast<int64_t>(B.size()) - 1));
      for (size_t k = drop; k < B.size(); ++k) e.shape.push_back(uni(0, 2) == 0 ? 1 : B[k]);
      int64_t cnt = 1;
      for (int64_t s : e.shape) cnt *= s;
      for (int64_t k = 0; k < cnt; ++k) {
        int64_t v = uni(-dim, dim - 1);  // negative entries count from the end
        if (oob && uni(0, 7) == 0) v = uni(0, 1) ? dim + uni(0, 3) : -dim - 1 - uni(0, 3);
        e.vals.push_back(static_cast<int32_t>(v));
      }
      have_arr = true;
    }
    es.push_back(e);
  }
  if (!have_arr) {  // every case has an index array somewhere
    size_t d = static_cast<size_t>(uni(0, static_cast<int64_t>(es.size()) - 1));
    es[d] = Entry{Entry::Arr};
    es[d].shape = B;
    int64_t cnt = 1;
    for (int64_t s : B) cnt *= s;
    for (int64_t k = 0; k < cnt; ++k) es[d].vals.push_back(static_cast<int32_t>(uni(-ref[d], ref[d] - 1)));
  }
  return es;
}

std::string entries_str(const std::vector<Entry>& es) {
  std::string s = "[";
  for (auto& e : es) {
    if (s.size() > 1) s += ", ";
    if (e.kind == Entry::Slice) s += std::to_string(e.start) + ":+" + std::to_string(e.size) + ":" + std::to_string(e.stride);
    if (e.kind == Entry::Int) s += std::to_string(e.i);
    if (e.kind == Entry::DynInt) s += "dyn(" + std::to_string(e.i) + ")";
    if (e.kind == Entry::Arr) s += "arr" + pl::shape_str(e.shape);
  }
  return s + "]";
}

// One kernel per case: o1 = x[idx]; o2 = x, o2[idx] = v; o3 = x, o3[idx] += v, all checked
// exactly (i32) against np_index: loads read poison outside, += adds every duplicate
// (np.add.at), stores with duplicate targets keep the last lane in row-major order in the
// interpreter and one of the lanes on the GPU.
void check_case(const pl::Shape& ref, const std::vector<Entry>& es, uint64_t seed) {
  SCOPED_TRACE("ref " + pl::shape_str(ref) + " index " + entries_str(es));
  NpIndex want = np_index(ref, es);
  int64_t rn = 1;
  for (int64_t s : ref) rn *= s;
  std::vector<int32_t> xs = random_ints<int32_t>(static_cast<size_t>(rn), seed, false);
  for (auto& v : xs) v %= 1000;
  std::vector<int32_t> vs = random_ints<int32_t>(want.offsets.size(), seed + 1, false);
  for (auto& v : vs) v %= 1000;
  std::vector<pl::Array> args{pl::Array::from_vector(xs, ref), pl::Array::from_vector(vs, want.shape)};
  for (auto& e : es) {
    if (e.kind == Entry::Arr) args.push_back(pl::Array::from_vector(e.vals, e.shape));
    if (e.kind == Entry::DynInt) args.push_back(pl::Array::scalar<int32_t>(static_cast<int32_t>(e.i)));
  }
  auto got_shape = std::make_shared<pl::Shape>();
  auto call = interp_call(
      [es, got_shape](const std::vector<pl::Ref>& r) {
        size_t next = 2;
        pl::Indexers idx;
        for (auto& e : es) {
          switch (e.kind) {
            case Entry::Slice: idx.push_back(pl::ds(e.start, e.size, e.stride)); break;
            case Entry::Int: idx.push_back(e.i); break;
            case Entry::DynInt:
            case Entry::Arr: idx.push_back(r[next++][pl::all].get()); break;
          }
        }
        const pl::Ref &x = r[0], &v = r[1], &o1 = r[next], &o2 = r[next + 1], &o3 = r[next + 2];
        pl::Value g = pl::load(x, idx);
        *got_shape = g.shape();
        o1[pl::all] = g;
        o2[pl::all] = x[pl::all];
        pl::store(o2, idx, v[pl::all]);
        o3[pl::all] = x[pl::all];
        o3.at(idx) += v[pl::all];
      },
      {pl::ShapeDtype(want.shape, pl::i32), pl::ShapeDtype(ref, pl::i32), pl::ShapeDtype(ref, pl::i32)}, "npindex",
      kNoBoundsCheck);  // indices out of range on purpose
  std::vector<pl::Array> outs;
  try {
    outs = call(args);
  } catch (const pl::Error& e) {
    FAIL() << e.what() << " (library shape " << pl::shape_str(*got_shape) << ", numpy " << pl::shape_str(want.shape) << ")";
  }
  ASSERT_EQ(*got_shape, want.shape);
  std::vector<int32_t> w1, w2 = xs, w3 = xs;
  std::vector<std::vector<int32_t>> writers(xs.size());
  for (size_t k = 0; k < want.offsets.size(); ++k) {
    int64_t off = want.offsets[k];
    w1.push_back(off >= 0 ? xs[off] : INT32_MIN);
    if (off >= 0) w2[off] = vs[k], w3[off] += vs[k], writers[off].push_back(vs[k]);
  }
  EXPECT_TRUE(equal(outs[0].to_vector<int32_t>(), w1)) << "load";
  EXPECT_TRUE(equal(outs[2].to_vector<int32_t>(), w3)) << "addupdate";
  std::vector<int32_t> o2 = outs[1].to_vector<int32_t>();
  if (call.backend_name() == "interpreter") {
    EXPECT_TRUE(equal(o2, w2)) << "store";
  } else {
    for (size_t f = 0; f < o2.size(); ++f) {
      bool ok = writers[f].empty() ? o2[f] == xs[f] : std::count(writers[f].begin(), writers[f].end(), o2[f]) > 0;
      EXPECT_TRUE(ok) << "store: element " << f << " is " << o2[f];
    }
  }
}

TEST(AdvancedIndexing, RandomCombinationsAgainstNumpyRules) {
  std::mt19937_64 g(20261207);
  for (int c = 0; c < 40; ++c) {
    pl::Shape ref;
    int64_t rank = std::uniform_int_distribution<int64_t>(1, 4)(g);
    for (int64_t d = 0; d < rank; ++d) ref.push_back(std::uniform_int_distribution<int64_t>(2, 5)(g));
    check_case(ref, random_entries(ref, g, /*oob=*/c % 3 == 0), 100 + c);
  }
}

// The cases named in the rules, one by one.
TEST(AdvancedIndexing, NamedCases) {
  auto arr = [](pl::Shape s, std::vector<int32_t> v) { return Entry{Entry::Arr, 0, 0, 1, 0, std::move(v), std::move(s)}; };
  auto sl = [](int64_t start, int64_t size, int64_t stride = 1) { return Entry{Entry::Slice, start, size, stride}; };
  auto in = [](int64_t i) { return Entry{Entry::Int, 0, 0, 1, i}; };
  auto dyn = [](int64_t i) { return Entry{Entry::DynInt, 0, 0, 1, i}; };
  std::vector<int32_t> r16(16), c32(32);
  for (int k = 0; k < 16; ++k) r16[k] = (k * 5) % 16 - (k % 3 == 0 ? 16 : 0);
  for (int k = 0; k < 32; ++k) c32[k] = (k * 7) % 32;
  // [16,1] and [1,32] broadcast to [16,32]
  check_case({16, 32}, {arr({16, 1}, r16), arr({1, 32}, c32)}, 1);
  // x[-1] through an index array is the last row
  check_case({4, 3}, {arr({2}, {-1, -4})}, 2);
  // an integer beside an index array: adjacent (stays in place) and not (goes first)
  check_case({3, 4, 5}, {sl(0, 3), in(1), arr({2}, {4, -2})}, 3);  // [3, 2]
  check_case({3, 4, 5}, {in(1), sl(1, 2), arr({6}, {0, 1, 2, 3, 4, -1})}, 4);  // numpy: [6, 2]
  check_case({3, 4, 5}, {dyn(2), sl(0, 4), arr({3}, {1, 1, 1})}, 5);  // [3, 4]: duplicates accumulate in +=
  check_case({3, 4, 5}, {arr({2, 1}, {0, 2}), sl(0, 2, 2), arr({3}, {4, 0, -5})}, 6);  // [2, 3, 2]
  check_case({3, 4, 5}, {sl(0, 3), arr({2}, {3, 3}), in(-1)}, 7);  // adjacent pair after a slice: [3, 2]
}

// A dynamic scalar index is an offset (as Pallas on the GPU): a negative one is outside.
TEST(AdvancedIndexing, NegativeDynamicScalarIsOutside) {
  auto call = interp_call([](pl::Ref x, pl::Ref i, pl::Ref o) { o[pl::all] = x(i[pl::all].get()); },
                          {pl::ShapeDtype({3}, pl::i32)}, "test", kNoBoundsCheck);
  std::vector<int32_t> xs{1, 2, 3, 4, 5, 6};
  auto o = call({pl::Array::from_vector(xs, {2, 3}), pl::Array::scalar<int32_t>(-1)})[0].to_vector<int32_t>();
  EXPECT_EQ(o, std::vector<int32_t>(3, INT32_MIN));
}

TEST(AdvancedIndexing, IndexArraysThatDoNotBroadcastAreAnError) {
  auto call = interp_call(
      [](pl::Ref x, pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = x(a[pl::all].get(), b[pl::all].get()); },
      {pl::ShapeDtype({3}, pl::f32)}, "bcast");
  EXPECT_TRUE(throws_error(
      [&] {
        call({pl::Array::from_vector(std::vector<float>(16, 1.f), {4, 4}), pl::Array::from_vector(std::vector<int32_t>{0, 1, 2}),
              pl::Array::from_vector(std::vector<int32_t>{0, 1})});
      },
      {"kernel 'bcast'", "index arrays", "[3]", "[2]", "cannot be broadcast"}));
}

// Scatter-add with duplicate indices in every dtype the GPU adds with a CAS loop or natively.
template <class T>
void check_scatter_add() {
  pl::DType t = pl::dtype_of<T>();
  SCOPED_TRACE(pl::dtype_name(t));
  std::vector<int32_t> idx{0, 3, 3, -1, 1, 3, 0, 5};  // -1 is 5; 5 three times
  std::vector<double> vals{1, 2, 3, 4, 5, 6, 7, 8}, init{10, 20, 30, 40, 50, 60};
  auto call = interp_call(
      [](pl::Ref x, pl::Ref i, pl::Ref v, pl::Ref o) {
        o[pl::all] = x[pl::all];
        o.at({i[pl::all].get()}) += v[pl::all];
      },
      {pl::ShapeDtype({6}, t)});
  auto o = to_doubles(call({make_array(init, {6}, t), pl::Array::from_vector(idx), make_array(vals, {8}, t)})[0]);
  std::vector<double> want = init;
  for (size_t k = 0; k < idx.size(); ++k) want[idx[k] < 0 ? idx[k] + 6 : idx[k]] += vals[k];
  EXPECT_EQ(o, want);
}
TEST(AdvancedIndexing, ScatterAddAccumulatesDuplicatesInEveryDtype) {
  check_scatter_add<int8_t>();
  check_scatter_add<int16_t>();
  check_scatter_add<int32_t>();
  check_scatter_add<int64_t>();
  check_scatter_add<uint8_t>();
  check_scatter_add<uint16_t>();
  check_scatter_add<uint32_t>();
  check_scatter_add<uint64_t>();
  check_scatter_add<float>();
  check_scatter_add<double>();
  check_scatter_add<pl::f16_t>();
  check_scatter_add<pl::bf16_t>();
}

// ---- 3. masked swap ----
TEST(MaskedSwap, MaskedOffLanesReturnTheOperand) {
  for (pl::DType t : {pl::f32, pl::i32, pl::bf16}) {
    SCOPED_TRACE(pl::dtype_name(t));
    pl::Array x = make_array(normal(24, 5, 0, 50), {24}, t), y = make_array(normal(24, 6, 0, 50), {24}, t);
    auto call = interp_call(
        [](pl::Ref x, pl::Ref y, pl::Ref m, pl::Ref o, pl::Ref old) {
          o[pl::all] = x[pl::all];
          old[pl::all] = pl::swap(o, {pl::ds(0, 32)}, pl::load(y, {pl::ds(0, 32)}, {.mask = m[pl::all], .other = 0}),
                                  {.mask = m[pl::all]});
        },
        {pl::ShapeDtype({24}, t), pl::ShapeDtype({32}, t)});
    std::vector<bool> mask(32);
    for (int k = 0; k < 32; ++k) mask[k] = k < 24 && k % 3 != 0;
    auto outs = call({x, y, pl::Array::from_vector(mask)});
    auto xv = to_doubles(x), yv = to_doubles(y), o = to_doubles(outs[0]), old = to_doubles(outs[1]);
    for (int k = 0; k < 32; ++k) {
      if (k < 24) EXPECT_EQ(o[k], mask[k] ? yv[k] : xv[k]) << k;
      EXPECT_EQ(old[k], mask[k] ? xv[k] : 0.0) << k;  // masked off: the operand (other = 0 there)
    }
  }
}

// ---- 4. calls with no outputs ----
pl::Call printer(bool with_check = false) {
  return pl::pallas_call(
      [with_check](pl::Ref x) {
        pl::Value s = pl::sum(x[pl::all]);
        pl::debug_print("sum {}", {s});
        if (with_check) pl::check(s > 0, "sum is {}", s);
      },
      std::vector<pl::ShapeDtype>{},
      {.grid = {2}, .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })}, .name = "noout"});
}

TEST(NoOutputs, RunsForItsEffects) {
  pl::Array x = pl::Array::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  pl::Call c = printer();
  EXPECT_EQ(c.num_outputs(), 0);
  ::testing::internal::CaptureStdout();
  std::vector<pl::Array> outs = c({x});
  std::fflush(stdout);
  std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_TRUE(outs.empty());
  if (c.backend_name() == "interpreter") {  // device printf reaches stdout at the next synchronisation
    EXPECT_THAT(printed, HasSubstr("sum 10"));
    EXPECT_THAT(printed, HasSubstr("sum 26"));
  }
  EXPECT_THAT(c.jaxpr_text(), HasSubstr("debug_print"));
  EXPECT_TRUE(throws_error([&] { c(x); }, {"kernel 'noout'", "0 outputs", "vector form"}));
}

TEST(NoOutputs, Transforms) {
  pl::Array x = pl::Array::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  ::testing::internal::CaptureStdout();
  // vmap: a batch of two runs four programs, still no outputs
  pl::Array xb = pl::Array::from_vector(std::vector<float>(16, 1.f), {2, 8});
  EXPECT_TRUE(pl::vmap(printer(), {0})({xb}).empty());
  // jvp: no outputs, no tangents
  auto [outs, tans] = pl::jvp(printer(), {x}, {x});
  EXPECT_TRUE(outs.empty());
  EXPECT_TRUE(tans.empty());
  std::fflush(stdout);
  std::string printed = ::testing::internal::GetCapturedStdout();
  pl::Call p = printer();
  p.trace({x.shape_dtype()});
  if (p.backend_name() == "interpreter") EXPECT_THAT(printed, HasSubstr("sum 4"));
  // checkify: the check is reported although there is nothing else to return
  pl::Array neg = pl::Array::from_vector(std::vector<float>{1, 2, 3, 4, -5, -6, -7, -8});
  for (bool slots : {false, true}) {  // the interpreter's check rule, and error outputs
    ::testing::internal::CaptureStdout();
    auto r = pl::checkify(printer(true), {.error_outputs = slots})({neg});
    std::fflush(stdout);
    ::testing::internal::GetCapturedStdout();
    EXPECT_TRUE(r.outputs.empty());
    EXPECT_FALSE(r.error.ok());
    EXPECT_THAT(r.error.message(), HasSubstr("sum is -26"));
    EXPECT_EQ(r.error.program_id(), std::vector<int64_t>{1});
  }
}

// ---- 5. sub-operations are enums ----
TEST(SubOperationEnums, PrintedNamesAreStable) {
  auto call = interp_call(
      [](pl::Ref x, pl::Ref o, pl::Ref p) {
        o[pl::all] = pl::zeros({8}, pl::i32);
        p[pl::all] = pl::atomic_xor_(o, {pl::all}, x[pl::all]) + pl::atomic_add(o, {pl::all}, x[pl::all]);
        pl::store(o, {pl::all}, pl::load(x, {pl::all}, {.cache_modifier = ".ca", .eviction_policy = "evict_first"}),
                  {.eviction_policy = "evict_last"});
      },
      {pl::ShapeDtype({8}, pl::i32), pl::ShapeDtype({8}, pl::i32)});
  call.trace({pl::ShapeDtype({8}, pl::i32)});
  std::string t = call.jaxpr_text();
  EXPECT_THAT(t, HasSubstr("atomic_rmw[idx=[0:8], op='xor']"));
  EXPECT_THAT(t, HasSubstr("op='add'"));
  EXPECT_THAT(t, HasSubstr("cache_modifier='.ca', eviction_policy='evict_first'"));
  EXPECT_THAT(t, HasSubstr("store[idx=[0:8], eviction_policy='evict_last']"));
  for (int k = 0; k < pallas::ir::kNumAtomicOps; ++k)
    EXPECT_EQ(pallas::ir::atomic_op_of(pallas::ir::enum_name(static_cast<pallas::ir::AtomicOp>(k)), "t"),
              static_cast<pallas::ir::AtomicOp>(k));
}

TEST(SubOperationEnums, UnknownNamesAndValuesAreErrors) {
  auto bad_cache = [](pl::Ref x, pl::Ref o) { o[pl::all] = pl::load(x, {pl::all}, {.cache_modifier = ".cv"}); };
  EXPECT_TRUE(throws_error(
      [&] { interp_call(bad_cache, {pl::ShapeDtype({4}, pl::f32)}, "hint")({pl::Array::from_vector(std::vector<float>(4))}); },
      {"kernel 'hint'", "pl::load", "unsupported cache modifier '.cv'", "'.ca', '.cg'"}));
  auto bad_evict = [](pl::Ref x, pl::Ref o) { pl::store(o, {pl::all}, x[pl::all], {.eviction_policy = "evict_normal"}); };
  EXPECT_TRUE(throws_error(
      [&] { interp_call(bad_evict, {pl::ShapeDtype({4}, pl::f32)}, "hint")({pl::Array::from_vector(std::vector<float>(4))}); },
      {"kernel 'hint'", "pl::store", "unsupported eviction policy 'evict_normal'", "'evict_first', 'evict_last'"}));
  EXPECT_TRUE(throws_error([] { pallas::ir::atomic_op_of("nand", "pl::atomic"); }, {"pl::atomic", "unsupported atomic op 'nand'", "'xchg'"}));
  EXPECT_TRUE(throws_error([] { pallas::ir::enum_name(static_cast<pallas::ir::AtomicOp>(42)); }, {"atomic_rmw", "unknown atomic op 42"}));

  // An atomic_rmw whose op is outside the enum (a corrupted IR): both backends refuse it by name.
  auto call = interp_call([](pl::Ref x, pl::Ref o) {
    o[pl::all] = pl::zeros({4}, pl::i32);
    pl::atomic_max(o, {pl::all}, x[pl::all]);
  }, {pl::ShapeDtype({4}, pl::i32)}, "corrupt");
  call.trace({pl::ShapeDtype({4}, pl::i32)});
  pallas::core::PallasCall pc = call.state()->get_traced();
  auto k = std::make_shared<pallas::ir::Jaxpr>(*pc.kernel);
  for (auto& e : k->eqns)
    if (e.params.has("op")) e.params.set("op", static_cast<pallas::ir::AtomicOp>(42));
  pc.kernel = k;
  std::vector<pl::Array> args{pl::Array::from_vector(std::vector<int32_t>{1, 2, 3, 4})};
  EXPECT_TRUE(throws_error([&] { pallas::interp::run_call(pc, args); }, {"atomic_rmw", "unknown atomic op 42"}));
#ifdef PALLAS_TEST_HAVE_CUDA
  EXPECT_TRUE(throws_error([&] { pallas::cuda::lower(pc); }, {"atomic_rmw", "unknown atomic op 42"}));
#endif
}

}  // namespace
}  // namespace pt
