#include <gtest/gtest.h>

#include <pallas/pallas.h>

namespace pl = pallas;

TEST(Smoke, VectorAdd) {
  auto add_kernel = [](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; };
  pl::Array x = pl::Array::from_vector(std::vector<float>(1024, 1.f), {1024});
  pl::Array y = pl::random::normal({1024}, pl::f32, 0);
  auto add = pl::pallas_call(add_kernel, pl::ShapeDtype({1024}, pl::f32),
                             {.grid = {8},
                              .in_specs = {pl::BlockSpec({128}, [](pl::Value i) { return pl::idx(i); }),
                                           pl::BlockSpec({128}, [](pl::Value i) { return pl::idx(i); })},
                              .out_specs = {pl::BlockSpec({128}, [](pl::Value i) { return pl::idx(i); })}});
  pl::Array out = add(x, y);
  auto o = out.to_vector<float>();
  auto yv = y.to_vector<float>();
  for (int i = 0; i < 1024; ++i) ASSERT_FLOAT_EQ(o[i], 1.f + yv[i]);
  std::printf("%s\n", add.jaxpr_text().c_str());
}
