// The sm_90a attention fast path: which calls it takes, and that its generated kernel compiles
// to an sm_90a cubin with NVRTC (no GPU needed). Running it is checked on the H200.
#ifdef PALLAS_HAVE_CUDA
#include <gtest/gtest.h>
#include <nvrtc.h>

#include <cmath>
#include <vector>

#include "pallas/kernels.h"
#include "src/backends/cuda/sm90/attention_plan.h"

namespace pl = pallas;
using pl::cuda::sm90::plan_attention;

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
