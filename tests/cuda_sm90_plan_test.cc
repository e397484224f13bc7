// The sm_90a fast paths: which calls they take, and that their generated kernels compile
// to sm_90a cubins with NVRTC (no GPU needed). Running them is checked on the H200.
#ifdef PALLAS_HAVE_CUDA
#include <gtest/gtest.h>
#include <nvrtc.h>

#include <cmath>
#include <vector>

#include "pallas/kernels.h"
#include "src/backends/cuda/sm90/attention_plan.h"
#include "src/backends/cuda/sm90/matmul_plan.h"

namespace pl = pallas;
using pl::cuda::sm90::plan_attention;
using pl::cuda::sm90::plan_matmul;

namespace {

size_t cubin_size(const std::string& src, std::string* log) {
  nvrtcProgram prog;
  EXPECT_EQ(nvrtcCreateProgram(&prog, src.c_str(), "fast_path.cu", 0, nullptr, nullptr), NVRTC_SUCCESS);
  const char* opts[] = {"--gpu-architecture=sm_90a", "-std=c++17", "-default-device"};
  nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  log->resize(n);
  nvrtcGetProgramLog(prog, log->data());
  size_t cub = 0;
  if (r == NVRTC_SUCCESS) nvrtcGetCUBINSize(prog, &cub);
  nvrtcDestroyProgram(&prog);
  return cub;
}

const pl::core::PallasCall& traced(const pl::Call& c, std::vector<pl::ShapeDtype> in) {
  c.trace(in);
  return c.state()->get_traced();
}

}  // namespace

TEST(Sm90Matmul, TakesTheLibraryMatmulWithAnyBlocks) {
  for (auto [bm, bn, bk] : std::vector<std::tuple<int, int, int>>{{64, 64, 32}, {128, 128, 64}, {32, 256, 128}}) {
    auto call = pl::kernels::matmul(512, 512, 1024, pl::bf16, pl::bf16, {.block_m = bm, .block_n = bn, .block_k = bk});
    std::string why;
    auto plan = plan_matmul(traced(call, {{{512, 1024}, pl::bf16}, {{1024, 512}, pl::bf16}}), &why);
    ASSERT_TRUE(plan) << why;
    EXPECT_EQ(plan->m, 512);
    EXPECT_EQ(plan->k, 1024);
    EXPECT_EQ(plan->bn, 256);
    EXPECT_EQ(plan->grid, (512 / 128) * (512 / 256));
  }
}

TEST(Sm90Matmul, CompilesForEachDtype) {
  for (auto [in, out] : std::vector<std::pair<pl::DType, pl::DType>>{
           {pl::bf16, pl::f32}, {pl::bf16, pl::bf16}, {pl::f16, pl::f16}, {pl::f16, pl::f32}}) {
    auto call = pl::kernels::matmul(256, 128, 128, in, out);
    auto plan = plan_matmul(traced(call, {{{256, 128}, in}, {{128, 128}, in}}));
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->bn, 128);
    std::string log;
    EXPECT_GT(cubin_size(plan->source, &log), 0u) << log;
  }
}

TEST(Sm90Matmul, LeavesOtherKernelsToTheGeneralLowering) {
  std::string why;
  // f32 inputs (tf32 path not specialised), odd shapes, other kernels.
  auto f32 = pl::kernels::matmul(256, 256, 256, pl::f32, pl::f32);
  EXPECT_FALSE(plan_matmul(traced(f32, {{{256, 256}, pl::f32}, {{256, 256}, pl::f32}}), &why));
  EXPECT_NE(why.find("bf16"), std::string::npos) << why;
  auto odd = pl::kernels::matmul(96, 256, 256, pl::bf16, pl::f32, {.block_m = 32});
  EXPECT_FALSE(plan_matmul(traced(odd, {{{96, 256}, pl::bf16}, {{256, 256}, pl::bf16}}), &why));
  auto sm = pl::kernels::softmax(128, 128, pl::bf16);
  EXPECT_FALSE(plan_matmul(traced(sm, {{{128, 128}, pl::bf16}}), &why));
  // A matmul kernel with extra work in the epilogue is not the pattern.
  auto relu = pl::pallas_call(
      [](pl::Ref a, pl::Ref b, pl::Ref o) {
        pl::Value acc = pl::fori_loop(0, 2, pl::zeros({128, 128}), [&](pl::Value k, pl::Value acc) {
          return acc + pl::dot(a(pl::all, pl::ds(k * 64, 64)), b(pl::ds(k * 64, 64), pl::all));
        });
        o[pl::all] = pl::maximum(acc, 0.f);
      },
      pl::ShapeDtype({128, 128}, pl::f32),
      {.grid = {1, 1},
       .in_specs = {pl::BlockSpec({128, 128}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
                    pl::BlockSpec({128, 128}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({128, 128}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })}});
  EXPECT_FALSE(plan_matmul(traced(relu, {{{128, 128}, pl::bf16}, {{128, 128}, pl::bf16}}), &why));
}

TEST(Sm90Attention, TakesTheLibraryKernelCausalOrNot) {
  for (bool causal : {false, true})
    for (int64_t bq : {64, 128}) {
      auto call = pl::kernels::flash_attention(2, 4, 512, 128, pl::bf16, {.block_q = bq, .block_k = 64, .causal = causal});
      pl::ShapeDtype s({2, 4, 512, 128}, pl::bf16);
      std::string why;
      auto plan = plan_attention(traced(call, {s, s, s}), &why);
      ASSERT_TRUE(plan) << why;
      EXPECT_EQ(plan->causal, causal);
      EXPECT_EQ(plan->grid_x, 4);
      EXPECT_EQ(plan->grid_y, 8);
      EXPECT_NEAR(plan->scale, 1.0 / std::sqrt(128.0), 1e-12);
      std::string log;
      EXPECT_GT(cubin_size(plan->source, &log), 0u) << log;
    }
}

TEST(Sm90Attention, LeavesOtherShapesAndKernels) {
  std::string why;
  auto d64 = pl::kernels::flash_attention(1, 2, 256, 64, pl::bf16);
  pl::ShapeDtype s({1, 2, 256, 64}, pl::bf16);
  EXPECT_FALSE(plan_attention(traced(d64, {s, s, s}), &why));
  EXPECT_NE(why.find("head_dim"), std::string::npos) << why;
  auto mm = pl::kernels::matmul(256, 256, 256, pl::bf16, pl::f32);
  EXPECT_FALSE(plan_attention(traced(mm, {{{256, 256}, pl::bf16}, {{256, 256}, pl::bf16}}), &why));
}
#endif
