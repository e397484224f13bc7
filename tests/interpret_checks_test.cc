// The interpreter's checks (CallOptions::interpret_params, PALLAS_INTERPRET_CHECKS): races
// between programs on parallel axes, reads of unwritten output/scratch elements, accesses
// outside a ref or an array — each reported, and each legal neighbour not reported. Also the
// grid-size errors, debug_print's tile format and order, and the thread setting.
#include <thread>

#include "tests/test_util.h"

namespace pt {
namespace {
using V = pl::Value;

// Each set names every check, so PALLAS_INTERPRET_CHECKS cannot change what a test sees.
const pl::InterpretParams kRaces{.detect_races = true, .detect_uninitialized = false, .detect_out_of_bounds = false,
                                 .detect_unwritten_outputs = false, .detect_padding_reads = false};
const pl::InterpretParams kUninit{.detect_races = false, .detect_uninitialized = true, .detect_out_of_bounds = false,
                                  .detect_unwritten_outputs = false, .detect_padding_reads = false};
const pl::InterpretParams kBounds{.detect_races = false, .detect_uninitialized = false, .detect_out_of_bounds = true,
                                  .detect_unwritten_outputs = false, .detect_padding_reads = false};
const pl::InterpretParams kUnwritten{.detect_races = false, .detect_uninitialized = false, .detect_out_of_bounds = false,
                                     .detect_unwritten_outputs = true, .detect_padding_reads = false};
const pl::InterpretParams kPadding{.detect_races = false, .detect_uninitialized = false, .detect_out_of_bounds = false,
                                   .detect_unwritten_outputs = false, .detect_padding_reads = true};
// What "1" / "all" turns on: every check a correct kernel never trips (padding reads are legal).
const pl::InterpretParams kAll{.detect_races = true, .detect_uninitialized = true, .detect_out_of_bounds = true,
                               .detect_unwritten_outputs = true, .detect_padding_reads = false};
const pl::InterpretParams kNone{.detect_races = false, .detect_uninitialized = false, .detect_out_of_bounds = false,
                                .detect_unwritten_outputs = false, .detect_padding_reads = false};

pl::Array ramp(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = static_cast<float>(k) + 0.5f;
  return pl::Array::from_vector(v, {n});
}

// ---- races ----

// Programs on a declared-parallel axis store to one shared block: reported with the kernel,
// both programs, the operand and the element.
TEST(InterpretOnlyChecks, RaceWriteWrite) {
  auto c = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({2, 4}, pl::f32),
                           {.grid = {3},
                            .dimension_semantics = {pl::parallel},
                            .in_specs = {pl::BlockSpec({2, 4}, [](V) { return pl::idx(0, 0); })},
                            .out_specs = {pl::BlockSpec({2, 4}, [](V) { return pl::idx(0, 0); })},
                            .interpret = true,
                            .name = "racy",
                            .interpret_params = kRaces});
  pl::Array x = pl::Array::from_vector(std::vector<float>(8, 1.f), {2, 4});
  EXPECT_TRUE(throws_error([&] { c(x); }, {"kernel 'racy'", "race on output 0 element [0, 0]", "program (0,) writes it",
                                          "program (1,) stores to it", "grid axis 0", "parallel"}));
  // the same call without the check runs (the interpreter serialises the programs)
  auto quiet = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({2, 4}, pl::f32),
                               {.grid = {3},
                                .dimension_semantics = {pl::parallel},
                                .in_specs = {pl::BlockSpec({2, 4}, [](V) { return pl::idx(0, 0); })},
                                .out_specs = {pl::BlockSpec({2, 4}, [](V) { return pl::idx(0, 0); })},
                                .interpret = true,
                                .interpret_params = kNone});
  EXPECT_NO_THROW(quiet(x));
}

// A program reads an element another parallel program writes (whole-array output, each
// program writes its row and reads its neighbour's).
TEST(InterpretOnlyChecks, RaceWriteRead) {
  auto c = pl::pallas_call(
      [](pl::Ref o) {
        V i = pl::program_id(0);
        o(i, pl::all) = pl::full({4}, 1.f);
        o((i + 1) % 4, 1) = o((i + 1) % 4, 1) + 1.f;
      },
      pl::ShapeDtype({4, 4}, pl::f32),
      {.grid = {4}, .dimension_semantics = {pl::parallel}, .interpret = true, .name = "neighbour", .interpret_params = kRaces});
  EXPECT_TRUE(throws_error([&] { c(std::vector<pl::Array>{}); },
                           {"kernel 'neighbour'", "race on output 0 element [1, 1]", "program (0,)", "program (1,)"}));
}

// The element's coordinates on a 2-D grid with a squeezed block dim; the axis named is the
// parallel one the programs differ in.
TEST(InterpretOnlyChecks, RaceNamesArrayCoordinatesAndAxis) {
  auto c = pl::pallas_call([](pl::Ref o) { o(pl::ds(1, 2)) = pl::full({2}, 3.f); }, pl::ShapeDtype({3, 8}, pl::f32),
                           {.grid = {3, 2},
                            .dimension_semantics = {pl::parallel, pl::parallel},
                            .out_specs = {pl::BlockSpec({pl::squeezed, 4}, [](V i, V) { return pl::idx(i, 1); })},
                            .interpret = true,
                            .name = "cols",
                            .interpret_params = kRaces});
  EXPECT_TRUE(throws_error([&] { c(std::vector<pl::Array>{}); },
                           {"race on output 0 element [0, 5]", "program (0, 0) writes it", "program (0, 1) stores to it",
                            "grid axis 1"}));
}

// Not races: disjoint blocks on parallel axes; revisits along a sequential axis (declared or
// inferred); two programs reading one input element.
TEST(InterpretOnlyChecks, NoRaceDisjointSequentialAndSharedReads) {
  pl::Array x = ramp(64);
  auto blocks = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.f; }, pl::ShapeDtype({64}, pl::f32),
                                {.grid = {8},
                                 .in_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
                                 .out_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
                                 .interpret = true,
                                 .interpret_params = kAll});
  EXPECT_NO_THROW(blocks(x));
  // accumulation over an inferred-sequential axis k: o[i] = sum_k x[i, k]
  auto rows = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({8}); });
        o[pl::all] = o[pl::all] + x[pl::all];
      },
      pl::ShapeDtype({8, 8}, pl::f32),
      {.grid = {8, 4},
       .in_specs = {pl::BlockSpec({pl::squeezed, 8}, [](V i, V k) { return pl::idx(i * 4 + k, 0); })},
       .out_specs = {pl::BlockSpec({pl::squeezed, 8}, [](V i, V) { return pl::idx(i, 0); })},
       .interpret = true,
       .interpret_params = kAll});
  pl::Array x2 = pl::Array::from_vector(std::vector<float>(256, 1.f), {32, 8});
  std::vector<float> got;
  ASSERT_NO_THROW(got = rows(x2).to_vector<float>());
  for (float v : got) EXPECT_EQ(v, 4.f);
  // every program reads the whole input (one shared block)
  auto shared = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::sum(x[pl::all]); }, pl::ShapeDtype({4}, pl::f32),
                                {.grid = {4},
                                 .out_specs = {pl::BlockSpec({pl::squeezed}, [](V i) { return pl::idx(i); })},
                                 .interpret = true,
                                 .interpret_params = kAll});
  EXPECT_NO_THROW(shared(x));
}

// Atomics and `+=` (atomic on the GPU where parallel programs share a block) do not race with
// each other; a plain store into the block they update does.
TEST(InterpretOnlyChecks, AtomicsRaceOnlyWithPlainAccesses) {
  pl::Array x = ramp(32), zero = pl::Array::zeros({8}, pl::f32);
  auto opts = [](pl::InterpretParams p) {
    return pl::CallOptions{.grid = {4},
                           .dimension_semantics = {pl::parallel},
                           .in_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); }),
                                        pl::BlockSpec({8}, [](V) { return pl::idx(0); })},
                           .out_specs = {pl::BlockSpec({8}, [](V) { return pl::idx(0); })},
                           .input_output_aliases = {{1, 0}},
                           .interpret = true,
                           .name = "hist",
                           .interpret_params = p};
  };
  auto atomic = pl::pallas_call([](pl::Ref x, pl::Ref, pl::Ref o) { pl::atomic_add(o, {pl::all}, x[pl::all]); },
                                pl::ShapeDtype({8}, pl::f32), opts(kAll));
  EXPECT_NO_THROW(atomic(x, zero));
  auto plus = pl::pallas_call([](pl::Ref x, pl::Ref, pl::Ref o) { o[pl::all] += x[pl::all]; }, pl::ShapeDtype({8}, pl::f32),
                              opts(kAll));
  EXPECT_NO_THROW(plus(x, zero));
  auto mixed = pl::pallas_call(
      [](pl::Ref x, pl::Ref, pl::Ref o) {
        pl::when(pl::program_id(0) == 2, [&] { o(0) = 0.f; });
        pl::atomic_add(o, {pl::all}, x[pl::all]);
      },
      pl::ShapeDtype({8}, pl::f32), opts(kRaces));
  EXPECT_TRUE(throws_error([&] { mixed(x, zero); },
                           {"kernel 'hist'", "race on output 0 element [0]", "atomically updates it", "program (2,) stores to it"}));
}

// Of several racing pairs the report is the one of the first program in row-major order,
// whatever the number of threads.
TEST(InterpretOnlyChecks, ReportIsDeterministic) {
  auto c = pl::pallas_call([](pl::Ref o) { o[pl::all] = pl::full({4}, 1.f); }, pl::ShapeDtype({8}, pl::f32),
                           {.grid = {4, 8},
                            .dimension_semantics = {pl::parallel, pl::parallel},
                            .out_specs = {pl::BlockSpec({4}, [](V i, V) { return pl::idx(i % 2); })},
                            .interpret = true,
                            .interpret_params = kRaces});
  std::string first = error_of([&] { c(std::vector<pl::Array>{}); });
  EXPECT_THAT(first, HasSubstr("program (0, 0) writes it and program (0, 1) stores to it"));
  for (int k = 0; k < 5; ++k) EXPECT_EQ(error_of([&] { c(std::vector<pl::Array>{}); }), first);
}

// ---- uninitialised reads ----

TEST(InterpretOnlyChecks, UninitializedOutputRead) {
  auto acc = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] += x[pl::all]; }, pl::ShapeDtype({8}, pl::f32),
                             {.grid = {4},
                              .in_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
                              .out_specs = {pl::BlockSpec({8}, [](V) { return pl::idx(0); })},
                              .interpret = true,
                              .name = "no_init",
                              .interpret_params = kUninit});
  EXPECT_TRUE(throws_error([&] { acc(ramp(32)); },
                           {"kernel 'no_init'", "program (0,) adds to output 0 element [0], which no program has written"}));
  // initialised by program 0 (the reduction idiom): fine
  auto init = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::when(pl::program_id(0) == 0, [&] { o[pl::all] = pl::zeros({8}); });
        o[pl::all] += x[pl::all];
      },
      pl::ShapeDtype({8}, pl::f32),
      {.grid = {4},
       .in_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
       .out_specs = {pl::BlockSpec({8}, [](V) { return pl::idx(0); })},
       .interpret = true,
       .interpret_params = kAll});
  EXPECT_NO_THROW(init(ramp(32)));
  // an output aliased to an input starts written
  auto aliased = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = o[pl::all] + 1.f; }, pl::ShapeDtype({8}, pl::f32),
                                 {.input_output_aliases = {{0, 0}}, .interpret = true, .interpret_params = kAll});
  EXPECT_NO_THROW(aliased(ramp(8)));
  // a read of one element left unwritten names it
  auto partial = pl::pallas_call(
      [](pl::Ref o) {
        o(pl::ds(0, 5)) = pl::full({5}, 1.f);
        o(pl::ds(0, 3)) = o(pl::ds(4, 3));
      },
      pl::ShapeDtype({8}, pl::f32), {.interpret = true, .name = "partial", .interpret_params = kUninit});
  EXPECT_TRUE(throws_error([&] { partial(std::vector<pl::Array>{}); }, {"loads output 0 element [5]"}));
}

TEST(InterpretOnlyChecks, UninitializedScratchReadAndMaskedLoads) {
  auto scratch = pl::pallas_call(
      [](pl::Ref o, pl::Ref s) {
        s(pl::ds(0, 3)) = pl::full({3}, 2.f);
        o[pl::all] = s[pl::all];
      },
      pl::ShapeDtype({4}, pl::f32),
      {.grid = {2},
       .out_specs = {pl::BlockSpec({4}, [](V) { return pl::idx(0); })},
       .scratch_shapes = {pl::ShapeDtype({4}, pl::f32)},
       .interpret = true,
       .name = "scratchy",
       .interpret_params = kUninit});
  EXPECT_TRUE(throws_error([&] { scratch(std::vector<pl::Array>{}); },
                           {"kernel 'scratchy'", "program (0,) loads scratch 0 element [3], which it has not written"}));
  // scratch is fresh in every program: written in program 0 only, read in program 1
  auto stale = pl::pallas_call(
      [](pl::Ref o, pl::Ref s) {
        pl::when(pl::program_id(0) == 0, [&] { s[pl::all] = pl::full({4}, 2.f); });
        o[pl::all] = s[pl::all];
      },
      pl::ShapeDtype({8}, pl::f32),
      {.grid = {2},
       .out_specs = {pl::BlockSpec({4}, [](V i) { return pl::idx(i); })},
       .scratch_shapes = {pl::ShapeDtype({4}, pl::f32)},
       .interpret = true,
       .interpret_params = kUninit});
  EXPECT_TRUE(throws_error([&] { stale(std::vector<pl::Array>{}); }, {"program (1,) loads scratch 0 element [0]"}));
  // masked-off lanes of a load are not reads
  auto masked = pl::pallas_call(
      [](pl::Ref o, pl::Ref s) {
        s(pl::ds(0, 2)) = pl::full({2}, 2.f);
        o[pl::all] = pl::load(s, {pl::all}, {.mask = pl::arange(4) < 2, .other = 0.f});
      },
      pl::ShapeDtype({4}, pl::f32), {.scratch_shapes = {pl::ShapeDtype({4}, pl::f32)}, .interpret = true, .interpret_params = kAll});
  std::vector<float> got;
  ASSERT_NO_THROW(got = masked(std::vector<pl::Array>{})[0].to_vector<float>());
  EXPECT_EQ(got, (std::vector<float>{2.f, 2.f, 0.f, 0.f}));
}

// ---- out of bounds ----

// A dynamic ds past the end of a ref reads poison in silence without the check.
TEST(InterpretOnlyChecks, DynamicSlicePastTheRef) {
  auto make = [](pl::InterpretParams p) {
    return pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x(pl::ds(pl::program_id(0) * 4 + 2, 4)); },
                           pl::ShapeDtype({8}, pl::f32),
                           {.grid = {2},
                            .out_specs = {pl::BlockSpec({4}, [](V i) { return pl::idx(i); })},
                            .interpret = true,
                            .name = "shifted",
                            .interpret_params = p});
  };
  std::vector<float> quiet = make(kNone)(ramp(8)).to_vector<float>();
  EXPECT_TRUE(std::isnan(quiet[6]) && std::isnan(quiet[7]));
  EXPECT_TRUE(throws_error([&] { make(kBounds)(ramp(8)); },
                           {"kernel 'shifted'", "program (1,) loads input 0 at [8], outside its f32[8] block",
                            "index 8 on dim 0 of size 8"}));
}

TEST(InterpretOnlyChecks, IndexArrayOutOfRangeAndStores) {
  auto gather = pl::pallas_call([](pl::Ref x, pl::Ref i, pl::Ref o) { o[pl::all] = x(i[pl::all]); }, pl::ShapeDtype({3}, pl::f32),
                                {.interpret = true, .name = "gather", .interpret_params = kBounds});
  EXPECT_TRUE(throws_error([&] { gather(ramp(4), pl::Array::from_vector(std::vector<int32_t>{0, 3, 4})); },
                           {"loads input 0 at [4], outside its f32[4] block"}));
  EXPECT_NO_THROW(gather(ramp(4), pl::Array::from_vector(std::vector<int32_t>{0, 3, 1})));
  auto scatter = pl::pallas_call(
      [](pl::Ref o) {
        o[pl::all] = pl::zeros({4});
        o(pl::ds(pl::program_id(0) + 2, 3)) = pl::full({3}, 1.f);
      },
      pl::ShapeDtype({4}, pl::f32), {.grid = {1}, .interpret = true, .name = "scatter", .interpret_params = kBounds});
  EXPECT_TRUE(throws_error([&] { scatter(std::vector<pl::Array>{}); }, {"stores to output 0 at [4], outside its f32[4] block"}));
}

// Masked lanes may lie anywhere (as in Pallas): no report for masked loads and stores whose
// off lanes fall outside the ref.
TEST(InterpretOnlyChecks, MaskedLanesOutsideAreLegal) {
  auto c = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        V start = pl::program_id(0) * 4 + 2;
        V m = start + pl::arange(4) < 8;
        V v = pl::load(x, {pl::ds(start, 4)}, {.mask = m, .other = -1.f});
        o[pl::all] = pl::full({4}, 0.f);
        pl::store(o, {pl::ds(pl::program_id(0) * 2, 4)}, v, {.mask = pl::program_id(0) * 2 + pl::arange(4) < 4});
      },
      pl::ShapeDtype({8}, pl::f32),
      {.grid = {2}, .out_specs = {pl::BlockSpec({4}, [](V i) { return pl::idx(i); })}, .interpret = true, .interpret_params = kAll});
  std::vector<float> got;
  ASSERT_NO_THROW(got = c(ramp(8)).to_vector<float>());
  EXPECT_EQ(got, (std::vector<float>{2.5f, 3.5f, 4.5f, 5.5f, 0.f, 0.f, 6.5f, 7.5f}));
}

// An overhanging edge block: a plain elementwise kernel reads its padding and the store drops
// those lanes — correct, so never reported by "all"; the padding check (opt-in) reports the
// unmasked reads, and masked reads and writes there (dropped) are not reported by either.
TEST(InterpretOnlyChecks, PaddingReads) {
  auto spec = pl::BlockSpec({4}, [](V i) { return pl::idx(i); });
  auto naive = [&](pl::InterpretParams checks) {
    return pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::exp(x[pl::all]); }, pl::ShapeDtype({10}, pl::f32),
                           {.grid = {3}, .in_specs = {spec}, .out_specs = {spec}, .interpret = true, .name = "edge",
                            .interpret_params = checks});
  };
  std::vector<float> got;
  ASSERT_NO_THROW(got = naive(kAll)(ramp(10)).to_vector<float>());
  for (int k = 0; k < 10; ++k) EXPECT_FLOAT_EQ(got[static_cast<size_t>(k)], std::exp(static_cast<float>(k) + 0.5f));
  EXPECT_TRUE(throws_error([&] { naive(kPadding)(ramp(10)); },
                           {"kernel 'edge'", "program (2,) loads input 0 element [10], beyond the edge of the f32[10] array",
                            "block [8:12]", "Mask the load"}));
  auto masked = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        V m = pl::program_id(0) * 4 + pl::arange(4) < 10;
        o[pl::all] = pl::exp(pl::load(x, {pl::all}, {.mask = m, .other = 0.f}));  // the store's padding lanes are dropped
      },
      pl::ShapeDtype({10}, pl::f32),
      {.grid = {3}, .in_specs = {spec}, .out_specs = {spec}, .interpret = true,
       .interpret_params = {.detect_races = true, .detect_uninitialized = true, .detect_out_of_bounds = true,
                            .detect_unwritten_outputs = true, .detect_padding_reads = true}});
  EXPECT_NO_THROW(masked(ramp(10)));
}

// ---- unwritten outputs ----

// A grid one block short leaves the output's tail unwritten: reported with the count, the
// first and last element, and the fix; a grid that covers the array is not reported.
TEST(InterpretOnlyChecks, UnwrittenOutputs) {
  auto copy = [](int64_t programs, pl::InterpretParams checks) {
    auto spec = pl::BlockSpec({128}, [](V i) { return pl::idx(i); });
    return pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, pl::ShapeDtype({1000}, pl::f32),
                           {.grid = {programs}, .in_specs = {spec}, .out_specs = {spec}, .interpret = true, .name = "short",
                            .interpret_params = checks});
  };
  EXPECT_TRUE(throws_error([&] { copy(7, kUnwritten)(ramp(1000)); },
                           {"kernel 'short'", "104 of 1000 elements of output 0 f32[1000] were written by no program",
                            "the first at [896]", "the last at [999]", "pl::cdiv"}));
  EXPECT_TRUE(throws_error([&] { copy(7, kAll)(ramp(1000)); }, {"104 of 1000 elements"}));
  std::vector<float> got;
  ASSERT_NO_THROW(got = copy(8, kAll)(ramp(1000)).to_vector<float>());
  EXPECT_EQ(got, ramp(1000).to_vector<float>());
  // off: the same short grid runs, and the tail comes back as NaN
  ASSERT_NO_THROW(got = copy(7, kNone)(ramp(1000)).to_vector<float>());
  EXPECT_TRUE(std::isnan(got[999]));

  // a store masked too tightly; and an output aliased to an input starts written
  auto half = [](bool alias) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref o) { pl::store(o, {pl::all}, x[pl::all], {.mask = pl::arange(8) < 4}); },
        pl::ShapeDtype({8}, pl::f32),
        {.input_output_aliases = alias ? std::map<int, int>{{0, 0}} : std::map<int, int>{}, .interpret = true,
         .name = "half", .interpret_params = kUnwritten});
  };
  EXPECT_TRUE(throws_error([&] { half(false)(ramp(8)); }, {"kernel 'half'", "4 of 8 elements of output 0", "the first at [4]"}));
  EXPECT_NO_THROW(half(true)(ramp(8)));
  // atomics count as writes
  auto atomics = pl::pallas_call(
      [](pl::Ref o) {
        pl::when(pl::program_id(0) == 0, [&] { o[pl::all] = pl::zeros({4}); });
        pl::atomic_add(o, {pl::all}, pl::full({4}, 1.f));
      },
      pl::ShapeDtype({4}, pl::f32), {.grid = {3}, .interpret = true, .interpret_params = kAll});
  ASSERT_NO_THROW(got = atomics(std::vector<pl::Array>{})[0].to_vector<float>());
  EXPECT_EQ(got, (std::vector<float>{3.f, 3.f, 3.f, 3.f}));
}

// A block wholly outside its array is no edge block: its index map put it there. Reading it is
// reported as out of bounds (in "all"; padding reads of edge blocks are not), and the message
// says so (block index, element start, the array's size, the program, the load's line)
// without suggesting a block shape that divides the array, which would not help.
TEST(InterpretOnlyChecks, BlockWhollyOutsideTheArrayBlamesTheIndexMap) {
  int line = 0;
  auto out = pl::BlockSpec({4}, [](V i) { return pl::idx(i); });
  auto call = [&](int shift, pl::InterpretParams checks = kBounds) {
    auto in = pl::BlockSpec({4}, [shift](V i) { return pl::idx(i + shift); });  // the bug: counts elements, say
    return pl::pallas_call(
        [&](pl::Ref x, pl::Ref o) {
          line = __LINE__; o[pl::all] = x[pl::all];
        },
        pl::ShapeDtype({8}, pl::f32),
        {.grid = {2}, .in_specs = {in}, .out_specs = {out}, .interpret = true, .name = "far", .interpret_params = checks});
  };
  std::string m = error_of([&] { call(2)(ramp(8)); });
  EXPECT_TRUE(throws_error([&] { call(2)(ramp(8)); },
                           {"kernel 'far'", "program (0,) loads input 0 (at interpret_checks_test.cc:" + std::to_string(line) + ")",
                            "from a block wholly outside the f32[8] array", "its index map put block index 2 of dim 0 at element 8",
                            "past the array's size 8", "The index map is the likely bug", "must be in [0, 2)"}));
  EXPECT_EQ(m.find("divides"), std::string::npos) << m;
  EXPECT_TRUE(throws_error([&] { call(-1)(ramp(8)); },
                           {"kernel 'far'", "program (0,) loads input 0", "block index -1 of dim 0 at element -4",
                            "before the array's start"}));
  EXPECT_TRUE(throws_error([&] { call(2, kAll)(ramp(8)); }, {"from a block wholly outside", "likely bug"}));
  EXPECT_TRUE(throws_error([&] { call(2, kPadding)(ramp(8)); }, {"from a block wholly outside", "likely bug"}));
  EXPECT_NO_THROW(call(2, kNone)(ramp(8)));  // off: it reads poison
}

// ---- grid sizes ----

TEST(InterpretOnlyChecks, GridOverflowAndHugeGrids) {
  auto k = [](pl::Ref o) { o[pl::all] = pl::zeros({1}); };
  auto one = [](V, V, V) { return pl::idx(0); };
  // 2^70 programs: refused when traced (it used to run no program at all)
  auto over = pl::pallas_call(k, pl::ShapeDtype({1}, pl::f32),
                              {.grid = {1 << 20, 1 << 20, 1 << 30}, .out_specs = {pl::BlockSpec({1}, one)}, .name = "over"});
  EXPECT_TRUE(throws_error([&] { over(std::vector<pl::Array>{}); },
                           {"kernel 'over'", "grid (1048576, 1048576, 1073741824)", "overflows"}));
  // an axis past program_id's i32
  auto wide = pl::pallas_call(k, pl::ShapeDtype({1}, pl::f32),
                              {.grid = {int64_t{1} << 31}, .out_specs = {pl::BlockSpec({1}, [](V) { return pl::idx(0); })}, .name = "wide"});
  EXPECT_TRUE(throws_error([&] { wide(std::vector<pl::Array>{}); }, {"kernel 'wide'", "grid axis 0", "2147483647"}));
  // 2^40 programs: a clear limit of the interpreter (it used to throw std::bad_alloc)
  auto huge = pl::pallas_call(k, pl::ShapeDtype({1}, pl::f32),
                              {.grid = {1 << 20, 1 << 20}, .out_specs = {pl::BlockSpec({1}, [](V, V) { return pl::idx(0); })},
                               .interpret = true, .name = "huge"});
  EXPECT_TRUE(throws_error([&] { huge(std::vector<pl::Array>{}); }, {"kernel 'huge'", "1099511627776 programs", "at most 2^32"}));
  // dynamic bounds whose product overflows: refused at call time
  auto dyn = pl::pallas_call(k, pl::ShapeDtype({1}, pl::f32),
                             {.grid = {pl::dynamic, pl::dynamic, pl::dynamic}, .out_specs = {pl::BlockSpec({1}, one)},
                              .interpret = true, .name = "dyn"});
  pl::Array big = pl::Array::scalar(int32_t{1} << 30);
  EXPECT_TRUE(throws_error([&] { dyn({big, big, big}); }, {"kernel 'dyn'", "overflows"}));
}

// ---- debug_print ----

// Tiles print with dtype and shape, nested in row-major order; programs print in row-major
// order of the grid on every run.
TEST(InterpretOnlyChecks, DebugPrintTilesAndOrder) {
  auto c = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::debug_print("t={} s={}", {x[pl::all].get(), pl::program_id(1)});
        o[pl::all] = x[pl::all];
      },
      pl::ShapeDtype({4, 6}, pl::i32),
      {.grid = {2, 2},
       .in_specs = {pl::BlockSpec({2, 3}, [](V i, V j) { return pl::idx(i, j); })},
       .out_specs = {pl::BlockSpec({2, 3}, [](V i, V j) { return pl::idx(i, j); })},
       .interpret = true});
  std::vector<int32_t> xs(24);
  for (int k = 0; k < 24; ++k) xs[static_cast<size_t>(k)] = k;
  pl::Array x = pl::Array::from_vector(xs, {4, 6});
  std::string want =
      "[program (0, 0)] t=i32[2,3] [[0 1 2] [6 7 8]] s=0\n"
      "[program (0, 1)] t=i32[2,3] [[3 4 5] [9 10 11]] s=1\n"
      "[program (1, 0)] t=i32[2,3] [[12 13 14] [18 19 20]] s=0\n"
      "[program (1, 1)] t=i32[2,3] [[15 16 17] [21 22 23]] s=1\n";
  for (int rep = 0; rep < 3; ++rep) {
    ::testing::internal::CaptureStdout();
    c(x);
    EXPECT_EQ(::testing::internal::GetCapturedStdout(), want);
  }
  auto f = interp_call(
      [](pl::Ref x, pl::Ref o) {
        pl::debug_print("{} {}", {x[pl::all].get().reshape({1, 2, 2}), x(3).get() > 0.f});
        o[pl::all] = x[pl::all];
      },
      {pl::ShapeDtype({4}, pl::f32)});
  ::testing::internal::CaptureStdout();
  f({pl::Array::from_vector(std::vector<float>{1.5f, -2.f, 1e-7f, 3e10f})});
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "[program ()] f32[1,2,2] [[[1.5 -2] [1e-07 3e+10]]] True\n");
}

// ---- threads ----

TEST(InterpretOnlyChecks, ThreadSetting) {
  int before = pl::interpret_num_threads();
  EXPECT_GE(before, 1);
  auto c = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 3.f; }, pl::ShapeDtype({256}, pl::f32),
                           {.grid = {32},
                            .in_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
                            .out_specs = {pl::BlockSpec({8}, [](V i) { return pl::idx(i); })},
                            .interpret = true});
  pl::Array x = ramp(256);
  std::vector<float> want = c(x).to_vector<float>();
  for (int t : {1, 3, 8}) {
    pl::set_interpret_num_threads(t);
    EXPECT_EQ(pl::interpret_num_threads(), t);
    EXPECT_EQ(c(x).to_vector<float>(), want);
  }
  pl::set_interpret_num_threads(0);
  EXPECT_EQ(pl::interpret_num_threads(), before);
  EXPECT_TRUE(throws_error([] { pl::set_interpret_num_threads(-1); }, {"set_interpret_num_threads"}));
}

}  // namespace
}  // namespace pt
