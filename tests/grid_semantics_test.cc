// Grid dimension semantics: inferred or declared, and the Pallas reduction idioms that revisit
// an output block (accumulation over a grid axis), which must give the interpreter's answer on
// every backend. Inputs hold small integers, so every sum is exact in any order and both
// backends must agree bit for bit.
#include "src/core/pallas_call.h"
#include "src/ir/scalar_eval.h"
#include "tests/test_util.h"

namespace pt {
namespace {

using V = pl::Value;

// Row sums of x [64, 96] in blocks of [16, 32]: the output block (16) ignores grid axis 1,
// so axis 1 is inferred sequential; program (i, 0) initialises, the others accumulate.
pl::Call row_sums(std::vector<pl::DimensionSemantics> sem = {}) {
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({16}); });
        o[pl::all] = o[pl::all] + pl::sum(x[pl::all], 1);
      },
      pl::ShapeDtype({64}, pl::f32),
      {.grid = {4, 3},
       .dimension_semantics = std::move(sem),
       .in_specs = {pl::BlockSpec({16, 32}, [](V i, V j) { return pl::idx(i, j); })},
       .out_specs = {pl::BlockSpec({16}, [](V i, V j) { return pl::idx(i); })},
       .name = "row_sums"});
}

std::vector<float> host_row_sums(const pl::Array& x) {
  auto v = x.to_vector<float>();
  std::vector<float> r(64, 0.f);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 96; ++j) r[i] += v[i * 96 + j];
  return r;
}

TEST(GridSemantics, InferredFromOutputIndexMaps) {
  pl::Array x = small_ints({64, 96}, 1);
  pl::Call c = row_sums();
  EXPECT_TRUE(equal(c(x).to_vector<float>(), host_row_sums(x)));
  EXPECT_THAT(c.jaxpr_text(), HasSubstr("dimension_semantics=(parallel, sequential)"));
  // An all-parallel grid prints no semantics line (the IR text of such calls is unchanged).
  auto add = pl::pallas_call([](pl::Ref a, pl::Ref o) { o[pl::all] = a[pl::all] + 1.f; }, pl::ShapeDtype({64}, pl::f32),
                             {.grid = {4},
                              .in_specs = {pl::BlockSpec({16}, [](V i) { return pl::idx(i); })},
                              .out_specs = {pl::BlockSpec({16}, [](V i) { return pl::idx(i); })}});
  add(pl::Array::zeros({64}, pl::f32));
  EXPECT_THAT(add.jaxpr_text(), ::testing::Not(HasSubstr("dimension_semantics")));
}

TEST(GridSemantics, DeclaredSequentialMatchesInferred) {
  pl::Array x = small_ints({64, 96}, 2);
  pl::Call c = row_sums({pl::parallel, pl::sequential});
  EXPECT_TRUE(equal(c(x).to_vector<float>(), host_row_sums(x)));
  pl::Call all_seq = row_sums({pl::arbitrary, pl::arbitrary});
  EXPECT_TRUE(equal(all_seq(x).to_vector<float>(), host_row_sums(x)));
  EXPECT_THAT(all_seq.jaxpr_text(), HasSubstr("dimension_semantics=(sequential, sequential)"));
}

TEST(GridSemantics, WrongNumberOfEntriesIsAnError) {
  pl::Array x = small_ints({64, 96}, 3);
  EXPECT_TRUE(throws_error([&] { row_sums({pl::parallel})(x); },
                           {"kernel 'row_sums'", "dimension_semantics has 1 entries", "grid has 2 axes"}));
}

// Every program adds its block into the one output block (the index map is constant).
TEST(GridSemantics, EveryProgramAccumulatesIntoOneBlock) {
  pl::Array x = small_ints({8 * 32, 16}, 4);
  auto c = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        pl::when(pl::program_id(0) == 0, [&] { o[pl::all] = pl::zeros({32, 16}); });
        o[pl::all] += xr[pl::all];
      },
      pl::ShapeDtype({32, 16}, pl::f32),
      {.grid = {8},
       .in_specs = {pl::BlockSpec({32, 16}, [](V i) { return pl::idx(i, 0); })},
       .out_specs = {pl::BlockSpec({32, 16}, [](V i) { return pl::idx(0, 0); })},
       .name = "shared_block"});
  auto v = x.to_vector<float>();
  std::vector<float> want(32 * 16, 0.f);
  for (int p = 0; p < 8; ++p)
    for (int e = 0; e < 32 * 16; ++e) want[static_cast<size_t>(e)] += v[static_cast<size_t>(p * 32 * 16 + e)];
  EXPECT_TRUE(equal(c(x).to_vector<float>(), want));
  EXPECT_THAT(c.jaxpr_text(), HasSubstr("dimension_semantics=(sequential,)"));
}

// A matmul that accumulates over a K grid axis into its f32 output block.
TEST(GridSemantics, MatmulAccumulatesOverKGridAxis) {
  const int M = 64, N = 96, K = 128, bm = 32, bn = 32, bk = 32;
  pl::Array a = small_ints({M, K}, 5), b = small_ints({K, N}, 6);
  auto c = pl::pallas_call(
      [](pl::Ref ar, pl::Ref br, pl::Ref o) {
        pl::when(pl::program_id(2) == 0, [&] { o[pl::all] = pl::zeros({bm, bn}); });
        o[pl::all] += pl::dot(ar[pl::all], br[pl::all], {.precision = pl::Precision::Highest});
      },
      pl::ShapeDtype({M, N}, pl::f32),
      {.grid = {M / bm, N / bn, K / bk},
       .in_specs = {pl::BlockSpec({bm, bk}, [](V i, V j, V k) { return pl::idx(i, k); }),
                    pl::BlockSpec({bk, bn}, [](V i, V j, V k) { return pl::idx(k, j); })},
       .out_specs = {pl::BlockSpec({bm, bn}, [](V i, V j, V k) { return pl::idx(i, j); })},
       .name = "k_axis_matmul"});
  auto av = a.to_vector<float>(), bv = b.to_vector<float>();
  std::vector<float> want(M * N, 0.f);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += static_cast<double>(av[i * K + k]) * bv[k * N + j];
      want[static_cast<size_t>(i * N + j)] = static_cast<float>(s);
    }
  EXPECT_TRUE(equal(c(a, b).to_vector<float>(), want));
  EXPECT_THAT(c.jaxpr_text(), HasSubstr("dimension_semantics=(parallel, parallel, sequential)"));
}

// Declared parallel while programs share the output block: `+=` is atomic on every backend,
// so the (integer) total is exact whatever the order.
TEST(GridSemantics, DeclaredParallelSharedBlockAddupdateIsAtomic) {
  pl::Array x = small_ints({16 * 64}, 7, pl::i32);
  pl::Array zero = pl::Array::zeros({64}, pl::i32);
  auto c = pl::pallas_call(
      [](pl::Ref xr, pl::Ref acc_in, pl::Ref o) { o[pl::all] += xr[pl::all]; },
      pl::ShapeDtype({64}, pl::i32),
      {.grid = {16},
       .dimension_semantics = {pl::parallel},
       .in_specs = {pl::BlockSpec({64}, [](V i) { return pl::idx(i); }), pl::BlockSpec({64}, [](V i) { return pl::idx(0); })},
       .out_specs = {pl::BlockSpec({64}, [](V i) { return pl::idx(0); })},
       .input_output_aliases = {{1, 0}},
       .name = "atomic_shared"});
  auto v = x.to_vector<int32_t>();
  std::vector<int32_t> want(64, 0);
  for (int p = 0; p < 16; ++p)
    for (int e = 0; e < 64; ++e) want[static_cast<size_t>(e)] += v[static_cast<size_t>(p * 64 + e)];
  EXPECT_TRUE(equal(c(x, zero).to_vector<int32_t>(), want));
  // the same through a map that revisits blocks along the declared-parallel axis (i / 4): four
  // programs add into each block at once, so the GPU's += must be atomic there too
  pl::Array zeros4 = pl::Array::zeros({4 * 64}, pl::i32);
  auto quarters = pl::pallas_call(
      [](pl::Ref xr, pl::Ref acc_in, pl::Ref o) { o[pl::all] += xr[pl::all]; },
      pl::ShapeDtype({4 * 64}, pl::i32),
      {.grid = {16},
       .dimension_semantics = {pl::parallel},
       .in_specs = {pl::BlockSpec({64}, [](V i) { return pl::idx(i); }), pl::BlockSpec({64}, [](V i) { return pl::idx(i / 4); })},
       .out_specs = {pl::BlockSpec({64}, [](V i) { return pl::idx(i / 4); })},
       .input_output_aliases = {{1, 0}},
       .name = "atomic_quarters"});
  std::vector<int32_t> want4(4 * 64, 0);
  for (int p = 0; p < 16; ++p)
    for (int e = 0; e < 64; ++e) want4[static_cast<size_t>((p / 4) * 64 + e)] += v[static_cast<size_t>(p * 64 + e)];
  EXPECT_TRUE(equal(quarters(x, zeros4).to_vector<int32_t>(), want4));
}

// An output index map that reads scalar-prefetch data may send two programs to one block:
// without declared semantics that is refused, naming the output and the fixes.
TEST(GridSemantics, DataDependentOutputMapNeedsDeclaredSemantics) {
  auto make = [](std::vector<pl::DimensionSemantics> sem) {
    return pl::pallas_call(
        [](pl::Ref perm, pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] * 2.f; }, pl::ShapeDtype({32}, pl::f32),
        {.grid = {4},
         .dimension_semantics = std::move(sem),
         .in_specs = {pl::BlockSpec({8}, [](V i, pl::Ref p) { return pl::idx(i); })},
         .out_specs = {pl::BlockSpec({8}, [](V i, pl::Ref p) { return pl::idx(p(i).get()); })},
         .num_scalar_prefetch = 1,
         .name = "permute"});
  };
  pl::Array perm = pl::Array::from_vector(std::vector<int32_t>{2, 0, 3, 1});
  pl::Array x = small_ints({32}, 8);
  EXPECT_TRUE(throws_error([&] { make({})(perm, x); },
                           {"kernel 'permute'", "index map of output 0 reads scalar-prefetch data", "dimension_semantics",
                            "atomics"}));
  auto out = make({pl::parallel})(perm, x).to_vector<float>();
  auto xv = x.to_vector<float>();
  std::vector<int> p{2, 0, 3, 1};
  for (int i = 0; i < 4; ++i)
    for (int e = 0; e < 8; ++e) EXPECT_EQ(out[static_cast<size_t>(p[i] * 8 + e)], 2.f * xv[static_cast<size_t>(i * 8 + e)]);
}

// A whole-array output written in disjoint slices by each program (Triton style): inferred
// sequential (its block is revisited), and declaring the axis parallel is the user's promise.
TEST(GridSemantics, WholeArrayOutputWrittenInSlices) {
  pl::Array x = small_ints({256}, 9);
  for (auto sem : {std::vector<pl::DimensionSemantics>{}, std::vector<pl::DimensionSemantics>{pl::parallel}}) {
    auto c = pl::pallas_call(
        [](pl::Ref xr, pl::Ref o) {
          V i = pl::program_id(0);
          o(pl::ds(i * 32, 32)) = xr(pl::ds(i * 32, 32)).get() + 1.f;
        },
        pl::ShapeDtype({256}, pl::f32), {.grid = {8}, .dimension_semantics = sem, .name = "slices"});
    auto got = c(x).to_vector<float>();
    auto xv = x.to_vector<float>();
    for (size_t k = 0; k < xv.size(); ++k) EXPECT_EQ(got[k], xv[k] + 1.f);
  }
}

// Blocks whose index map points before the array or past a squeezed dimension read poison
// and drop their writes on every backend.
TEST(GridSemantics, BlocksOutsideTheArrayOnEitherSide) {
  pl::Array x = small_ints({4, 16}, 10);
  auto c = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all] + 1.f; }, pl::ShapeDtype({4, 16}, pl::f32),
      {.grid = {4},
       .in_specs = {pl::BlockSpec({pl::squeezed, 8}, [](V i) { return pl::idx(i - 1, i - 1); })},
       .out_specs = {pl::BlockSpec({pl::squeezed, 8}, [](V i) { return pl::idx(i, i - 1); })},
       .name = "outside",
       .interpret_params = {.detect_out_of_bounds = false, .detect_unwritten_outputs = false}});  // half the rows stay unwritten
  auto got = c(x).to_vector<float>();
  auto xv = x.to_vector<float>();
  // program i copies x[i-1, 8(i-1) : 8i] to row i: rows 1 and 2 get one half each; program
  // 0's blocks start at row -1 and column -8, program 3's lie past the end of the columns.
  for (int r = 0; r < 4; ++r)
    for (int col = 0; col < 16; ++col) {
      float g = got[static_cast<size_t>(r * 16 + col)];
      bool written = (r == 1 && col < 8) || (r == 2 && col >= 8);
      if (written) EXPECT_EQ(g, xv[static_cast<size_t>((r - 1) * 16 + col)] + 1.f) << r << "," << col;
      else EXPECT_TRUE(std::isnan(g)) << r << "," << col << " = " << g;
    }
}


// Two programs of one axis write one block through a computed index map (i / 2): the axis is
// inferred sequential, so program 2k initialises the block and 2k + 1 accumulates into it in
// that order on every backend (on the GPU they would otherwise race).
TEST(GridSemantics, MapRevisitingBlocksAlongAnAxisMakesItSequential) {
  pl::Array x = small_ints({8 * 16}, 11);
  auto c = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        pl::when(pl::program_id(0) % 2 == 0, [&] { o[pl::all] = xr[pl::all]; });
        pl::when(pl::program_id(0) % 2 == 1, [&] { o[pl::all] = o[pl::all] * 2.f + xr[pl::all]; });
      },
      pl::ShapeDtype({4 * 16}, pl::f32),
      {.grid = {8},
       .in_specs = {pl::BlockSpec({16}, [](V i) { return pl::idx(i); })},
       .out_specs = {pl::BlockSpec({16}, [](V i) { return pl::idx(i / 2); })},
       .name = "pairs"});
  auto xv = x.to_vector<float>();
  std::vector<float> want(64);
  for (int b = 0; b < 4; ++b)
    for (int e = 0; e < 16; ++e)  // order matters: 2 * first + second
      want[static_cast<size_t>(b * 16 + e)] = 2.f * xv[static_cast<size_t>(2 * b * 16 + e)] + xv[static_cast<size_t>((2 * b + 1) * 16 + e)];
  EXPECT_TRUE(equal(c(x).to_vector<float>(), want));
  EXPECT_THAT(c.jaxpr_text(), HasSubstr("dimension_semantics=(sequential,)"));
}

// The semantics inferred for index maps of several shapes: an axis stays parallel only where
// a block index is one-to-one in the parallel axes it reads.
TEST(GridSemantics, InferenceSeesAffineIndexMaps) {
  auto semantics = [](std::vector<int64_t> grid, pl::Shape out, pl::Shape block,
                      std::function<std::vector<V>(V, V)> map) {
    auto c = pl::pallas_call([](pl::Ref o) { o[pl::all] = pl::zeros({o.shape()[0], o.shape()[1]}); },
                             pl::ShapeDtype(out, pl::f32),
                             {.grid = grid,
                              .out_specs = {pl::BlockSpec(block, [map](V i, V j) {
                                auto v = map(i, j);
                                return pl::idx(v[0], v[1]);
                              })},
                              .interpret = true,
                              .interpret_params = {.detect_unwritten_outputs = false}});  // some maps skip blocks
    c(std::vector<pl::Array>{});
    std::string t = c.jaxpr_text();
    auto at = t.find("dimension_semantics=");
    return at == std::string::npos ? std::string("all parallel") : t.substr(at + 20, t.find('\n', at) - at - 20);
  };
  // one axis per block index, shifted, scaled, reversed: parallel
  EXPECT_EQ(semantics({4, 3}, {8, 6}, {2, 2}, [](V i, V j) { return std::vector<V>{i, j}; }), "all parallel");
  EXPECT_EQ(semantics({4, 3}, {8, 12}, {2, 2}, [](V i, V j) { return std::vector<V>{3 - i, j * 2 + 1}; }), "all parallel");
  // both axes flattened into one index (i * 3 + j, j < 3): one-to-one, parallel
  EXPECT_EQ(semantics({4, 3}, {2, 24}, {2, 2}, [](V i, V j) { return std::vector<V>{pl::Value(0) * i, i * 3 + j}; }),
            "all parallel");
  // a grouped program order (Triton's L2 swizzle: one axis walks the blocks through % and /):
  // no affine form, so the maps are run over the grid at trace time — one-to-one, parallel
  EXPECT_EQ(semantics({12, 1}, {8, 6}, {2, 2}, [](V i, V) { return std::vector<V>{i % 4, i / 4}; }), "all parallel");
  EXPECT_EQ(semantics({6, 2}, {8, 6}, {2, 2}, [](V i, V j) { return std::vector<V>{(i * 2 + j) % 4, (i * 2 + j) / 4}; }),
            "all parallel");
  // i32 arithmetic wraps: i * 65536 * 65536 is 0, so this map is j alone and i revisits blocks
  EXPECT_EQ(semantics({2, 3}, {2, 6}, {2, 2}, [](V i, V j) { return std::vector<V>{i * 0, i * 65536 * 65536 + j}; }),
            "(sequential, parallel)");
  // select_n on an integer index is not run on the host (the backends disagree out of range):
  // the axis it reads stays sequential even where the map happens to be one-to-one
  EXPECT_EQ(semantics({3, 1}, {6, 2}, {2, 2}, [](V i, V) { return std::vector<V>{pl::select_n(i, {i, i, i}), i * 0}; }),
            "(sequential, parallel)");
  // i + j repeats blocks along both axes; i / 2 along i; j % 2 along j
  EXPECT_EQ(semantics({4, 3}, {2, 24}, {2, 2}, [](V i, V j) { return std::vector<V>{pl::Value(0) * i, i + j}; }),
            "(sequential, sequential)");
  EXPECT_EQ(semantics({4, 3}, {8, 6}, {2, 2}, [](V i, V j) { return std::vector<V>{i / 2, j}; }), "(sequential, parallel)");
  EXPECT_EQ(semantics({4, 3}, {8, 6}, {2, 2}, [](V i, V j) { return std::vector<V>{i, j % 2}; }), "(parallel, sequential)");
  // a block index that also reads a sequential axis still keeps the parallel one apart when it is
  // one-to-one over both (output 0: i + 4 j; j is sequential because output 1 ignores it)
  auto two = pl::pallas_call(
      [](pl::Ref o0, pl::Ref o1) {
        o0[pl::all] = pl::zeros({2});
        pl::when(pl::program_id(1) == 0, [&] { o1[pl::all] = pl::zeros({2}); });
      },
      std::vector<pl::ShapeDtype>{pl::ShapeDtype({24}, pl::f32), pl::ShapeDtype({8}, pl::f32)},
      {.grid = {4, 3},
       .out_specs = {pl::BlockSpec({2}, [](V i, V j) { return pl::idx(i + j * 4); }),
                     pl::BlockSpec({2}, [](V i, V j) { return pl::idx(i); })},
       .interpret = true});
  two(std::vector<pl::Array>{});
  EXPECT_THAT(two.jaxpr_text(), HasSubstr("dimension_semantics=(parallel, sequential)"));
}

// With a grid size given at call time the maps cannot be run at trace time: an axis whose
// map the affine forms cannot see through is sequential (never a race), one they prove stays
// parallel.
TEST(GridSemantics, CallTimeGridSizesKeepUnprovenAxesSequential) {
  auto c = pl::pallas_call([](pl::Ref o) { o[pl::all] = pl::zeros({2}); }, pl::ShapeDtype({64}, pl::f32),
                           {.grid = {pl::dynamic, pl::dynamic},
                            .out_specs = {pl::BlockSpec({2}, [](V i, V j) { return pl::idx(i % 4 + j * 0); })},
                            .interpret = true,
                            .interpret_params = {.detect_unwritten_outputs = false}});
  c(std::vector<pl::Array>{pl::Array::scalar<int32_t>(4), pl::Array::scalar<int32_t>(1)});
  EXPECT_THAT(c.jaxpr_text(), HasSubstr("dimension_semantics=(sequential, sequential)"));
}

// The host evaluator the inference runs index maps with (src/ir/scalar_eval) agrees with the
// backends on integer scalars: each expression of the grid indices is an index map run on the
// host, and is also computed in a kernel and stored — division by zero and by negatives, rem,
// wrap-around at i32 and through i8, select, clamp, min/max, abs, sign.
TEST(GridSemantics, IndexMapsRunOnTheHostAgreeWithTheKernels) {
  auto exprs = [](V i, V j) -> std::vector<V> {
    return {(i - 2) / (j - 1),
            (i * 7 - 20) % (j - 2),
            pl::where(i > j, i, j * 3),
            pl::clamp(V(0), i - j, V(2)),
            (i * 100).astype(pl::i8).astype(pl::i32),
            pl::abs(i - 3) + pl::sign(j - 2) * 10,
            pl::maximum(i, j * 2) - pl::minimum(i, V(1)),
            i * 1000000000 + j};
  };
  const int64_t K = 8, G0 = 5, G1 = 4;
  auto kernel_call = pl::pallas_call(
      [&](pl::Ref o) {
        auto v = exprs(pl::program_id(0), pl::program_id(1));
        for (int64_t k = 0; k < K; ++k) o(k) = v[static_cast<size_t>(k)];
      },
      pl::ShapeDtype({G0 * G1, K}, pl::i32),
      {.grid = {G0, G1},
       .out_specs = {pl::BlockSpec({pl::squeezed, K}, [](V i, V j) { return pl::idx(i * 4 + j, 0); })},
       .name = "exprs"});
  std::vector<int32_t> got = kernel_call(std::vector<pl::Array>{})[0].to_vector<int32_t>();
  auto map_call = pl::pallas_call([](pl::Ref o) { o[pl::all] = pl::zeros(o.shape(), pl::f32); },
                                  pl::ShapeDtype(pl::Shape(K, 1), pl::f32),
                                  {.grid = {G0, G1},
                                   .dimension_semantics = {pl::sequential, pl::sequential},
                                   .out_specs = {pl::BlockSpec::with_vector_map(
                                       pl::Shape(K, 1), [&](const std::vector<V>& g) { return exprs(g[0], g[1]); })}});
  const auto& pc = map_call.state()->get({});
  auto program = pl::ir::ScalarProgram::compile(*pc.grid.outputs[0].index_map, 2);
  ASSERT_TRUE(program.has_value());
  std::vector<int64_t> slots;
  for (int64_t i = 0; i < G0; ++i)
    for (int64_t j = 0; j < G1; ++j) {
      int64_t pid[2] = {i, j}, out[K];
      program->run(pid, out, slots);
      for (int64_t k = 0; k < K; ++k)
        EXPECT_EQ(out[k], got[static_cast<size_t>((i * G1 + j) * K + k)]) << "expression " << k << " at (" << i << ", " << j << ")";
    }
}

// A grid axis of size 0 runs no program: refused when an output would be left unwritten, legal
// when there is nothing to write.
TEST(GridSemantics, ZeroSizeGridAxis) {
  auto k = [](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; };
  auto spec = pl::BlockSpec({8}, [](V i) { return pl::idx(i); });
  auto empty_grid = pl::pallas_call(k, pl::ShapeDtype({1000}, pl::f32),
                                    {.grid = {0}, .in_specs = {spec}, .out_specs = {spec}, .name = "nothing"});
  EXPECT_TRUE(throws_error([&] { empty_grid(pl::Array::zeros({1000}, pl::f32)); },
                           {"kernel 'nothing'", "grid axis 0 has size 0", "output 0 f32[1000]", "at least one program"}));
  auto empty_array = pl::pallas_call(k, pl::ShapeDtype({0}, pl::f32),
                                     {.grid = {0}, .in_specs = {spec}, .out_specs = {spec}, .name = "empty"});
  pl::Array out;
  ASSERT_NO_THROW(out = empty_array(pl::Array::zeros({0}, pl::f32)));
  EXPECT_EQ(out.size(), 0);
}

}  // namespace
}  // namespace pt
