// Block pipelining over the programs a CUDA block runs (src/backends/cuda/grid_pipeline.h):
// kernels whose input blocks the GPU backend copies into shared memory ahead of the program
// that reads them — over sequential grid axes, and over the parallel programs of a persistent
// kernel with large blocks — including blocks that overhang the array, blocks chosen by
// scalar-prefetch data, squeezed dimensions and dimensions split for the tensor copy. The
// interpreter defines the answers; the GPU half of the suite runs the same kernels on the GPU.
// Inputs hold small integers, so every sum is exact in any order.
#include <dlfcn.h>

#include "pallas/kernels.h"
#include "tests/test_util.h"
#ifdef PALLAS_TEST_HAVE_CUDA
#include "src/backends/cuda/compile.h"
#endif

namespace pt {
namespace {

using V = pl::Value;

// Column sums of x [R, 64] over a sequential grid axis of row blocks; R = 100 is not a whole
// number of 32-row blocks, so the last block overhangs the array: its rows past the end read
// poison and are masked out, on the GPU from the block's copy in shared memory as from global.
TEST(GridPipeline, ColumnSumsOverASequentialAxisWithAnEdgeBlock) {
  const int64_t R = 100, C = 64, br = 32, bc = 16;
  pl::Array x = small_ints({R, C}, 1);
  auto c = pl::pallas_call(
      [=](pl::Ref xr, pl::Ref o) {
        pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({1, bc}); });
        pl::Value rows = pl::iota(pl::i32, {br, bc}, 0) + pl::program_id(1) * int(br);
        pl::Value v = pl::where(rows < int(R), xr[pl::all], 0.f);
        o[pl::all] += pl::sum(v, {0}, true);
      },
      pl::ShapeDtype({1, C}, pl::f32),
      {.grid = {C / bc, (R + br - 1) / br},
       .in_specs = {pl::BlockSpec({br, bc}, [](V j, V i) { return pl::idx(i, j); })},
       .out_specs = {pl::BlockSpec({1, bc}, [](V j, V) { return pl::idx(0, j); })},
       .name = "column_sums"});
  auto xv = x.to_vector<float>();
  std::vector<float> want(C, 0.f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t col = 0; col < C; ++col) want[static_cast<size_t>(col)] += xv[static_cast<size_t>(r * C + col)];
  EXPECT_TRUE(equal(c(x).to_vector<float>(), want));
}

// Two sequential axes, a parallel batch axis squeezed from the blocks, and a block order that
// runs backwards along one sequential axis: the copies ahead follow the index maps, not the
// program order.
TEST(GridPipeline, TwoSequentialAxesBackwardsWithASqueezedBatch) {
  const int64_t B = 3, R = 64, C = 48, br = 16, bc = 16;
  pl::Array x = small_ints({B, R, C}, 2);
  auto c = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        pl::when((pl::program_id(1) == 0) & (pl::program_id(2) == 0), [&] { o[pl::all] = pl::zeros({1, 1}); });
        // weight each block by its step, so a block read at the wrong step changes the total
        pl::Value step = (pl::program_id(1) * 3 + pl::program_id(2) + 1).astype(pl::f32);
        o[pl::all] += pl::sum(xr[pl::all] * step, {0, 1}, false).reshape({1, 1});
      },
      pl::ShapeDtype({B, 1}, pl::f32),
      {.grid = {B, R / br, C / bc},
       .in_specs = {pl::BlockSpec({pl::squeezed, br, bc}, [](V b, V i, V j) { return pl::idx(b, 3 - i, j); })},
       .out_specs = {pl::BlockSpec({1, 1}, [](V b, V, V) { return pl::idx(b, 0); })},
       .name = "two_axes"});
  auto xv = x.to_vector<float>();
  std::vector<float> want(B, 0.f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < R / br; ++i)
      for (int64_t j = 0; j < C / bc; ++j) {
        float step = static_cast<float>(i * 3 + j + 1);
        for (int64_t r = 0; r < br; ++r)
          for (int64_t col = 0; col < bc; ++col)
            want[static_cast<size_t>(b)] += xv[static_cast<size_t>((b * R + (3 - i) * br + r) * C + j * bc + col)] * step;
      }
  EXPECT_TRUE(equal(c(x).to_vector<float>(), want));
}

// The block each sequential step reads comes from scalar-prefetch data (a gather of row
// blocks): the copy ahead evaluates the index map on the data, as the step itself does.
TEST(GridPipeline, BlocksChosenByScalarPrefetchData) {
  std::vector<int32_t> order{2, 0, 3, 3, 1};
  const int64_t R = 4 * 8, C = 32;
  pl::Array x = small_ints({R, C}, 3);
  auto c = pl::pallas_call(
      [](pl::Ref, pl::Ref xr, pl::Ref o) {
        pl::when(pl::program_id(0) == 0, [&] { o[pl::all] = pl::zeros({8, C}); });
        o[pl::all] = o[pl::all] * 2.f + xr[pl::all];
      },
      pl::ShapeDtype({8, C}, pl::f32),
      {.grid = {5},
       .in_specs = {pl::BlockSpec({8, C}, [](V i, pl::Ref ord) { return pl::idx(ord(i), 0); })},
       .out_specs = {pl::BlockSpec({8, C}, [](V, pl::Ref) { return pl::idx(0, 0); })},
       .num_scalar_prefetch = 1,
       .name = "gathered_blocks"});
  auto xv = x.to_vector<float>();
  std::vector<float> want(8 * C, 0.f);
  for (int32_t blk : order)
    for (int64_t e = 0; e < 8 * C; ++e) want[static_cast<size_t>(e)] = want[static_cast<size_t>(e)] * 2 + xv[static_cast<size_t>(blk * 8 * C + e)];
  EXPECT_TRUE(equal(c(pl::Array::from_vector(order), x).to_vector<float>(), want));
}

// Large row blocks over a parallel grid (a norm's shape: 8 rows of 1024 f32, 32 KiB a block):
// on the GPU each CUDA block runs many programs (persistent), its next block copied while it
// computes this one; the rows are longer than a tensor copy's 256 elements, so the copy takes
// a view of each row as 4 x 256. The last block overhangs the array by 3 rows.
TEST(GridPipeline, PersistentProgramsOverLargeRowBlocks) {
  const int64_t R = 8 * 600 - 3, C = 1024, br = 8;
  pl::Array x = small_ints({R, C}, 4);
  pl::Array w = small_ints({1, C}, 5);
  auto c = pl::pallas_call(
      [](pl::Ref xr, pl::Ref wr, pl::Ref o) {
        pl::Value v = xr[pl::all];
        o[pl::all] = v * wr[pl::all] + pl::sum(v, {1}, true);
      },
      pl::ShapeDtype({R, C}, pl::f32),
      {.grid = {(R + br - 1) / br},
       .in_specs = {pl::BlockSpec({br, C}, [](V i) { return pl::idx(i, 0); }), pl::BlockSpec({1, C}, [](V) { return pl::idx(0, 0); })},
       .out_specs = {pl::BlockSpec({br, C}, [](V i) { return pl::idx(i, 0); })},
       .name = "row_blocks",
       .compiler_params = {.num_warps = 8}});
  auto xv = x.to_vector<float>(), wv = w.to_vector<float>();
  std::vector<float> want(static_cast<size_t>(R * C));
  for (int64_t r = 0; r < R; ++r) {
    float s = 0;
    for (int64_t col = 0; col < C; ++col) s += xv[static_cast<size_t>(r * C + col)];
    for (int64_t col = 0; col < C; ++col)
      want[static_cast<size_t>(r * C + col)] = xv[static_cast<size_t>(r * C + col)] * wv[static_cast<size_t>(col)] + s;
  }
  EXPECT_TRUE(equal(c(x, w).to_vector<float>(), want));
}

// bf16 blocks (2-byte elements), as the rms norm benchmark: 8 rows of 2048 a program.
TEST(GridPipeline, PersistentBf16RowBlocks) {
  const int64_t R = 8 * 300, C = 2048, br = 8;
  pl::Array x = small_ints({R, C}, 6, pl::bf16);
  auto c = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = (xr[pl::all].astype(pl::f32) * 2.f).astype(pl::bf16); },
                           pl::ShapeDtype({R, C}, pl::bf16),
                           {.grid = {R / br},
                            .in_specs = {pl::BlockSpec({br, C}, [](V i) { return pl::idx(i, 0); })},
                            .out_specs = {pl::BlockSpec({br, C}, [](V i) { return pl::idx(i, 0); })},
                            .name = "bf16_rows"});
  auto xv = x.to_vector<float>();
  std::vector<float> want(xv.size());
  for (size_t k = 0; k < xv.size(); ++k) want[k] = xv[k] * 2;
  EXPECT_TRUE(equal(c(x).to_vector<float>(), want));
}

// A caller's view of device memory that is not 16-byte aligned (a torch tensor sliced at an odd
// offset) cannot take tensor copies: the call runs the kernel compiled without them, with the
// same answer.
TEST(GridPipelineGpuOnly, UnalignedViewRunsWithoutTensorCopies) {
  if (!pl::cuda_available()) GTEST_SKIP() << "needs a CUDA device";
  const int64_t R = 8 * 200, C = 1024, br = 8;
  pl::Array x = small_ints({R, C}, 7);
  pl::Array mem(pl::Shape{R * C + 1}, pl::f32, pl::Device::cuda(0));
  pl::Array view = pl::Array::view(static_cast<char*>(mem.raw_data()) + 4, {R, C}, pl::f32, pl::Device::cuda(0));
  view.copy_from(x);
  auto c = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] + pl::sum(xr[pl::all], {1}, true); }, pl::ShapeDtype({R, C}, pl::f32),
                           {.grid = {R / br},
                            .in_specs = {pl::BlockSpec({br, C}, [](V i) { return pl::idx(i, 0); })},
                            .out_specs = {pl::BlockSpec({br, C}, [](V i) { return pl::idx(i, 0); })},
                            .name = "unaligned_rows"});
  auto xv = x.to_vector<float>();
  std::vector<float> want(xv.size());
  for (int64_t r = 0; r < R; ++r) {
    float s = 0;
    for (int64_t col = 0; col < C; ++col) s += xv[static_cast<size_t>(r * C + col)];
    for (int64_t col = 0; col < C; ++col) want[static_cast<size_t>(r * C + col)] = xv[static_cast<size_t>(r * C + col)] + s;
  }
  EXPECT_TRUE(equal(c(view).to_vector<float>(), want));
}

// The same for a tensor-core matmul, whose loads otherwise go by cp.async or TMA straight into
// the dot's tiles: given a bf16
// view 2 bytes past an aligned address, it gives the answer it gives aligned arrays.
TEST(GridPipelineGpuOnly, UnalignedViewOfAMatmulOperand) {
  if (!pl::cuda_available()) GTEST_SKIP() << "needs a CUDA device";
  const int64_t M = 256, N = 128, K = 256;
  pl::Array a = small_ints({M, K}, 3, pl::bf16), b = small_ints({K, N}, 5, pl::bf16);
  pl::Array mem(pl::Shape{M * K + 1}, pl::bf16, pl::Device::cuda(0));
  pl::Array view = pl::Array::view(static_cast<char*>(mem.raw_data()) + 2, {M, K}, pl::bf16, pl::Device::cuda(0));
  view.copy_from(a);
  auto mm = pl::pallas_call(
      [](pl::Ref x, pl::Ref y, pl::Ref o) {
        o[pl::all] = pl::fori_loop(0, int(K / 64), pl::Value(pl::zeros({128, 128})), [&](V k, V acc) {
          return acc + pl::dot(x(pl::all, pl::ds(k * 64, 64)), y(pl::ds(k * 64, 64), pl::all));
        });
      },
      pl::ShapeDtype({M, N}, pl::f32),
      {.grid = {M / 128},
       .in_specs = {pl::BlockSpec({128, K}, [](V i) { return pl::idx(i, 0); }), pl::BlockSpec({K, N}, [](V) { return pl::idx(0, 0); })},
       .out_specs = {pl::BlockSpec({128, N}, [](V i) { return pl::idx(i, 0); })},
       .name = "unaligned_matmul"});
  EXPECT_TRUE(equal(mm(view, b).to_vector<float>(), mm(a, b).to_vector<float>()));
  auto lib = pl::kernels::matmul(M, N, K, pl::bf16, pl::f32, {.block_m = 128, .block_n = 128, .block_k = 64});
  EXPECT_TRUE(equal(lib(view, b).to_vector<float>(), lib(a, b).to_vector<float>()));
}

#ifdef PALLAS_TEST_HAVE_CUDA
// Without a GPU, under the stub driver (ctest -R stub.DeviceRouting; it reports an sm_90 device
// and launches nothing): a call given an unaligned view launches the kernel lowered for
// unaligned arrays with that kernel's own threads and shared memory — not the shape of the
// call's aligned kernel (on the H100 the unaligned kernel was first launched with the shape of
// the sm_90a matmul fast path, since retired).
TEST(DevicesStubDriver, UnalignedViewsLaunchTheirOwnKernel) {
  if (!std::getenv("STUB_CUDA_DEVICES")) GTEST_SKIP() << "runs under the stub driver only (ctest -R stub.DeviceRouting)";
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto last = reinterpret_cast<void (*)(unsigned*, unsigned*)>(dlsym(h, "pallas_stub_last_launch"));
  ASSERT_NE(last, nullptr);
  const int64_t M = 256, N = 128, K = 256;
  // the library's matmul loop, on the GPU backend
  auto lib = pl::pallas_call(
      [](pl::Ref x, pl::Ref y, pl::Ref o) {
        pl::Value acc = pl::fori_loop(0, K / 64, pl::zeros({128, 128}, pl::f32), [&](V s, V acc) {
          pl::Value xs = x(pl::all, pl::ds(s * 64, 64));  // separate statements: a fixed trace order
          pl::Value ys = y(pl::ds(s * 64, 64), pl::all);
          return acc + pl::dot(xs, ys);
        });
        o[pl::all] = acc.astype(pl::f32);
      },
      pl::ShapeDtype({M, N}, pl::f32),
      {.grid = {M / 128, N / 128},
       .in_specs = {pl::BlockSpec({128, K}, [](V i, V) { return pl::idx(i, 0); }), pl::BlockSpec({K, 128}, [](V, V j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({128, 128}, [](V i, V j) { return pl::idx(i, j); })},
       .name = "matmul",
       .backend = pl::Backend::Cuda});
  pl::Array a = pl::Array::zeros({M, K}, pl::bf16).to(pl::Device::cuda(0)), b = pl::Array::zeros({K, N}, pl::bf16).to(pl::Device::cuda(0));
  pl::Array mem(pl::Shape{M * K + 8}, pl::bf16, pl::Device::cuda(0));
  pl::Array view = pl::Array::view(static_cast<char*>(mem.raw_data()) + 2, {M, K}, pl::bf16, pl::Device::cuda(0));
  unsigned block = 0, smem = 0;
  lib(a, b);
  pl::synchronize();
  last(&block, &smem);
  auto aligned = pallas::cuda::compile_call(lib.state()->get_traced(), "sm_90a");
  EXPECT_EQ(block, static_cast<unsigned>(aligned->lowered.threads));
  EXPECT_EQ(smem, static_cast<unsigned>(aligned->lowered.smem_bytes));
  lib(view, b);
  pl::synchronize();
  last(&block, &smem);
  auto plain = pallas::cuda::compile_call(lib.state()->get_traced(), "sm_90a", /*tensor_maps=*/false, /*aligned=*/false);
  EXPECT_EQ(block, static_cast<unsigned>(plain->lowered.threads));
  EXPECT_EQ(smem, static_cast<unsigned>(plain->lowered.smem_bytes));
  // the two kernels differ in shape (the aligned one stages its operands by TMA), so the
  // launch of the unaligned one shows whose shape it took
  EXPECT_NE(plain->lowered.smem_bytes, aligned->lowered.smem_bytes);
}
#endif

}  // namespace
}  // namespace pt
