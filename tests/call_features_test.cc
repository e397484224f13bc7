// Every pallas_call feature in interpret mode: grids of rank 0..4 walked in row-major order,
// default (whole-array) specs, squeezed dims, index maps with arithmetic, several outputs,
// scratch, scalar prefetch, dynamic grid bounds, input/output aliasing, edge blocks, revisited
// outputs, memory_space Any, debug_print, debug / jaxpr_text, backends.
#include "tests/test_util.h"

namespace pt {
namespace {

pl::BlockSpec rows(int64_t r, int64_t c) {
  return pl::BlockSpec({r, c}, [](pl::Value i) { return pl::idx(i, 0); });
}

TEST(CallFeatures, GridRank0WholeArrays) {
  auto xs = normal(6 * 5, 1);
  pl::Array x = make_array(xs, {6, 5}, pl::f32);
  auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] * 3.0; }, pl::ShapeDtype({6, 5}, pl::f32),
                              {.name = "rank0"});
  auto o = to_doubles(call(x));
  for (int k = 0; k < 30; ++k) EXPECT_EQ(o[k], round_to(3 * round_to(xs[k], pl::f32), pl::f32));
}

TEST(CallFeatures, Grid1DBlocks) {
  auto xs = normal(8 * 16, 2);
  pl::Array x = make_array(xs, {8, 16}, pl::f32);
  auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] + pl::program_id(0).astype(pl::f32); },
                              pl::ShapeDtype({8, 16}, pl::f32),
                              {.grid = {4}, .in_specs = {rows(2, 16)}, .out_specs = {rows(2, 16)}});
  auto o = to_doubles(call(x)), xv = to_doubles(x);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 16; ++j) EXPECT_EQ(o[i * 16 + j], round_to(xv[i * 16 + j] + i / 2, pl::f32));
}

// A 2-D grid of 2-D blocks, with a transposing index map on the input.
TEST(CallFeatures, Grid2DTransposedIndexMap) {
  auto xs = normal(8 * 12, 3);
  pl::Array x = make_array(xs, {8, 12}, pl::f32);
  auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = pl::transpose(xr[pl::all]); },
                              pl::ShapeDtype({12, 8}, pl::f32),
                              {.grid = {3, 2},
                               .in_specs = {pl::BlockSpec({4, 4}, [](pl::Value i, pl::Value j) { return pl::idx(j, i); })},
                               .out_specs = {pl::BlockSpec({4, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })}});
  auto o = to_doubles(call(x)), xv = to_doubles(x);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 12; ++j) EXPECT_EQ(o[j * 8 + i], xv[i * 12 + j]);
}

// Grids of rank 3 and 4, with squeezed block dims.
TEST(CallFeatures, Grid3DAnd4DWithSqueezedDims) {
  auto xs = normal(2 * 3 * 4 * 8, 4);
  pl::Array x = make_array(xs, {2, 3, 4, 8}, pl::f32);
  auto call4 = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        EXPECT_EQ(xr.shape(), (pl::Shape{4}));  // three squeezed dims, then 4 of 8
        o[pl::all] = xr[pl::all] * 2.0;
      },
      pl::ShapeDtype({2, 3, 4, 8}, pl::f32),
      {.grid = {2, 3, 4, 2},
       .in_specs = {pl::BlockSpec({pl::squeezed, pl::squeezed, pl::squeezed, 4},
                                  [](pl::Value a, pl::Value b, pl::Value c, pl::Value d) { return pl::idx(a, b, c, d); })},
       .out_specs = {pl::BlockSpec({pl::squeezed, pl::squeezed, pl::squeezed, 4},
                                   [](pl::Value a, pl::Value b, pl::Value c, pl::Value d) { return pl::idx(a, b, c, d); })},
       .name = "grid4"});
  auto o = to_doubles(call4(x)), xv = to_doubles(x);
  for (size_t k = 0; k < xv.size(); ++k) ASSERT_EQ(o[k], xv[k] * 2);

  auto call3 = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) { o[pl::all] = pl::sum(xr[pl::all], 0); },  // [4, 8] -> [8]
      pl::ShapeDtype({2, 3, 8}, pl::f32),
      {.grid = {2, 3, 1},
       .in_specs = {pl::BlockSpec({pl::squeezed, pl::squeezed, 4, 8},
                                  [](pl::Value a, pl::Value b, pl::Value c) { return pl::idx(a, b, 0, c); })},
       .out_specs = {pl::BlockSpec({pl::squeezed, pl::squeezed, 8},
                                   [](pl::Value a, pl::Value b, pl::Value c) { return pl::idx(a, b, c); })},
       .name = "grid3"});
  auto s = to_doubles(call3(x));
  std::vector<double> want(2 * 3 * 8, 0.0);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c)
        for (int d = 0; d < 8; ++d) want[(a * 3 + b) * 8 + d] += xv[((a * 3 + b) * 4 + c) * 8 + d];
  EXPECT_TRUE(close(s, want, 1e-6, false));
}

// Programs run in row-major order: a revisited scalar block records the sequence of ids.
TEST(CallFeatures, RowMajorOrder) {
  auto call = pl::pallas_call(
      [](pl::Ref o) {
        pl::Value a = pl::program_id(0), b = pl::program_id(1);
        pl::when((a == 0) & (b == 0), [&] { o(0) = pl::Value::constant(0, pl::i64); });
        o(0) = o(0).get() * 10 + (a * 3 + b + 1).astype(pl::i64);
      },
      pl::ShapeDtype({1}, pl::i64), {.grid = {2, 3}, .name = "order"});
  EXPECT_EQ(call(std::vector<pl::Array>{})[0].to_vector<int64_t>()[0], 123456);
}

// Empty specs: every program sees the whole arrays.
TEST(CallFeatures, DefaultSpecsWholeArray) {
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        EXPECT_EQ(xr.shape(), (pl::Shape{4, 4}));
        pl::Value i = pl::program_id(0);
        o(i) = xr(i) + xr(3 - i);
      },
      pl::ShapeDtype({4, 4}, pl::i32), {.grid = {4}, .name = "whole"});
  std::vector<int32_t> xs;
  for (int k = 0; k < 16; ++k) xs.push_back(k * k);
  auto o = call(pl::Array::from_vector(xs, {4, 4})).to_vector<int32_t>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(o[i * 4 + j], xs[i * 4 + j] + xs[(3 - i) * 4 + j]);
}

// Index maps with arithmetic (reverse, div, mod, constant) and several outputs.
TEST(CallFeatures, IndexMapArithmeticAndSeveralOutputs) {
  std::vector<int32_t> xs;
  for (int k = 0; k < 8 * 4; ++k) xs.push_back(k);
  pl::Array x = pl::Array::from_vector(xs, {8, 4});
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2, pl::Ref o3) {
        o1[pl::all] = xr[pl::all];
        o2[pl::all] = xr[pl::all] * 2;
        o3[pl::all] = xr[pl::all] + 1000 * pl::program_id(0);
      },
      {pl::ShapeDtype({8, 4}, pl::i32), pl::ShapeDtype({4, 8}, pl::i32), pl::ShapeDtype({2, 4}, pl::i32)},
      {.grid = {8},
       .dimension_semantics = {pl::sequential},  // o3's blocks repeat along the axis (i % 2)
       .in_specs = {pl::BlockSpec({1, 4}, [](pl::Value i) { return pl::idx(7 - i, 0); })},
       .out_specs = {pl::BlockSpec({1, 4}, [](pl::Value i) { return pl::idx(i, 0); }),
                     pl::BlockSpec({1, 4}, [](pl::Value i) { return pl::idx(i / 2, i % 2); }),
                     pl::BlockSpec({1, 4}, [](pl::Value i) { return pl::idx(i % 2, 0); })},
       .name = "arith"});
  auto outs = call({x});
  auto o1 = outs[0].to_vector<int32_t>(), o2 = outs[1].to_vector<int32_t>(), o3 = outs[2].to_vector<int32_t>();
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(o1[i * 4 + j], xs[(7 - i) * 4 + j]);
      EXPECT_EQ(o2[(i / 2) * 8 + (i % 2) * 4 + j], 2 * xs[(7 - i) * 4 + j]);
    }
  // o3's block i % 2 is revisited: the last program to write it (6 or 7) wins
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(o3[r * 4 + j], xs[(7 - (6 + r)) * 4 + j] + 1000 * (6 + r));
}

// Scratch buffers: extra refs after the outputs, private to a program.
TEST(CallFeatures, ScratchShapes) {
  auto xs = normal(4 * 8, 5);
  pl::Array x = make_array(xs, {4, 8}, pl::f32);
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o, pl::Ref acc, pl::Ref cnt) {
        EXPECT_EQ(acc.shape(), (pl::Shape{8}));
        acc[pl::all] = pl::zeros({8});
        pl::store(cnt, {}, pl::Value::constant(0, pl::i32));
        pl::fori_loop(0, 3, [&](pl::Value) {
          acc[pl::all] += xr[pl::all];
          pl::store(cnt, {}, cnt.at({}).get() + 1);
        });
        o[pl::all] = acc[pl::all] * cnt.at({}).get().astype(pl::f32);  // 3 x * 3
      },
      pl::ShapeDtype({4, 8}, pl::f32),
      {.grid = {4},
       .in_specs = {pl::BlockSpec({pl::squeezed, 8}, [](pl::Value i) { return pl::idx(i, 0); })},
       .out_specs = {pl::BlockSpec({pl::squeezed, 8}, [](pl::Value i) { return pl::idx(i, 0); })},
       .scratch_shapes = {pl::ShapeDtype({8}, pl::f32), pl::ShapeDtype({}, pl::i32)},
       .name = "scratch"});
  auto o = to_doubles(call(x)), xv = to_doubles(x);
  std::vector<double> want;
  for (double v : xv) want.push_back(round_to(round_to(round_to(v + v, pl::f32) + v, pl::f32) * 3, pl::f32));
  EXPECT_TRUE(close(o, want, 1e-7));
}

// Scalar prefetch: leading i32 operands go to every index map (as refs) and to the kernel.
TEST(CallFeatures, ScalarPrefetch) {
  std::vector<int32_t> order{3, 0, 2, 1}, scale{5, 6, 7, 8};
  auto xs = normal(4 * 8, 6);
  pl::Array x = make_array(xs, {4, 8}, pl::f32);
  auto call = pl::pallas_call(
      [](pl::Ref ord, pl::Ref sc, pl::Ref xr, pl::Ref o) {
        pl::Value i = pl::program_id(0);
        o[pl::all] = xr[pl::all] * sc(i).get().astype(pl::f32) + ord(i).get().astype(pl::f32);
      },
      pl::ShapeDtype({4, 8}, pl::f32),
      {.grid = {4},
       .in_specs = {pl::BlockSpec({pl::squeezed, 8}, [](pl::Value i, pl::Ref ord, pl::Ref) { return pl::idx(ord(i), 0); })},
       .out_specs = {pl::BlockSpec({pl::squeezed, 8}, [](pl::Value i, pl::Ref, pl::Ref) { return pl::idx(i, 0); })},
       .num_scalar_prefetch = 2,
       .name = "prefetch"});
  auto o = to_doubles(call(pl::Array::from_vector(order), pl::Array::from_vector(scale), x)), xv = to_doubles(x);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) {
      // The GPU may contract x*s + o into one FMA (as Triton's default fp fusion), so 1 ulp apart.
      double want = round_to(round_to(xv[order[i] * 8 + j] * scale[i], pl::f32) + order[i], pl::f32);
      EXPECT_NEAR(o[i * 8 + j], want, 1e-6 * std::fabs(want) + 1e-7);
    }
}

// Dynamic grid bounds: one i32 scalar per pl::dynamic axis, passed before the inputs; the
// trace is reused for other bound values.
TEST(CallFeatures, DynamicGridBounds) {
  std::vector<float> xs(64);
  for (int k = 0; k < 64; ++k) xs[k] = static_cast<float>(k);
  pl::Array x = pl::Array::from_vector(xs, {8, 8});
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        pl::Value n = pl::num_programs(0);
        o[pl::all] = xr[pl::all] + n.astype(pl::f32) * 1000;
      },
      pl::ShapeDtype({8, 8}, pl::f32),
      {.grid = {pl::dynamic, 2},
       .in_specs = {pl::BlockSpec({1, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
       .out_specs = {pl::BlockSpec({1, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
       .name = "dynamic",
       .interpret_params = {.detect_unwritten_outputs = false}});  // rows past the grid stay unwritten
  EXPECT_THAT(call.trace({x.shape_dtype()}).jaxpr_text(), HasSubstr("grid=(dynamic, 2)"));
  for (int n : {8, 3}) {
    SCOPED_TRACE(n);
    auto o = call(pl::Array::scalar<int32_t>(n), x).to_vector<float>();
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) {
        if (i < n) EXPECT_EQ(o[i * 8 + j], xs[i * 8 + j] + 1000.f * n);
        else EXPECT_TRUE(std::isnan(o[i * 8 + j])) << "rows beyond the grid are never written (poison)";
      }
  }
  EXPECT_THAT(error_of([&] { call(pl::Array::scalar<int32_t>(-1), x); }),
              ::testing::AllOf(HasSubstr("kernel 'dynamic'"), HasSubstr("negative")));
  // 0 runs no program: refused, as a static axis of size 0 is, since the output would stay unwritten
  EXPECT_THAT(error_of([&] { call(pl::Array::scalar<int32_t>(0), x); }),
              ::testing::AllOf(HasSubstr("kernel 'dynamic'"), HasSubstr("dynamic grid bound 0 is 0"),
                               HasSubstr("output 0 f32[8,8] would be written by none")));
}

// input_output_aliases: the output starts as the input; unwritten blocks keep its values,
// and the caller's array is not modified.
TEST(CallFeatures, InputOutputAliases) {
  std::vector<float> xs(32), ys(32);
  for (int k = 0; k < 32; ++k) xs[k] = static_cast<float>(k), ys[k] = static_cast<float>(100 + k);
  pl::Array x = pl::Array::from_vector(xs, {4, 8}), y = pl::Array::from_vector(ys, {4, 8});
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref yr, pl::Ref o) {
        pl::when(pl::program_id(0) % 2 == 0, [&] { o[pl::all] = xr[pl::all] + yr[pl::all]; });
      },
      pl::ShapeDtype({4, 8}, pl::f32),
      {.grid = {4}, .in_specs = {rows(1, 8), rows(1, 8)}, .out_specs = {rows(1, 8)},
       .input_output_aliases = {{1, 0}}, .name = "alias"});
  auto o = call(x, y).to_vector<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) EXPECT_EQ(o[i * 8 + j], i % 2 == 0 ? xs[i * 8 + j] + ys[i * 8 + j] : ys[i * 8 + j]);
  EXPECT_EQ(y.to_vector<float>(), ys);
  // an in-place update: o = o + 1 through the aliased output only
  auto inc = pl::pallas_call([](pl::Ref, pl::Ref o) { o[pl::all] = o[pl::all] + 1.0; }, pl::ShapeDtype({4, 8}, pl::f32),
                             {.input_output_aliases = {{0, 0}}, .name = "inc"});
  auto io = inc(x).to_vector<float>();
  for (int k = 0; k < 32; ++k) EXPECT_EQ(io[k], xs[k] + 1);
}

// Edge blocks that overhang the array read NaN (floats) or int min (ints) outside it, and
// their writes outside are dropped.
TEST(CallFeatures, EdgeBlocksOverhang) {
  std::vector<float> xs(10);
  std::vector<int32_t> is(10);
  for (int k = 0; k < 10; ++k) xs[k] = static_cast<float>(k + 1), is[k] = k + 1;
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref ir, pl::Ref o, pl::Ref nan_seen, pl::Ref int_seen) {
        pl::Value v = xr[pl::all];
        o[pl::all] = v * 2.0;
        nan_seen[pl::all] = pl::where(v != v, 1, 0);  // NaN lanes
        int_seen[pl::all] = pl::where(ir[pl::all] == INT32_MIN, 1, 0);
      },
      {pl::ShapeDtype({10}, pl::f32), pl::ShapeDtype({12}, pl::i32), pl::ShapeDtype({12}, pl::i32)},
      {.grid = {3},
       .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); }),
                    pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
       .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); }),
                     pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); }),
                     pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
       .name = "edge",
       .interpret_params = kNoBoundsCheck});
  auto outs = call({pl::Array::from_vector(xs), pl::Array::from_vector(is)});
  ASSERT_EQ(outs[0].shape(), (pl::Shape{10}));
  auto o = outs[0].to_vector<float>();
  for (int k = 0; k < 10; ++k) EXPECT_EQ(o[k], 2.f * (k + 1));
  auto n = outs[1].to_vector<int32_t>(), m = outs[2].to_vector<int32_t>();
  for (int k = 0; k < 12; ++k) {
    EXPECT_EQ(n[k], k >= 10 ? 1 : 0) << k;
    EXPECT_EQ(m[k], k >= 10 ? 1 : 0) << k;
  }
}

// A 2-D edge: an 5x6 array in 4x4 blocks.
TEST(CallFeatures, EdgeBlocks2D) {
  auto xs = normal(30, 7);
  pl::Array x = make_array(xs, {5, 6}, pl::f32);
  auto spec = [] { return pl::BlockSpec({4, 4}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); }); };
  auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = -xr[pl::all]; }, pl::ShapeDtype({5, 6}, pl::f32),
                              {.grid = {2, 2}, .in_specs = {spec()}, .out_specs = {spec()}, .interpret_params = kNoBoundsCheck});
  auto o = to_doubles(call(x)), xv = to_doubles(x);
  for (int k = 0; k < 30; ++k) EXPECT_EQ(o[k], -xv[k]);
}

// A revisited output block accumulates over the last grid axis (a reduction grid).
TEST(CallFeatures, RevisitedOutputAccumulates) {
  auto xs = normal(4 * 32, 8);
  pl::Array x = make_array(xs, {4, 32}, pl::f32);
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({1, 8}); });
        o[pl::all] += xr[pl::all];
      },
      pl::ShapeDtype({4, 8}, pl::f32),
      {.grid = {4, 4},
       .in_specs = {pl::BlockSpec({1, 8}, [](pl::Value i, pl::Value k) { return pl::idx(i, k); })},
       .out_specs = {pl::BlockSpec({1, 8}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); })},
       .name = "accumulate"});
  auto o = to_doubles(call(x)), xv = to_doubles(x);
  std::vector<double> want(32, 0.0);
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 8; ++j) want[i * 8 + j] += xv[i * 32 + k * 8 + j];
  EXPECT_TRUE(close(o, want, 1e-6, false));
}

// Outputs a kernel never writes are poison (NaN), never stale data or zeros.
TEST(CallFeatures, UnwrittenOutputIsPoison) {
  auto call = pl::pallas_call([](pl::Ref o, pl::Ref oi) { o(0) = 1.0; oi(0) = 1; },
                              {pl::ShapeDtype({4}, pl::f32), pl::ShapeDtype({4}, pl::i16)},
                              {.name = "poison", .interpret_params = {.detect_unwritten_outputs = false}});
  auto outs = call(std::vector<pl::Array>{});
  auto o = outs[0].to_vector<float>();
  EXPECT_EQ(o[0], 1.f);
  for (int k = 1; k < 4; ++k) EXPECT_TRUE(std::isnan(o[k]));
  EXPECT_EQ(outs[1].to_vector<int16_t>(), (std::vector<int16_t>{1, INT16_MIN, INT16_MIN, INT16_MIN}));
}

// Writing to an input ref changes the kernel's copy, never the caller's array.
TEST(CallFeatures, InputWritesDoNotLeak) {
  std::vector<float> xs{1, 2, 3, 4};
  pl::Array x = pl::Array::from_vector(xs);
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        xr[pl::all] = xr[pl::all] * 10.0;
        o[pl::all] = xr[pl::all];
      },
      pl::ShapeDtype({4}, pl::f32), {});
  EXPECT_EQ(call(x).to_vector<float>(), (std::vector<float>{10, 20, 30, 40}));
  EXPECT_EQ(x.to_vector<float>(), xs);
}

// memory_space Any: the kernel gets the whole array and indexes it itself.
TEST(CallFeatures, MemorySpaceAny) {
  std::vector<float> xs(32);
  for (int k = 0; k < 32; ++k) xs[k] = static_cast<float>(k);
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        EXPECT_EQ(xr.shape(), (pl::Shape{32}));
        pl::Value i = pl::program_id(0);
        o[pl::all] = xr(pl::ds(i * 8, 8)) + 1.0;
      },
      pl::ShapeDtype({32}, pl::f32),
      {.grid = {4},
       .in_specs = {pl::BlockSpec({32}, pl::MemorySpace::Any)},
       .out_specs = {pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); })},
       .name = "any"});
  auto o = call(pl::Array::from_vector(xs)).to_vector<float>();
  for (int k = 0; k < 32; ++k) EXPECT_EQ(o[k], xs[k] + 1);
  EXPECT_THAT(call.jaxpr_text(), HasSubstr("memory_space=any"));
}

// The vector forms: a kernel over std::vector<Ref>, an index map over std::vector<Value>.
TEST(CallFeatures, VectorFormsOfKernelAndIndexMap) {
  std::vector<int32_t> xs(16);
  for (int k = 0; k < 16; ++k) xs[k] = k;
  auto call = pl::pallas_call(
      [](const std::vector<pl::Ref>& refs) { refs[2][pl::all] = refs[0][pl::all] - refs[1][pl::all]; },
      pl::ShapeDtype({16}, pl::i32),
      {.grid = {2},
       .in_specs = {pl::BlockSpec::with_vector_map({8}, [](const std::vector<pl::Value>& g) { return std::vector<pl::Value>{g[0]}; }),
                    pl::BlockSpec::with_vector_map({8}, [](const std::vector<pl::Value>& g) { return std::vector<pl::Value>{1 - g[0]}; })},
       .out_specs = {pl::BlockSpec::with_vector_map({8}, [](const std::vector<pl::Value>& g) { return std::vector<pl::Value>{g[0]}; })},
       .name = "vector_forms"});
  auto o = call(pl::Array::from_vector(xs), pl::Array::from_vector(xs)).to_vector<int32_t>();
  for (int k = 0; k < 16; ++k) EXPECT_EQ(o[k], xs[k] - xs[(k + 8) % 16]) << k;
}

// Many programs with disjoint outputs (run on threads where there are cores) still give
// exactly the sequential result.
TEST(CallFeatures, ManyProgramsInParallel) {
  auto xs = normal(256 * 16, 9);
  pl::Array x = make_array(xs, {256, 16}, pl::f32);
  auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = pl::exp(xr[pl::all]) + pl::program_id(0).astype(pl::f32); },
                              pl::ShapeDtype({256, 16}, pl::f32),
                              {.grid = {256}, .in_specs = {rows(1, 16)}, .out_specs = {rows(1, 16)}});
  auto o = to_doubles(call(x)), xv = to_doubles(x);
  std::vector<double> want;
  for (int i = 0; i < 256; ++i)
    for (int j = 0; j < 16; ++j) want.push_back(round_to(round_to(std::exp(xv[i * 16 + j]), pl::f32) + i, pl::f32));
  EXPECT_TRUE(close(o, want, 1e-6));
}

// debug_print prints once per program with the program id, values formatted in place.
TEST(CallFeatures, DebugPrint) {
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        pl::Value i = pl::program_id(0);
        pl::debug_print("i={} x={} sum={}", {i, xr(0).get(), pl::sum(xr[pl::all])});
        o[pl::all] = xr[pl::all];
      },
      pl::ShapeDtype({4}, pl::i32),
      {.grid = {2}, .in_specs = {pl::BlockSpec({2}, [](pl::Value i) { return pl::idx(i); })},
       .out_specs = {pl::BlockSpec({2}, [](pl::Value i) { return pl::idx(i); })}, .name = "print"});
  ::testing::internal::CaptureStdout();
  call(pl::Array::from_vector(std::vector<int32_t>{3, 4, 5, 6}));
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, HasSubstr("[program (0,)] i=0 x=3 sum=7"));
  EXPECT_THAT(out, HasSubstr("[program (1,)] i=1 x=5 sum=11"));
  // a tile is printed with its dtype and shape, then its elements in nested brackets
  auto tile = interp_call([](pl::Ref xr, pl::Ref o) {
    pl::debug_print("v={}", {xr[pl::all].get()});
    o[pl::all] = xr[pl::all];
  }, {pl::ShapeDtype({3}, pl::f32)}, "tile_print");
  ::testing::internal::CaptureStdout();
  tile({pl::Array::from_vector(std::vector<float>{1.5f, -2.f, 0.25f})});
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("v=f32[3] [1.5 -2 0.25]"));
}

// debug = true prints the IR when the call is traced; jaxpr_text returns the same text.
TEST(CallFeatures, DebugAndJaxprText) {
  auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = pl::exp(xr[pl::all]); }, pl::ShapeDtype({8}, pl::f32),
                              {.grid = {2},
                               .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
                               .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
                               .debug = true,
                               .name = "debugged"});
  ::testing::internal::CaptureStdout();
  call(pl::Array::from_vector(std::vector<float>(8, 0.f)));
  std::string printed = ::testing::internal::GetCapturedStdout();
  std::string text = call.jaxpr_text();
  EXPECT_EQ(printed, text);
  EXPECT_THAT(text, HasSubstr("pallas_call kernel 'debugged'"));
  EXPECT_THAT(text, HasSubstr("grid=(2,)"));
  EXPECT_THAT(text, HasSubstr("input 0: f32[8] block=[4]"));
  EXPECT_THAT(text, HasSubstr("exp"));
  // printed once, at trace time: a second call prints nothing
  ::testing::internal::CaptureStdout();
  call(pl::Array::from_vector(std::vector<float>(8, 1.f)));
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(call.name(), "debugged");
  EXPECT_EQ(call.num_outputs(), 1);
}

// trace() makes the IR available without running; the traced call then runs.
TEST(CallFeatures, TraceBeforeRun) {
  auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] + 1; }, pl::ShapeDtype({4}, pl::i32),
                              {.name = "pretraced"});
  call.trace({pl::ShapeDtype({4}, pl::i32)});
  EXPECT_THAT(call.jaxpr_text(), HasSubstr("add"));
  EXPECT_EQ(call(pl::Array::from_vector(std::vector<int32_t>{1, 2, 3, 4})).to_vector<int32_t>(),
            (std::vector<int32_t>{2, 3, 4, 5}));
}

// compiler_params and cost_estimate are accepted (hints for the GPU); Auto and Interpret
// backends give the same result here.
TEST(CallFeatures, BackendsAndHints) {
  std::vector<float> xs{1, 2, 3, 4};
  for (pl::Backend b : {pl::Backend::Auto, pl::Backend::Interpret}) {
    auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] * 2.0; }, pl::ShapeDtype({4}, pl::f32),
                                {.name = "hints",
                                 .compiler_params = {.num_warps = 8, .num_stages = 2, .arch = "sm_90a"},
                                 .cost_estimate = pl::CostEstimate{.flops = 4, .transcendentals = 0, .bytes_accessed = 32},
                                 .backend = b});
    EXPECT_EQ(call(pl::Array::from_vector(xs)).to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
  }
}

// Backend::Cuda runs on a GPU, and fails clearly (naming the kernel and the way out) without one.
TEST(CallFeatures, CudaBackendWithoutGpuFailsClearly) {
  auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] * 2.0; }, pl::ShapeDtype({4}, pl::f32),
                              {.name = "on_gpu", .backend = pl::Backend::Cuda});
  pl::Array x = pl::Array::from_vector(std::vector<float>{1, 2, 3, 4});
  if (pl::cuda_available()) {
    EXPECT_EQ(call(x).to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
  } else {
    EXPECT_TRUE(throws_error([&] { call(x); }, {"kernel 'on_gpu'", "Cuda", "Backend::Interpret"}));
  }
  // interpret = true overrides the backend
  auto forced = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] * 2.0; }, pl::ShapeDtype({4}, pl::f32),
                                {.interpret = true, .name = "forced", .backend = pl::Backend::Cuda});
  EXPECT_EQ(forced(x).to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// Scratch is private to each program and starts as poison there (as a GPU block's shared
// memory starts undefined): a read before any write gives NaN, in every program.
TEST(CallFeatures, ScratchStartsAsPoisonInEveryProgram) {
  auto call = pl::pallas_call(
      [](pl::Ref o, pl::Ref s) {
        o(pl::program_id(0)) = s[pl::all];  // read before write
        s[pl::all] = pl::full({4}, 1.0);
      },
      pl::ShapeDtype({3, 4}, pl::f32),
      {.grid = {3},
       .scratch_shapes = {pl::ShapeDtype({4}, pl::f32)},
       .name = "scratch_poison",
       .interpret_params = {.detect_uninitialized = false}});
  for (float v : call(std::vector<pl::Array>{})[0].to_vector<float>()) EXPECT_TRUE(std::isnan(v));
}

// Accumulating into a block that is revisited out of order (programs 0, 2, 4 hit block 0;
// 1, 3, 5 hit block 1): each block sees its programs in row-major order.
TEST(CallFeatures, InterleavedRevisits) {
  auto call = pl::pallas_call(
      [](pl::Ref o) {
        pl::Value i = pl::program_id(0);
        pl::when(i < 2, [&] { o[pl::all] = pl::zeros({1}, pl::i32); });
        o[pl::all] = o[pl::all] * 10 + (i + 1);
      },
      pl::ShapeDtype({2}, pl::i32),
      {.grid = {6},
       .dimension_semantics = {pl::sequential},  // the map i % 2 moves with i but repeats blocks
       .out_specs = {pl::BlockSpec({1}, [](pl::Value i) { return pl::idx(i % 2); })},
       .name = "interleaved"});
  EXPECT_EQ(call(std::vector<pl::Array>{})[0].to_vector<int32_t>(), (std::vector<int32_t>{135, 246}));
}

// Dynamic bounds, scalar prefetch and aliasing together: arguments are the bounds, then
// the prefetch operands, then the inputs; alias indices count the prefetch operands.
TEST(CallFeatures, DynamicBoundsWithPrefetchAndAlias) {
  std::vector<int32_t> perm{2, 0, 1, 3};
  std::vector<float> xs(16), ys(16, -1.f);
  for (int k = 0; k < 16; ++k) xs[k] = static_cast<float>(k);
  auto call = pl::pallas_call(
      [](pl::Ref p, pl::Ref x, pl::Ref, pl::Ref o) { o[pl::all] = x[pl::all] + p(pl::program_id(0)).get().astype(pl::f32) * 100; },
      pl::ShapeDtype({4, 4}, pl::f32),
      {.grid = {pl::dynamic},
       .in_specs = {pl::BlockSpec({1, 4}, [](pl::Value i, pl::Ref p) { return pl::idx(p(i), 0); }),
                    pl::BlockSpec({1, 4}, [](pl::Value i, pl::Ref) { return pl::idx(i, 0); })},
       .out_specs = {pl::BlockSpec({1, 4}, [](pl::Value i, pl::Ref) { return pl::idx(i, 0); })},
       .num_scalar_prefetch = 1,
       .input_output_aliases = {{2, 0}},
       .name = "all_together"});
  auto o = call(pl::Array::scalar<int32_t>(3), pl::Array::from_vector(perm), pl::Array::from_vector(xs, {4, 4}),
                pl::Array::from_vector(ys, {4, 4}))
               .to_vector<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(o[i * 4 + j], i < 3 ? xs[perm[i] * 4 + j] + 100.f * perm[i] : -1.f) << i << "," << j;  // row 3: aliased input kept
}

// A grid with an axis of size zero runs no programs (refused when an output would stay
// unwritten: GridSemantics.ZeroSizeGridAxis); a grid of rank 5 runs them all.
TEST(CallFeatures, EmptyAndHighRankGrids) {
  auto none = pl::pallas_call([](pl::Ref o) { o[pl::all] = pl::zeros({0}); }, pl::ShapeDtype({0}, pl::f32),
                              {.grid = {3, 0}, .name = "empty_grid"});
  EXPECT_EQ(none(std::vector<pl::Array>{})[0].size(), 0);
  auto five = pl::pallas_call(
      [](pl::Ref o) {
        pl::Value lin = pl::program_id(0);
        for (int a = 1; a < 5; ++a) lin = lin * 2 + pl::program_id(a);
        o(lin) = lin;
      },
      pl::ShapeDtype({32}, pl::i32), {.grid = {2, 2, 2, 2, 2}, .name = "grid5"});
  auto o = five(std::vector<pl::Array>{})[0].to_vector<int32_t>();
  for (int k = 0; k < 32; ++k) EXPECT_EQ(o[k], k);
}

// Indexing inside a block that is a strided view of a bigger array (a column block), and
// inside a padded edge block: gathers, masked loads, scatters and atomics address the block.
TEST(CallFeatures, IndexingInsideStridedAndEdgeBlocks) {
  std::vector<float> xs(6 * 8);
  for (int k = 0; k < 48; ++k) xs[k] = static_cast<float>(k);
  std::vector<int32_t> idx{3, 0, 2};
  auto call = pl::pallas_call(
      [](pl::Ref x, pl::Ref ir, pl::Ref g, pl::Ref o) {
        pl::Value i = ir[pl::all];
        g[pl::all] = x(pl::all, i);  // [4, 3]: columns 3, 0, 2 of the block
        o[pl::all] = pl::load(x, {pl::all, pl::all}, {.mask = pl::arange(4) < 2, .other = -1.0});
        pl::store(o, {1, i}, pl::full({3}, 500.0));
        pl::atomic_add(o, {0, i}, pl::full({3}, 1000.0));
      },
      {pl::ShapeDtype({8, 6}, pl::f32), pl::ShapeDtype({6, 8}, pl::f32)},
      {.grid = {2, 2},
       .in_specs = {pl::BlockSpec({4, 4}, [](pl::Value a, pl::Value b) { return pl::idx(a, b); }),
                    pl::BlockSpec({3}, [](pl::Value, pl::Value) { return pl::idx(0); })},
       .out_specs = {pl::BlockSpec({4, 3}, [](pl::Value a, pl::Value b) { return pl::idx(a, b); }),
                     pl::BlockSpec({4, 4}, [](pl::Value a, pl::Value b) { return pl::idx(a, b); })},
       .name = "strided_blocks",
       .interpret_params = kNoBoundsCheck});
  auto outs = call({pl::Array::from_vector(xs, {6, 8}), pl::Array::from_vector(idx)});
  auto g = outs[0].to_vector<float>(), o = outs[1].to_vector<float>();
  auto X = [&](int r, int c) { return r < 6 ? xs[r * 8 + c] : NAN; };
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int r = 0; r < 4; ++r) {
        int row = a * 4 + r;
        for (int k = 0; k < 3; ++k) {
          float want = X(row, b * 4 + idx[k]);
          if (row < 8) {
            if (std::isnan(want)) EXPECT_TRUE(std::isnan(g[row * 6 + b * 3 + k]));
            else EXPECT_EQ(g[row * 6 + b * 3 + k], want) << row << "," << k;
          }
        }
        if (row >= 6) continue;  // outside the output: dropped
        for (int c = 0; c < 4; ++c) {
          float want = c < 2 ? X(row, b * 4 + c) : -1.f;
          bool hit = c == 3 || c == 0 || c == 2;
          if (r == 1 && hit) want = 500.f;
          if (r == 0 && hit) want += 1000.f;
          EXPECT_EQ(o[row * 8 + b * 4 + c], want) << row << "," << c;
        }
      }
}

// An array of rank above the limit (8) is reported for the kernel when the call is traced.
TEST(CallFeatures, RankLimitIsAnError) {
  pl::Shape s(9, 1);
  auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype(s, pl::f32),
                              {.name = "rank9"});
  EXPECT_TRUE(throws_error([&] { call(pl::Array::full(s, 1.0, pl::f32)); }, {"kernel 'rank9'", "rank 9", "8"}));
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {
// A BlockSpec with a block shape and no index map always selects block 0.
TEST(CallFeatures, BlockSpecWithoutIndexMap) {
  std::vector<int32_t> xs{1, 2, 3, 4, 5, 6, 7, 8};
  auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o(pl::program_id(0)) = pl::sum(x[pl::all]); }, pl::ShapeDtype({2}, pl::i32),
                              {.grid = {2}, .in_specs = {pl::BlockSpec(pl::Shape{4})}, .name = "no_map"});
  EXPECT_EQ(call(pl::Array::from_vector(xs)).to_vector<int32_t>(), (std::vector<int32_t>{10, 10}));
}

// debug_print on a rank-0 grid, of bools and 16-bit floats.
TEST(CallFeatures, DebugPrintFormats) {
  auto call = interp_call(
      [](pl::Ref x, pl::Ref o) {
        pl::Value v = x[pl::all];
        pl::debug_print("b={} h={} n={}", {v > 1.0, v, pl::sum(v.astype(pl::i32))});
        o[pl::all] = v;
      },
      {pl::ShapeDtype({2}, pl::f16)}, "formats");
  ::testing::internal::CaptureStdout();
  call({make_array({0.5, 2.5}, {2}, pl::f16)});
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "[program ()] b=bool[2] [False True] h=f16[2] [0.5 2.5] n=2\n");
}
}  // namespace
}  // namespace pt

#include <thread>

namespace pt {
namespace {
// Calls traced and run from several threads at once (each with its own kernel, and one
// shared call) give the sequential results.
TEST(CallFeatures, ConcurrentCallsFromThreads) {
  std::vector<float> xs(64);
  for (int k = 0; k < 64; ++k) xs[k] = static_cast<float>(k);
  pl::Array x = pl::Array::from_vector(xs, {8, 8});
  auto shared = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] * 2.0; }, pl::ShapeDtype({8, 8}, pl::f32),
                                {.grid = {8}, .in_specs = {rows(1, 8)}, .out_specs = {rows(1, 8)}, .name = "shared"});
  std::vector<int> bad(4, 0);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int rep = 0; rep < 10; ++rep) {
        float add = static_cast<float>(t * 100 + rep);
        auto own = pl::pallas_call([add](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] + add; }, pl::ShapeDtype({8, 8}, pl::f32),
                                   {.grid = {2}, .in_specs = {rows(4, 8)}, .out_specs = {rows(4, 8)}});
        auto a = own(x).to_vector<float>();
        auto b = shared(x).to_vector<float>();
        for (int k = 0; k < 64; ++k) bad[t] += (a[k] != xs[k] + add) + (b[k] != 2 * xs[k]);
      }
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}
}  // namespace
}  // namespace pt
