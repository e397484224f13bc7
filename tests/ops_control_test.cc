// Control flow: fori_loop (tile carries, several carries, captured values, dynamic and
// empty trip counts, effects only, nesting, weak init), while_loop, cond (values, operands,
// captured values, effects), switch_case with n branches (index clamped), when; program_id
// and num_programs.
#include "tests/test_util.h"

namespace pt {
namespace {

TEST(Control, ForiLoopTileCarryAndCapture) {
  auto xs = uniform(4 * 8, 1, -1, 1);
  for (auto& x : xs) x = round_to(x, pl::f32);
  pl::Array x = make_array(xs, {4, 8}, pl::f32);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2, pl::Ref o3) {
        pl::Value v = xr[pl::all];  // captured by the body
        pl::Value acc = pl::fori_loop(0, 5, pl::zeros({4, 8}), [&](pl::Value i, pl::Value c) {
          return c + v * i.astype(pl::f32);  // sum_i i * x = 10 x
        });
        o1[pl::all] = acc;
        // two carries of different types: a tile and a counter
        auto cs = pl::fori_loop(2, 6, std::vector<pl::Value>{v, pl::Value::constant(0, pl::i32)},
                                [&](pl::Value i, const std::vector<pl::Value>& c) {
                                  return std::vector<pl::Value>{c[0] * 2.0, c[1] + i};
                                });
        o2[pl::all] = cs[0] + cs[1].astype(pl::f32);  // 16 x + (2+3+4+5)
        // a loop that reads the ref inside, row by row (effects in the body)
        pl::fori_loop(0, 4, [&](pl::Value i) { o3(i) = xr(i) + 1.0; });
      },
      std::vector<pl::ShapeDtype>(3, pl::ShapeDtype({4, 8}, pl::f32)));
  auto outs = call({x});
  std::vector<double> w1, w2, w3;
  for (double v : xs) {
    w1.push_back(round_to(10 * v, pl::f32));
    w2.push_back(round_to(16 * v + 14, pl::f32));
    w3.push_back(round_to(v + 1, pl::f32));
  }
  EXPECT_TRUE(close(to_doubles(outs[0]), w1, 1e-6));
  EXPECT_TRUE(close(to_doubles(outs[1]), w2, 1e-6));
  EXPECT_TRUE(close(to_doubles(outs[2]), w3, 1e-6));
}

// Trip counts from a program id (dynamic), empty and reversed ranges, nested loops.
TEST(Control, ForiLoopDynamicAndEmptyBounds) {
  auto call = pl::pallas_call(
      [](pl::Ref o1, pl::Ref o2, pl::Ref o3) {
        pl::Value p = pl::program_id(0);
        // sum_{i<p} i
        pl::Value s = pl::fori_loop(0, p, pl::Value::constant(0, pl::i32), [](pl::Value i, pl::Value c) { return c + i; });
        o1(p) = s;
        pl::Value e = pl::fori_loop(5, 5, pl::Value::constant(7, pl::i32), [](pl::Value, pl::Value c) { return c * 0; });
        pl::Value r = pl::fori_loop(p + 3, p, e, [](pl::Value, pl::Value c) { return c * 0; });  // lo > hi: no trips
        o2(p) = r;
        // nested: sum_{i<p} sum_{j<i} 1
        pl::Value n = pl::fori_loop(0, p, pl::Value::constant(0, pl::i32), [](pl::Value i, pl::Value c) {
          return pl::fori_loop(0, i, c, [](pl::Value, pl::Value d) { return d + 1; });
        });
        o3(p) = n;
      },
      std::vector<pl::ShapeDtype>(3, pl::ShapeDtype({6}, pl::i32)), {.grid = {6}, .name = "dyn_loop"});
  auto outs = call(std::vector<pl::Array>{});
  EXPECT_EQ(outs[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 1, 3, 6, 10}));
  EXPECT_EQ(outs[1].to_vector<int32_t>(), std::vector<int32_t>(6, 7));
  EXPECT_EQ(outs[2].to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 1, 3, 6, 10}));
}

// A weak scalar init takes the dtype and shape the body gives it (as JAX).
TEST(Control, ForiLoopWeakInit) {
  pl::Array x = make_array(std::vector<double>(16, 0.5), {16}, pl::f16);
  pl::DType seen = pl::f64;
  auto call = interp_call(
      [&seen](pl::Ref xr, pl::Ref o) {
        pl::Value r = pl::fori_loop(0, 3, 0.0, [&](pl::Value, pl::Value c) { return c + xr[pl::all]; });
        seen = r.dtype();
        o[pl::all] = r;
      },
      {pl::ShapeDtype({16}, pl::f16)});
  auto got = to_doubles(call({x})[0]);
  EXPECT_EQ(seen, pl::f16);
  EXPECT_EQ(got, std::vector<double>(16, 1.5));
}

TEST(Control, WhileLoop) {
  auto xs = uniform(8, 2, 1, 2);
  for (auto& x : xs) x = round_to(x, pl::f32);
  pl::Array x = make_array(xs, {8}, pl::f32);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2) {
        pl::Value limit = pl::Value::constant(100.0, pl::f32);  // captured by the condition
        pl::Value v = xr[pl::all];
        // double a tile until its max passes the limit, counting the steps
        auto r = pl::while_loop(
            std::vector<pl::Value>{v, pl::Value::constant(0, pl::i32)},
            [&](const std::vector<pl::Value>& c) { return pl::max(c[0]) < limit; },
            [&](const std::vector<pl::Value>& c) { return std::vector<pl::Value>{c[0] * 2.0, c[1] + 1}; });
        o1[pl::all] = r[0];
        pl::store(o2, {}, r[1]);
      },
      {pl::ShapeDtype({8}, pl::f32), pl::ShapeDtype({}, pl::i32)});
  auto outs = call({x});
  double mx = *std::max_element(xs.begin(), xs.end());
  int steps = 0;
  while (mx * std::pow(2, steps) < 100) ++steps;
  auto o1 = to_doubles(outs[0]);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(o1[k], xs[k] * std::pow(2, steps));
  EXPECT_EQ(outs[1].to_vector<int32_t>()[0], steps);
  // single-carry form, zero iterations when the condition starts false
  auto z = interp_call(
      [](pl::Ref o) {
        pl::Value r = pl::while_loop(pl::Value::constant(5, pl::i32), [](pl::Value c) { return c < 0; },
                                     [](pl::Value c) { return c - 1; });
        pl::Value q = pl::while_loop(pl::Value::constant(10, pl::i32), [](pl::Value c) { return c; },  // int cond: != 0
                                     [](pl::Value c) { return c - 1; });
        pl::store(o, {}, r * 100 + q);
      },
      {pl::ShapeDtype({}, pl::i32)});
  EXPECT_EQ(z(std::vector<pl::Array>{})[0].to_vector<int32_t>()[0], 500);
}

// cond returning values (closures and explicit operands), with captured tiles; when for effects.
TEST(Control, CondAndWhen) {
  auto xs = uniform(4 * 8, 3, -1, 1);
  for (auto& x : xs) x = round_to(x, pl::f32);
  pl::Array x = make_array(xs, {4, 8}, pl::f32);
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2, pl::Ref o3) {
        pl::Value i = pl::program_id(0);
        pl::Value row = xr(i);  // captured by both branches
        pl::Value a = pl::cond(i % 2 == 0, [&] { return row * 2.0; }, [&] { return row - 1.0; });
        o1(i) = a;
        auto b = pl::cond(
            i < 2, [](const std::vector<pl::Value>& ops) { return std::vector<pl::Value>{ops[0] + ops[1], ops[1]}; },
            [](const std::vector<pl::Value>& ops) { return std::vector<pl::Value>{ops[0] * ops[1], ops[0]}; },
            {row, pl::full({8}, 3.0)});
        o2(i) = b[0] + b[1];
        o3(i) = pl::zeros({8});
        pl::when(i == 3, [&] { o3(i) = row; });
        pl::cond(i == 1, [&] { o3(i) = -row; }, [] {});  // effects only, no results
      },
      std::vector<pl::ShapeDtype>(3, pl::ShapeDtype({4, 8}, pl::f32)), {.grid = {4}, .name = "cond"});
  auto outs = call({x});
  auto o1 = to_doubles(outs[0]), o2 = to_doubles(outs[1]), o3 = to_doubles(outs[2]);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) {
      double v = xs[i * 8 + j];
      EXPECT_EQ(o1[i * 8 + j], round_to(i % 2 == 0 ? v * 2 : v - 1, pl::f32));
      EXPECT_EQ(o2[i * 8 + j], round_to(i < 2 ? round_to(v + 3, pl::f32) + 3 : round_to(v * 3, pl::f32) + v, pl::f32));
      EXPECT_EQ(o3[i * 8 + j], i == 3 ? v : i == 1 ? -v : 0.0);
    }
}

// cond joins a weak scalar in one branch with a tile in the other.
TEST(Control, CondJoinsWeakScalar) {
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o) {
        pl::Value i = pl::program_id(0);
        o(i) = pl::cond(i == 0, [&] { return pl::Value(xr(i)); }, [] { return pl::Value(0.0); });
      },
      pl::ShapeDtype({2, 4}, pl::bf16), {.grid = {2}, .name = "join"});
  pl::Array x = make_array({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}, pl::bf16);
  EXPECT_EQ(to_doubles(call(x)), (std::vector<double>{1, 2, 3, 4, 0, 0, 0, 0}));
}

// switch_case: n branches; the index is clamped into range (lax.switch).
TEST(Control, SwitchCase) {
  auto call = pl::pallas_call(
      [](pl::Ref o) {
        pl::Value i = pl::program_id(0) - 1;  // -1 .. 4
        auto r = pl::switch_case(i,
                                 {[](const std::vector<pl::Value>& ops) { return std::vector<pl::Value>{ops[0] * 10}; },
                                  [](const std::vector<pl::Value>& ops) { return std::vector<pl::Value>{ops[0] * 20}; },
                                  [](const std::vector<pl::Value>& ops) { return std::vector<pl::Value>{ops[0] * 30}; }},
                                 {pl::Value::constant(1, pl::i32)});
        o(pl::program_id(0)) = r[0];
      },
      pl::ShapeDtype({6}, pl::i32), {.grid = {6}, .name = "switch"});
  EXPECT_EQ(call(std::vector<pl::Array>{})[0].to_vector<int32_t>(), (std::vector<int32_t>{10, 10, 20, 30, 30, 30}));
}

// program_id and num_programs on a 3-D grid.
TEST(Control, ProgramIdAndNumPrograms) {
  auto call = pl::pallas_call(
      [](pl::Ref o) {
        pl::Value a = pl::program_id(0), b = pl::program_id(1), c = pl::program_id(2);
        pl::Value n = pl::num_programs(0) * 100 + pl::num_programs(1) * 10 + pl::num_programs(2);
        o(a, b, c) = n * 1000 + a * 100 + b * 10 + c;
      },
      pl::ShapeDtype({2, 3, 4}, pl::i32), {.grid = {2, 3, 4}, .name = "pid"});
  auto got = call(std::vector<pl::Array>{})[0].to_vector<int32_t>();
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) EXPECT_EQ(got[(a * 3 + b) * 4 + c], 234000 + a * 100 + b * 10 + c);
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// A value from the kernel's top level used two frames down (a cond inside a loop body, and a
// loop inside a cond), and values captured by a while body.
TEST(Control, NestedCaptures) {
  auto xs = uniform(8, 4, -1, 1);
  for (auto& x : xs) x = round_to(x, pl::f32);
  pl::Array x = make_array(xs, {8}, pl::f32);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2, pl::Ref o3) {
        pl::Value v = xr[pl::all];
        pl::Value two = pl::Value::constant(2.0, pl::f32);
        o1[pl::all] = pl::fori_loop(0, 4, pl::zeros({8}), [&](pl::Value i, pl::Value acc) {
          return pl::cond(i % 2 == 0, [&] { return acc + v; }, [&] { return acc - v * two; });
        });  // v - 2v + v - 2v = -2v
        o2[pl::all] = pl::cond(pl::Value(true), [&] {
          return pl::fori_loop(0, 3, v, [&](pl::Value, pl::Value c) { return c * two; });
        }, [&] { return v; });  // 8v
        pl::Value step = v * 0.5;
        auto r = pl::while_loop(std::vector<pl::Value>{pl::zeros({8}), pl::Value::constant(0, pl::i32)},
                                [&](const std::vector<pl::Value>& c) { return c[1] < 4; },
                                [&](const std::vector<pl::Value>& c) { return std::vector<pl::Value>{c[0] + step, c[1] + 1}; });
        o3[pl::all] = r[0];  // 2v
      },
      std::vector<pl::ShapeDtype>(3, pl::ShapeDtype({8}, pl::f32)));
  auto outs = call({x});
  auto o1 = to_doubles(outs[0]), o2 = to_doubles(outs[1]), o3 = to_doubles(outs[2]);
  for (int k = 0; k < 8; ++k) {
    EXPECT_FLOAT_EQ(o1[k], -2 * xs[k]);
    EXPECT_EQ(o2[k], 8 * xs[k]);
    EXPECT_FLOAT_EQ(o3[k], 2 * xs[k]);
  }
}

// Unrolled loops, i64 bounds and a dynamic ds with a stride.
TEST(Control, UnrollI64BoundsAndStridedDynamicSlice) {
  std::vector<int32_t> xs(32);
  for (int k = 0; k < 32; ++k) xs[k] = k * 3;
  auto call = pl::pallas_call(
      [](pl::Ref xr, pl::Ref o1, pl::Ref o2, pl::Ref o3) {
        pl::Value p = pl::program_id(0);
        pl::Value a = pl::fori_loop(0, 10, pl::Value::constant(0, pl::i32), [](pl::Value i, pl::Value c) { return c + i; }, 3);
        pl::Value b = pl::fori_loop(pl::Value::constant(0, pl::i64), pl::Value::constant(5, pl::i64), pl::Value::constant(0, pl::i64),
                                    [](pl::Value i, pl::Value c) {
                                      EXPECT_EQ(i.dtype(), pl::i64);
                                      return c + i * i;
                                    });
        o1(p) = a;
        o2(p) = b;
        o3(p) = xr(pl::ds(p * 2, 4, 3));  // elements 2p, 2p+3, 2p+6, 2p+9
      },
      {pl::ShapeDtype({2}, pl::i32), pl::ShapeDtype({2}, pl::i64), pl::ShapeDtype({2, 4}, pl::i32)},
      {.grid = {2}, .name = "unroll"});
  auto outs = call({pl::Array::from_vector(xs)});
  EXPECT_EQ(outs[0].to_vector<int32_t>(), (std::vector<int32_t>{45, 45}));
  EXPECT_EQ(outs[1].to_vector<int64_t>(), (std::vector<int64_t>{30, 30}));
  auto o3 = outs[2].to_vector<int32_t>();
  for (int p = 0; p < 2; ++p)
    for (int k = 0; k < 4; ++k) EXPECT_EQ(o3[p * 4 + k], xs[2 * p + 3 * k]);
}

// Writes to an input ref inside loops and conditionals change only the kernel's copy.
TEST(Control, InputWritesInsideControlFlowDoNotLeak) {
  std::vector<float> xs{1, 2, 3, 4};
  pl::Array x = pl::Array::from_vector(xs);
  auto call = interp_call(
      [](pl::Ref xr, pl::Ref o) {
        pl::fori_loop(0, 2, [&](pl::Value i) {
          pl::when(i == 1, [&] { xr[pl::all] = xr[pl::all] * 10.0; });
        });
        pl::while_loop(pl::Value::constant(0, pl::i32), [](pl::Value c) { return c < 1; }, [&](pl::Value c) {
          pl::atomic_add(xr, {0}, 0.5);
          return c + 1;
        });
        o[pl::all] = xr[pl::all];
      },
      {pl::ShapeDtype({4}, pl::f32)});
  EXPECT_EQ(call({x})[0].to_vector<float>(), (std::vector<float>{10.5f, 20, 30, 40}));
  EXPECT_EQ(x.to_vector<float>(), xs);
  EXPECT_EQ(call({x})[0].to_vector<float>(), (std::vector<float>{10.5f, 20, 30, 40}));  // the same again
}

}  // namespace
}  // namespace pt
