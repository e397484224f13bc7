// Golden tests of the CUDA backend's layout pass (src/backends/cuda/layout.h): the plan it
// prints for a kernel, i.e. the vector width it picks and why each access is or is not
// vectorised. No GPU needed; the kernels' results on the GPU are checked by the GPU half of
// the suite and by CudaLowering.RowReductionsInEveryLayout.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include <pallas/kernels.h>
#include <pallas/pallas.h>

#include "src/core/pallas_call.h"
#ifdef PALLAS_TEST_HAVE_CUDA
#include <nvrtc.h>

#include "src/backends/cuda/compile.h"
#include "src/backends/cuda/layout.h"
#include "src/backends/cuda/lower.h"

namespace pl = pallas;

namespace {

// The loop plans, then where each wgmma dot reads its operands: the loop-plans and dot-operands
// passes' sections (NAME.10-loop-plans.txt and NAME.11-dot-operands.txt under PALLAS_DUMP_PASSES).
std::string decisions(const pallas::cuda::Lowered& L) { return L.section("loop-plans") + L.section("dot-operands"); }

std::string plan_of(pl::Call call, const std::vector<pl::ShapeDtype>& args, int threads = 128, bool aligned = true) {
  call.trace(args);
  return pallas::cuda::plan_layout(call.state()->get_traced(), threads, aligned).text;
}

pl::BlockSpec rows(int64_t r, int64_t c) { return pl::BlockSpec({r, c}, [](pl::Value i) { return pl::idx(i, 0); }); }

TEST(CudaLayout, ElementwiseF32MovesSixteenBytes) {
  auto call = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) {
                                pl::Value a = x[pl::all], b = y[pl::all];
                                o[pl::all] = a * b;
                              }, pl::ShapeDtype({4096}, pl::f32),
                              {.grid = {4}, .in_specs = {pl::BlockSpec({1024}, [](pl::Value i) { return pl::idx(i); }),
                                                         pl::BlockSpec({1024}, [](pl::Value i) { return pl::idx(i); })},
                               .out_specs = {pl::BlockSpec({1024}, [](pl::Value i) { return pl::idx(i); })}});
  EXPECT_EQ(plan_of(call, {pl::ShapeDtype({4096}, pl::f32), pl::ShapeDtype({4096}, pl::f32)}),
            "layout: blocked, runs of 4 element(s) per thread, 128 threads\n"
            "  #0 load input 0 f32[1024]: vector 4 x f32 (16 B)\n"
            "  #1 load input 1 f32[1024]: vector 4 x f32 (16 B)\n"
            "  #2 store output 0 f32[1024]: vector 4 x f32 (16 B)\n");
}

// bf16 in and out, f32 inside: runs of 8 so that the bf16 accesses are 16 bytes.
TEST(CudaLayout, Bf16RowsTakeRunsOfEight) {
  auto call = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::Value v = x[pl::all].astype(pl::f32);
        o[pl::all] = (v * pl::rsqrt(pl::sum(v * v, {1}, true) / 4096.f + 1e-6f)).astype(pl::bf16);
      },
      pl::ShapeDtype({64, 4096}, pl::bf16), {.grid = {8}, .in_specs = {rows(8, 4096)}, .out_specs = {rows(8, 4096)}});
  EXPECT_EQ(plan_of(call, {pl::ShapeDtype({64, 4096}, pl::bf16)}),
            "layout: blocked, runs of 8 element(s) per thread, 128 threads\n"
            "  #0 load input 0 bf16[8,4096]: vector 8 x bf16 (16 B)\n"
            "  #1 store output 0 bf16[8,4096]: vector 8 x bf16 (16 B)\n");
}

// A call given an array that is not 16-byte aligned (a caller's view) runs a kernel planned
// without vector accesses to its arrays (the runner picks it by the pointers it is given).
TEST(CudaLayout, UnalignedArraysTakeElementAccesses) {
  auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + 1.f; }, pl::ShapeDtype({8, 1024}, pl::f32),
                              {.grid = {4}, .in_specs = {rows(2, 1024)}, .out_specs = {rows(2, 1024)}});
  EXPECT_EQ(plan_of(call, {pl::ShapeDtype({8, 1024}, pl::f32)}, 128, /*aligned=*/false),
            "layout: blocked, runs of 1 element(s) per thread, 128 threads\n"
            "  #0 load input 0 f32[2,1024]: scalar (the array is not 16-byte aligned (a caller's view))\n"
            "  #1 store output 0 f32[2,1024]: scalar (the array is not 16-byte aligned (a caller's view))\n");
  EXPECT_EQ(plan_of(call, {pl::ShapeDtype({8, 1024}, pl::f32)}),
            "layout: blocked, runs of 4 element(s) per thread, 128 threads\n"
            "  #0 load input 0 f32[2,1024]: vector 4 x f32 (16 B)\n"
            "  #1 store output 0 f32[2,1024]: vector 4 x f32 (16 B)\n");
}

// A row of 1001 elements: runs of 4 would straddle rows and the array's edge; nothing is
// vectorised, so the plain cyclic layout (runs of 1) is kept.
TEST(CudaLayout, OddRowsStayScalar) {
  auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + 1.f; }, pl::ShapeDtype({8, 1001}, pl::f32),
                              {.grid = {4}, .in_specs = {rows(2, 1001)}, .out_specs = {rows(2, 1001)}});
  EXPECT_EQ(plan_of(call, {pl::ShapeDtype({8, 1001}, pl::f32)}),
            "layout: blocked, runs of 1 element(s) per thread, 128 threads\n"
            "  #0 load input 0 f32[2,1001]: scalar (vector width 1)\n"
            "  #1 store output 0 f32[2,1001]: scalar (vector width 1)\n");
}

// Dynamic starts: a product with a multiple of 4 is one, pl::multiple_of says so of a start
// read from memory, the same start without it is not known to be one.
TEST(CudaLayout, DivisibilityOfDynamicStarts) {
  auto call = pl::pallas_call(
      [](pl::Ref s, pl::Ref x, pl::Ref o) {
        pl::Value i = pl::program_id(0);
        pl::Value start = s(i).get();
        pl::Value a = x[pl::ds(i * 256, 256)];
        pl::Value b = x[pl::ds(pl::multiple_of(start, {256}), 256)];
        pl::Value c = x[pl::ds(start, 256)];
        o[pl::ds(i * 256, 256)] = a + b + c;
      },
      pl::ShapeDtype({2048}, pl::f32), {.grid = {4}, .in_specs = {pl::BlockSpec()}, .out_specs = {pl::BlockSpec()}, .num_scalar_prefetch = 1});
  EXPECT_EQ(plan_of(call, {pl::ShapeDtype({4}, pl::i32), pl::ShapeDtype({2048}, pl::f32)}),
            "layout: blocked, runs of 4 element(s) per thread, 128 threads\n"
            "  #0 load prefetch 0 i32[]: scalar (one element)\n"
            "  #1 load input 1 f32[256]: vector 4 x f32 (16 B)\n"
            "  #2 load input 1 f32[256]: vector 4 x f32 (16 B)\n"
            "  #3 load input 1 f32[256]: scalar (the last dimension's start is not a known multiple of 4 (pl::multiple_of))\n"
            "  #4 store output 0 f32[256]: vector 4 x f32 (16 B)\n");
}

TEST(CudaLayout, ColumnsMasksAndIndexArraysStayScalar) {
  auto call = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::Value col = x(pl::ds(0, 64), 3);
        pl::Value v = x[pl::all];
        pl::Value m = pl::iota(pl::i32, {64, 64}, 1) < 10;
        pl::store(o, {pl::all, pl::all}, v + pl::broadcast_to(pl::reshape(col, {64, 1}), {64, 64}), {.mask = m});
      },
      pl::ShapeDtype({64, 64}, pl::f32), {});
  EXPECT_EQ(plan_of(call, {pl::ShapeDtype({64, 64}, pl::f32)}),
            "layout: blocked, runs of 4 element(s) per thread, 128 threads\n"
            "  #0 load input 0 f32[64]: scalar (the last dimension is indexed)\n"
            "  #1 load input 0 f32[64,64]: vector 4 x f32 (16 B)\n"
            "  #2 store output 0 f32[64,64]: scalar (a masked store)\n");
}

// Which loads the pipeliner takes, and how deep (pipeline.h): trans_b puts B K-major (still
// along the rows the program holds); f32 goes through staging tiles (tf32 rounding); a loop
// that writes a ref is not pipelined; num_stages is honoured and shrinks to fit 200 KiB, or the
// loop is not pipelined at all. (K-major tiles hold whole 128-byte rows: K = 32 takes 64.)
// A dot that accumulates into a fragment carry stays in flight across iterations and takes one
// more buffer than num_stages, when it fits.
// dots_of: the dots text of a K loop of bf16/f16/f32/i8 dots over 128 x bn blocks, lowered for
// arch (i8 accumulates and stores i32).
std::string dots_of(int64_t bk, pl::DType t, bool tb, bool write_in_loop, int stages, int64_t bn = 128, int warps = 4,
                    const std::string& arch = "sm_90a", bool tensor_maps = true) {
  int64_t n = 512, bm = 128;
  const pl::DType acc_t = t == pl::i8 ? pl::i32 : pl::f32, out_t = t == pl::i8 ? pl::i32 : t;
  auto call = pl::pallas_call(
      [=](pl::Ref a, pl::Ref b, pl::Ref o) {
        pl::Value acc = pl::fori_loop(0, int(n / bk), pl::Value(pl::zeros({bm, bn}, acc_t)), [&](pl::Value k, pl::Value acc) {
          pl::Value y = tb ? b(pl::all, pl::ds(k * bk, bk)) : b(pl::ds(k * bk, bk), pl::all);
          pl::Value d = pl::dot(a(pl::all, pl::ds(k * bk, bk)), y, {.trans_b = tb});
          if (write_in_loop) o[pl::all] = d.astype(out_t);
          return acc + d;
        });
        o[pl::all] = acc.astype(out_t);
      },
      pl::ShapeDtype({n, n}, out_t),
      {.grid = {n / bm, n / bn},
       .in_specs = {pl::BlockSpec({bm, n}, [](pl::Value i, pl::Value j) { return pl::idx(i, 0); }),
                    tb ? pl::BlockSpec({bn, n}, [](pl::Value i, pl::Value j) { return pl::idx(j, 0); })
                       : pl::BlockSpec({n, bn}, [](pl::Value i, pl::Value j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
       .compiler_params = {.num_warps = warps, .num_stages = stages}});
  call.trace({pl::ShapeDtype({n, n}, t), pl::ShapeDtype({n, n}, t)});
  pallas::cuda::Lowered L = pallas::cuda::lower(call.state()->get_traced(), arch, tensor_maps);
  // a TMA copy and its tensor map go together: one map per operand here
  size_t tma_copies = 0;
  std::string text = decisions(L);
  for (size_t at = 0; (at = text.find("pipelined by TMA", at)) != std::string::npos; ++at) ++tma_copies;
  EXPECT_EQ(L.tensor_maps.size(), tma_copies);
  return text;
}

// The dot-acceleration and pipelining decisions (the loop-plans section and the printer's dot lines, decisions()) for
// a user-written K loop on sm_90a: both loads go to shared memory by TMA (one thread issues
// them, an mbarrier per stage), two iterations ahead, in the tiles wgmma reads (A K-major,
// B MN-major), and the dot reads them there while the next iteration's copies are issued
// (four buffers for three stages). With every copy by TMA the loop has no barrier: the last
// warp out of a stage issues its refill. (cp.async copies and tf32 rounding keep the barrier.)
TEST(CudaLayout, MatmulLoopIsPipelinedIntoWgmmaTiles) {
  EXPECT_EQ(dots_of(64, pl::bf16, false, false, 3, 128, 8),
            "loop: 3 stages, 4 buffers of 32768 bytes, copies 2 iteration(s) ahead, the dot in flight across iterations, no barrier per iteration\n"
            "  pipelined by TMA: operand A (bf16[128,64], K-major) of the dot giving f32[128,128]\n"
            "  pipelined by TMA: operand B (bf16[64,128], MN-major) of the dot giving f32[128,128]\n"
            "dot bf16[128,64] x bf16[64,128]: wgmma m64n128k16, 2 tile(s) over 2 warpgroup(s); A K-major in shared memory, B MN-major in shared memory\n");
  // sm_80 has no wgmma: mma.sync from registers, nothing pipelined
  EXPECT_EQ(dots_of(64, pl::bf16, false, false, 3, 128, 8, "sm_80"), "");
  // AOT kernels take no tensor maps (their launch functions pass arrays only): cp.async
  EXPECT_EQ(dots_of(64, pl::bf16, false, false, 3, 128, 8, "sm_90a", false),
            "loop: 3 stages, 4 buffers of 32768 bytes, copies 2 iteration(s) ahead, the dot in flight across iterations\n"
            "  pipelined by cp.async: operand A (bf16[128,64], K-major) of the dot giving f32[128,128]\n"
            "  pipelined by cp.async: operand B (bf16[64,128], MN-major) of the dot giving f32[128,128]\n"
            "dot bf16[128,64] x bf16[64,128]: wgmma m64n128k16, 2 tile(s) over 2 warpgroup(s); A K-major in shared memory, B MN-major in shared memory\n");
}

TEST(CudaLayout, PipelinerChoosesItsLoads) {
  // rows of 32 f16 (64 bytes) are less than a 128-byte TMA box: cp.async
  EXPECT_EQ(dots_of(32, pl::f16, true, false, 4),
            "loop: 4 stages, 5 buffers of 32768 bytes, copies 3 iteration(s) ahead, the dot in flight across iterations\n"
            "  pipelined by cp.async: operand A (f16[128,32], K-major) of the dot giving f32[128,128]\n"
            "  pipelined by cp.async: operand B (f16[128,32], K-major) of the dot giving f32[128,128]\n"
            "dot f16[128,32] x f16[128,32]^T: wgmma m64n128k16, 2 tile(s) over 1 warpgroup(s); A K-major in shared memory, B K-major in shared memory\n");
  // f32 (tf32 dots) by TMA: A (K contiguous) straight into its K-major tile, rounded there by
  // every thread; B (N contiguous) as loaded into a staging region of the stage, rounded by
  // every thread into the stage's own K-major tile (a stage: A tile, B staging, B tile)
  EXPECT_EQ(dots_of(32, pl::f32, false, false, 3),
            "loop: 3 stages, 4 buffers of 49152 bytes, copies 2 iteration(s) ahead, the dot in flight across iterations\n"
            "  pipelined by TMA, rounded to tf32 in place: operand A (f32[128,32], K-major) of the dot giving f32[128,128]\n"
            "  pipelined by TMA into a staging region, rounded to tf32 into its transposed place: operand B (f32[32,128], K-major) of the dot giving f32[128,128]\n"
            "dot f32[128,32] x f32[32,128]: wgmma m64n128k8, 2 tile(s) over 1 warpgroup(s); A K-major in shared memory, B K-major in shared memory\n");
  // without TMA (AOT kernels): A straight into its tile, B word by word into its transposed,
  // K-major place; each thread rounds what it copied in place, so the dot stays in flight as
  // for 16-bit operands
  EXPECT_EQ(dots_of(32, pl::f32, false, false, 3, 128, 4, "sm_90a", false),
            "loop: 3 stages, 4 buffers of 32768 bytes, copies 2 iteration(s) ahead, the dot in flight across iterations\n"
            "  pipelined by cp.async, rounded to tf32 in place: operand A (f32[128,32], K-major) of the dot giving f32[128,128]\n"
            "  pipelined by cp.async word by word into its transposed place, rounded to tf32 in place: operand B (f32[32,128], K-major) of the dot giving f32[128,128]\n"
            "dot f32[128,32] x f32[32,128]: wgmma m64n128k8, 2 tile(s) over 1 warpgroup(s); A K-major in shared memory, B K-major in shared memory\n");
  // blocks of K that the transposing copy's order does not cover (8 < 16): B is staged, and
  // its tile rewritten each iteration, so the dot does not stay in flight
  const std::string bk8 = dots_of(8, pl::f32, false, false, 3);
  EXPECT_EQ(bk8.substr(0, bk8.find("  pipelined by cp.async through a staging tile")),
            "loop: 3 stages, 3 buffers of 20480 bytes, copies 2 iteration(s) ahead\n"
            "  pipelined by cp.async, rounded to tf32 in place: operand A (f32[128,8], K-major) of the dot giving f32[128,128]\n");
  EXPECT_NE(bk8.find("through a staging tile, rounded to tf32 each iteration: operand B"), std::string::npos);
  EXPECT_EQ(dots_of(64, pl::bf16, false, true, 3),
            "dot bf16[128,64] x bf16[64,128]: wgmma m64n128k16, 2 tile(s) over 1 warpgroup(s); A K-major written to shared memory, B MN-major written to shared memory\n");
  // 64 KiB a stage: the fourth buffer for the dot in flight would not fit in 200 KiB, three
  // stages without it do; 96 KiB a stage: two buffers; 192 KiB a stage: not even 2
  EXPECT_EQ(dots_of(128, pl::bf16, false, false, 3, 128), "loop: 3 stages, 3 buffers of 65536 bytes, copies 2 iteration(s) ahead, no barrier per iteration\n"
            "  pipelined by TMA: operand A (bf16[128,128], K-major) of the dot giving f32[128,128]\n"
            "  pipelined by TMA: operand B (bf16[128,128], MN-major) of the dot giving f32[128,128]\n"
            "dot bf16[128,128] x bf16[128,128]: wgmma m64n128k16, 2 tile(s) over 1 warpgroup(s); A K-major in shared memory, B MN-major in shared memory\n");
  EXPECT_EQ(dots_of(128, pl::bf16, false, false, 4, 256).substr(0, 54), "loop: 2 stages, 2 buffers of 98304 bytes, copies 1 ite");
  // i8 (wgmma reads 8-bit operands K-major only): B with rows K lands by TMA as loaded in a
  // staging region and every thread moves 4 x 4-byte blocks of it into the K-major tile,
  // transposing them in registers; the dot stays in flight (the stage's own tile is written)
  EXPECT_EQ(dots_of(128, pl::i8, false, false, 3, 128, 8),
            "loop: 3 stages, 4 buffers of 49152 bytes, copies 2 iteration(s) ahead, the dot in flight across iterations\n"
            "  pipelined by TMA: operand A (i8[128,128], K-major) of the dot giving i32[128,128]\n"
            "  pipelined by TMA into a staging region, moved into its transposed place in 4 x 4-byte blocks: operand B (i8[128,128], K-major) of the dot giving i32[128,128]\n"
            "dot i8[128,128] x i8[128,128]: wgmma m64n128k32, 2 tile(s) over 2 warpgroup(s); A K-major in shared memory, B K-major in shared memory\n");
  // 64 bytes of K: A's rows are less than a TMA box (cp.async); B's staging holds 64 rows
  auto starts = [](const std::string& s, const std::string& prefix) { return s.substr(0, prefix.size()) == prefix ? prefix : s; };
  const std::string i8_bk64 =
            "loop: 3 stages, 4 buffers of 40960 bytes, copies 2 iteration(s) ahead, the dot in flight across iterations\n"
            "  pipelined by cp.async: operand A (i8[128,64], K-major) of the dot giving i32[128,128]\n"
            "  pipelined by TMA into a staging region, moved into its transposed place in 4 x 4-byte blocks: operand B (i8[64,128], K-major) of the dot giving i32[128,128]\n";
  EXPECT_EQ(starts(dots_of(64, pl::i8, false, false, 3, 128, 8), i8_bk64), i8_bk64);
  // x·Wᵀ: B is K-major as loaded, no barrier per iteration
  const std::string i8_x_wt = "loop: 3 stages, 4 buffers of 32768 bytes, copies 2 iteration(s) ahead, the dot in flight across iterations, no barrier per iteration\n";
  EXPECT_EQ(starts(dots_of(128, pl::i8, true, false, 3, 128, 8), i8_x_wt), i8_x_wt);
  // without TMA (AOT kernels) an 8-bit B with rows K has no asynchronous copy: it goes through
  // registers to its tile each iteration, and only A is pipelined
  EXPECT_EQ(dots_of(128, pl::i8, false, false, 3, 128, 8, "sm_90a", false),
            "loop: 3 stages, 3 buffers of 16384 bytes, copies 2 iteration(s) ahead\n"
            "  pipelined by cp.async: operand A (i8[128,128], K-major) of the dot giving i32[128,128]\n"
            "dot i8[128,128] x i8[128,128]: wgmma m64n128k32, 2 tile(s) over 2 warpgroup(s); A K-major in shared memory, B K-major written to shared memory\n");
  EXPECT_EQ(dots_of(256, pl::bf16, false, false, 4, 256).substr(0, 4), "dot ");
}

// Flash attention's shape of loop (kernels/attention.cc, written as a user writes it): Q is
// loaded before the loop, so its tile is written to shared memory once and stays; K and V
// are pipelined; the output accumulator, rescaled each iteration by exp(m_old - m_new), stays
// in fragments (scaled in place), and P = exp(S - m) goes to the second dot from registers.
// The loop is rotated (rotation.h): P·V of one iteration runs behind the next one's Q·Kᵀ, so V's
// stage is kept an iteration longer (a fourth buffer).
TEST(CudaLayout, AttentionLoopKeepsQResidentAndPipelinesKV) {
  pl::Call k = pl::kernels::flash_attention(1, 1, 256, 64, pl::bf16, {.block_q = 64, .block_k = 64});
  pl::ShapeDtype s({1, 1, 256, 64}, pl::bf16);
  k.trace({s, s, s});
  EXPECT_EQ(decisions(pallas::cuda::lower(k.state()->get_traced(), "sm_90a")),
            "loop: operand bf16[64,64] stays in shared memory (K-major)\n"
            "loop: 3 stages, 4 buffers of 16384 bytes, copies 2 iteration(s) ahead, the second dot's stage kept an iteration longer, no barrier per iteration\n"
            "  pipelined by TMA: operand B (bf16[64,64], K-major) of the dot giving f32[64,64]\n"
            "  pipelined by TMA: operand B (bf16[64,64], MN-major) of the dot giving f32[64,64]\n"
            "loop rotated: the second dot of each iteration is issued after the first dot of the next\n"
            "dot bf16[64,64] x bf16[64,64]^T: wgmma m64n64k16, 1 tile(s) over 1 warpgroup(s); A K-major in shared memory, B K-major in shared memory\n"
            "dot bf16[64,64] x bf16[64,64]: wgmma m64n64k16, 1 tile(s) over 1 warpgroup(s); A in registers (its fragments), B MN-major in shared memory\n");
}

// A rotated loop takes fewer stages rather than give up its rotation: at D128 with 128 keys a
// block (64 KB stages) or D256, three buffers fit where four do not, so the loop keeps two
// stages and the extra buffer for the second dot's stage, not three stages unrotated.
TEST(CudaLayout, RotatedAttentionTakesFewerStagesBeforeItsRotation) {
  auto plan = [](int64_t d, int64_t bq, int64_t bk, int warps) {
    pl::Call k = pl::kernels::flash_attention(1, 1, 512, d, pl::bf16, {.block_q = bq, .block_k = bk, .compiler_params = {.num_warps = warps}});
    pl::ShapeDtype s({1, 1, 512, d}, pl::bf16);
    k.trace({s, s, s});
    std::string t = decisions(pallas::cuda::lower(k.state()->get_traced(), "sm_90a"));
    size_t at = t.find("loop: ", t.find("loop: ") + 1);
    return t.substr(at, t.find('\n', at) - at) + (t.find("loop rotated") != std::string::npos ? " (rotated)" : "");
  };
  EXPECT_EQ(plan(128, 128, 128, 8), "loop: 2 stages, 3 buffers of 65536 bytes, copies 1 iteration(s) ahead, the second dot's stage kept an iteration longer, no barrier per iteration (rotated)");
  EXPECT_EQ(plan(256, 64, 64, 4), "loop: 2 stages, 3 buffers of 65536 bytes, copies 1 iteration(s) ahead, the second dot's stage kept an iteration longer, no barrier per iteration (rotated)");
  // 32 KB stages: three stages and the extra buffer, as before
  EXPECT_EQ(plan(128, 128, 64, 8), "loop: 3 stages, 4 buffers of 32768 bytes, copies 2 iteration(s) ahead, the second dot's stage kept an iteration longer, no barrier per iteration (rotated)");
}

// With two warpgroups (8 warps, 128 query rows) the rotated loop's warpgroups take turns
// (FA3's ping-pong): each waits on its named barrier before issuing its dots and arrives on the
// other's right after, so one's softmax runs while the other's dots hold the tensor cores. The
// last warpgroup opens the first turn and warpgroup 0 takes the last arrival after the loop.
TEST(CudaLayout, AttentionWarpgroupsTakeTurns) {
  setenv("PALLAS_PINGPONG", "1", 1);  // opt-in (rotation.h)
  pl::Call k = pl::kernels::flash_attention(1, 1, 256, 64, pl::bf16, {.block_q = 128, .block_k = 64, .compiler_params = {.num_warps = 8}});
  pl::ShapeDtype s({1, 1, 256, 64}, pl::bf16);
  k.trace({s, s, s});
  pallas::cuda::Lowered L = pallas::cuda::lower(k.state()->get_traced(), "sm_90a");
  EXPECT_EQ(decisions(L),
            "loop: operand bf16[128,64] stays in shared memory (K-major)\n"
            "loop: 3 stages, 4 buffers of 16384 bytes, copies 2 iteration(s) ahead, the second dot's stage kept an iteration longer, no barrier per iteration\n"
            "  pipelined by TMA: operand B (bf16[64,64], K-major) of the dot giving f32[128,64]\n"
            "  pipelined by TMA: operand B (bf16[64,64], MN-major) of the dot giving f32[128,64]\n"
            "warpgroups take turns: 2 issue their dots one after another (named barriers 1..2)\n"
            "loop rotated: the second dot of each iteration is issued after the first dot of the next\n"
            "dot bf16[128,64] x bf16[64,64]^T: wgmma m64n64k16, 2 tile(s) over 2 warpgroup(s); A K-major in shared memory, B K-major in shared memory\n"
            "dot bf16[128,64] x bf16[64,64]: wgmma m64n64k16, 2 tile(s) over 2 warpgroup(s); A in registers (its fragments), B MN-major in shared memory\n");
  // every barrier balanced: one opening arrival, one sync and one arrival a turn, one closing sync
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = L.source.find(what); at != std::string::npos; at = L.source.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("bar.arrive 1, 256"), 1u);
  EXPECT_EQ(count("bar.sync %0, 256"), 1u);
  EXPECT_EQ(count("bar.arrive %0, 256"), 2u);  // after the second dot, and in iteration lo (no second dot)
  EXPECT_EQ(count("bar.sync 1, 256"), 1u);
  // off for one warpgroup, and unless requested
  pl::Call one = pl::kernels::flash_attention(1, 1, 256, 64, pl::bf16, {.block_q = 64, .block_k = 64});
  one.trace({s, s, s});
  EXPECT_EQ(decisions(pallas::cuda::lower(one.state()->get_traced(), "sm_90a")).find("take turns"), std::string::npos);
  unsetenv("PALLAS_PINGPONG");
  std::string off = decisions(pallas::cuda::lower(k.state()->get_traced(), "sm_90a"));
  EXPECT_EQ(off.find("take turns"), std::string::npos);
}

// The generated code points back to the kernel's source: a #line directive with the line of
// each named op before its code (NVRTC messages and -lineinfo's line table then name the
// kernel's file and line), and an NVRTC error at such a line is shown where the code
// generated for it starts.
int g_line_of_dot = 0;
TEST(CudaLayout, GeneratedCodePointsToTheKernelSource) {
  // (the refs are read a line before the dot and stored some lines after it: ref accesses have
  // lines of their own, and an error two lines into the dot's code must be nearest the dot's)
  auto kernel = [](pl::Ref x, pl::Ref y, pl::Ref o) {
    pl::Value a = x[pl::all], b = y[pl::all];
    pl::Value d = pl::dot(a, b); g_line_of_dot = __LINE__;
    pl::Value e = pl::exp(d);  // no line of its own
    //
    //
    o[pl::all] = e;
  };
  pl::Call k = pl::pallas_call(kernel, pl::ShapeDtype({64, 64}, pl::f32), {.name = "lines"});
  k.trace({pl::ShapeDtype({64, 64}, pl::f32), pl::ShapeDtype({64, 64}, pl::f32)});
  std::string src = pallas::cuda::lower(k.state()->get_traced(), "sm_90a").source;
  std::string file = __FILE__;
  std::string directive = "#line " + std::to_string(g_line_of_dot) + " \"" + file + "\"";
  size_t at = src.find(directive);
  ASSERT_NE(at, std::string::npos) << directive;
  EXPECT_NE(src.find("dot", at), std::string::npos);
  // an error two lines into the code generated for the dot
  std::string log = file + "(" + std::to_string(g_line_of_dot + 2) + "): error: something\n";
  std::string shown = pallas::cuda::explain_nvrtc_error(log, src, "lines.cu");
  int generated = 1 + static_cast<int>(std::count(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(at), '\n')) + 1 + 2;
  EXPECT_NE(shown.find("in the code generated for " + file + ":" + std::to_string(g_line_of_dot + 2)), std::string::npos) << shown;
  EXPECT_NE(shown.find(">> " + std::to_string(generated) + ": "), std::string::npos) << shown;
  // an error in the generated file itself is shown at its line
  EXPECT_NE(pallas::cuda::explain_nvrtc_error("lines.cu(3): error: x\n", src, "lines.cu").find(">> 3: "), std::string::npos);
}

// The value-layout pass on the same loop (the value-layouts section): S = Q K^T stays in its fragments,
// the softmax runs on them, the row statistics (m, l, and alpha) are held per fragment row —
// in the loop and as carries — and the output is divided by l in fragments before the store.
// With 8 warps and 128 query rows, two warpgroups take a 64-row tile each.
TEST(CudaLayout, AttentionValuesStayInFragments) {
  pl::Call k = pl::kernels::flash_attention(1, 1, 256, 64, pl::bf16, {.block_q = 128, .block_k = 64, .compiler_params = {.num_warps = 8}});
  pl::ShapeDtype s({1, 1, 256, 64}, pl::bf16);
  k.trace({s, s, s});
  const std::string mma = "mma [128, 64] (2 tile(s) of 64 x 64 over 2 warpgroup(s))", rows = "rows [128] (2 tile(s) of 64 rows over 2 warpgroup(s))";
  EXPECT_EQ(pallas::cuda::lower(k.state()->get_traced(), "sm_90a").section("value-layouts"),
            "values not in the blocked layout (mma: a tensor-core dot's fragments; rows: one value per fragment row)\n"
            "  broadcast_in_dim f32[128]: " + rows + "\n"
            "  broadcast_in_dim f32[128]: " + rows + "\n"
            "  broadcast_in_dim f32[128,64]: " + mma + "\n"
            "  fori_loop:\n"
            "    dot f32[128,64]: " + mma + "\n"
            "    reduce_max f32[128]: " + rows + "\n"
            "    mul f32[128]: " + rows + "\n"
            "    max f32[128]: " + rows + "\n"
            "    stop_gradient f32[128]: " + rows + "\n"
            "    sub f32[128]: " + rows + "\n"
            "    exp2 f32[128]: " + rows + "\n"
            "    reshape f32[128,1]: " + rows + "\n"
            "    mul f32[128,64]: " + mma + "\n"
            "    broadcast_in_dim f32[128,64]: " + mma + "\n"
            "    sub f32[128,64]: " + mma + "\n"
            "    exp2 f32[128,64]: " + mma + "\n"
            "    reduce_sum f32[128]: " + rows + "\n"
            "    mul f32[128]: " + rows + "\n"
            "    add f32[128]: " + rows + "\n"
            "    convert_element_type bf16[128,64]: " + mma + "\n"
            "    dot f32[128,64]: " + mma + "\n"
            "    reshape f32[128,1]: " + rows + "\n"
            "    carry 0 f32[128]: " + rows + "\n"
            "    carry 1 f32[128]: " + rows + "\n"
            "    carry 2 f32[128,64]: " + mma + "\n"
            "  reshape f32[128,1]: " + rows + "\n"
            "  broadcast_in_dim f32[128,64]: " + mma + "\n"
            "  div f32[128,64]: " + mma + "\n"
            "  convert_element_type bf16[128,64]: " + mma + "\n");
  // sm_80: mma.sync tiles of 16 x 32 split the 64 columns over two warps: the dots' results are
  // fragments, their row statistics blocked
  std::string sm80 = pallas::cuda::lower(k.state()->get_traced(), "sm_80").section("value-layouts");
  EXPECT_NE(sm80.find("    dot f32[128,64]: mma [128, 64] (16 tile(s) of 16 x 32 over 8 warp(s))\n"), std::string::npos) << sm80;
  EXPECT_EQ(sm80.find("rows ["), std::string::npos) << sm80;
}

// Flexible values (value_layout.cc): a causal mask built from iota and a constant fill take the
// fragments' layout because every user takes them there; the masked scores' row maximum is per
// fragment row; a column sum and a store take the blocked layout (converted where used, not
// listed). A dot result that starts a loop carry which the body transposes: the carry is
// blocked (the fixed point), while the same value read by every iteration stays in fragments.
TEST(CudaLayout, FlexibleValuesTakeTheirUsersLayout) {
  const int64_t M = 64, N = 64, K = 32;
  auto causal = pl::pallas_call(
      [=](pl::Ref a, pl::Ref b, pl::Ref o, pl::Ref rowmax, pl::Ref colsum) {
        pl::Value s = pl::dot(a[pl::all], b[pl::all]);
        pl::Value row = pl::iota(pl::i32, {M, N}, 0) + 8;  // separate statements: a fixed trace order
        pl::Value col = pl::iota(pl::i32, {M, N}, 1);
        pl::Value mask = row >= col;
        pl::Value fill = pl::full({M, N}, -1e30f);
        pl::Value sm = pl::where(mask, s, fill);
        o[pl::all] = sm;
        rowmax[pl::all] = pl::max(sm, {1});
        colsum[pl::all] = pl::sum(s, {0});
      },
      {pl::ShapeDtype({M, N}, pl::f32), pl::ShapeDtype({M}, pl::f32), pl::ShapeDtype({N}, pl::f32)});
  causal.trace({pl::ShapeDtype({M, K}, pl::bf16), pl::ShapeDtype({K, N}, pl::bf16)});
  const std::string mma = "mma [64, 64] (1 tile(s) of 64 x 64 over 1 warpgroup(s))";
  EXPECT_EQ(pallas::cuda::lower(causal.state()->get_traced(), "sm_90a").section("value-layouts"),
            "values not in the blocked layout (mma: a tensor-core dot's fragments; rows: one value per fragment row)\n"
            "  dot f32[64,64]: " + mma + "\n"
            "  iota i32[64,64]: " + mma + "\n"
            "  add i32[64,64]: " + mma + "\n"
            "  iota i32[64,64]: " + mma + "\n"
            "  ge bool[64,64]: " + mma + "\n"
            "  broadcast_in_dim f32[64,64]: " + mma + "\n"
            "  select_n f32[64,64]: " + mma + "\n"
            "  reduce_max f32[64]: rows [64] (1 tile(s) of 64 rows over 1 warpgroup(s))\n");
  auto carry = pl::pallas_call(
      [=](pl::Ref a, pl::Ref b, pl::Ref o) {
        pl::Value s = pl::dot(a[pl::all], b[pl::all]);
        o[pl::all] = pl::fori_loop(0, 3, s, [&](pl::Value, pl::Value c) { return pl::transpose(c + s * 0.5f, {1, 0}); });
      },
      pl::ShapeDtype({M, M}, pl::f32));
  carry.trace({pl::ShapeDtype({M, K}, pl::bf16), pl::ShapeDtype({K, M}, pl::bf16)});
  EXPECT_EQ(pallas::cuda::lower(carry.state()->get_traced(), "sm_90a").section("value-layouts"),
            "values not in the blocked layout (mma: a tensor-core dot's fragments; rows: one value per fragment row)\n"
            "  dot f32[64,64]: " + mma + "\n"
            "  fori_loop:\n"
            "    mul f32[64,64]: " + mma + "\n"
            "    add f32[64,64]: " + mma + "\n");
  // an epilogue's bias row and per-row scale (loaded, blocked) broadcast straight into the
  // fragments: the [64, 64] tile is never converted; the scale, broadcast as loaded, is read
  // from memory slot by slot (no exchange)
  auto epilogue = pl::pallas_call(
      [=](pl::Ref a, pl::Ref b, pl::Ref bias, pl::Ref scale, pl::Ref o) {
        pl::Value s = pl::dot(a[pl::all], b[pl::all]);
        o[pl::all] = pl::maximum(s + bias[pl::all].astype(pl::f32), 0.f) * scale[pl::all];
      },
      pl::ShapeDtype({M, N}, pl::f32));
  epilogue.trace({pl::ShapeDtype({M, K}, pl::bf16), pl::ShapeDtype({K, N}, pl::bf16), pl::ShapeDtype({1, N}, pl::bf16), pl::ShapeDtype({M, 1}, pl::f32)});
  EXPECT_EQ(pallas::cuda::lower(epilogue.state()->get_traced(), "sm_90a").section("value-layouts"),
            "values not in the blocked layout (mma: a tensor-core dot's fragments; rows: one value per fragment row)\n"
            "  dot f32[64,64]: " + mma + "\n"
            "  broadcast_in_dim f32[64,64]: " + mma + "\n"
            "  add f32[64,64]: " + mma + "\n"
            "  max f32[64,64]: " + mma + "\n"
            "  broadcast_in_dim f32[64,64]: " + mma + "\n"
            "  mul f32[64,64]: " + mma + "\n"
            "vector loads read where a broadcast puts them in fragments\n"
            "  load f32[64,1] read again by its broadcast to f32[64,64]\n");
}

// Every eqn's code in the generated .cu starts with the eqn as the jaxpr printer writes it
// (the same names as Call::jaxpr_text), so a line of an NVRTC error or a profiler's source
// view leads back to the op; an eqn holding a loop body is cut at the body.
TEST(CudaLayout, GeneratedCodeNamesEachEquation) {
  auto k = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::Value v = pl::exp(x[pl::all]) * 2.f;
        o[pl::all] = pl::fori_loop(0, 2, v, [](pl::Value, pl::Value c) { return c + 1.f; });
      },
      pl::ShapeDtype({128}, pl::f32));
  k.trace({pl::ShapeDtype({128}, pl::f32)});
  std::string src = pallas::cuda::lower(k.state()->get_traced(), "sm_90a").source;
  std::string ir = k.jaxpr_text();
  int seen = 0;
  std::istringstream lines(ir.substr(ir.find("kernel={")));
  for (std::string l; std::getline(lines, l);) {
    size_t eq = l.find(" = ");
    if (eq == std::string::npos || l.find("lambda") != std::string::npos) continue;
    std::string text = l.substr(l.find_first_not_of(' '));
    if (text.find("fori_loop[") != std::string::npos) text = text.substr(0, text.find("body=") + 5) + " ...";
    EXPECT_NE(src.find("// " + text + "\n"), std::string::npos) << text;
    ++seen;
  }
  EXPECT_GE(seen, 5) << ir;  // load, exp, mul, fori_loop, add (the store has no " = ")
}

// ptxas serialises every wgmma of a kernel (its info C7514, a 10–15% loss measured on the
// H200) when it sees a non-wgmma instruction read an accumulator inside the wgmma pipeline;
// after the loop, a conversion of the accumulators to f16/bf16 (a K loop stored as is) did, until
// the wait got a register fence (fence_fragments). The K loops of cuda_bench and attention,
// compiled by NVRTC with ptxas' report: no serialisation.
TEST(CudaLayout, WgmmaLoopsAreNotSerialised) {
  auto report = [](pl::Call& call) {
    pallas::cuda::Lowered L = pallas::cuda::lower(call.state()->get_traced(), "sm_90a");
    nvrtcProgram prog;
    EXPECT_EQ(nvrtcCreateProgram(&prog, L.source.c_str(), "k.cu", 0, nullptr, nullptr), NVRTC_SUCCESS);
    const char* opts[] = {"--gpu-architecture=sm_90a", "-std=c++17", "-default-device", "-diag-suppress=177,550", "--ptxas-options=-v"};
    EXPECT_EQ(nvrtcCompileProgram(prog, 5, opts), NVRTC_SUCCESS);
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    if (n) nvrtcGetProgramLog(prog, log.data());
    nvrtcDestroyProgram(&prog);
    return log;
  };
  const int64_t n = 512, bm = 128, bn = 128, bk = 64;
  for (int variant = 0; variant < 3; ++variant) {  // f16 stored as is, x W^T in bf16, bias + relu
    SCOPED_TRACE(variant);
    bool tb = variant == 1, epi = variant == 2;
    pl::DType t = variant == 0 ? pl::f16 : pl::bf16;
    auto call = pl::pallas_call(
        [=](pl::Ref a, pl::Ref b, pl::Ref bias, pl::Ref o) {
          pl::Value acc = pl::fori_loop(0, int(n / bk), pl::Value(pl::zeros({bm, bn})), [&](pl::Value k, pl::Value acc) {
            pl::Value y = tb ? b(pl::all, pl::ds(k * bk, bk)) : b(pl::ds(k * bk, bk), pl::all);
            return acc + pl::dot(a(pl::all, pl::ds(k * bk, bk)), y, {.trans_b = tb});
          });
          if (epi) acc = pl::maximum(acc + bias[pl::all].astype(pl::f32), 0.f);
          o[pl::all] = acc.astype(t);
        },
        pl::ShapeDtype({n, n}, t),
        {.grid = {n / bm, n / bn},
         .in_specs = {pl::BlockSpec({bm, n}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
                      tb ? pl::BlockSpec({bn, n}, [](pl::Value, pl::Value j) { return pl::idx(j, 0); })
                         : pl::BlockSpec({n, bn}, [](pl::Value, pl::Value j) { return pl::idx(0, j); }),
                      pl::BlockSpec({1, bn}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })},
         .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
         .compiler_params = {.num_warps = 8}});
    call.trace({pl::ShapeDtype({n, n}, t), pl::ShapeDtype({n, n}, t), pl::ShapeDtype({1, n}, t)});
    std::string log = report(call);
    EXPECT_EQ(log.find("C7514"), std::string::npos) << log;
    EXPECT_NE(log.find("Used "), std::string::npos) << log;  // the report is there
  }
  setenv("PALLAS_PINGPONG", "1", 1);
  for (int warps : {4, 8}) {  // one warpgroup, and two taking turns
    SCOPED_TRACE(warps);
    pl::Call att = pl::kernels::flash_attention(1, 1, 256, 64, pl::bf16, {.block_q = 16 * warps, .block_k = 64, .compiler_params = {.num_warps = warps}});
    pl::ShapeDtype s({1, 1, 256, 64}, pl::bf16);
    att.trace({s, s, s});
    std::string log = report(att);
    EXPECT_EQ(log.find("C7514"), std::string::npos) << log;
    EXPECT_EQ(log.find("C7515"), std::string::npos) << log;
    EXPECT_EQ(log.find("C7517"), std::string::npos) << log;
  }
  unsetenv("PALLAS_PINGPONG");
}

// PALLAS_PTXAS_REPORT=1 prints ptxas' report of each kernel compiled, named, on stderr.
TEST(CudaLayout, PtxasReportOnRequest) {
  auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::sqrt(x[pl::all]) * 3.f + 0.25f; }, pl::ShapeDtype({96}, pl::f32),
                           {.name = "ptxas_report"});
  k.trace({pl::ShapeDtype({96}, pl::f32)});
  const char* had_no_disk = std::getenv("PALLAS_NO_DISK_CACHE");  // a cached cubin is not compiled
  setenv("PALLAS_PTXAS_REPORT", "1", 1);
  if (!had_no_disk) setenv("PALLAS_NO_DISK_CACHE", "1", 1);
  testing::internal::CaptureStderr();
  k.compile_for("sm_90a");
  std::string err = testing::internal::GetCapturedStderr();
  unsetenv("PALLAS_PTXAS_REPORT");
  if (!had_no_disk) unsetenv("PALLAS_NO_DISK_CACHE");
  EXPECT_NE(err.find("pallas_ptxas_report_"), std::string::npos) << err;
  EXPECT_NE(err.find("Used "), std::string::npos) << err;
}

// Bounds checks only where a block can leave its array: the index map's range over the grid
// (adds, multiplies, min/max of program ids and constants) decides per dimension. Blocks of
// 256 tiling 1024 elements, walked forwards or backwards, need none; 1000 elements keep the
// upper bound (the last block overhangs); `i + 1` keeps it too but never goes below 0; `i - 1`
// keeps the lower bound only.
TEST(CudaLayout, BoundsChecksOnlyWhereABlockCanLeaveItsArray) {
  auto kernel = [](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + 1.f; };
  auto source = [&](int64_t n, std::function<pl::Value(pl::Value)> map) {
    auto spec = pl::BlockSpec({256}, [map](pl::Value i) { return pl::idx(map(i)); });
    auto c = pl::pallas_call(kernel, pl::ShapeDtype({1024}, pl::f32), {.grid = {4}, .in_specs = {spec}, .out_specs = {pl::BlockSpec({256}, [](pl::Value i) { return pl::idx(i); })}});
    c.trace({pl::ShapeDtype({n}, pl::f32)});
    std::string src = pallas::cuda::lower(c.state()->get_traced(), "sm_90a").source;
    return src.substr(src.find("// kernel body"));
  };
  auto has = [](const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; };
  std::string in = source(1024, [](pl::Value i) { return i; });
  EXPECT_FALSE(has(in, "1024ll - org")) << in;
  EXPECT_FALSE(has(in, ">= (-org")) << in;
  std::string backwards = source(1024, [](pl::Value i) { return 3 - i; });
  EXPECT_FALSE(has(backwards, "1024ll - org0")) << backwards;
  EXPECT_FALSE(has(backwards, ">= (-org0")) << backwards;
  std::string edge = source(1000, [](pl::Value i) { return i; });
  EXPECT_TRUE(has(edge, "< (1000ll - org0_0)")) << edge;
  EXPECT_FALSE(has(edge, ">= (-org0")) << edge;
  std::string ahead = source(1024, [](pl::Value i) { return i + 1; });
  EXPECT_TRUE(has(ahead, "< (1024ll - org0_0)")) << ahead;
  EXPECT_FALSE(has(ahead, ">= (-org0")) << ahead;
  std::string behind = source(1024, [](pl::Value i) { return i - 1; });
  EXPECT_FALSE(has(behind, "1024ll - org0")) << behind;
  EXPECT_TRUE(has(behind, ">= (-org0_0)")) << behind;
}

// The grid pipeline's plan (the grid-pipeline section, grid_pipeline.h): which
// input blocks go to shared memory by TMA ahead of the program that reads them.
std::string grid_of(pl::Call call, const std::vector<pl::ShapeDtype>& args, const std::string& arch = "sm_90a", bool tensor_maps = true) {
  call.trace(args);
  pallas::cuda::Lowered L = pallas::cuda::lower(call.state()->get_traced(), arch, tensor_maps);
  std::string plan = L.section("grid-pipeline");
  EXPECT_EQ(L.persistent, plan.find("persistent") != std::string::npos);
  return plan;
}

TEST(CudaLayout, GridPipelinePlans) {
  using V = pl::Value;
  // column sums over a sequential axis: every step's 256 x 32 block, two steps ahead
  auto column_sums = [](int stages) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref o) {
          pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({1, 32}); });
          o[pl::all] += pl::sum(x[pl::all], {0}, true);
        },
        pl::ShapeDtype({1, 4096}, pl::f32),
        {.grid = {128, 64},
         .in_specs = {pl::BlockSpec({256, 32}, [](V j, V i) { return pl::idx(i, j); })},
         .out_specs = {pl::BlockSpec({1, 32}, [](V j, V) { return pl::idx(0, j); })},
         .compiler_params = {.num_warps = 8, .num_stages = stages}});
  };
  EXPECT_EQ(grid_of(column_sums(0), {pl::ShapeDtype({16384, 4096}, pl::f32)}),
            "grid pipeline: over the sequential axes, 3 stages of 32768 bytes, copies 2 program(s) ahead\n"
            "  input 0 f32[16384,4096]: one TMA box [256, 32] of the view [16384, 4096], 32768 bytes\n");
  EXPECT_EQ(grid_of(column_sums(2), {pl::ShapeDtype({16384, 4096}, pl::f32)}),
            "grid pipeline: over the sequential axes, 2 stages of 32768 bytes, copies 1 program(s) ahead\n"
            "  input 0 f32[16384,4096]: one TMA box [256, 32] of the view [16384, 4096], 32768 bytes\n");
  // a block that does not move along the sequential axis (a scale row chosen by the parallel
  // axis) is read from global memory; only the moving one is staged
  auto scaled_sums = pl::pallas_call(
      [](pl::Ref x, pl::Ref s, pl::Ref o) {
        pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({1, 32}); });
        o[pl::all] += pl::sum(x[pl::all] * s[pl::all], {0}, true);
      },
      pl::ShapeDtype({1, 4096}, pl::f32),
      {.grid = {128, 64},
       .in_specs = {pl::BlockSpec({256, 32}, [](V j, V i) { return pl::idx(i, j); }), pl::BlockSpec({1, 32}, [](V j, V) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({1, 32}, [](V j, V) { return pl::idx(0, j); })},
       .compiler_params = {.num_warps = 8}});
  EXPECT_EQ(grid_of(scaled_sums, {pl::ShapeDtype({16384, 4096}, pl::f32), pl::ShapeDtype({1, 4096}, pl::f32)}),
            "grid pipeline: over the sequential axes, 3 stages of 32768 bytes, copies 2 program(s) ahead\n"
            "  input 0 f32[16384,4096]: one TMA box [256, 32] of the view [16384, 4096], 32768 bytes\n");
  // no tensor maps (AOT kernels, sm_80): nothing
  EXPECT_EQ(grid_of(column_sums(0), {pl::ShapeDtype({16384, 4096}, pl::f32)}, "sm_90a", false), "none (no tensor maps: an AOT kernel)\n");
  EXPECT_EQ(grid_of(column_sums(0), {pl::ShapeDtype({16384, 4096}, pl::f32)}, "sm_80"), "none (no TMA on sm_80)\n");
  // a norm over 8 rows of 4096 bf16 (64 KiB blocks) on a parallel grid: persistent; the rows,
  // longer than a box's 256 elements, are viewed as 16 x 256
  auto norm = [](int64_t rows) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref w, pl::Ref o) {
          pl::Value v = x[pl::all].astype(pl::f32);
          o[pl::all] = (v * pl::rsqrt(pl::sum(v * v, {1}, true) / 4096.f) * w[pl::all].astype(pl::f32)).astype(pl::bf16);
        },
        pl::ShapeDtype({16384, 4096}, pl::bf16),
        {.grid = {16384 / rows},
         .in_specs = {pl::BlockSpec({rows, 4096}, [](V i) { return pl::idx(i, 0); }), pl::BlockSpec({1, 4096}, [](V) { return pl::idx(0, 0); })},
         .out_specs = {pl::BlockSpec({rows, 4096}, [](V i) { return pl::idx(i, 0); })},
         .compiler_params = {.num_warps = 8}});
  };
  std::vector<pl::ShapeDtype> norm_args{pl::ShapeDtype({16384, 4096}, pl::bf16), pl::ShapeDtype({1, 4096}, pl::bf16)};
  // (the weight row, the same block for every program, stays in global memory)
  EXPECT_EQ(grid_of(norm(8), norm_args),
            "grid pipeline: persistent (each CUDA block runs programs blockIdx.x + i * gridDim.x), 2 stages of 65536 bytes, copies 1 program(s) ahead\n"
            "  input 0 bf16[16384,4096]: one TMA box [8, 16, 256] of the view [16384, 16, 256], 65536 bytes\n");
  // one row a program (8 KiB blocks): many programs fit on an SM at once; not persistent
  EXPECT_EQ(grid_of(norm(1), norm_args), "none\n");
  // an input the kernel writes, or reads in a loop, stays in global memory
  auto touched = [](bool write) {
    return pl::pallas_call(
        [write](pl::Ref x, pl::Ref o) {
          pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({1, 32}); });
          if (write) x[pl::all] = x[pl::all] * 2.f;
          pl::Value s = pl::fori_loop(0, 2, pl::Value(pl::zeros({1, 32})), [&](V k, V acc) { return acc + pl::sum(x[pl::all], {0}, true); });
          o[pl::all] += write ? pl::sum(x[pl::all], {0}, true) : s;
        },
        pl::ShapeDtype({1, 4096}, pl::f32),
        {.grid = {128, 64},
         .in_specs = {pl::BlockSpec({256, 32}, [](V j, V i) { return pl::idx(i, j); })},
         .out_specs = {pl::BlockSpec({1, 32}, [](V j, V) { return pl::idx(0, j); })}});
  };
  EXPECT_EQ(grid_of(touched(true), {pl::ShapeDtype({16384, 4096}, pl::f32)}), "none\n");
  EXPECT_EQ(grid_of(touched(false), {pl::ShapeDtype({16384, 4096}, pl::f32)}), "none\n");
  // rows of 3 f32 (12 bytes) are not whole 16-byte units: no tensor copy
  auto narrow = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::when(pl::program_id(0) == 0, [&] { o[pl::all] = pl::zeros({1, 3}); });
        o[pl::all] += pl::sum(x[pl::all], {0}, true);
      },
      pl::ShapeDtype({1, 3}, pl::f32),
      {.grid = {8}, .in_specs = {pl::BlockSpec({16, 3}, [](V i) { return pl::idx(i, 0); })}, .out_specs = {pl::BlockSpec({1, 3}, [](V) { return pl::idx(0, 0); })}});
  EXPECT_EQ(grid_of(narrow, {pl::ShapeDtype({128, 3}, pl::f32)}), "none\n");
  // a kernel whose loop feeds a dot streams its operands through the loop pipeliner; its
  // top-level block (attention's Q) is not staged (its stages would only take shared memory)
  auto attention_like = pl::pallas_call(
      [](pl::Ref q, pl::Ref kv, pl::Ref o) {
        pl::Value qb = q[pl::all];
        o[pl::all] = pl::fori_loop(0, 4, pl::Value(pl::zeros({256, 64})), [&](V j, V acc) {
          pl::Value kb = kv(pl::ds(j * 64, 64), pl::all);
          return acc + pl::dot(pl::dot(qb, kb, {.trans_b = true}).astype(pl::bf16), kb);
        });
      },
      pl::ShapeDtype({2048, 64}, pl::f32),
      {.grid = {8},
       .in_specs = {pl::BlockSpec({256, 64}, [](V i) { return pl::idx(i, 0); }), pl::BlockSpec({256, 64}, [](V) { return pl::idx(0, 0); })},
       .out_specs = {pl::BlockSpec({256, 64}, [](V i) { return pl::idx(i, 0); })},
       .compiler_params = {.num_warps = 4}});
  EXPECT_EQ(grid_of(attention_like, {pl::ShapeDtype({2048, 64}, pl::bf16), pl::ShapeDtype({256, 64}, pl::bf16)}), "none\n");
}

}  // namespace
#endif
