// The blockwise-elementwise GPU lowering: which calls it takes and that its kernels compile
// for sm_90a with NVRTC (no GPU needed). Running them is checked on the H200.
#ifdef PALLAS_HAVE_CUDA
#include <gtest/gtest.h>

#include "pallas/kernels.h"
#include "src/backends/cuda/compile.h"
#include "src/backends/cuda/lower_elementwise.h"

namespace pl = pallas;

namespace {
const pl::core::PallasCall& traced(const pl::Call& c, std::vector<pl::ShapeDtype> in) {
  c.trace(in);
  return c.state()->get_traced();
}
pl::BlockSpec blk(int64_t b) {
  return pl::BlockSpec({b}, [](pl::Value i) { return pl::idx(i); });
}
}  // namespace

TEST(CudaElementwise, LowersAndCompilesEveryDtypeFamily) {
  for (pl::DType t : {pl::f32, pl::f16, pl::bf16, pl::f64, pl::i32, pl::u8, pl::i64}) {
    auto call = pl::pallas_call(
        [t](pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref c) {
          pl::Value a = x[pl::all], b = y[pl::all];
          pl::Value r = pl::is_float(t) ? pl::exp(a) * b + pl::maximum(a, b) / 3 : (a / b) % 7 + (a << 1) - pl::abs(b);
          o[pl::all] = pl::where(a < b, r, a + pl::program_id(0)).astype(t);
          c[pl::all] = (a == b).astype(pl::i32) + pl::iota(pl::i32, {100}, 0);
        },
        {pl::ShapeDtype({1000}, t), pl::ShapeDtype({1000}, pl::i32)},
        {.grid = {10}, .in_specs = {blk(100), blk(100)}, .out_specs = {blk(100), blk(100)}});
    std::string why;
    auto plan = pl::cuda::lower_elementwise(traced(call, {{{1000}, t}, {{1000}, t}}), &why);
    ASSERT_TRUE(plan) << pl::dtype_name(t) << ": " << why;
    EXPECT_EQ(plan->programs, 10);
    EXPECT_EQ(plan->block_elems, 100);
    EXPECT_NO_THROW(pl::cuda::compile(plan->source, plan->entry, "sm_90a", "test", false)) << plan->source;
  }
}

TEST(CudaElementwise, EdgeBlocksSqueezedDimsAnd2DGrids) {
  auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::sqrt(x[pl::all]) + 1.0f; },
                              pl::ShapeDtype({3, 50, 70}, pl::f32),
                              {.grid = {3, 2, 3},
                               .in_specs = {pl::BlockSpec({pl::squeezed, 32, 32}, [](pl::Value b, pl::Value i, pl::Value j) { return pl::idx(b, i, j); })},
                               .out_specs = {pl::BlockSpec({pl::squeezed, 32, 32}, [](pl::Value b, pl::Value i, pl::Value j) { return pl::idx(b, i, j); })}});
  std::string why;
  auto plan = pl::cuda::lower_elementwise(traced(call, {{{3, 50, 70}, pl::f32}}), &why);
  ASSERT_TRUE(plan) << why;
  EXPECT_EQ(plan->programs, 18);
  EXPECT_NO_THROW(pl::cuda::compile(plan->source, plan->entry, "sm_90a", "test", false));
}

TEST(CudaElementwise, RefusesWhatItCannotLowerWithAReason) {
  std::string why;
  auto sm = pl::kernels::softmax(64, 128, pl::f32);
  EXPECT_FALSE(pl::cuda::lower_elementwise(traced(sm, {{{64, 128}, pl::f32}}), &why));
  EXPECT_NE(why.find("reduce_max"), std::string::npos) << why;
  auto masked = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) { pl::store(o, {pl::ds(0, 8)}, x[pl::all], {.mask = pl::arange(8) < 3}); },
      pl::ShapeDtype({8}, pl::f32));
  EXPECT_FALSE(pl::cuda::lower_elementwise(traced(masked, {{{8}, pl::f32}}), &why));
  EXPECT_NE(why.find("whole block"), std::string::npos) << why;
}
#endif
