// Every error a user can hit: each is a pl::Error whose message names the kernel (its name,
// else its source location) and says what is wrong and what to change.
#include "tests/test_util.h"

namespace pt {
namespace {

pl::Array vec(int n, pl::DType t = pl::f32) { return pl::Array::full({n}, 1.0, t); }
const pl::ShapeDtype kOut({8}, pl::f32);

auto copy_kernel = [](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; };

// Runs a one-input, one-output kernel named "k" on an f32[8] input; returns its error.
template <class K>
std::function<void()> run_kernel(K kernel, std::vector<pl::Array> args = {vec(8)}, pl::ShapeDtype out = kOut) {
  return [=] {
    auto call = pl::pallas_call(kernel, out, {.name = "k"});
    call(args);
  };
}

// ---- options checked when the call is traced ----
TEST(CallErrors, AliasIndexOutOfRange) {
  auto in = [] {
    pl::pallas_call(copy_kernel, kOut, {.input_output_aliases = {{3, 0}}, .name = "alias"})(vec(8));
  };
  EXPECT_TRUE(throws_error(in, {"kernel 'alias'", "input_output_aliases names input 3", "1 input"}));
  auto out = [] {
    pl::pallas_call(copy_kernel, kOut, {.input_output_aliases = {{0, 2}}, .name = "alias"})(vec(8));
  };
  EXPECT_TRUE(throws_error(out, {"kernel 'alias'", "names output 2", "1 output"}));
}

TEST(CallErrors, AliasShapeOrDtypeMismatch) {
  auto shape = [] {
    pl::pallas_call([](pl::Ref, pl::Ref o) { o[pl::all] = pl::zeros({8}); }, kOut,
                    {.input_output_aliases = {{0, 0}}, .name = "alias"})(vec(4));
  };
  EXPECT_TRUE(throws_error(shape, {"kernel 'alias'", "f32[4]", "f32[8]", "same shape and dtype"}));
  auto dtype = [] {
    pl::pallas_call([](pl::Ref, pl::Ref o) { o[pl::all] = pl::zeros({8}); }, kOut,
                    {.input_output_aliases = {{0, 0}}, .name = "alias"})(vec(8, pl::i32));
  };
  EXPECT_TRUE(throws_error(dtype, {"kernel 'alias'", "i32[8]", "f32[8]", "same shape and dtype"}));
  auto twice = [] {
    pl::pallas_call([](pl::Ref, pl::Ref, pl::Ref o) { o[pl::all] = pl::zeros({8}); }, kOut,
                    {.input_output_aliases = {{0, 0}, {1, 0}}, .name = "alias"})(vec(8), vec(8));
  };
  EXPECT_TRUE(throws_error(twice, {"kernel 'alias'", "output 0 is aliased to inputs", "at most once"}));
}

TEST(CallErrors, WrongNumberOfSpecs) {
  auto spec = [] { return pl::BlockSpec({8}, [](pl::Value) { return pl::idx(0); }); };
  // traced for the shapes of one input (a call with one array is a wrong count: below)
  auto ins = [&] {
    pl::pallas_call(copy_kernel, kOut, {.grid = {1}, .in_specs = {spec(), spec()}, .name = "specs"}).trace({kOut});
  };
  EXPECT_TRUE(throws_error(ins, {"kernel 'specs'", "2 in_specs given for 1 input", "one BlockSpec per input"}));
  auto outs = [&] {
    pl::pallas_call(copy_kernel, kOut, {.grid = {1}, .out_specs = {spec(), spec()}, .name = "specs"})(vec(8));
  };
  EXPECT_TRUE(throws_error(outs, {"kernel 'specs'", "2 out_specs given for 1 output", "one BlockSpec per output"}));
}

// The number of arrays is checked first, before the specs and the kernel's arity: a call
// says how many it takes and how that is known.
TEST(CallErrors, WrongNumberOfArguments) {
  auto spec = pl::BlockSpec({8}, [](pl::Value i) { return pl::idx(i); });
  auto add_kernel = [](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; };
  auto add = pl::pallas_call(add_kernel, kOut, {.grid = {1}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "add"});
  EXPECT_TRUE(throws_error([&] { add(vec(8)); },
                           {"kernel 'add'", "called with 1 array but it takes 2: 2 inputs (one per in_spec)"}));
  // without specs: from the kernel's refs
  auto plain = pl::pallas_call(add_kernel, kOut, {.name = "add"});
  EXPECT_TRUE(throws_error([&] { plain(vec(8), vec(8), vec(8)); },
                           {"kernel 'add'", "called with 3 arrays but it takes 2: 2 inputs (the kernel takes 3 refs: 2 inputs, 1 output)"}));
  // specs and kernel disagree: both are named
  auto both = pl::pallas_call(copy_kernel, kOut, {.grid = {1}, .in_specs = {spec, spec}, .name = "both"});
  EXPECT_TRUE(throws_error([&] { both(vec(8)); },
                           {"kernel 'both'", "called with 1 array but it takes 2", "one per in_spec", "the kernel's 2 refs leave room for 1"}));
  // dynamic grid bounds and scalar prefetch count too, in the order they are passed
  auto dyn = pl::pallas_call([](pl::Ref, pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, kOut,
                             {.grid = {pl::dynamic}, .in_specs = {spec}, .out_specs = {spec}, .num_scalar_prefetch = 1, .name = "dyn"});
  EXPECT_TRUE(throws_error([&] { dyn(vec(8)); },
                           {"kernel 'dyn'", "called with 1 array but it takes 3: 1 dynamic grid bound, 1 scalar-prefetch operand "
                            "and 1 input (one per in_spec), in that order", "pl::Array::scalar"}));
  // after the first call traced it
  auto call = pl::pallas_call(copy_kernel, kOut, {.name = "args"});
  call(vec(8));  // traced for one input
  EXPECT_TRUE(throws_error([&] { call(vec(8), vec(8)); }, {"kernel 'args'", "called with 2 arrays but it takes 1: 1 input"}));
  EXPECT_TRUE(throws_error([&] { call(std::vector<pl::Array>{}); }, {"kernel 'args'", "called with 0 arrays"}));
  // the kernel's arity must match the refs the call passes: called, the count of arrays is
  // wrong for the kernel; traced for shapes, the kernel is wrong for them
  auto only_out = [](pl::Ref o) { o[pl::all] = pl::zeros({8}); };
  auto arity = [&] { pl::pallas_call(only_out, kOut, {.name = "arity"})(vec(8)); };
  EXPECT_TRUE(throws_error(arity, {"kernel 'arity'", "called with 1 array but it takes 0", "the kernel takes 1 ref", "1 output"}));
  auto arity_traced = [&] { pl::pallas_call(only_out, kOut, {.name = "arity"}).trace({kOut}); };
  EXPECT_TRUE(throws_error(arity_traced, {"kernel 'arity'", "takes 1 ref", "passes 2", "1 input, 1 output"}));
  // an empty argument
  EXPECT_TRUE(throws_error([] { pl::pallas_call(copy_kernel, kOut, {.name = "empty"})(pl::Array()); },
                           {"kernel 'empty'", "input 0 is an empty Array"}));
}

TEST(CallErrors, ArgumentNotWhatTheCallWasTracedFor) {
  auto call = pl::pallas_call(copy_kernel, kOut, {.name = "traced"});
  call(vec(8));
  EXPECT_TRUE(throws_error([&] { call(vec(4)); }, {"kernel 'traced'", "input 0 is f32[4]", "traced for f32[8]", "new pallas_call"}));
  EXPECT_TRUE(throws_error([&] { call(vec(8, pl::f16)); }, {"kernel 'traced'", "f16[8]", "traced for f32[8]"}));
}

TEST(CallErrors, BlockShapeRankMismatch) {
  auto f = [] {
    pl::pallas_call(copy_kernel, kOut,
                    {.grid = {2}, .in_specs = {pl::BlockSpec({2, 4}, [](pl::Value i) { return pl::idx(i, 0); })},
                     .name = "rank"})(vec(8));
  };
  EXPECT_TRUE(throws_error(f, {"kernel 'rank'", "block shape [2,4] of input 0 has rank 2", "f32[8] has rank 1",
                               "one block size per dimension"}));
  auto neg = [] {
    pl::pallas_call(copy_kernel, kOut,
                    {.grid = {2}, .in_specs = {pl::BlockSpec({0}, [](pl::Value i) { return pl::idx(i); })},
                     .name = "zero"})(vec(8));
  };
  EXPECT_TRUE(throws_error(neg, {"kernel 'zero'", "block dimension 0 of input 0 is 0", "must be positive"}));
}

TEST(CallErrors, IndexMapArityAndResults) {
  auto arity = [] {
    pl::pallas_call(copy_kernel, kOut,
                    {.grid = {2, 2}, .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
                     .name = "imap"})(vec(8));
  };
  EXPECT_TRUE(throws_error(arity, {"kernel 'imap'", "index map of input 0", "takes 1 argument", "2 axes", "must take 2"}));
  auto results = [] {
    pl::pallas_call(copy_kernel, kOut,
                    {.grid = {2}, .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i, 0); })},
                     .name = "imap"})(vec(8));
  };
  EXPECT_TRUE(throws_error(results, {"kernel 'imap'", "index map of input 0", "returns 2 indices", "rank 1",
                                     "one block index per dimension"}));
  auto floats = [] {
    pl::pallas_call(copy_kernel, kOut,
                    {.grid = {2}, .out_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i.astype(pl::f32)); })},
                     .name = "imap"})(vec(8));
  };
  EXPECT_TRUE(throws_error(floats, {"kernel 'imap'", "index map of output 0", "f32[]", "integer scalars"}));
  // with scalar prefetch the map must also take the prefetch refs
  auto prefetch = [] {
    pl::pallas_call([](pl::Ref, pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, kOut,
                    {.grid = {2}, .in_specs = {pl::BlockSpec({4}, [](pl::Value i) { return pl::idx(i); })},
                     .num_scalar_prefetch = 1, .name = "imap"})(pl::Array::scalar<int32_t>(0), vec(8));
  };
  EXPECT_TRUE(throws_error(prefetch, {"kernel 'imap'", "1 scalar-prefetch operand", "must take 2"}));
  // program_id is for kernels; index maps get the grid indices as arguments
  auto pid = [] {
    pl::pallas_call(copy_kernel, kOut,
                    {.grid = {2}, .in_specs = {pl::BlockSpec({4}, [](pl::Value) { return pl::idx(pl::program_id(0)); })},
                     .name = "imap"})(vec(8));
  };
  EXPECT_TRUE(throws_error(pid, {"kernel 'imap'", "program_id is only available in kernels"}));
}

TEST(CallErrors, KernelReturnsAValue) {
  auto f = [] {
    pl::pallas_call([](pl::Ref x, pl::Ref o) -> pl::Value { return x[pl::all]; }, kOut, {.name = "ret"})(vec(8));
  };
  EXPECT_TRUE(throws_error(f, {"kernel 'ret'", "returns a value", "must return void", "output refs"}));
}

TEST(CallErrors, GridAndPrefetchOptions) {
  EXPECT_TRUE(throws_error([] { pl::pallas_call(copy_kernel, kOut, {.grid = {-3}, .name = "g"})(vec(8)); },
                           {"kernel 'g'", "grid size -3 is negative"}));
  EXPECT_TRUE(throws_error(
      [] { pl::pallas_call(copy_kernel, kOut, {.num_scalar_prefetch = 2, .name = "p"})(vec(8)); },
      {"kernel 'p'", "num_scalar_prefetch is 2", "1 input"}));
  EXPECT_TRUE(throws_error(
      [] {
        pl::pallas_call([](pl::Ref, pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, kOut,
                        {.num_scalar_prefetch = 1, .name = "p"})(vec(1), vec(8));
      },
      {"kernel 'p'", "scalar-prefetch operand 0 is f32[1]", "integer arrays"}));
  // zero outputs are allowed
  EXPECT_TRUE(throws_error(
      [] { pl::pallas_call(copy_kernel, std::vector<pl::ShapeDtype>{}, {.name = "none"}).trace({kOut}); },
      {"kernel 'none'", "the kernel takes 2 refs but the call passes 1", "0 outputs"}));
  EXPECT_TRUE(throws_error(
      [] { pl::pallas_call(copy_kernel, std::vector<pl::ShapeDtype>{}, {.name = "none"})({vec(8)}); },
      {"kernel 'none'", "called with 1 array but it takes 2", "2 inputs, 0 outputs"}));
  // dynamic bounds must be integer scalars, passed first
  auto call = pl::pallas_call(copy_kernel, kOut, {.grid = {pl::dynamic}, .name = "dyn"});
  EXPECT_TRUE(throws_error([&] { call(vec(1), vec(8)); }, {"kernel 'dyn'", "argument 0 is a dynamic grid bound", "pl::Array::scalar"}));
  EXPECT_TRUE(throws_error([&] { call(std::vector<pl::Array>{}); }, {"kernel 'dyn'", "called with 0 arrays", "1 dynamic grid bound and 1 input"}));
  // a first call (not traced yet) without its dynamic bound
  auto dyn0 = pl::pallas_call(copy_kernel, kOut, {.grid = {pl::dynamic}, .name = "dyn0"});
  EXPECT_TRUE(throws_error([&] { dyn0(std::vector<pl::Array>{}); }, {"kernel 'dyn0'", "called with 0 arrays but it takes 2: 1 dynamic grid bound and 1 input"}));
  // ... and where the count is not known before tracing (a kernel over a vector of refs)
  auto any = pl::pallas_call([](const std::vector<pl::Ref>& r) { r.back()[pl::all] = pl::zeros({8}); }, kOut,
                             {.grid = {pl::dynamic}, .name = "any"});
  EXPECT_TRUE(throws_error([&] { any(std::vector<pl::Array>{}); }, {"kernel 'any'", "the grid has 1 dynamic bound, passed first"}));
}

TEST(CallErrors, UsingTheCallObject) {
  auto two = pl::pallas_call([](pl::Ref x, pl::Ref o1, pl::Ref o2) { o1[pl::all] = x[pl::all]; o2[pl::all] = x[pl::all]; },
                             {kOut, kOut}, {.name = "two"});
  EXPECT_TRUE(throws_error([&] { two(vec(8)); }, {"kernel 'two'", "has 2 outputs", "vector form"}));
  auto fresh = pl::pallas_call(copy_kernel, kOut, {.name = "fresh"});
  EXPECT_TRUE(throws_error([&] { fresh.jaxpr_text(); }, {"kernel 'fresh'", "not been traced", ".trace("}));
  pl::Call empty;
  EXPECT_TRUE(throws_error([&] { empty(vec(8)); }, {"empty Call"}));
}

// Without a name, errors name the kernel by its source location.
TEST(CallErrors, UnnamedKernelNamedBySourceLocation) {
  int line = __LINE__ + 1;
  auto call = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + pl::zeros({4}); }, kOut, {});
  EXPECT_TRUE(throws_error([&] { call(vec(8)); }, {"kernel at call_errors_test.cc:" + std::to_string(line), "add", "[8]", "[4]"}));
}

// ---- errors inside the kernel: the op and the shapes / dtypes in the message ----
TEST(KernelErrors, MismatchedShapes) {
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + pl::zeros({4}); }),
                           {"kernel 'k'", "add", "[8]", "[4]", "cannot be broadcast"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::where(pl::zeros({3}, pl::bool_), x[pl::all], 0.0); }),
                           {"kernel 'k'", "where", "[8]", "[3]"}));
  // storing a tile of the wrong shape: said as a store, not as a broadcast the kernel never wrote
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = x(pl::slice(0, 4)); }),
                           {"kernel 'k'", "store to output 0[:]", "f32[4]", "[8]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::reshape(x[pl::all], {3, 3}); }),
                           {"kernel 'k'", "reshape", "f32[8]", "[3,3]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::squeeze(x[pl::all], 0); }),
                           {"kernel 'k'", "squeeze", "dimension 0 of f32[8] is not of size 1"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::transpose(x[pl::all], {1, 0}); }),
                           {"kernel 'k'", "transpose", "not a permutation", "f32[8]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::broadcast_to(x[pl::all], {8, 3}); }),
                           {"kernel 'k'", "broadcast_to", "f32[8]", "[8,3]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::sum(x[pl::all], 2); }),
                           {"kernel 'k'", "axis 2 is out of range for rank 1"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::expand_dims(x[pl::all], 3); }),
                           {"kernel 'k'", "expand_dims", "axis 3", "f32[8]"}));
}

TEST(KernelErrors, MismatchedDtypes) {
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all].astype(pl::i32); }),
                           {"kernel 'k'", "i32[8]", "does not match the ref dtype f32", ".astype(f32)"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] << 1; }),
                           {"kernel 'k'", "shift_left", "integer dtypes", "f32[8]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = (x[pl::all] & x[pl::all]).astype(pl::f32); }),
                           {"kernel 'k'", "and", "integer or bool dtypes", "f32[8]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::population_count(x[pl::all]); }),
                           {"kernel 'k'", "population_count", "f32[8]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = (x[pl::all] > 0) + (x[pl::all] > 1); }),
                           {"kernel 'k'", "add", "bool[8]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::bitcast(x[pl::all], pl::f16); }),
                           {"kernel 'k'", "bitcast", "f32[8]", "f16", "widths"}));
  EXPECT_TRUE(throws_error(
      run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::integer_pow(x[pl::all], -1); }, {vec(8, pl::i32)}, pl::ShapeDtype({8}, pl::i32)),
      {"kernel 'k'", "integer_pow", "negative exponent", "i32[8]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::sum(x[pl::all] > 0).astype(pl::f32) + x[pl::all]; }),
                           {"kernel 'k'", "reduce_sum", "bool", ".astype(pl::i32)"}));
}

TEST(KernelErrors, Dot) {
  pl::ShapeDtype out({4, 4}, pl::f32);
  auto m = [](int r, int c, pl::DType t = pl::f32) { return pl::Array::full({r, c}, 1.0, t); };
  auto dot_k = [](pl::DotOptions o) {
    return [o](pl::Ref a, pl::Ref b, pl::Ref c) { c[pl::all] = pl::dot(a[pl::all], b[pl::all], o); };
  };
  EXPECT_TRUE(throws_error(run_kernel(dot_k({}), {m(4, 3), m(4, 4)}, out), {"kernel 'k'", "dot", "contraction", "f32[4,3]", "f32[4,4]"}));
  EXPECT_TRUE(throws_error(run_kernel(dot_k({.trans_b = true}), {m(4, 3), m(3, 4)}, out), {"kernel 'k'", "dot", "(transposed)"}));
  EXPECT_TRUE(throws_error(run_kernel(dot_k({}), {m(4, 4), m(4, 4, pl::f16)}, out),
                           {"kernel 'k'", "dot: operands are f32 and f16", "same element type", "f16[4,4]", ".astype("}));
  EXPECT_TRUE(throws_error(run_kernel(dot_k({}), {m(4, 4, pl::u8), m(4, 4, pl::u8)}, pl::ShapeDtype({4, 4}, pl::i32)),
                           {"kernel 'k'", "dot", "u8", "unsigned"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref a, pl::Ref c) { c[pl::all] = pl::dot(a[pl::all], a[pl::all]); }, {vec(4)}, out),
                           {"kernel 'k'", "dot", "2D", "f32[4]"}));
}

TEST(KernelErrors, Indexing) {
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = x(0, 0); }), {"kernel 'k'", "2 indexers", "rank-1", "f32[8]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o(0) = x(8); }), {"kernel 'k'", "index 8 is out of bounds", "f32[8]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = x(pl::slice(4, 12)); }),
                           {"kernel 'k'", "static slice 4:12 is out of bounds", "f32[8]"}));
  auto big = [](pl::Ref x, pl::Ref o) {
    pl::Value s = x(0).astype(pl::i32);
    o(pl::ds(0, 8)) = x(pl::ds(s, 9));
  };
  EXPECT_TRUE(throws_error(run_kernel(big), {"kernel 'k'", "ds(start, 9) is larger than dimension 0", "f32[8]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = x(x(0)); }), {"kernel 'k'", "index", "f32[]", "integer"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = x(pl::ds(x(0), 8)); }), {"kernel 'k'", "ds() start must be an integer"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) {
                             pl::Value v = x[pl::all];
                             o[pl::all] = pl::exp(pl::Value(pl::Ref(v).value()));
                           }),
                           {"kernel 'k'", "is a value, not a ref"}));
}

TEST(KernelErrors, MasksAndAtomics) {
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::load(x, {pl::all}, {.other = 0.0}); }),
                           {"kernel 'k'", "other requires mask"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::load(x, {pl::all}, {.mask = pl::arange(8)}); }),
                           {"kernel 'k'", "mask must be bool", "i32[8]"}));
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) { pl::store(o, {pl::all}, x[pl::all], {.mask = pl::arange(4) < 2}); }),
                           {"kernel 'k'", "the mask bool[4] does not broadcast", "[8]"}));
  auto i8 = [](pl::Ref x, pl::Ref o) { pl::atomic_add(o, {pl::all}, x[pl::all]); };
  EXPECT_TRUE(throws_error(run_kernel(i8, {vec(8, pl::i8)}, pl::ShapeDtype({8}, pl::i8)), {"kernel 'k'", "atomic_add", "does not support i8"}));
  auto fand = [](pl::Ref x, pl::Ref o) { pl::atomic_and_(o, {pl::all}, x[pl::all]); };
  EXPECT_TRUE(throws_error(run_kernel(fand), {"kernel 'k'", "atomic_and", "needs an integer ref", "f32[8]"}));
  auto cas16 = [](pl::Ref x, pl::Ref o) { pl::atomic_cas(o, {pl::all}, x[pl::all], x[pl::all]); };
  EXPECT_TRUE(throws_error(run_kernel(cas16, {vec(8, pl::i16)}, pl::ShapeDtype({8}, pl::i16)), {"kernel 'k'", "atomic_cas", "32- or 64-bit", "i16"}));
}

TEST(KernelErrors, ControlFlow) {
  auto carry = [](pl::Ref x, pl::Ref o) {
    o[pl::all] = pl::fori_loop(0, 3, x[pl::all], [](pl::Value, pl::Value c) { return c.astype(pl::f16); });
  };
  EXPECT_TRUE(throws_error(run_kernel(carry), {"kernel 'k'", "fori_loop", "carry 0", "f32[8]", "f16[8]", "must not change"}));
  auto shape = [](pl::Ref x, pl::Ref o) {
    o[pl::all] = pl::fori_loop(0, 3, x[pl::all], [](pl::Value, pl::Value c) { return pl::reshape(c, {2, 4}); });
  };
  EXPECT_TRUE(throws_error(run_kernel(shape), {"kernel 'k'", "fori_loop", "f32[8]", "f32[2,4]"}));
  auto nres = [](pl::Ref x, pl::Ref o) {
    auto r = pl::fori_loop(0, 3, std::vector<pl::Value>{x[pl::all]},
                           [](pl::Value, const std::vector<pl::Value>& c) { return std::vector<pl::Value>{c[0], c[0]}; });
    o[pl::all] = r[0];
  };
  EXPECT_TRUE(throws_error(run_kernel(nres), {"kernel 'k'", "fori_loop", "returns 2 values but 1 are carried"}));
  auto wcond = [](pl::Ref x, pl::Ref o) {
    o[pl::all] = pl::while_loop(pl::Value(x[pl::all]), [](pl::Value c) { return c > 0; }, [](pl::Value c) { return c; });
  };
  EXPECT_TRUE(throws_error(run_kernel(wcond), {"kernel 'k'", "while_loop", "condition must return a scalar", "bool[8]"}));
  auto branches = [](pl::Ref x, pl::Ref o) {
    auto r = pl::cond(pl::Value(true), [&] { return std::vector<pl::Value>{x[pl::all]}; },
                      [&] { return std::vector<pl::Value>{x[pl::all], x[pl::all]}; });
    o[pl::all] = r[0];
  };
  EXPECT_TRUE(throws_error(run_kernel(branches), {"kernel 'k'", "cond", "different numbers of values"}));
  auto btypes = [](pl::Ref x, pl::Ref o) {
    o[pl::all] = pl::cond(pl::Value(true), [&] { return pl::Value(x[pl::all]); }, [&] { return pl::Value(x(pl::slice(0, 4))); });
  };
  EXPECT_TRUE(throws_error(run_kernel(btypes), {"kernel 'k'", "cond", "branch", "f32[4]", "f32[8]"}));
  auto pid = [](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + pl::program_id(1).astype(pl::f32); };
  EXPECT_TRUE(throws_error([&] { pl::pallas_call(pid, kOut, {.grid = {2}, .name = "k"})(vec(8)); },
                           {"kernel 'k'", "program_id axis 1 is out of bounds for a grid of rank 1"}));
  auto np = [](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + pl::num_programs(3).astype(pl::f32); };
  EXPECT_TRUE(throws_error([&] { pl::pallas_call(np, kOut, {.grid = {2}, .name = "k"})(vec(8)); },
                           {"kernel 'k'", "num_programs axis 3"}));
}

TEST(KernelErrors, DebugPrintPlaceholders) {
  EXPECT_TRUE(throws_error(run_kernel([](pl::Ref x, pl::Ref o) {
                             pl::debug_print("a={} b={}", {x(0).get()});
                             o[pl::all] = x[pl::all];
                           }),
                           {"kernel 'k'", "debug_print", "2 {} placeholders for 1 values"}));
}

// Values belong to the trace that made them.
TEST(KernelErrors, ValuesOutsideTheirTrace) {
  EXPECT_TRUE(throws_error([] { pl::exp(pl::Value(1.0)); }, {"pl::exp", "outside a kernel"}));
  pl::Value leaked;
  auto first = pl::pallas_call([&](pl::Ref x, pl::Ref o) { leaked = x[pl::all]; o[pl::all] = x[pl::all]; }, kOut,
                               {.name = "first"});
  first(vec(8));
  auto second = [&] {
    pl::pallas_call([&](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + leaked; }, kOut, {.name = "second"})(vec(8));
  };
  EXPECT_TRUE(throws_error(second, {"kernel 'second'", "traced outside it", "inputs"}));
  pl::Value empty;
  EXPECT_TRUE(throws_error(run_kernel([&](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] + empty; }), {"kernel 'k'", "empty"}));
}

// Host-side array errors.
TEST(ArrayErrors, Construction) {
  EXPECT_TRUE(throws_error([] { pl::Array::from_vector(std::vector<float>(5), {2, 3}); }, {"from_vector", "5 values", "[2,3]"}));
  EXPECT_TRUE(throws_error([] { pl::random::randint({4}, pl::i32, 0, 3, 3); }, {"randint", "empty range"}));
  EXPECT_TRUE(throws_error([] { pl::Array::from_vector(std::vector<float>(6), {2, 3}).reshape({4}); }, {"reshape", "[2,3]", "[4]"}));
  EXPECT_TRUE(throws_error([] { pl::Array a({-1}, pl::f32); }, {"negative dimension"}));
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {
TEST(ArrayErrors, DeviceArraysWithoutGpu) {
  if (pl::cuda_available()) {
    pl::Array d = pl::Array::from_vector(std::vector<float>{1, 2}).to(pl::Device::cuda());
    EXPECT_EQ(d.to_host().to_vector<float>(), (std::vector<float>{1, 2}));
  } else {
    EXPECT_TRUE(throws_error([] { pl::Array::from_vector(std::vector<float>{1, 2}).to(pl::Device::cuda()); }, {"cuda:0", "no CUDA backend"}));
    EXPECT_TRUE(throws_error([] { pl::Array a({4}, pl::f32, pl::Device::cuda(1)); }, {"cuda:1"}));
  }
  EXPECT_TRUE(throws_error([] { pl::Array().data(); }, {"empty"}));
  EXPECT_TRUE(throws_error([] { pl::Array().to_vector<float>(); }, {"empty"}));
}
}  // namespace
}  // namespace pt
