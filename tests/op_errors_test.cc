// Errors from an op inside a kernel name the op's line, after the kernel's name:
// "kernel 'k' (file:line): at op_errors_test.cc:42: dot: ...". Named ops take a defaulted
// source location, operators and ref accesses get theirs from their operands' and indexers'
// conversions, control flow from its call; the elementwise functions record none, so their
// errors name the last line recorded before them ("at or after"). Each kernel sets `line` on the
// line of the op that fails (it runs, and fails, while the call is traced). Kernels are written
// outside the EXPECT macros: __LINE__ in a macro's multi-line argument is not the token's line
// on every compiler.
#include "tests/test_util.h"

namespace pt {
namespace {

const char* kFile = "op_errors_test.cc:";
// "@" stands for the line the kernel recorded, known once it has run (see fails()).
const std::string kAt = std::string("): at ") + kFile + "@: ";
const std::string kAtOrAfter = std::string("): at or after ") + kFile + "@: ";

// f throws a pl::Error whose message has every part, with "@" in a part replaced by `line`
// as f left it.
::testing::AssertionResult fails(const int& line, const std::function<void()>& f, std::vector<std::string> parts) {
  std::string m = error_of(f);
  if (m.empty()) return ::testing::AssertionFailure() << "no pl::Error";
  for (auto& p : parts) {
    if (size_t at = p.find('@'); at != std::string::npos) p.replace(at, 1, std::to_string(line));
    if (m.find(p) == std::string::npos) return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << m;
  }
  return ::testing::AssertionSuccess();
}

const pl::ShapeDtype kVec({8}, pl::f32);

// The error of tracing `kernel` (named "k") for these inputs.
template <class K>
std::function<void()> traced(K kernel, std::vector<pl::ShapeDtype> ins = {kVec}, pl::ShapeDtype out = kVec) {
  return [=] { pl::pallas_call(kernel, out, {.name = "k"}).trace(ins); };
}

// The issue's example: a dot of mismatched dtypes, reported at the dot, not at the pallas_call.
TEST(OpErrors, DotOfMismatchedDtypesNamesTheDot) {
  int line = 0, call_line = 0;
  auto kernel = [&](pl::Ref a, pl::Ref b, pl::Ref o) {
    pl::Value x = a[pl::all];
    line = __LINE__; o[pl::all] = pl::dot(x, b[pl::all]);
  };
  auto f = [&] {
    call_line = __LINE__; auto c = pl::pallas_call(kernel, pl::ShapeDtype({4, 4}, pl::f32), {.name = "matmul"});
    c(pl::Array::full({4, 4}, 1.0, pl::bf16), pl::Array::full({4, 4}, 1.0, pl::f32));
  };
  EXPECT_TRUE(fails(line, f, {"kernel 'matmul' (op_errors_test.cc:", kAt + "dot: operands are bf16 and f32",
                              "same element type", ".astype(pl::bf16)"}));
  std::string m = error_of(f);
  std::string want = "kernel 'matmul' (" + std::string(kFile) + std::to_string(call_line) + "): at " + kFile +
                     std::to_string(line) + ": dot: ";
  EXPECT_EQ(m.rfind(want, 0), 0u) << m;  // the kernel first, then the op's line
}

// Binary operators (shapes that do not broadcast, dtypes an op refuses), unary operators, +=.
TEST(OpErrors, OperatorsNameTheirLine) {
  int line = 0;
  auto add = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    pl::Value w = pl::zeros({4});
    line = __LINE__; o[pl::all] = v + w;
  };
  EXPECT_TRUE(fails(line, traced(add), {"kernel 'k'", kAt + "add: shapes [8] and [4] cannot be broadcast together", "reshape"}));
  auto shift = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; o[pl::all] = v << 1;
  };
  EXPECT_TRUE(fails(line, traced(shift), {kAt + "shift_left", "integer dtypes", "f32[8]"}));
  auto unary = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; o[pl::all] = (~v).astype(pl::f32);
  };
  EXPECT_TRUE(fails(line, traced(unary), {kAt + "not", "f32[8]"}));
  auto accumulate = [&](pl::Ref x, pl::Ref o) {
    pl::Value acc = x[pl::all];
    line = __LINE__; acc += pl::zeros({3});
    o[pl::all] = acc;
  };
  EXPECT_TRUE(fails(line, traced(accumulate), {kAt + "add: shapes [8] and [3]"}));
  // comparisons, and operands read straight from refs
  auto compare = [&](pl::Ref x, pl::Ref o) {
    line = __LINE__; o[pl::all] = pl::where(x[pl::all] < x(pl::slice(0, 4)), 1.0f, 0.0f);
  };
  EXPECT_TRUE(fails(line, traced(compare), {kAt + "lt: shapes [8] and [4]"}));
}

// An elementwise function records no line: its error names the last one recorded before it.
TEST(OpErrors, ElementwiseFunctionsNameTheLastLineBeforeThem) {
  int line = 0;
  auto popcount = [&](pl::Ref x, pl::Ref o) {
    line = __LINE__; pl::Value v = x[pl::all];
    pl::Value w = pl::population_count(v);
    o[pl::all] = w;
  };
  EXPECT_TRUE(fails(line, traced(popcount), {"kernel 'k'", kAtOrAfter + "population_count", "f32[8]"}));
  auto maximum = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; pl::Value w = v * 2.0f;
    o[pl::all] = pl::maximum(w, pl::Value(pl::zeros({2})));
  };
  EXPECT_TRUE(fails(line, traced(maximum), {kAtOrAfter + "max: shapes [8] and [2]"}));
  // on a statement that reads a ref, that is the function's own line
  auto clz = [&](pl::Ref x, pl::Ref o) {
    line = __LINE__; o[pl::all] = pl::clz(x[pl::all]);
  };
  EXPECT_TRUE(fails(line, traced(clz), {kAtOrAfter + "clz"}));
}

// Named ops take their caller's line: shapes, reductions, reshape, where, clamp, bitcast.
TEST(OpErrors, NamedOpsNameTheirLine) {
  int line = 0;
  auto sum = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; o[pl::all] = pl::sum(v, 2);
  };
  EXPECT_TRUE(fails(line, traced(sum), {kAt, "axis 2 is out of range for rank 1"}));
  auto reshape = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; o[pl::all] = pl::reshape(v, {3, 3});
  };
  EXPECT_TRUE(fails(line, traced(reshape), {kAt + "reshape", "f32[8]", "[3,3]"}));
  auto where = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; o[pl::all] = pl::where(pl::zeros({3}, pl::bool_), v, 0.0f);
  };
  EXPECT_TRUE(fails(line, traced(where), {kAt + "where", "[8]", "[3]"}));
  auto clamp = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; o[pl::all] = pl::clamp(pl::Value(pl::zeros({3})), v, 1.0f);
  };
  EXPECT_TRUE(fails(line, traced(clamp), {kAt + "clamp: lo f32[3] does not broadcast to x's shape [8]", "scalar bound"}));
  auto bitcast = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; o[pl::all] = pl::bitcast(v, pl::f16).astype(pl::f32);
  };
  EXPECT_TRUE(fails(line, traced(bitcast), {kAt + "bitcast", "widths"}));
  auto pid = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; o[pl::all] = v + pl::program_id(1).astype(pl::f32);
  };
  EXPECT_TRUE(fails(line, traced(pid), {kAt, "program_id axis 1 is out of bounds for a grid of rank 0"}));
  auto print = [&](pl::Ref x, pl::Ref o) {
    line = __LINE__; pl::debug_print("a={} b={}", {x(0).get()});
    o[pl::all] = x[pl::all];
  };
  EXPECT_TRUE(fails(line, traced(print), {kAt + "debug_print", "2 {} placeholders for 1 values"}));
}

// A store (an assignment to a ref view, pl::store, +=) of a value that does not fit the slice
// says so in the store's terms, not as a broadcast the user never wrote.
TEST(OpErrors, StoresOfTheWrongShapeSayWhichSlice) {
  int line = 0;
  auto assign = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x(pl::slice(0, 4));
    line = __LINE__; o[pl::all] = v;
  };
  EXPECT_TRUE(fails(line, traced(assign), {"kernel 'k'", kAt + "store to output 0[:]: the value has shape [4] (f32[4])",
                                           "the slice output 0[:] has shape [8]", "index a slice of the value's shape"}));
  auto slice = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; o(pl::slice(2, 6)) = v;
  };
  EXPECT_TRUE(fails(line, traced(slice), {kAt + "store to output 0[2:6]: the value has shape [8]", "has shape [4]"}));
  auto add_to = [&](pl::Ref x, pl::Ref o) {
    line = __LINE__; o[pl::all] += x(pl::slice(0, 2));
  };
  EXPECT_TRUE(fails(line, traced(add_to), {kAt + "+= into output 0[:]: the value has shape [2]"}));
  auto dtype = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all].astype(pl::i32);
    line = __LINE__; pl::store(o, {pl::all}, v);
  };
  EXPECT_TRUE(fails(line, traced(dtype), {kAt + "store to output 0[:]: the value i32[8] does not match the ref dtype f32",
                                          ".astype(f32)"}));
  auto mask = [&](pl::Ref x, pl::Ref o) {
    pl::Value m = pl::arange(4) < 2;
    line = __LINE__; pl::store(o, {pl::all}, x[pl::all], {.mask = m});
  };
  EXPECT_TRUE(fails(line, traced(mask), {kAt + "store to output 0[:]: the mask bool[4] does not broadcast to the slice", "[8]"}));
  // into a scratch buffer, at a dynamic slice
  auto scratch = [&](pl::Ref x, pl::Ref o, pl::Ref s) {
    pl::Value i = pl::program_id(0) * 2;
    line = __LINE__; s(pl::ds(i, 4)) = x(pl::slice(0, 3));
    o[pl::all] = x[pl::all];
  };
  auto f = [&] {
    pl::pallas_call(scratch, kVec, {.grid = {2}, .scratch_shapes = {pl::ShapeDtype({8}, pl::f32)}, .name = "k"}).trace({kVec});
  };
  EXPECT_TRUE(fails(line, f, {kAt + "store to scratch 0[ds(start, 4)]: the value has shape [3]"}));
}

// Loads: indices, slices and masks the ref cannot take, and load's `other`.
TEST(OpErrors, LoadsNameTheirLine) {
  int line = 0;
  auto index = [&](pl::Ref x, pl::Ref o) {
    line = __LINE__; pl::Value v = x(8);
    o[pl::all] = v;
  };
  EXPECT_TRUE(fails(line, traced(index), {"kernel 'k'", kAt + "load: index 8 is out of bounds", "f32[8]"}));
  auto slice = [&](pl::Ref x, pl::Ref o) {
    line = __LINE__; o[pl::all] = x(pl::slice(4, 12));
  };
  EXPECT_TRUE(fails(line, traced(slice), {kAt + "load: static slice 4:12 is out of bounds"}));
  auto rank = [&](pl::Ref x, pl::Ref o) {
    line = __LINE__; o[pl::all] = x(0, 0);
  };
  EXPECT_TRUE(fails(line, traced(rank), {kAt, "2 indexers", "rank-1"}));
  auto other = [&](pl::Ref x, pl::Ref o) {
    pl::Value m = pl::arange(8) < 4;
    line = __LINE__; o[pl::all] = pl::load(x, {pl::all}, {.mask = m, .other = pl::Value(pl::zeros({3}))});
  };
  EXPECT_TRUE(fails(line, traced(other), {kAt + "load from input 0[:]: other has shape [3]", "has shape [8]"}));
}

// Atomics take the line of their indexers (they stay plain functions).
TEST(OpErrors, AtomicsNameTheirLine) {
  int line = 0;
  pl::ShapeDtype i8({8}, pl::i8);
  auto add = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; pl::atomic_add(o, {pl::all}, v);
  };
  EXPECT_TRUE(fails(line, traced(add, {i8}, i8), {kAt + "atomic_add", "does not support i8"}));
  auto max = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x(pl::slice(0, 4));
    line = __LINE__; pl::atomic_max(o, {pl::all}, v);
  };
  EXPECT_TRUE(fails(line, traced(max), {kAt + "atomic_max on output 0[:]: the value has shape [4]"}));
}

// Control flow: a carry or branch mismatch names the loop's or cond's line; an error inside
// a body names the body's line.
TEST(OpErrors, ControlFlowNamesTheLoopOrTheBodyLine) {
  int line = 0, body_line = 0;
  auto carry = [&](pl::Ref x, pl::Ref o) {
    auto body = [](pl::Value, pl::Value c) {
      pl::Value d = c;
      return d.astype(pl::f16);
    };
    line = __LINE__; o[pl::all] = pl::fori_loop(0, 3, x[pl::all], body);
  };
  EXPECT_TRUE(fails(line, traced(carry), {kAt + "fori_loop: carry 0", "f16[8]", "must not change"}));
  auto count = [&](pl::Ref x, pl::Ref o) {
    auto body = [](pl::Value, const std::vector<pl::Value>& c) {
      return std::vector<pl::Value>{c[0], c[0]};
    };
    line = __LINE__; o[pl::all] = pl::fori_loop(0, 3, std::vector<pl::Value>{x[pl::all]}, body)[0];
  };
  EXPECT_TRUE(fails(line, traced(count), {kAt + "fori_loop: the body returns 2 values but 1 are carried"}));
  auto in_body = [&](pl::Ref x, pl::Ref o) {
    auto body = [&](pl::Value, pl::Value c) {
      pl::Value w = pl::zeros({4});
      body_line = __LINE__; return c + w;
    };
    o[pl::all] = pl::fori_loop(0, 3, x[pl::all], body);
  };
  EXPECT_TRUE(fails(body_line, traced(in_body), {kAt + "add: shapes [8] and [4]"}));
  auto while_cond = [&](pl::Ref x, pl::Ref o) {
    auto cnd = [](pl::Value c) { return c > 0; };
    auto body = [](pl::Value c) { return c; };
    line = __LINE__; o[pl::all] = pl::while_loop(pl::Value(x[pl::all]), cnd, body);
  };
  EXPECT_TRUE(fails(line, traced(while_cond), {kAt + "while_loop: the condition must return a scalar", "bool[8]"}));
  auto branches = [&](pl::Ref x, pl::Ref o) {
    auto a = [&] { return pl::Value(x[pl::all]); };
    auto b = [&] { return pl::Value(x(pl::slice(0, 4))); };
    line = __LINE__; o[pl::all] = pl::cond(x(0) > 0, a, b);
  };
  EXPECT_TRUE(fails(line, traced(branches), {kAt + "cond: branch", "f32[4]", "f32[8]"}));
  auto when = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; pl::when(v > 0, [&] { o[pl::all] = v; });
  };
  EXPECT_TRUE(fails(line, traced(when), {kAt + "pl::cond / pl::when: the predicate must be a scalar", "bool[8]"}));
}

// Values from another trace, and empty Values, are reported at the op that uses them.
TEST(OpErrors, ForeignAndEmptyValuesNameTheOp) {
  int line = 0;
  pl::Value leaked;
  pl::pallas_call([&](pl::Ref x, pl::Ref o) { leaked = x[pl::all]; o[pl::all] = x[pl::all]; }, kVec, {}).trace({kVec});
  auto foreign = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; o[pl::all] = v + leaked;
  };
  EXPECT_TRUE(fails(line, traced(foreign), {"kernel 'k'", kAt + "uses a Value traced outside it"}));
  pl::Value empty;
  auto undefined = [&](pl::Ref x, pl::Ref o) {
    pl::Value v = x[pl::all];
    line = __LINE__; o[pl::all] = v * empty;
  };
  EXPECT_TRUE(fails(line, traced(undefined), {kAt + "pl::mul: an operand is an empty (default-constructed) Value"}));
}

// An op's error inside an index map names the map and the op's line.
TEST(OpErrors, IndexMapOpsNameTheirLine) {
  int line = 0;
  auto f = [&] {
    line = __LINE__; auto spec = pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(pl::sum(i, 1)); });
    pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({4}, pl::f32),
                    {.grid = {2}, .in_specs = {spec}, .name = "k"})
        .trace({kVec});
  };
  EXPECT_TRUE(fails(line, f, {"kernel 'k'", "the index map of input 0: at op_errors_test.cc:@: ", "axis 1 is out of range for rank 0"}));
}

// Ops in a helper function (the kernel library's style) name the helper's line, where the op
// is, not the kernel's.
pl::Value bad_scale(const pl::Value& v, int* line) {
  *line = __LINE__; return v * pl::Value(pl::zeros({5}));
}
TEST(OpErrors, OpsInHelperFunctionsNameTheHelpersLine) {
  int line = 0;
  auto k = [&](pl::Ref x, pl::Ref o) { o[pl::all] = bad_scale(x[pl::all], &line); };
  EXPECT_TRUE(fails(line, traced(k), {kAt + "mul: shapes [8] and [5]"}));
}

}  // namespace
}  // namespace pt
