// Behaviours fixed after review: strides, predicates, shapes, prefetch writes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <pallas/pallas.h>

namespace pl = pallas;
using ::testing::HasSubstr;

namespace {
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const pl::Error& e) {
    return e.what();
  }
  return "";
}
pl::Array iota_f32(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i + 1);
  return pl::Array::from_vector(v);
}
}  // namespace

TEST(SemanticsFixes, NonPositiveStridesAreErrorsNotCrashes) {
  auto zero = [] {
    pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::slice(0, 4, 0)]; }, pl::ShapeDtype({4}, pl::f32),
                    {.name = "zero_step"})(iota_f32(4));
  };
  EXPECT_THAT(error_of(zero), HasSubstr("step 0 must be positive"));
  auto neg = [] {
    pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::ds(pl::program_id(0) + 3, 4, -1)]; },
                    pl::ShapeDtype({4}, pl::f32), {.grid = {1}, .name = "neg_stride"})(iota_f32(4));
  };
  std::string m = error_of(neg);
  EXPECT_THAT(m, HasSubstr("neg_stride"));
  EXPECT_THAT(m, HasSubstr("stride positive"));
}

TEST(SemanticsFixes, IntegerPredicatesAreTrueWhenNonZero) {
  auto call = pl::pallas_call(
      [](pl::Ref o) {
        pl::Value p = pl::program_id(0) - 1;  // -1, 0, 1
        o[pl::program_id(0)] = pl::cond(p, [] { return pl::Value(1.f); }, [] { return pl::Value(0.f); });
      },
      pl::ShapeDtype({3}, pl::f32), {.grid = {3}});
  EXPECT_EQ(call({}).at(0).to_vector<float>(), (std::vector<float>{1, 0, 1}));
  auto tile = [] {
    pl::pallas_call([](pl::Ref x, pl::Ref o) { pl::when(x[pl::all] > 0.f, [&] { o[pl::all] = x[pl::all]; }); },
                    pl::ShapeDtype({4}, pl::f32), {.name = "tile_pred"})(iota_f32(4));
  };
  EXPECT_THAT(error_of(tile), HasSubstr("predicate must be a scalar"));
}

TEST(SemanticsFixes, NegativeShapesAreRefused) {
  auto bad = [] {
    pl::pallas_call([](pl::Ref o) { o[pl::all] = pl::sum(pl::broadcast_to(pl::Value(1.f), {-5, -3})) + pl::zeros({4}); },
                    pl::ShapeDtype({4}, pl::f32), {.name = "neg_shape"})({});
  };
  std::string m = error_of(bad);
  EXPECT_THAT(m, HasSubstr("neg_shape"));
  EXPECT_THAT(m, HasSubstr("negative dimension"));
}

TEST(SemanticsFixes, WritingAScalarPrefetchRefLeavesTheCallersArray) {
  auto call = pl::pallas_call(
      [](pl::Ref s, pl::Ref x, pl::Ref o) {
        s[0] = pl::Value(7);
        o[pl::all] = x[pl::all];
      },
      pl::ShapeDtype({4}, pl::f32), {.grid = {2}, .num_scalar_prefetch = 1});
  pl::Array s = pl::Array::from_vector(std::vector<int32_t>{0});
  call(s, iota_f32(4));
  EXPECT_EQ(s.to_vector<int32_t>(), std::vector<int32_t>{0});
}
