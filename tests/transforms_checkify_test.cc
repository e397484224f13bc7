// checkify: out-of-bounds index maps and user checks are caught; good calls stay silent.
#include "src/transforms/transforms.h"
#include "tests/transforms_util.h"

namespace pl = pallas;
using V = pl::Value;

namespace {
bool g_error_outputs = false;
// Both ways of reporting: the interpreter's check rule, and errors as outputs of the call.
pl::CheckedCall checkify_(const pl::Call& c) { return pl::checkify(c, {.error_outputs = g_error_outputs}); }

// A failed check's message: the kernel's name first, then the check's line, then its text.
std::string at(int line) { return ": at transforms_checkify_test.cc:" + std::to_string(line) + ": "; }
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
int g_check_line = 0, g_loop_check_line = 0, g_vmap_check_line = 0, g_slot_check_line = 0;

class TransformsCheckify : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { g_error_outputs = GetParam(); }
};

pl::Call shifted(int64_t shift, const char* name) {
  return pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + 1.0f; }, pl::ShapeDtype({32}, pl::f32),
                         {.grid = {4},
                          .in_specs = {pl::BlockSpec({8}, [shift](V i) { return pl::idx(i + shift); })},
                          .out_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
                          .name = name,
                          // blocks outside the array are what checkify should catch here
                          .interpret_params = {.detect_out_of_bounds = false}});
}
}  // namespace

TEST_P(TransformsCheckify, SilentOnGoodCalls) {
  auto c = checkify_(shifted(0, "good"));
  pl::Array x = pl::random::normal({32}, pl::f32, 1);
  auto [err, outs] = c({x});
  EXPECT_TRUE(err.ok());
  EXPECT_TRUE(err.program_id().empty());
  EXPECT_NO_THROW(err.throw_if_error());
  auto xv = tu::vec(x), ov = tu::vec(outs[0]);
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(ov[i], xv[i] + 1);
  // an edge block that overhangs the array (padded) is legal
  auto edge = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({30}, pl::f32),
                              {.grid = {4},
                               .in_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
                               .out_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
                               // it reads the padding unmasked, which the interpreter's bounds check reports
                               .interpret_params = {.detect_out_of_bounds = false}});
  EXPECT_TRUE(checkify_(edge)(pl::random::normal({30}, pl::f32, 2)).error.ok());
}

TEST_P(TransformsCheckify, CatchesOutOfBoundsIndexMaps) {
  pl::Array x = pl::random::normal({32}, pl::f32, 1);
  auto [err, outs] = checkify_(shifted(1, "shift_up"))({x});
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.program_id(), (std::vector<int64_t>{3}));
  EXPECT_EQ(err.message().rfind("kernel 'shift_up' (transforms_checkify_test.cc:", 0), 0u) << err.message();
  EXPECT_TRUE(tu::contains(err.message(), "): out-of-bounds block: the index map of input 0 returned")) << err.message();
  EXPECT_TRUE(tu::contains(err.message(), "returned block (4)")) << err.message();
  EXPECT_THROW_MSG(err.throw_if_error(), "out-of-bounds", "program (3,)");
  auto down = checkify_(shifted(-2, "shift_down"))({x}).error;
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.program_id(), (std::vector<int64_t>{0}));
  EXPECT_TRUE(tu::contains(down.message(), "returned block (-2)")) << down.message();
  // an output index map, on a 2-D grid
  auto out2 = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({16, 16}, pl::f32),
                              {.grid = {2, 2},
                               .in_specs = {pl::BlockSpec({8, 8}, [](V i, V j) { return pl::idx(i, j); })},
                               .out_specs = {pl::BlockSpec({8, 8}, [](V i, V j) { return pl::idx(i, j * 2); })}});
  auto e2 = checkify_(out2)(pl::random::normal({16, 16}, pl::f32, 3)).error;
  ASSERT_FALSE(e2.ok());
  EXPECT_EQ(e2.program_id(), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(tu::contains(e2.message(), "output 0")) << e2.message();
}

TEST_P(TransformsCheckify, CatchesFailingUserChecks) {
  auto call = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        V v = x[pl::all];
        g_check_line = __LINE__; pl::check(v > 0.0f, "x must be positive, min is {} in block {}", pl::min(v), pl::program_id(0));
        o[pl::all] = pl::sqrt(v);
      },
      pl::ShapeDtype({32}, pl::f32),
      {.grid = {4},
       .in_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
       .out_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
       .name = "positive"});
  std::vector<float> xs(32, 1.0f);
  xs[21] = -3.0f;  // block 2
  xs[30] = -1.0f;  // block 3: a later failure
  pl::Array x = pl::Array::from_vector(xs, {32});
  auto [err, outs] = checkify_(call)({x});
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.program_id(), (std::vector<int64_t>{2}));
  // the kernel's name and the check's line, as every error (the message used to lack both)
  EXPECT_EQ(err.message().rfind("kernel 'positive' (transforms_checkify_test.cc:", 0), 0u) << err.message();
  EXPECT_TRUE(ends_with(err.message(), at(g_check_line) + "x must be positive, min is -3 in block 2")) << err.message();
  // without checkify the check does nothing
  EXPECT_NO_THROW(call(x));
  // good data: silent
  EXPECT_TRUE(checkify_(call)(pl::Array::full({32}, 2.0, pl::f32)).error.ok());
  // checks inside loops
  auto loop = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::fori_loop(0, 8, [&](V i) {
          V e = x[i];
          g_loop_check_line = __LINE__; pl::check(e < 10.0f, "element {} is {}", i, e);
          o[i] = e;
        });
      },
      pl::ShapeDtype({8}, pl::f32), {});
  std::vector<float> ys(8, 0.0f);
  ys[5] = 11.0f;
  auto le = checkify_(loop)(pl::Array::from_vector(ys, {8})).error;
  EXPECT_EQ(le.message().rfind("kernel at transforms_checkify_test.cc:", 0), 0u) << le.message();  // unnamed
  EXPECT_TRUE(ends_with(le.message(), at(g_loop_check_line) + "element 5 is 11")) << le.message();
  EXPECT_THROW_MSG(pl::pallas_call([](pl::Ref x, pl::Ref o) { pl::check(x[0] > 0.0f, "no holes", x[0]); },
                                   pl::ShapeDtype({8}, pl::f32), {})(pl::Array::zeros({8}, pl::f32)),
                   "placeholders");
}

TEST_P(TransformsCheckify, CheckifyOfVmap) {
  auto call = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        V v = x[pl::all];
        g_vmap_check_line = __LINE__; pl::check(v < 100.0f, "too big: {}", pl::max(v));
        o[pl::all] = v;
      },
      pl::ShapeDtype({16}, pl::f32),
      {.grid = {2},
       .in_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
       .out_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })}});
  std::vector<float> xs(3 * 16, 0.0f);
  xs[2 * 16 + 9] = 500.0f;  // batch 2, block 1
  pl::Array x = pl::Array::from_vector(xs, {3, 16});
  auto [err, outs] = checkify_(pl::vmap(call, {0}))({x});
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.program_id(), (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(ends_with(err.message(), at(g_vmap_check_line) + "too big: 500")) << err.message();
  EXPECT_EQ(outs[0].shape(), (pl::Shape{3, 16}));
  // an out-of-bounds map under vmap
  auto bad = checkify_(pl::vmap(shifted(1, "shift_up"), {1}));
  auto e = bad(pl::random::normal({32, 2}, pl::f32, 1)).error;
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.program_id(), (std::vector<int64_t>{0, 3}));
}

INSTANTIATE_TEST_SUITE_P(Transforms, TransformsCheckify, ::testing::Values(false, true),
                         [](const auto& i) { return i.param ? "ErrorOutputs" : "Interpreter"; });

TEST(TransformsCheckifyOutputs, ErrorOutputsAreOrdinaryOutputs) {
  auto call = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        g_slot_check_line = __LINE__; pl::check(x[pl::all] > 0.0f, "bad {}", x[pl::all]);
        o[pl::all] = x[pl::all];
      },
      pl::ShapeDtype({4}, pl::f32), {.grid = {2}, .in_specs = {pl::BlockSpec({2}, [](V i) { return pl::idx(i); })},
                                     .out_specs = {pl::BlockSpec({2}, [](V i) { return pl::idx(i); })}});
  const auto& pc = call.trace({pl::ShapeDtype({4}, pl::f32)}).state()->get({pl::ShapeDtype({4}, pl::f32)});
  auto sc = pallas::transforms::slot_pallas_call(pc);
  ASSERT_EQ(sc.call.grid.outputs.size(), 3u);
  EXPECT_EQ(sc.call.grid.outputs[1].array, pl::ShapeDtype({2, 1}, pl::i32));
  EXPECT_EQ(sc.call.grid.outputs[2].array, pl::ShapeDtype({2, 2}, pl::f64));
  EXPECT_FALSE(tu::contains(sc.call.text(), " check[")) << "no check equations left";
  auto e = pl::checkify(call, {.error_outputs = true})(pl::Array::from_vector(std::vector<float>{1, 2, 3, -4}, {4})).error;
  EXPECT_TRUE(ends_with(e.message(), at(g_slot_check_line) + "bad [3 -4]")) << e.message();
  EXPECT_EQ(e.program_id(), (std::vector<int64_t>{1}));
}
