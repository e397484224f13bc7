// Golden tests of the CUDA backend's planning passes (src/backends/cuda/plan/passes.h): for a
// kernel, the plan after the passes up to N, and pass N's section of it. The blocked-layout,
// value-layouts and grid-pipeline passes have more in tests/cuda_layout_test.cc. No GPU needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <pallas/kernels.h>
#include <pallas/pallas.h>

#include "src/core/pallas_call.h"
#ifdef PALLAS_TEST_HAVE_CUDA
#include "src/backends/cuda/lower.h"
#include "src/backends/cuda/plan/loops.h"
#include "src/backends/cuda/plan/passes.h"

namespace pl = pallas;
namespace cu = pallas::cuda;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using V = pl::Value;

// The index of pass `name` in the list, 1-based (what plan_kernel's up_to counts).
int pass_number(const std::string& name) {
  const auto& passes = cu::plan_passes();
  for (size_t i = 0; i < passes.size(); ++i)
    if (passes[i].name == name) return static_cast<int>(i) + 1;
  ADD_FAILURE() << "no pass " << name;
  return 0;
}

// The section pass `name` wrote, running the passes up to it (and no further) for arch.
std::string section(pl::Call call, const std::vector<pl::ShapeDtype>& args, const std::string& name, const std::string& arch = "sm_90a") {
  call.trace(args);
  int n = pass_number(name);
  cu::KernelPlan p = cu::plan_kernel(call.state()->get_traced(), cu::target_from_env("test", arch), true, n);
  EXPECT_EQ(p.sections.size(), static_cast<size_t>(n));
  if (p.sections.empty()) return "";
  EXPECT_EQ(p.sections.back().first, name);
  return p.sections.back().second;
}

pl::Call matmul(int64_t bm, int64_t bn, int64_t bk, pl::DType t, int warps, pl::Precision prec = pl::Precision::Default) {
  const pl::DType acc_t = t == pl::f64 ? pl::f64 : pl::f32;
  return pl::pallas_call(
      [=](pl::Ref a, pl::Ref b, pl::Ref o) {
        V acc = pl::fori_loop(0, int(512 / bk), V(pl::zeros({bm, bn}, acc_t)), [&](V k, V acc) {
          return acc + pl::dot(a(pl::all, pl::ds(k * bk, bk)), b(pl::ds(k * bk, bk), pl::all), {.precision = prec});
        });
        o[pl::all] = acc;
      },
      pl::ShapeDtype({512, 512}, acc_t),
      {.grid = {512 / bm, 512 / bn},
       .in_specs = {pl::BlockSpec({bm, 512}, [](V i, V) { return pl::idx(i, 0); }),
                    pl::BlockSpec({512, bn}, [](V, V j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({bm, bn}, [](V i, V j) { return pl::idx(i, j); })},
       .compiler_params = {.num_warps = warps}});
}
std::vector<pl::ShapeDtype> mm_args(pl::DType t) { return {pl::ShapeDtype({512, 512}, t), pl::ShapeDtype({512, 512}, t)}; }

TEST(CudaPasses, TheListInOrder) {
  std::vector<std::string> names;
  for (const cu::PlanPass& p : cu::plan_passes()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"kernel", "blocked-layout", "dot-kinds", "value-layouts", "scratch", "resident-outputs",
                                             "grid-pipeline", "shared-memory", "refs", "loop-plans", "dot-operands",
                                             "loop-shared-memory"}));
}

TEST(CudaPasses, KernelTakesThreadsStagesAndTheTargetsFeatures) {
  auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({1024}, pl::f32),
                           {.name = "copy", .compiler_params = {.num_warps = 8, .num_stages = 2}});
  std::string s = section(k, {pl::ShapeDtype({1024}, pl::f32)}, "kernel");
  EXPECT_THAT(s, ::testing::StartsWith("pallas_copy_"));
  EXPECT_THAT(
      s, HasSubstr(": 256 threads (8 warps), 2 stages, target sm_90a maps aligned vec=0, wgmma, tma, 232448 bytes of shared memory\n"));
  EXPECT_THAT(section(k, {pl::ShapeDtype({1024}, pl::f32)}, "kernel", "sm_80"),
              HasSubstr("target sm_80 maps aligned vec=0, 166912 bytes of shared memory\n"));
}

// Without num_warps: 4 for a kernel with a dot; a kernel without one takes warps, up to 16, so
// that its largest value is at most 32 elements a thread.
TEST(CudaPasses, DefaultWarpsFollowTheLargestValueWithoutADot) {
  auto rows = [](int64_t r, int warps) {
    return pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * pl::sum(x[pl::all], {1}, true); },
                           pl::ShapeDtype({64, 4096}, pl::f32),
                           {.grid = {64 / r},
                            .in_specs = {pl::BlockSpec({r, 4096}, [](pl::Value i) { return pl::idx(i, 0); })},
                            .out_specs = {pl::BlockSpec({r, 4096}, [](pl::Value i) { return pl::idx(i, 0); })},
                            .compiler_params = {.num_warps = warps}});
  };
  std::vector<pl::ShapeDtype> x{pl::ShapeDtype({64, 4096}, pl::f32)};
  EXPECT_THAT(section(rows(1, 0), x, "kernel"), HasSubstr(": 128 threads (4 warps)"));
  EXPECT_THAT(section(rows(2, 0), x, "kernel"), HasSubstr(": 256 threads (8 warps)"));
  EXPECT_THAT(section(rows(4, 0), x, "kernel"), HasSubstr(": 512 threads (16 warps)"));
  EXPECT_THAT(section(rows(16, 0), x, "kernel"), HasSubstr(": 512 threads (16 warps)"));
  EXPECT_THAT(section(rows(4, 2), x, "kernel"), HasSubstr(": 64 threads (2 warps)"));  // given: taken
  // a dot: 4, whatever the sizes
  EXPECT_THAT(section(matmul(128, 128, 64, pl::bf16, 0), mm_args(pl::bf16), "kernel"), HasSubstr(": 128 threads (4 warps)"));
}

// The symbol: one name for a kernel's images for several archs (an AOT library looks them all up
// by one name), another for other stages or switches (dumps and profiles keep them apart).
TEST(CudaPasses, TheSymbolIsTheSameAcrossArchsOnly) {
  auto name = [](int stages, const std::string& arch, bool tensor_maps = false) {
    auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({1024}, pl::f32),
                             {.name = "sym", .compiler_params = {.num_stages = stages}});
    k.trace({pl::ShapeDtype({1024}, pl::f32)});
    return cu::plan_kernel(k.state()->get_traced(), cu::target_from_env("test", arch, tensor_maps), true, 1).name;
  };
  EXPECT_EQ(name(2, "sm_90a"), name(2, "sm_80"));
  EXPECT_NE(name(2, "sm_90a"), name(3, "sm_90a"));
  EXPECT_NE(name(2, "sm_90a", false), name(2, "sm_90a", true));
}

TEST(CudaPasses, DotKindsByDtypeRowsAndTarget) {
  // bf16, 128 rows, 4 warps on sm_90a: wgmma, one tile of 64 rows per warpgroup
  EXPECT_EQ(section(matmul(128, 128, 64, pl::bf16, 4), mm_args(pl::bf16), "dot-kinds"),
            "dot 0: wgmma 128x128x64, 1 warpgroups, tiles 2x1 of 64x128, 2 per worker, result in fragments\n");
  // fewer than 64 rows: mma.sync, 16-row tiles of up to 32 columns over the warps
  EXPECT_EQ(section(matmul(32, 64, 32, pl::bf16, 4), mm_args(pl::bf16), "dot-kinds"),
            "dot 0: mma.sync 32x64x32, 4 warps, tiles 2x2 of 16x32, 1 per worker, result in fragments (fewer than 64 rows)\n");
  // sm_80: no wgmma
  EXPECT_EQ(section(matmul(128, 128, 64, pl::bf16, 4), mm_args(pl::bf16), "dot-kinds", "sm_80"),
            "dot 0: mma.sync 128x128x64, 4 warps, tiles 8x4 of 16x32, 8 per worker, result in fragments (no wgmma on sm_80)\n");
  // f32 at Precision::Highest: SIMT (tf32 would round it); f64: no tensor-core instruction
  EXPECT_EQ(section(matmul(64, 64, 32, pl::f32, 4, pl::Precision::Highest), mm_args(pl::f32), "dot-kinds"),
            "dot 0: simt 64x64x32 (Precision::Highest f32 (tf32 would round it))\n");
  EXPECT_EQ(section(matmul(64, 64, 32, pl::f64, 4), mm_args(pl::f64), "dot-kinds"),
            "dot 0: simt 64x64x32 (no tensor-core instruction for f64)\n");
  // 256 columns: one n256 wgmma a tile on one warpgroup; a 64-row block on more warpgroups has
  // its columns split so that each takes a tile (none idles holding the accumulator's registers)
  EXPECT_EQ(section(matmul(64, 256, 64, pl::bf16, 4), mm_args(pl::bf16), "dot-kinds"),
            "dot 0: wgmma 64x256x64, 1 warpgroups, tiles 1x1 of 64x256, 1 per worker, result in fragments\n");
  EXPECT_EQ(section(matmul(64, 256, 64, pl::bf16, 8), mm_args(pl::bf16), "dot-kinds"),
            "dot 0: wgmma 64x256x64, 2 warpgroups, tiles 1x2 of 64x128, 1 per worker, result in fragments\n");
  EXPECT_EQ(section(matmul(64, 256, 64, pl::bf16, 16), mm_args(pl::bf16), "dot-kinds"),
            "dot 0: wgmma 64x256x64, 4 warpgroups, tiles 1x4 of 64x64, 1 per worker, result in fragments\n");
  // past 256 threads a thread has too few registers for n256 (ptxas refused it): n128 tiles
  EXPECT_EQ(section(matmul(128, 256, 64, pl::bf16, 16), mm_args(pl::bf16), "dot-kinds"),
            "dot 0: wgmma 128x256x64, 4 warpgroups, tiles 2x2 of 64x128, 1 per worker, result in fragments\n");
  // i8: wgmma's n in multiples of 16, so a 64 x 16 block cannot split over two warpgroups
  EXPECT_EQ(section(matmul(64, 16, 64, pl::i8, 8), mm_args(pl::i8), "dot-kinds"),
            "dot 0: wgmma 64x16x64, 2 warpgroups, tiles 1x1 of 64x16, 1 per worker, result in fragments\n");
  // PALLAS_SPREAD_SMALL_DOTS: a 16 x 32 mma.sync block on 4 warps takes four 16 x 8 tiles
  pl::Call small = matmul(16, 32, 32, pl::bf16, 4);
  EXPECT_EQ(section(small, mm_args(pl::bf16), "dot-kinds"),
            "dot 0: mma.sync 16x32x32, 4 warps, tiles 1x1 of 16x32, 1 per worker, result in fragments (fewer than 64 rows)\n");
  cu::Target spread = cu::target_from_env("test", "sm_90a");
  spread.spread_small_dots = true;
  cu::KernelPlan p = cu::plan_kernel(small.state()->get_traced(), spread, true, pass_number("dot-kinds"));
  EXPECT_EQ(p.sections.back().second,
            "dot 0: mma.sync 16x32x32, 4 warps, tiles 1x4 of 16x8, 1 per worker, result in fragments (fewer than 64 rows)\n");
}

TEST(CudaPasses, ScratchGoesAtTheBottomAligned) {
  auto k = pl::pallas_call(
      [](pl::Ref x, pl::Ref o, pl::Ref s0, pl::Ref s1) {
        s0[pl::all] = x[pl::all];
        s1[pl::all] = pl::zeros({3}, pl::f32);
        o[pl::all] = s0[pl::all];
      },
      pl::ShapeDtype({100}, pl::f32), {.scratch_shapes = {pl::ShapeDtype({100}, pl::f32), pl::ShapeDtype({3}, pl::f32)}});
  EXPECT_EQ(section(k, {pl::ShapeDtype({100}, pl::f32)}, "scratch"),
            "scratch 0 f32[100]: shared memory [0, 400)\n"
            "scratch 1 f32[3]: shared memory [400, 412)\n");
}

// The accumulator of a K grid axis stays in shared memory; a block that moves along the
// sequential axis does not; one too large for 48 KiB does not.
TEST(CudaPasses, ResidentOutputsOfTheSequentialLoop) {
  auto ksum = [](int64_t rows) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref o) {
          pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros(o.shape(), pl::f32); });
          o[pl::all] += x[pl::all];
        },
        pl::ShapeDtype({rows, 128}, pl::f32),
        {.grid = {1, 4},
         .in_specs = {pl::BlockSpec({rows, 128}, [](V i, V k) { return pl::idx(i, k); })},
         .out_specs = {pl::BlockSpec({rows, 128}, [](V i, V) { return pl::idx(i, 0); })}});
  };
  EXPECT_EQ(section(ksum(8), {pl::ShapeDtype({8, 512}, pl::f32)}, "resident-outputs"),
            "output 0 block f32[8,128]: resident in shared memory [0, 4096) over the sequential loop\n");
  EXPECT_EQ(section(ksum(128), {pl::ShapeDtype({128, 512}, pl::f32)}, "resident-outputs"),
            "output 0 block f32[128,128]: in global memory (65536 bytes above 0 pass the 48 KiB for resident blocks)\n");
  auto moving = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({512}, pl::f32),
                                {.grid = {4},
                                 .dimension_semantics = {pl::sequential},
                                 .in_specs = {pl::BlockSpec({128}, [](V i) { return pl::idx(i); })},
                                 .out_specs = {pl::BlockSpec({128}, [](V i) { return pl::idx(i); })}});
  EXPECT_EQ(section(moving, {pl::ShapeDtype({512}, pl::f32)}, "resident-outputs"),
            "output 0 block f32[128]: in global memory (its block changes along the sequential axes)\n");
  auto parallel = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({512}, pl::f32),
                                  {.grid = {4},
                                   .in_specs = {pl::BlockSpec({128}, [](V i) { return pl::idx(i); })},
                                   .out_specs = {pl::BlockSpec({128}, [](V i) { return pl::idx(i); })}});
  EXPECT_EQ(section(parallel, {pl::ShapeDtype({512}, pl::f32)}, "resident-outputs"), "none (no sequential grid axis)\n");
}

TEST(CudaPasses, SharedMemoryListsTheRegionsBelowTheBody) {
  auto k = pl::pallas_call(
      [](pl::Ref x, pl::Ref o, pl::Ref s) {
        pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros(o.shape(), pl::f32); });
        s[pl::all] = x[pl::all];
        o[pl::all] += s[pl::all];
      },
      pl::ShapeDtype({8, 128}, pl::f32),
      {.grid = {1, 4},
       .in_specs = {pl::BlockSpec({8, 128}, [](V i, V k) { return pl::idx(i, k); })},
       .out_specs = {pl::BlockSpec({8, 128}, [](V i, V) { return pl::idx(i, 0); })},
       .scratch_shapes = {pl::ShapeDtype({8, 128}, pl::f32)}});
  // the input's 4 KiB block is pipelined over the sequential axis by TMA (3 stages)
  EXPECT_EQ(section(k, {pl::ShapeDtype({8, 512}, pl::f32)}, "shared-memory"),
            "[0, 4096) scratch 0 f32[8,128]\n"
            "[4096, 8192) resident output 0\n"
            "[8192, 20504) grid pipeline: 3 stages and their mbarriers\n"
            "the body's shared memory from 20504\n");
  EXPECT_EQ(section(k, {pl::ShapeDtype({8, 512}, pl::f32)}, "shared-memory", "sm_80"),
            "[0, 4096) scratch 0 f32[8,128]\n"
            "[4096, 8192) resident output 0\n"
            "the body's shared memory from 8192\n");
}

// Input blocks in global memory are refs the loop pipeliner's TMA copies can address; a loop
// body's refs are the refs they are bound to; an input the grid pipeline stages is not one.
TEST(CudaPasses, RefsFollowTheirBindingsIntoLoops) {
  pl::Call mm = matmul(128, 128, 64, pl::bf16, 4);
  EXPECT_EQ(section(mm, mm_args(pl::bf16), "refs"),
            "input 0: a block of array parameter p0 bf16[512,512]\n"
            "input 1: a block of array parameter p1 bf16[512,512]\n");
  cu::KernelPlan p = cu::plan_kernel(mm.state()->get_traced(), cu::target_from_env("test", "sm_90a"), true, pass_number("refs"));
  const pallas::ir::Jaxpr& k = *mm.state()->get_traced().kernel;
  const pallas::ir::Eqn* fori = nullptr;
  for (const auto& e : k.eqns)
    if (e.prim->name == "fori_loop") fori = &e;
  ASSERT_NE(fori, nullptr);
  std::vector<int> params;  // the body's ref operands, as bound
  for (const auto& v : fori->params.get<pallas::ir::JaxprPtr>("body")->invars)
    if (v.aval.is_ref) params.push_back(p.refs.count(v.id) ? p.refs.at(v.id).param : -2);
  std::sort(params.begin(), params.end());
  EXPECT_EQ(params, (std::vector<int>{0, 1}));  // the body captures both inputs' refs
  // a block the grid pipeline copies into shared memory (column sums over a sequential axis)
  auto colsum = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({1, 32}); });
        o[pl::all] += pl::sum(x[pl::all], {0}, true);
      },
      pl::ShapeDtype({1, 4096}, pl::f32),
      {.grid = {128, 64},
       .in_specs = {pl::BlockSpec({256, 32}, [](V j, V i) { return pl::idx(i, j); })},
       .out_specs = {pl::BlockSpec({1, 32}, [](V j, V) { return pl::idx(0, j); })}});
  EXPECT_EQ(section(colsum, {pl::ShapeDtype({16384, 4096}, pl::f32)}, "refs"), "input 0: read from the grid pipeline's stage\n");
}

// The K loop of a matmul: its carry stays in fragments, both loads are pipelined by TMA into
// the dot's tiles, the dot stays in flight; nothing on sm_80 or for SIMT dots.
TEST(CudaPasses, LoopPlansOfAKLoop) {
  EXPECT_EQ(section(matmul(128, 128, 64, pl::bf16, 8), mm_args(pl::bf16), "loop-plans"),
            "loop: 3 stages, 4 buffers of 32768 bytes, copies 2 iteration(s) ahead, the dot in flight across iterations, no barrier per "
            "iteration\n"
            "  pipelined by TMA: operand A (bf16[128,64], K-major) of the dot giving f32[128,128]\n"
            "  pipelined by TMA: operand B (bf16[64,128], MN-major) of the dot giving f32[128,128]\n");
  EXPECT_EQ(section(matmul(128, 128, 64, pl::bf16, 8), mm_args(pl::bf16), "loop-plans", "sm_80"), "");
  EXPECT_EQ(section(matmul(64, 64, 32, pl::f32, 4, pl::Precision::Highest), mm_args(pl::f32), "loop-plans"), "");
  // the plan itself: one loop, its carry in fragments, not rotated (one dot)
  pl::Call mm = matmul(128, 128, 64, pl::bf16, 8);
  mm.trace(mm_args(pl::bf16));
  cu::KernelPlan p = cu::plan_kernel(mm.state()->get_traced(), cu::target_from_env("test", "sm_90a"));
  ASSERT_EQ(p.loops.size(), 1u);
  const cu::LoopPlan& L = *p.loops.begin()->second;
  ASSERT_EQ(L.carries.size(), 1u);
  EXPECT_TRUE(L.carries[0].has_value());
  EXPECT_FALSE(L.rotated);
  EXPECT_EQ(L.pipeline.stages, 3);
  EXPECT_NE(L.pipeline.dot_in_flight, nullptr);
}

// A tile past the target's shared memory goes through global scratch (the kernel's last
// parameter, one region per CUDA block), not refused; the kernel's shared memory stays within
// the target's limit. (Run on both backends: ShapeOps.TileLargerThanSharedMemory.)
// A loop over row blocks of q and g with k and v fixed (an attention backward's dK/dV loop,
// written with the key rows first): each of q and g feeds two dots, once K-major and once
// MN-major, and is copied once a step into a tile both read; the row statistic l, broadcast
// over the columns of a dot's fragments, is read slot by slot instead of exchanged.
pl::Call two_readers_loop() {
  using V = pl::Value;
  return pl::pallas_call(
      [](pl::Ref q, pl::Ref g, pl::Ref l, pl::Ref k, pl::Ref v, pl::Ref dk, pl::Ref dv) {
        V kb = k[pl::all], vb = v[pl::all];
        auto outs = pl::fori_loop(0, 8, std::vector<V>{pl::zeros({64, 128}), pl::zeros({64, 128})}, [&](V i, std::vector<V> c) {
          V qb = q(pl::ds(i * 64, 64), pl::all), gb = g(pl::ds(i * 64, 64), pl::all);
          V p = pl::exp(pl::dot(kb, qb, {.trans_b = true}) - pl::expand_dims(l(pl::ds(i * 64, 64)), 0));
          V dp = pl::dot(vb, gb, {.trans_b = true});
          return std::vector<V>{c[0] + pl::dot((p * dp).astype(pl::bf16), qb), c[1] + pl::dot(p.astype(pl::bf16), gb)};
        });
        dk[pl::all] = outs[0];
        dv[pl::all] = outs[1];
      },
      std::vector<pl::ShapeDtype>{pl::ShapeDtype({64, 128}, pl::f32), pl::ShapeDtype({64, 128}, pl::f32)},
      {.name = "two_readers", .compiler_params = {.num_warps = 4, .num_stages = 2}});
}
std::vector<pl::ShapeDtype> two_readers_args() {
  pl::ShapeDtype rows({512, 128}, pl::bf16), kv({64, 128}, pl::bf16);
  return {rows, rows, pl::ShapeDtype({512}, pl::f32), kv, kv};
}

TEST(CudaPasses, LoadsReadByTwoDotsArePipelinedOnce) {
  EXPECT_EQ(section(two_readers_loop(), two_readers_args(), "loop-plans"),
            "loop: operand bf16[64,128] stays in shared memory (K-major)\n"
            "loop: operand bf16[64,128] stays in shared memory (K-major)\n"
            "loop: 2 stages, 2 buffers of 32768 bytes, copies 1 iteration(s) ahead, no barrier per iteration\n"
            "  pipelined by TMA: operand B (bf16[64,128], K-major) of the dot giving f32[64,64], and operand B of the dot giving f32[64,128]\n"
            "  pipelined by TMA: operand B (bf16[64,128], K-major) of the dot giving f32[64,64], and operand B of the dot giving f32[64,128]\n");
  EXPECT_THAT(section(two_readers_loop(), two_readers_args(), "dot-operands"),
              HasSubstr("dot bf16[64,64] x bf16[64,128]: wgmma m64n128k16, 1 tile(s) over 1 warpgroup(s); A in registers (its fragments), B "
                        "MN-major in shared memory\n"));
  EXPECT_THAT(section(two_readers_loop(), two_readers_args(), "value-layouts"),
              HasSubstr("vector loads read where a broadcast puts them in fragments\n"
                        "  load f32[64] read again by its broadcast to f32[64,64]\n"));
}

// Each loop's resident operand tiles, then its stage buffers, sit above the exchange base of
// the scope holding it; its body's exchanges (and the loops nested in it) start above them.
TEST(CudaPasses, LoopSharedMemoryStacksEachLoopsRegions) {
  EXPECT_EQ(section(matmul(128, 128, 64, pl::bf16, 8), mm_args(pl::bf16), "loop-shared-memory"),
            "loop 1 (depth 0): stage buffers [0, 132144); its body's exchanges from 132144\n");
  EXPECT_EQ(section(two_readers_loop(), two_readers_args(), "loop-shared-memory"),
            "loop 1 (depth 0): resident operand tiles [0, 33792), stage buffers [33792, 100376); its body's exchanges from 100384\n");
  // grouped matmul: the K loop is nested in the loop over the groups a row block meets
  pl::Call g = pl::kernels::grouped_matmul(512, 256, 256, 4, pl::bf16, pl::bf16);
  EXPECT_EQ(section(g, {pl::ShapeDtype({4}, pl::i32), pl::ShapeDtype({512, 256}, pl::bf16), pl::ShapeDtype({4, 256, 256}, pl::bf16)},
                    "loop-shared-memory"),
            "loop 3 (depth 1): stage buffers [0, 132144); its body's exchanges from 132144\n");
  EXPECT_EQ(section(matmul(128, 128, 64, pl::bf16, 8), mm_args(pl::bf16), "loop-shared-memory", "sm_80"), "");
  // an outer loop whose dot keeps an operand (v) in shared memory, around a pipelined K loop:
  // the inner loop's buffers start above the outer loop's tile
  pl::Call nested = pl::pallas_call(
      [](pl::Ref x, pl::Ref w, pl::Ref v, pl::Ref o) {
        V vb = v[pl::all];
        o[pl::all] = pl::fori_loop(0, 2, pl::zeros({128, 128}), [&](V j, V out) {
          V h = pl::fori_loop(0, 4, pl::zeros({128, 128}), [&](V k, V acc) {
            return acc + pl::dot(x(pl::ds(j * 128, 128), pl::ds(k * 64, 64)), w(pl::ds(k * 64, 64), pl::all));
          });
          return out + pl::dot(h.astype(pl::bf16), vb);
        });
      },
      pl::ShapeDtype({128, 128}, pl::f32), {.name = "nested", .compiler_params = {.num_warps = 8}});
  EXPECT_EQ(section(nested, {pl::ShapeDtype({256, 256}, pl::bf16), pl::ShapeDtype({256, 128}, pl::bf16), pl::ShapeDtype({128, 128}, pl::bf16)},
                    "loop-shared-memory"),
            "loop 1 (depth 0): resident operand tiles [0, 33792); its body's exchanges from 33792\n"
            "loop 2 (depth 1): stage buffers [33792, 165936); its body's exchanges from 165936\n");
}

// mma.sync dots (decode attention: a query group of 4 rows) take the loop pipeline too: K (rows
// are keys, the dot's N: K-major) and V (rows are keys, the second dot's K: MN-major) go by TMA
// into stage tiles the dots read where they are, q stays resident; paged attention's pages come
// from its block table, a scalar load the copies of a later iteration read ahead.
TEST(CudaPasses, LoopPlansOfMmaSyncDots) {
  pl::kernels::DecodeAttention d = pl::kernels::decode_attention(2, 8, 256, 128, pl::bf16, {.kv_heads = 2});
  std::vector<pl::ShapeDtype> args{pl::ShapeDtype({2}, pl::i32), pl::ShapeDtype({2, 8, 128}, pl::bf16),
                                   pl::ShapeDtype({2, 2, 256, 128}, pl::bf16), pl::ShapeDtype({2, 2, 256, 128}, pl::bf16)};
  EXPECT_EQ(section(d.partial, args, "loop-plans"),
            "loop: operand bf16[4,128] stays in shared memory (K-major)\n"
            "loop: 3 stages, 3 buffers of 16384 bytes, copies 2 iteration(s) ahead, no barrier per iteration\n"
            "  pipelined by TMA: operand B (bf16[32,128], K-major) of the dot giving f32[4,32]\n"
            "  pipelined by TMA: operand B (bf16[32,128], MN-major) of the dot giving f32[4,128]\n");
  EXPECT_EQ(section(d.partial, args, "dot-operands"),
            "dot bf16[4,128] x bf16[32,128]^T: mma.sync 1 tile(s) over 4 warp(s); A a resident tile, B a loop stage\n"
            "dot bf16[4,32] x bf16[32,128]: mma.sync 4 tile(s) over 4 warp(s); A written to shared memory, B a loop stage\n");
  EXPECT_EQ(section(d.partial, args, "loop-plans", "sm_80"), "");
  pl::kernels::DecodeAttention pg = pl::kernels::paged_attention(2, 8, 8, 32, 16, 128, pl::bf16, {.kv_heads = 2});
  std::vector<pl::ShapeDtype> pargs{pl::ShapeDtype({2}, pl::i32), pl::ShapeDtype({2, 8}, pl::i32), pl::ShapeDtype({2, 8, 128}, pl::bf16),
                                    pl::ShapeDtype({2, 16, 32, 128}, pl::bf16), pl::ShapeDtype({2, 16, 32, 128}, pl::bf16)};
  EXPECT_THAT(section(pg.partial, pargs, "loop-plans"), HasSubstr("  pipelined by TMA: operand B (bf16[32,128], MN-major) of the dot giving f32[4,128]\n"));
}

// An 8-bit float K loop keeps its carry in the wgmma's fragments (the dot in flight) only with
// fast accumulation; at Precision::Highest each dot is added into the f32 carry after it.
TEST(CudaPasses, Fp8CarriesAreAddedStepByStepAtHighest) {
  std::vector<pl::ShapeDtype> args{pl::ShapeDtype({256, 256}, pl::f8e4m3), pl::ShapeDtype({256, 256}, pl::f8e4m3),
                                   pl::ShapeDtype({256, 1}, pl::f32), pl::ShapeDtype({1, 256}, pl::f32)};
  EXPECT_THAT(section(pl::kernels::scaled_matmul(256, 256, 256, pl::f8e4m3, pl::bf16, {.fast_accumulation = true}), args, "loop-plans"),
              HasSubstr("the dot in flight across iterations"));
  EXPECT_THAT(section(pl::kernels::scaled_matmul(256, 256, 256, pl::f8e4m3, pl::bf16), args, "loop-plans"),
              Not(HasSubstr("the dot in flight")));
}

TEST(CudaPasses, ExchangeLargerThanSharedMemoryGoesThroughGlobalScratch) {
  auto big = [](int64_t rows) {
    auto k = pl::pallas_call(
        [](pl::Ref x, pl::Ref o) {
          o[pl::all] = pl::transpose(x[pl::all], {2, 0, 1});
        },
        pl::ShapeDtype({256, rows, 24}, pl::f32));
    k.trace({pl::ShapeDtype({rows, 24, 256}, pl::f32)});
    return cu::lower(k.state()->get_traced(), "sm_90a");
  };
  cu::Lowered L = big(16);
  EXPECT_EQ(L.global_exchange_bytes, 16u * 24 * 256 * 4);
  EXPECT_LE(L.smem_bytes, L.smem_limit);
  EXPECT_EQ(L.smem_limit, 232448u);
  EXPECT_THAT(L.source, HasSubstr("unsigned char* __restrict__ pgx)"));
  // a tile that fits stays in shared memory, and the kernel takes no such parameter
  cu::Lowered S = big(4);
  EXPECT_EQ(S.global_exchange_bytes, 0u);
  EXPECT_EQ(S.source.find("pgx"), std::string::npos);
  EXPECT_GE(S.smem_bytes, 4u * 24 * 256 * 4);
}

// A loop pipeline plans its buffers before the loop's exchanges take their place above them:
// the f32 dQ kernel of an attention backward with 128 x 128 blocks (D64, 8 warps) came out 16
// bytes over sm_90's limit and was refused at launch on an H100. Lowering now plans it again
// leaving those bytes free.
TEST(CudaPasses, LoopPipelineLeavesRoomForTheLoopsExchanges) {
  const int64_t S = 128, D = 64;
  pl::Call dq = pl::kernels::flash_attention_bwd_dq(1, 2, S, D, pl::f32);
  pl::ShapeDtype blk({1, 2, S, D}, pl::f32), row({1, 2, S}, pl::f32);
  dq.trace({blk, blk, blk, blk, row, row});
  cu::Lowered L = cu::lower(dq.state()->get_traced(), "sm_90a");
  EXPECT_LE(L.smem_bytes, L.smem_limit);
}

// PALLAS_DUMP_PASSES=dir: the plan after every pass, numbered, then the printed kernel.
TEST(CudaPasses, DumpWritesThePlanAfterEveryPass) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("pallas_dump_passes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const char* was = std::getenv("PALLAS_DUMP_PASSES");  // scripts/source_corpus.sh sets it for the whole suite
  const std::string saved = was ? was : "";
  setenv("PALLAS_DUMP_PASSES", dir.c_str(), 1);
  auto k =
      pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.f; }, pl::ShapeDtype({1024}, pl::f32), {.name = "dumped"});
  k.trace({pl::ShapeDtype({1024}, pl::f32)});
  cu::Lowered L = cu::lower(k.state()->get_traced(), "sm_90a");
  if (was)
    setenv("PALLAS_DUMP_PASSES", saved.c_str(), 1);
  else
    unsetenv("PALLAS_DUMP_PASSES");
  const auto& passes = cu::plan_passes();
  for (size_t i = 0; i < passes.size(); ++i) {
    char nn[8];
    std::snprintf(nn, sizeof nn, "%02zu", i + 1);
    fs::path f = dir / (L.name + "." + nn + "-" + passes[i].name + ".txt");
    ASSERT_TRUE(fs::exists(f)) << f;
    std::ifstream in(f);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(text, HasSubstr("== " + std::string(passes[i].name) + "\n"));  // the plan so far, up to this pass
    if (i + 1 < passes.size()) EXPECT_THAT(text, ::testing::Not(HasSubstr("== " + std::string(passes[i + 1].name) + "\n")));
  }
  char nn[8];
  std::snprintf(nn, sizeof nn, "%02zu", passes.size() + 1);
  std::ifstream cu_file(dir / (L.name + "." + nn + "-print.cu"));
  std::string src((std::istreambuf_iterator<char>(cu_file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(src, L.source);
  EXPECT_EQ(L.plan_text.substr(0, 10), "== kernel\n");
  fs::remove_all(dir);
}

}  // namespace
#endif
