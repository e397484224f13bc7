// Shape and selection ops: broadcast_to / broadcast_in_dim, reshape, squeeze, expand_dims,
// transpose, iota / arange, full / zeros / ones / *_like, where, select_n, clamp, bitcast,
// stop_gradient and the hints. They move values exactly, so results are compared exactly.
#include "tests/test_util.h"

namespace pt {
namespace {

// Row-major index helpers.
int64_t at2(int64_t i, int64_t j, int64_t n1) { return i * n1 + j; }

class ShapeOpsTest : public ::testing::TestWithParam<pl::DType> {
 protected:
  pl::DType t() const { return GetParam(); }
  // Random values of t (exact in t), read back as doubles.
  pl::Array rand(pl::Shape s, uint64_t seed) const {
    int64_t n = pl::shape_size(s);
    if (t() == pl::bool_) {
      std::vector<bool> b;
      for (int64_t k = 0; k < n; ++k) b.push_back((k * 5 + seed) % 3 == 0);
      return pl::Array::from_vector(b, s);
    }
    if (pl::is_float(t())) return make_array(with_edges(normal(n, seed), t(), false), s, t());
    return pl::random::randint(s, t(), seed, -100, 100).astype(t());
  }
};

TEST_P(ShapeOpsTest, BroadcastTo) {
  pl::Array row = rand({1, 32}, 1), vec = rand({32}, 2), col = rand({4, 1}, 3);
  auto call = interp_call(
      [](pl::Ref r, pl::Ref v, pl::Ref c, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4) {
        o1[pl::all] = pl::broadcast_to(r[pl::all], {4, 32});
        o2[pl::all] = pl::broadcast_to(v[pl::all], {4, 32});
        o3[pl::all] = pl::broadcast_to(c[pl::all], {4, 32});
        o4[pl::all] = pl::broadcast_in_dim(c(pl::all, 0), {4, 32}, {0});  // [4] along dim 0
      },
      std::vector<pl::ShapeDtype>(4, pl::ShapeDtype({4, 32}, t())));
  auto outs = call({row, vec, col});
  auto rv = to_doubles(row), vv = to_doubles(vec), cv = to_doubles(col);
  auto o1 = to_doubles(outs[0]), o2 = to_doubles(outs[1]), o3 = to_doubles(outs[2]), o4 = to_doubles(outs[3]);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 32; ++j) {
      ASSERT_EQ(o1[at2(i, j, 32)], rv[j]);
      ASSERT_EQ(o2[at2(i, j, 32)], vv[j]);
      ASSERT_EQ(o3[at2(i, j, 32)], cv[i]);
      ASSERT_EQ(o4[at2(i, j, 32)], cv[i]);
    }
}

// Broadcasts of every shape class the CUDA backend lowers apart (rules_shape.cc): a row vector
// over rows and a column over columns, each with the broadcast extent a multiple of the
// threads' repeat, a divisor of it, or neither; over 3-d tiles; with 1, 4 and 8 warps.
TEST_P(ShapeOpsTest, BroadcastOfRowsAndColumnsAtEveryExtent) {
  struct Case {
    int64_t a, b, c;
    int warps;
  };
  for (Case k : {Case{1, 8, 4096, 8}, Case{1, 16, 512, 4}, Case{1, 64, 8, 4}, Case{1, 5, 24, 4}, Case{1, 3, 40, 1}, Case{2, 3, 256, 4}}) {
    SCOPED_TRACE("broadcast over [" + std::to_string(k.a) + "," + std::to_string(k.b) + "," + std::to_string(k.c) + "], " + std::to_string(k.warps) +
                 " warps");
    pl::Shape S{k.a, k.b, k.c};
    pl::Array row = rand({1, 1, k.c}, 11), col = rand({k.a, k.b, 1}, 12), lead = rand({k.a, 1, 1}, 13);
    auto call = pl::pallas_call(
        [S](pl::Ref r, pl::Ref c, pl::Ref l, pl::Ref o1, pl::Ref o2, pl::Ref o3) {
          o1[pl::all] = pl::broadcast_to(r[pl::all], S);
          o2[pl::all] = pl::broadcast_to(c[pl::all], S);
          o3[pl::all] = pl::broadcast_to(l[pl::all], S);
        },
        std::vector<pl::ShapeDtype>(3, pl::ShapeDtype(S, t())), {.name = "broadcasts", .compiler_params = {.num_warps = k.warps}});
    auto outs = call({row, col, lead});
    auto rv = to_doubles(row), cv = to_doubles(col), lv = to_doubles(lead);
    auto o1 = to_doubles(outs[0]), o2 = to_doubles(outs[1]), o3 = to_doubles(outs[2]);
    for (int64_t i = 0; i < k.a; ++i)
      for (int64_t j = 0; j < k.b; ++j)
        for (int64_t m = 0; m < k.c; ++m) {
          int64_t f = (i * k.b + j) * k.c + m;
          ASSERT_EQ(o1[f], rv[m]) << f;
          ASSERT_EQ(o2[f], cv[i * k.b + j]) << f;
          ASSERT_EQ(o3[f], lv[i]) << f;
        }
  }
}

TEST_P(ShapeOpsTest, ReshapeSqueezeExpandDims) {
  pl::Array x = rand({4, 32}, 4);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4, pl::Ref o5) {
        pl::Value v = xr[pl::all];
        o1[pl::all] = pl::reshape(v, {8, 16});
        o2[pl::all] = v.reshape({-1});                          // inferred size
        pl::Value e = pl::expand_dims(v, 1);                    // [4,1,32]
        o3[pl::all] = pl::squeeze(e, 1);                        // back to [4,32]
        o4[pl::all] = pl::squeeze(pl::expand_dims(pl::expand_dims(v, 0), -1));  // [1,4,32,1] -> [4,32]
        o5[pl::all] = pl::expand_dims(v, -1);                   // [4,32,1]
      },
      {pl::ShapeDtype({8, 16}, t()), pl::ShapeDtype({128}, t()), pl::ShapeDtype({4, 32}, t()),
       pl::ShapeDtype({4, 32}, t()), pl::ShapeDtype({4, 32, 1}, t())});
  auto outs = call({x});
  auto xv = to_doubles(x);
  for (auto& o : outs) EXPECT_EQ(to_doubles(o), xv);  // row-major order never changes
}

TEST_P(ShapeOpsTest, Transpose) {
  pl::Array x = rand({4, 8}, 5), y = rand({2, 3, 4}, 6);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref yr, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4) {
        pl::Value v = xr[pl::all];
        o1[pl::all] = pl::transpose(v);
        o2[pl::all] = v.T();
        o3[pl::all] = pl::transpose(yr[pl::all], {2, 0, 1});  // [4,2,3]
        o4[pl::all] = pl::transpose(yr[pl::all]);             // reversed: [4,3,2]
      },
      {pl::ShapeDtype({8, 4}, t()), pl::ShapeDtype({8, 4}, t()), pl::ShapeDtype({4, 2, 3}, t()),
       pl::ShapeDtype({4, 3, 2}, t())});
  auto outs = call({x, y});
  auto xv = to_doubles(x), yv = to_doubles(y);
  auto o1 = to_doubles(outs[0]), o2 = to_doubles(outs[1]), o3 = to_doubles(outs[2]), o4 = to_doubles(outs[3]);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) {
      ASSERT_EQ(o1[j * 4 + i], xv[i * 8 + j]);
      ASSERT_EQ(o2[j * 4 + i], xv[i * 8 + j]);
    }
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) {
        double v = yv[(a * 3 + b) * 4 + c];
        ASSERT_EQ(o3[(c * 2 + a) * 3 + b], v);
        ASSERT_EQ(o4[(c * 3 + b) * 2 + a], v);
      }
}

TEST_P(ShapeOpsTest, WhereAndSelectN) {
  pl::Array x = rand({4, 32}, 7), y = rand({4, 32}, 8);
  std::vector<int32_t> sel;
  for (int k = 0; k < 128; ++k) sel.push_back(k % 5 - 1);  // -1..3: out of range is clamped to [0, 2]
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref yr, pl::Ref sr, pl::Ref o1, pl::Ref o2, pl::Ref o3) {
        pl::Value a = xr[pl::all], b = yr[pl::all], s = sr[pl::all];
        o1[pl::all] = pl::where(s > 0, a, b);
        o2[pl::all] = pl::where(s, a, b);  // an integer condition means != 0
        o3[pl::all] = pl::select_n(s, {a, b, b});  // -1 must give a (clamped), not the last case
      },
      std::vector<pl::ShapeDtype>(3, pl::ShapeDtype({4, 32}, t())));
  auto outs = call({x, y, pl::Array::from_vector(sel, {4, 32})});
  auto xv = to_doubles(x), yv = to_doubles(y);
  auto o1 = to_doubles(outs[0]), o2 = to_doubles(outs[1]), o3 = to_doubles(outs[2]);
  for (int i = 0; i < 128; ++i) {
    ASSERT_EQ(o1[i], sel[i] > 0 ? xv[i] : yv[i]);
    ASSERT_EQ(o2[i], sel[i] != 0 ? xv[i] : yv[i]);
    int k = std::clamp(sel[i], 0, 2);
    ASSERT_EQ(o3[i], k == 0 ? xv[i] : yv[i]) << "selector " << sel[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, ShapeOpsTest,
                         ::testing::Values(pl::bool_, pl::i8, pl::u8, pl::i16, pl::i32, pl::u32, pl::i64, pl::u64,
                                           pl::f16, pl::bf16, pl::f32, pl::f64),
                         [](const auto& info) { return std::string(pl::dtype_name(info.param)); });

// where with a scalar condition and scalar branches (weak scalars take the tile's dtype).
TEST(ShapeOps, WhereScalars) {
  pl::Array x = make_array(normal(64, 1), {2, 32}, pl::f16);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2) {
        pl::Value v = xr[pl::all];
        o1[pl::all] = pl::where(v > 0, v, 0.0);  // relu; 0.0 is weak so the result stays f16
        o2[pl::all] = pl::where(xr(0, 0) > 1e9, -v, v);  // rank-0 predicate (false)
      },
      {pl::ShapeDtype({2, 32}, pl::f16), pl::ShapeDtype({2, 32}, pl::f16)});
  auto outs = call({x});
  auto xv = to_doubles(x), o1 = to_doubles(outs[0]), o2 = to_doubles(outs[1]);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(o1[i], xv[i] > 0 ? xv[i] : 0.0);
    EXPECT_EQ(o2[i], xv[i]);
  }
}

// iota along each dimension, several dtypes; arange(stop) and arange(start, stop).
TEST(ShapeOps, IotaArange) {
  for (pl::DType t : {pl::i32, pl::u8, pl::i64, pl::f32, pl::f16, pl::bf16}) {
    SCOPED_TRACE(pl::dtype_name(t));
    auto call = interp_call(
        [t](pl::Ref o0, pl::Ref o1, pl::Ref o2) {
          o0[pl::all] = pl::iota(t, {3, 5, 7}, 0);
          o1[pl::all] = pl::iota(t, {3, 5, 7}, 1);
          o2[pl::all] = pl::iota(t, {3, 5, 7}, 2);
        },
        std::vector<pl::ShapeDtype>(3, pl::ShapeDtype({3, 5, 7}, t)));
    auto outs = call(std::vector<pl::Array>{});
    auto a = to_doubles(outs[0]), b = to_doubles(outs[1]), c = to_doubles(outs[2]);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j)
        for (int k = 0; k < 7; ++k) {
          int f = (i * 5 + j) * 7 + k;
          ASSERT_EQ(a[f], i);
          ASSERT_EQ(b[f], j);
          ASSERT_EQ(c[f], k);
        }
  }
  auto call = interp_call(
      [](pl::Ref o0, pl::Ref o1) {
        o0[pl::all] = pl::arange(16);
        o1[pl::all] = pl::arange(-5, 11);
      },
      {pl::ShapeDtype({16}, pl::i32), pl::ShapeDtype({16}, pl::i32)});
  auto outs = call(std::vector<pl::Array>{});
  auto a = outs[0].to_vector<int32_t>(), b = outs[1].to_vector<int32_t>();
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(a[k], k);
    EXPECT_EQ(b[k], k - 5);
  }
}

TEST(ShapeOps, FullZerosOnesLike) {
  for (pl::DType t : {pl::i8, pl::u16, pl::i32, pl::f16, pl::bf16, pl::f32, pl::f64, pl::bool_}) {
    SCOPED_TRACE(pl::dtype_name(t));
    double v = t == pl::bool_ ? 1.0 : pl::is_unsigned_int(t) ? 7.0 : pl::is_float(t) ? -2.5 : -7.0;
    pl::Array x = pl::Array::full({3, 4}, 1.0, t);
    auto call = interp_call(
        [t, v](pl::Ref xr, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4, pl::Ref o5, pl::Ref o6) {
          o1[pl::all] = pl::full({3, 4}, v, t);
          o2[pl::all] = pl::zeros({3, 4}, t);
          o3[pl::all] = pl::ones({3, 4}, t);
          o4[pl::all] = pl::full_like(xr[pl::all], v);
          o5[pl::all] = pl::zeros_like(xr[pl::all]);
          pl::store(o6, {}, pl::full({}, v, t));  // rank-0 value into a rank-0 ref
        },
        {pl::ShapeDtype({3, 4}, t), pl::ShapeDtype({3, 4}, t), pl::ShapeDtype({3, 4}, t), pl::ShapeDtype({3, 4}, t),
         pl::ShapeDtype({3, 4}, t), pl::ShapeDtype({}, t)});
    auto outs = call({x});
    for (double e : to_doubles(outs[0])) ASSERT_EQ(e, v);
    for (double e : to_doubles(outs[1])) ASSERT_EQ(e, 0.0);
    for (double e : to_doubles(outs[2])) ASSERT_EQ(e, 1.0);
    for (double e : to_doubles(outs[3])) ASSERT_EQ(e, v);
    for (double e : to_doubles(outs[4])) ASSERT_EQ(e, 0.0);
    ASSERT_EQ(to_doubles(outs[5]), std::vector<double>{v});
  }
  // pl::full / pl::zeros outside a kernel make Arrays
  pl::Array a = pl::full({2, 3}, 4.0, pl::i16);
  EXPECT_EQ(a.dtype(), pl::i16);
  EXPECT_EQ(a.to_vector<int16_t>(), std::vector<int16_t>(6, 4));
  pl::Array z = pl::zeros({5});
  EXPECT_EQ(z.dtype(), pl::f32);
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(5, 0.f));
}

// clamp with scalar and tile bounds; NaN passes through.
TEST(ShapeOps, Clamp) {
  for (pl::DType t : {pl::f32, pl::f16, pl::bf16, pl::f64}) {
    SCOPED_TRACE(pl::dtype_name(t));
    auto xs = with_edges(uniform(64, 3, -3, 3), t);
    auto lo = with_edges(uniform(64, 4, -2, -0.5), t, false);
    pl::Array x = make_array(xs, {2, 32}, t), l = make_array(lo, {2, 32}, t);
    auto call = interp_call(
        [](pl::Ref xr, pl::Ref lr, pl::Ref o1, pl::Ref o2) {
          o1[pl::all] = pl::clamp(-1.0, xr[pl::all], 1.0);
          o2[pl::all] = pl::clamp(lr[pl::all], xr[pl::all], 2.0);
        },
        {pl::ShapeDtype({2, 32}, t), pl::ShapeDtype({2, 32}, t)});
    auto outs = call({x, l});
    auto o1 = to_doubles(outs[0]), o2 = to_doubles(outs[1]);
    for (int i = 0; i < 64; ++i) {
      if (std::isnan(xs[i])) {
        EXPECT_TRUE(std::isnan(o1[i]) && std::isnan(o2[i]));
        continue;
      }
      EXPECT_EQ(o1[i], std::min(std::max(xs[i], -1.0), 1.0)) << xs[i];
      EXPECT_EQ(o2[i], std::min(std::max(xs[i], lo[i]), 2.0)) << xs[i];
    }
  }
  for (pl::DType t : {pl::i8, pl::u8, pl::i32, pl::u64}) {
    SCOPED_TRACE(pl::dtype_name(t));
    auto ints = pl::random::randint({64}, pl::i64, 9, -120, 120);
    pl::Array x = ints.astype(t);
    auto xv = to_doubles(x);
    auto call = interp_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = pl::clamp(3, xr[pl::all], 100); },
                            {pl::ShapeDtype({64}, t)});
    auto ov = to_doubles(call({x})[0]);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(ov[i], std::min(std::max(xv[i], 3.0), 100.0)) << xv[i];
  }
}

// bitcast reinterprets the bytes (same width); stop_gradient and the hints are identities.
TEST(ShapeOps, BitcastAndIdentities) {
  auto fs = with_edges(normal(64, 2), pl::f32);
  pl::Array x = make_array(fs, {64}, pl::f32);
  std::vector<int16_t> h16;
  for (int k = 0; k < 64; ++k) h16.push_back(static_cast<int16_t>(k * 997 - 30000));
  std::vector<int32_t> ints;
  for (int k = 0; k < 64; ++k) ints.push_back(k * 16);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref hr, pl::Ref ir, pl::Ref o1, pl::Ref o2, pl::Ref o3, pl::Ref o4, pl::Ref o5, pl::Ref o6) {
        o1[pl::all] = pl::bitcast(xr[pl::all], pl::i32);
        o2[pl::all] = pl::bitcast(pl::bitcast(xr[pl::all], pl::u32), pl::f32);
        o3[pl::all] = pl::bitcast(hr[pl::all], pl::f16);
        o4[pl::all] = pl::bitcast(hr[pl::all], pl::bf16);
        o5[pl::all] = pl::stop_gradient(xr[pl::all]);
        o6[pl::all] = pl::max_contiguous(pl::multiple_of(ir[pl::all], {16}), {64});
      },
      {pl::ShapeDtype({64}, pl::i32), pl::ShapeDtype({64}, pl::f32), pl::ShapeDtype({64}, pl::f16),
       pl::ShapeDtype({64}, pl::bf16), pl::ShapeDtype({64}, pl::f32), pl::ShapeDtype({64}, pl::i32)});
  auto outs = call({x, pl::Array::from_vector(h16), pl::Array::from_vector(ints)});
  auto bits = outs[0].to_vector<int32_t>();
  auto xf = x.to_vector<float>();
  for (int i = 0; i < 64; ++i) {
    int32_t b;
    std::memcpy(&b, &xf[i], 4);
    EXPECT_EQ(bits[i], b);
  }
  auto back = outs[1].to_vector<float>();
  EXPECT_EQ(std::memcmp(back.data(), xf.data(), 256), 0);
  auto f16 = outs[2].to_vector<pl::f16_t>();
  auto b16 = outs[3].to_vector<pl::bf16_t>();
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(f16[i].bits, static_cast<uint16_t>(h16[i]));
    EXPECT_EQ(b16[i].bits, static_cast<uint16_t>(h16[i]));
  }
  EXPECT_TRUE(close(to_doubles(outs[4]), fs, 0.0));
  EXPECT_EQ(outs[5].to_vector<int32_t>(), ints);
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {
// Negative dimensions count from the end (iota), and argmax / max of bools work.
TEST(ShapeOps, NegativeIotaDimensionAndBoolArgmax) {
  auto call = interp_call(
      [](pl::Ref b, pl::Ref o1, pl::Ref o2) {
        o1[pl::all] = pl::iota(pl::i32, {3, 4}, -1);
        o2[pl::all] = pl::argmax(b[pl::all], 1);
      },
      {pl::ShapeDtype({3, 4}, pl::i32), pl::ShapeDtype({3}, pl::i32)});
  std::vector<bool> bs{false, false, true, true, false, false, false, false, true, false, false, true};
  auto outs = call({pl::Array::from_vector(bs, {3, 4})});
  auto o1 = outs[0].to_vector<int32_t>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(o1[i * 4 + j], j);
  EXPECT_EQ(outs[1].to_vector<int32_t>(), (std::vector<int32_t>{2, 0, 0}));
}

// A whole-block transpose of a tile larger than a GPU's shared memory (16 x 24 x 256 f32: 384 KiB;
// an H100 gives a CUDA block 227 KiB): the GPU exchanges it through global scratch instead
// of refusing it, and both backends give the same exact answer.
TEST(ShapeOps, TileLargerThanSharedMemory) {
  pl::Array x = pl::random::normal({16, 24, 256}, pl::f32, 7);
  auto call = interp_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = pl::transpose(xr[pl::all], {2, 0, 1}); },
                          {pl::ShapeDtype({256, 16, 24}, pl::f32)}, "big_transpose");
  auto t = call({x})[0].to_vector<float>();
  auto xv = x.to_vector<float>();
  for (int64_t a = 0; a < 16; ++a)
    for (int64_t b = 0; b < 24; ++b)
      for (int64_t k = 0; k < 256; ++k) ASSERT_EQ(t[(k * 16 + a) * 24 + b], xv[(a * 24 + b) * 256 + k]) << a << " " << b << " " << k;
}

}  // namespace
}  // namespace pt
