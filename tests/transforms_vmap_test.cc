// vmap of pallas_calls against a loop of unbatched calls; compositions with jvp.
#include "src/transforms/transforms.h"
#include "tests/transforms_util.h"

namespace pl = pallas;
using V = pl::Value;
using Axes = std::vector<std::optional<int>>;

namespace {
// Reference: a loop of unbatched calls, outputs stacked at axis 0.
std::vector<pl::Array> loop_ref(const pl::Call& call, const std::vector<pl::Array>& args, const Axes& axes, int64_t B) {
  std::vector<std::vector<pl::Array>> per;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<pl::Array> ab;
    for (size_t k = 0; k < args.size(); ++k) {
      if (!axes[k]) {
        ab.push_back(args[k]);
        continue;
      }
      int a = *axes[k] < 0 ? *axes[k] + args[k].ndim() : *axes[k];
      ab.push_back(pallas::transforms::take(args[k], a, b));
    }
    per.push_back(call(ab));
  }
  std::vector<pl::Array> outs;
  for (size_t o = 0; o < per[0].size(); ++o) {
    std::vector<pl::Array> xs;
    for (auto& r : per) xs.push_back(r[o]);
    outs.push_back(pallas::transforms::stack(xs));
  }
  return outs;
}

void expect_same(const std::vector<pl::Array>& a, const std::vector<pl::Array>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].shape(), b[k].shape()) << "output " << k;
    EXPECT_EQ(tu::vec(a[k]), tu::vec(b[k])) << "output " << k;
  }
}

// o = x * 2 + y + program_id(0), over a grid of 4 blocks of 8.
pl::Call add_call() {
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref y, pl::Ref o) {
        o[pl::all] = x[pl::all] * 2.0f + y[pl::all] + pl::program_id(0).astype(pl::f32);
      },
      pl::ShapeDtype({32}, pl::f32),
      {.grid = {4},
       .in_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); }), pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
       .out_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })}});
}
pl::Array R(pl::Shape s, uint64_t seed) { return pl::random::normal(s, pl::f32, seed); }
}  // namespace

TEST(TransformsVmap, InAxesPatterns) {
  auto call = add_call();
  struct Case {
    Axes axes;
    pl::Shape xs, ys;
  };
  std::vector<Case> cases = {
      {{0, 0}, {3, 32}, {3, 32}},
      {{1, std::nullopt}, {32, 5}, {32}},
      {{std::nullopt, 0}, {32}, {2, 32}},
      {{-1, 0}, {32, 4}, {4, 32}},
  };
  uint64_t seed = 1;
  for (auto& c : cases) {
    pl::Array x = R(c.xs, seed++), y = R(c.ys, seed++);
    auto vm = pl::vmap(call, c.axes);
    int64_t B = c.axes[0] ? (c.xs[*c.axes[0] < 0 ? c.xs.size() - 1 : *c.axes[0]]) : c.ys[0];
    expect_same(vm({x, y}), loop_ref(call, {x, y}, c.axes, B));
  }
}

TEST(TransformsVmap, GridAndBlockMappings) {
  auto call = add_call();
  auto vm = pl::vmap(call, {1, std::nullopt});
  vm.trace({pl::ShapeDtype({32, 6}, pl::f32), pl::ShapeDtype({32}, pl::f32)});
  const auto& pc = *vm.state()->traced;
  EXPECT_EQ(pc.grid.grid, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(pc.grid.inputs[0].block_shape, (pl::Shape{8, 1}));
  EXPECT_EQ(pc.grid.inputs[0].squeezed, (std::vector<bool>{false, true}));
  EXPECT_EQ(pc.grid.inputs[1].array.shape, (pl::Shape{32}));  // unbatched: not copied
  EXPECT_EQ(pc.grid.outputs[0].array.shape, (pl::Shape{6, 32}));
  EXPECT_TRUE(tu::contains(pc.text(), "program_id[axis=1]"));
  EXPECT_TRUE(tu::contains(vm.jaxpr_text(), "vmap of"));
  auto withcost = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({8}, pl::f32),
                                  {.cost_estimate = pl::CostEstimate{10, 2, 64}});
  auto vc = pl::vmap(withcost, {0});
  vc.trace({pl::ShapeDtype({5, 8}, pl::f32)});
  EXPECT_EQ(vc.state()->traced->cost_estimate->flops, 50);
  EXPECT_EQ(vc.state()->traced->cost_estimate->bytes_accessed, 320);
}

TEST(TransformsVmap, BatchOfOneAndNested) {
  auto call = add_call();
  pl::Array x = R({1, 32}, 1), y = R({32}, 2);
  expect_same(pl::vmap(call, {0, std::nullopt})({x, y}), loop_ref(call, {x, y}, {0, std::nullopt}, 1));
  // vmap of vmap: inner over axis 0 of both, outer over axis 1 of x only.
  auto inner = pl::vmap(call, {0, 0});
  auto outer = pl::vmap(inner, {1, std::nullopt});
  pl::Array x3 = R({3, 2, 32}, 3), y2 = R({3, 32}, 4);
  auto got = outer({x3, y2});
  EXPECT_EQ(got[0].shape(), (pl::Shape{2, 3, 32}));
  expect_same(got, loop_ref(inner, {x3, y2}, {1, std::nullopt}, 2));
  outer.trace({x3.shape_dtype(), y2.shape_dtype()});
  EXPECT_EQ(outer.state()->traced->grid.grid, (std::vector<int64_t>{2, 3, 4}));
}

TEST(TransformsVmap, MatmulAndReductionAcrossGrid) {
  auto mm = pl::pallas_call(
      [](pl::Ref a, pl::Ref b, pl::Ref o) {
        pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({8, 8}); });
        o[pl::all] += pl::dot(a[pl::all], b[pl::all], {.precision = pl::Precision::Highest});
      },
      pl::ShapeDtype({16, 8}, pl::f32),
      {.grid = {2, 4},
       .in_specs = {pl::BlockSpec({8, 4}, [](V i, V k) { return pl::idx(i, k); }),
                    pl::BlockSpec({4, 8}, [](V, V k) { return pl::idx(k, 0); })},
       .out_specs = {pl::BlockSpec({8, 8}, [](V i, V) { return pl::idx(i, 0); })}});
  pl::Array a = R({16, 3, 16}, 1), b = R({16, 8}, 2);
  Axes axes{1, std::nullopt};
  expect_same(pl::vmap(mm, axes)({a, b}), loop_ref(mm, {a, b}, axes, 3));
  pl::Array b3 = R({16, 8, 3}, 3);
  Axes axes2{1, 2};
  expect_same(pl::vmap(mm, axes2)({a, b3}), loop_ref(mm, {a, b3}, axes2, 3));
}

TEST(TransformsVmap, ScalarPrefetchAndDynamicGridFallBackToALoop) {
  // Gather rows by a prefetched index table.
  auto gather = pl::pallas_call(
      [](pl::Ref idx, pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + 1.0f; }, pl::ShapeDtype({4, 8}, pl::f32),
      {.grid = {4},
       .in_specs = {pl::BlockSpec({1, 8}, [](V i, pl::Ref t) { return pl::idx(t[i], 0); })},
       .out_specs = {pl::BlockSpec({1, 8}, [](V i, pl::Ref) { return pl::idx(i, 0); })},
       .num_scalar_prefetch = 1});
  pl::Array tbl = pl::Array::from_vector(std::vector<int32_t>{3, 1, 0, 2, 0, 0, 1, 1}, {2, 4});
  pl::Array x = R({4, 8}, 1);
  Axes axes{0, std::nullopt};
  expect_same(pl::vmap(gather, axes)({tbl, x}), loop_ref(gather, {tbl, x}, axes, 2));
  // unbatched prefetch, batched data: the grid rule
  pl::Array t1 = pl::Array::from_vector(std::vector<int32_t>{3, 1, 0, 2}, {4});
  pl::Array x2 = R({2, 4, 8}, 2);
  Axes axes2{std::nullopt, 0};
  expect_same(pl::vmap(gather, axes2)({t1, x2}), loop_ref(gather, {t1, x2}, axes2, 2));

  auto dyn = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * pl::num_programs(0).astype(pl::f32); },
      pl::ShapeDtype({16}, pl::f32),
      {.grid = {pl::dynamic},
       .in_specs = {pl::BlockSpec({4}, [](V i) { return pl::idx(i); })},
       .out_specs = {pl::BlockSpec({4}, [](V i) { return pl::idx(i); })}});
  pl::Array n = pl::Array::from_vector(std::vector<int32_t>{4, 4, 4}, {3});
  pl::Array xs = R({3, 16}, 4);
  auto got = pl::vmap(dyn, {0, 0})({n, xs});
  EXPECT_EQ(got[0].shape(), (pl::Shape{3, 16}));
  auto xv = tu::vec(xs), gv = tu::vec(got[0]);
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(gv[i], xv[i] * 4);
  // unbatched dynamic bound: the grid rule, num_programs of the user's axis
  auto got2 = pl::vmap(dyn, {std::nullopt, 0})({pl::Array::scalar<int32_t>(4), xs});
  expect_same(got2, got);
  EXPECT_THROW_MSG(pl::checkify(pl::vmap(dyn, {0, 0}))({n, xs}), "explicit loop");
}

TEST(TransformsVmap, AliasedInputsAreMovedOrBroadcast) {
  auto acc = pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; },
                             pl::ShapeDtype({8}, pl::f32), {.input_output_aliases = {{0, 0}}});
  pl::Array x = R({8, 3}, 1), y = R({3, 8}, 2);
  Axes axes{1, 0};
  expect_same(pl::vmap(acc, axes)({x, y}), loop_ref(acc, {x, y}, axes, 3));
  pl::Array x1 = R({8}, 3);
  Axes axes2{std::nullopt, 0};
  expect_same(pl::vmap(acc, axes2)({x1, y}), loop_ref(acc, {x1, y}, axes2, 3));
}

TEST(TransformsVmap, Errors) {
  auto call = add_call();
  EXPECT_THROW_MSG(pl::vmap(call, {0})({R({2, 32}, 1), R({32}, 2)}), "in_axes has 1");
  EXPECT_THROW_MSG(pl::vmap(call, {0, 0})({R({2, 32}, 1), R({3, 32}, 2)}), "different batch sizes");
  EXPECT_THROW_MSG(pl::vmap(call, {std::nullopt, std::nullopt})({R({32}, 1), R({32}, 2)}), "no argument is batched");
  EXPECT_THROW_MSG(pl::vmap(call, {2, 0})({R({2, 32}, 1), R({2, 32}, 2)}), "out of range");
}

// ---- compositions ----
namespace {
pl::Call f64_call() {
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref w, pl::Ref o) {
        V v = x[pl::all];
        o[pl::all] = pl::sin(v) * w[pl::all] + v * v * (pl::program_id(0).astype(pl::f64) + 1.0);
      },
      pl::ShapeDtype({4, 8}, pl::f64),
      {.grid = {2}, .in_specs = {tu::rows(2, 8), tu::rows(2, 8)}, .out_specs = {tu::rows(2, 8)}});
}
pl::Array D(pl::Shape s, uint64_t seed) { return pl::random::normal(s, pl::f64, seed); }
}  // namespace

TEST(TransformsCompose, VmapOfJvp) {
  auto call = f64_call();
  auto j = pl::jvp_call(call);  // (x, w, dx, dw) -> (o, do)
  auto vj = pl::vmap(j, {0, std::nullopt, 0, std::nullopt});
  pl::Array x = D({3, 4, 8}, 1), w = D({4, 8}, 2), dx = D({3, 4, 8}, 3), dw = D({4, 8}, 4);
  auto got = vj({x, w, dx, dw});
  ASSERT_EQ(got.size(), 2u);
  for (int64_t b = 0; b < 3; ++b) {
    auto [o, t] = pl::jvp(call, {pallas::transforms::take(x, 0, b), w}, {pallas::transforms::take(dx, 0, b), dw});
    EXPECT_EQ(tu::vec(pallas::transforms::take(got[0], 0, b)), tu::vec(o[0]));
    EXPECT_EQ(tu::vec(pallas::transforms::take(got[1], 0, b)), tu::vec(t[0]));
  }
}

TEST(TransformsCompose, JvpOfVmap) {
  auto call = f64_call();
  auto vm = pl::vmap(call, {1, std::nullopt});
  pl::Array x = D({4, 3, 8}, 1), w = D({4, 8}, 2);
  tu::expect_jvp_matches_fd(vm, {x, w}, {D({4, 3, 8}, 3), D({4, 8}, 4)});
  tu::expect_jvp_matches_fd(vm, {x, w}, {pl::Array(), D({4, 8}, 5)});
}

TEST(TransformsCompose, VmapOfVmapOfJvp) {
  auto call = f64_call();
  auto j = pl::jvp_call(call, {true, false});  // (x, w, dx) -> (o, do)
  auto vv = pl::vmap(pl::vmap(j, {0, std::nullopt, 0}), {0, 0, 0});
  pl::Array x = D({2, 3, 4, 8}, 1), w = D({2, 4, 8}, 2), dx = D({2, 3, 4, 8}, 3);
  auto got = vv({x, w, dx});
  EXPECT_EQ(got[1].shape(), (pl::Shape{2, 3, 4, 8}));
  auto [o, t] = pl::jvp(call, {pallas::transforms::take(pallas::transforms::take(x, 0, 1), 0, 2),
                               pallas::transforms::take(w, 0, 1)},
                        {pallas::transforms::take(pallas::transforms::take(dx, 0, 1), 0, 2), pl::Array()});
  EXPECT_EQ(tu::vec(pallas::transforms::take(pallas::transforms::take(got[1], 0, 1), 0, 2)), tu::vec(t[0]));
}

TEST(TransformsVmap, RaggedBatchSkipsBlocksPastEachLength) {
  auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.0f; }, pl::ShapeDtype({16, 2}, pl::f32),
                              {.grid = {4},
                               .in_specs = {pl::BlockSpec({4, 2}, [](V i) { return pl::idx(i, 0); })},
                               .out_specs = {pl::BlockSpec({4, 2}, [](V i) { return pl::idx(i, 0); })},
                               .name = "double"});
  auto rv = pl::vmap_ragged(call, {1}, {.grid_axis = 0, .block = 4});
  pl::Array x = R({16, 3, 2}, 1);  // batch at axis 1
  std::vector<int32_t> lens{16, 5, 0};
  auto out = rv({pl::Array::from_vector(lens, {3}), x})[0];
  ASSERT_EQ(out.shape(), (pl::Shape{3, 16, 2}));
  auto xv = tu::vec(x), ov = tu::vec(out);
  for (int b = 0; b < 3; ++b) {
    int64_t covered = (lens[b] + 3) / 4 * 4;  // blocks that start before the length
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 2; ++c) {
        double o = ov[(b * 16 + r) * 2 + c], want = 2 * xv[(r * 3 + b) * 2 + c];
        if (r < covered) EXPECT_FLOAT_EQ(o, want) << b << "," << r;
        else EXPECT_TRUE(std::isnan(o)) << "written past the length: " << b << "," << r;
      }
  }
  // the index maps are clamped: never out of bounds, even for an empty element
  rv.trace({pl::ShapeDtype({3}, pl::i32), x.shape_dtype()});
  EXPECT_TRUE(tu::contains(rv.jaxpr_text(), "scalar prefetch 0: i32[3]"));
  auto ck = pl::checkify(pl::vmap_ragged(call, {1}, {.grid_axis = 0, .block = 4}));
  EXPECT_TRUE(ck({pl::Array::from_vector(lens, {3}), x}).error.ok());
  EXPECT_THROW_MSG(pl::vmap_ragged(call, {1}, {.grid_axis = 3, .block = 4})({pl::Array::from_vector(lens, {3}), x}),
                   "double", "grid_axis");
}

TEST(TransformsVmap, GridQueriesInsideLoopsAndWholeArrayOperands) {
  // program_id inside a loop body and a cond branch; an input in memory space Any.
  auto call = pl::pallas_call(
      [](pl::Ref x, pl::Ref tbl, pl::Ref o) {
        V acc = pl::fori_loop(0, 2, pl::zeros({8}), [&](V j, V c) {
          return c + x[pl::all] * (pl::program_id(0) + j).astype(pl::f32);
        });
        V add = pl::cond(pl::program_id(0) == 1, [&] { return tbl(pl::program_id(0), pl::all); },
                         [&] { return pl::zeros({8}); });
        o[pl::all] = acc + add;
      },
      pl::ShapeDtype({16}, pl::f32),
      {.grid = {2},
       .in_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); }), pl::BlockSpec({2, 8}, pl::MemorySpace::Any)},
       .out_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })}});
  pl::Array x = R({3, 16}, 1), t = R({2, 8, 3}, 2);
  Axes axes{0, 2};
  expect_same(pl::vmap(call, axes)({x, t}), loop_ref(call, {x, t}, axes, 3));
  expect_same(pl::vmap(pl::vmap(call, {0, std::nullopt}), {std::nullopt, 2})({x, t}),
              loop_ref(pl::vmap(call, {0, std::nullopt}), {x, t}, {std::nullopt, 2}, 3));
}

TEST(TransformsVmap, VmapOfAnExplicitLoopIsALoop) {
  auto gather = pl::pallas_call(
      [](pl::Ref idx, pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 3.0f; }, pl::ShapeDtype({4, 8}, pl::f32),
      {.grid = {4},
       .in_specs = {pl::BlockSpec({1, 8}, [](V i, pl::Ref t) { return pl::idx(t[i], 0); })},
       .out_specs = {pl::BlockSpec({1, 8}, [](V i, pl::Ref) { return pl::idx(i, 0); })},
       .num_scalar_prefetch = 1});
  auto inner = pl::vmap(gather, {0, std::nullopt});  // batched prefetch: a loop
  pl::Array tbl = pl::Array::from_vector(std::vector<int32_t>{3, 1, 0, 2, 0, 0, 1, 1}, {2, 4});
  pl::Array x = R({2, 4, 8}, 5);
  Axes axes{std::nullopt, 0};  // the outer vmap batches only the data
  expect_same(pl::vmap(inner, axes)({tbl, x}), loop_ref(inner, {tbl, x}, axes, 2));
}
