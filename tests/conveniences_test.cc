// The conveniences a JAX or Triton user reaches for first: pl::cdiv (on C++ integers and on
// traced Values, in kernels and index maps), printing an Array (Array::str, operator<<) and
// pl::testing::allclose with its report — each against plain references and exact texts.
#include <sstream>

#include <pallas/testing.h>

#include "tests/test_util.h"

namespace pt {
namespace {

using V = pl::Value;
namespace plt = pl::testing;

// ---- cdiv ----

static_assert(pl::cdiv(10, 3) == 4 && pl::cdiv(9, 3) == 3 && pl::cdiv(0, 5) == 0 && pl::cdiv(1, 128) == 1);
static_assert(pl::cdiv(-7, 2) == -3);  // ceil(-3.5): exact for negative numerators too
static_assert(pl::cdiv(INT64_MAX, 2) == int64_t{1} << 62);  // no a + b - 1 overflow

TEST(Cdiv, IntegersMatchTheCeilingOfTheQuotient) {
  for (int64_t a = -40; a <= 40; ++a)
    for (int64_t b = 1; b <= 9; ++b)
      EXPECT_EQ(pl::cdiv(a, b), static_cast<int64_t>(std::ceil(static_cast<double>(a) / static_cast<double>(b))))
          << a << " / " << b;
}

TEST(Cdiv, NonPositiveDivisorIsAnError) {
  EXPECT_TRUE(throws_error([] { (void)pl::cdiv(10, 0); }, {"pl::cdiv(10, 0)", "the divisor must be positive"}));
  EXPECT_TRUE(throws_error([] { (void)pl::cdiv(10, -3); }, {"pl::cdiv(10, -3)", "must be positive"}));
}

// In a kernel: tiles by a C++ divisor and by another tile, against the integer reference.
TEST(Cdiv, TracedValuesInAKernel) {
  std::vector<int32_t> a(64), b(64);
  for (int k = 0; k < 64; ++k) a[static_cast<size_t>(k)] = k * 7 % 61, b[static_cast<size_t>(k)] = 1 + k % 9;
  auto call = pl::pallas_call(
      [](pl::Ref x, pl::Ref y, pl::Ref by8, pl::Ref byy) {
        by8[pl::all] = pl::cdiv(x[pl::all], 8);
        byy[pl::all] = pl::cdiv(x[pl::all].get(), y[pl::all].get());
      },
      {pl::ShapeDtype({64}, pl::i32), pl::ShapeDtype({64}, pl::i32)}, {.name = "cdiv_tiles"});
  auto outs = call({pl::Array::from_vector(a), pl::Array::from_vector(b)});
  std::vector<int32_t> want8(64), wanty(64);
  for (size_t k = 0; k < 64; ++k)
    want8[k] = static_cast<int32_t>(pl::cdiv(a[k], 8)), wanty[k] = static_cast<int32_t>(pl::cdiv(a[k], b[k]));
  EXPECT_TRUE(equal(outs[0].to_vector<int32_t>(), want8));
  EXPECT_TRUE(equal(outs[1].to_vector<int32_t>(), wanty));
}

// In an index map and a grid: program i reads input block cdiv(i, 2); the grid covers 30
// elements in blocks of 4 (the last block overhangs by 2, its writes there dropped).
TEST(Cdiv, InAnIndexMapAndAGrid) {
  const int64_t n = 30, bs = 4, nb = pl::cdiv(n, bs);
  ASSERT_EQ(nb, 8);
  std::vector<float> x(20);
  for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(k) + 0.5f;
  auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = xr[pl::all]; }, pl::ShapeDtype({n}, pl::f32),
                              {.grid = {nb},
                               .in_specs = {pl::BlockSpec({bs}, [](V i) { return pl::idx(pl::cdiv(i, 2)); })},
                               .out_specs = {pl::BlockSpec({bs}, [](V i) { return pl::idx(i); })},
                               .name = "cdiv_map"});
  auto got = call(pl::Array::from_vector(x)).to_vector<float>();
  for (int64_t k = 0; k < n; ++k)
    EXPECT_EQ(got[static_cast<size_t>(k)], x[static_cast<size_t>(pl::cdiv(k / bs, 2) * bs + k % bs)]) << k;
}

TEST(Cdiv, FloatsAndNonPositiveDivisorsAreErrorsNamingTheKernel) {
  auto floats = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::cdiv(x[pl::all], 2).astype(pl::f32); },
                                pl::ShapeDtype({8}, pl::f32), {.name = "cdiv_float"});
  EXPECT_TRUE(throws_error([&] { floats(pl::Array::zeros({8}, pl::f32)); },
                           {"kernel 'cdiv_float'", "pl::cdiv takes integers", "f32[8]", "pl::ceil(a / b)"}));
  auto zero = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::cdiv(x[pl::all], 0); },
                              pl::ShapeDtype({8}, pl::i32), {.name = "cdiv_zero"});
  EXPECT_TRUE(throws_error([&] { zero(pl::Array::zeros({8}, pl::i32)); },
                           {"kernel 'cdiv_zero'", "pl::cdiv(i32[8], 0)", "must be positive"}));
}

// ---- printing ----

pl::Array iota_array(pl::Shape shape, pl::DType t) {
  std::vector<double> v(static_cast<size_t>(pl::shape_size(shape)));
  for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<double>(k);
  return make_array(v, std::move(shape), t);
}

TEST(ArrayPrint, ShapeDtypeDeviceAndAlignedColumns) {
  pl::Array a = pl::Array::from_vector(std::vector<float>{1, 2.5f, 3, 4, 5, -6}, {2, 3});
  EXPECT_EQ(a.str(), "f32[2,3] on host:\n[[  1 2.5   3]\n [  4   5  -6]]");
  std::ostringstream os;
  os << a;
  EXPECT_EQ(os.str(), a.str());
  EXPECT_EQ(pl::Array::from_vector(std::vector<int32_t>{1, -2, 3, 40}).str(), "i32[4] on host: [ 1 -2  3 40]");
  EXPECT_EQ(pl::Array::scalar(0.1).str(), "f64[] on host: 0.1");
  EXPECT_EQ(iota_array({2, 2, 2}, pl::i8).str(), "i8[2,2,2] on host:\n[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]");
  EXPECT_EQ(pl::Array::zeros({0, 3}, pl::f32).str(), "f32[0,3] on host: []");
  EXPECT_EQ(pl::Array().str(), "<empty Array>");
}

// Floats: as few digits as read back the same value of the dtype, at most 6; ints exactly.
TEST(ArrayPrint, ValuesOfEveryKind) {
  for (pl::DType t : {pl::f16, pl::bf16, pl::f32, pl::f64})
    EXPECT_EQ(pl::Array::full({2}, 0.1, t).str(), std::string(pl::dtype_name(t)) + "[2] on host: [0.1 0.1]");
  EXPECT_EQ(pl::Array::full({1}, 1.0 / 3.0, pl::f32).str(), "f32[1] on host: [0.333333]");
  EXPECT_EQ(pl::Array::full({1}, 1.0 / 3.0, pl::bf16).str(), "bf16[1] on host: [0.334]");  // 0.333984375, 3 digits suffice
  EXPECT_EQ(pl::Array::from_vector(std::vector<float>{NAN, INFINITY, -INFINITY, 1e-7f, 3e10f}).str(),
            "f32[5] on host: [  nan   inf  -inf 1e-07 3e+10]");
  // plain where the digits allow (10, not %g's one-digit "1e+01"), an exponent beyond them
  EXPECT_EQ(pl::Array::from_vector(std::vector<float>{10, 100, 1500, 250000, 1e6f, -0.0f}).str(),
            "f32[6] on host: [    10    100   1500 250000  1e+06     -0]");
  EXPECT_EQ(pl::Array::from_vector(std::vector<bool>{true, false}).str(), "bool[2] on host: [ True False]");
  EXPECT_EQ(pl::Array::scalar(UINT64_MAX).str(), "u64[] on host: 18446744073709551615");
  EXPECT_EQ(pl::Array::scalar(INT64_MIN).str(), "i64[] on host: -9223372036854775808");
}

// More than 64 elements: the first and last three of each long dimension, "..." between.
TEST(ArrayPrint, LargeArraysElideTheMiddleOfEachDimension) {
  EXPECT_EQ(iota_array({100}, pl::i32).str(), "i32[100] on host: [ 0  1  2 ... 97 98 99]");
  EXPECT_EQ(iota_array({10, 10}, pl::i32).str(),
            "i32[10,10] on host:\n"
            "[[ 0  1  2 ...  7  8  9]\n"
            " [10 11 12 ... 17 18 19]\n"
            " [20 21 22 ... 27 28 29]\n"
            " ...\n"
            " [70 71 72 ... 77 78 79]\n"
            " [80 81 82 ... 87 88 89]\n"
            " [90 91 92 ... 97 98 99]]");
  EXPECT_EQ(iota_array({3, 40}, pl::i32).str(2),
            "i32[3,40] on host:\n"
            "[[  0   1 ...  38  39]\n"
            " [ 40  41 ...  78  79]\n"
            " [ 80  81 ... 118 119]]");
  // 64 elements print whole, and so does anything with enough edge items
  EXPECT_EQ(iota_array({8, 8}, pl::i32).str().find("..."), std::string::npos);
  std::string all = iota_array({10, 10}, pl::i32).str(100);
  EXPECT_EQ(all.find("..."), std::string::npos);
  EXPECT_THAT(all, HasSubstr("[50 51 52 53 54 55 56 57 58 59]"));
}

TEST(ArrayPrint, DeviceArraysAreCopiedAndNamed) {
  if (!pl::cuda_available()) GTEST_SKIP() << "no usable CUDA device: device arrays cannot be made here";
  pl::Array a = pl::Array::from_vector(std::vector<float>{1, 2, 3}).to(pl::Device::cuda(0));
  EXPECT_EQ(a.str(), "f32[3] on cuda:0: [1 2 3]");
}

// ---- allclose ----

pl::Array f32s(std::vector<float> v, pl::Shape s) { return pl::Array::from_vector(v, std::move(s)); }

TEST(Allclose, DefaultTolerancesPerDtype) {
  EXPECT_EQ(plt::default_tolerance(pl::f16).rtol, 1e-3);
  EXPECT_EQ(plt::default_tolerance(pl::bf16).rtol, 1.6e-2);
  EXPECT_EQ(plt::default_tolerance(pl::f32).rtol, 1.3e-6);
  EXPECT_EQ(plt::default_tolerance(pl::f32).atol, 1e-5);
  EXPECT_EQ(plt::default_tolerance(pl::f64).atol, 1e-7);
  for (pl::DType t : {pl::i8, pl::i32, pl::u64, pl::bool_}) {
    EXPECT_EQ(plt::default_tolerance(t).rtol, 0.0);
    EXPECT_EQ(plt::default_tolerance(t).atol, 0.0);
  }
}

TEST(Allclose, MatchReportsTheLargestErrors) {
  pl::Array a = f32s({1, 2, 3, 4, 5, 6}, {2, 3});
  auto r = plt::allclose(a, a);
  EXPECT_TRUE(r) << r.report;
  EXPECT_EQ(r.report, "allclose: all 6 elements of f32[2,3] match (atol=1e-05, rtol=1.3e-06); max abs error 0, max rel error 0\n");
  // within 1e-5 + 1.3e-6 * 6: passes, and says by how much it differs
  auto near = plt::allclose(a, f32s({1, 2, 3, 4, 5, 6.00001f}, {2, 3}));
  EXPECT_TRUE(near) << near.report;
  EXPECT_EQ(near.mismatches, 0);
  EXPECT_EQ(near.max_abs_error, static_cast<double>(6.00001f) - 6.0);
  EXPECT_THAT(near.report, HasSubstr("max abs error 1e-05, max rel error 1.67e-06"));
}

TEST(Allclose, MismatchReportListsTheWorstElements) {
  auto r = plt::allclose(f32s({1, 2, 3, 4, 5, 6}, {2, 3}), f32s({1, 2, 0.5f, 4, 5, 16}, {2, 3}));
  EXPECT_FALSE(r);
  EXPECT_EQ(r.mismatches, 2);
  EXPECT_EQ(r.max_abs_error, 10.0);
  EXPECT_EQ(r.max_rel_error, 5.0);
  EXPECT_EQ(r.report,
            "allclose: 2 of 6 elements of f32[2,3] differ beyond atol + rtol * |expected| (atol=1e-05, rtol=1.3e-06)\n"
            "  max abs error 10 at [1, 2], max rel error 5 at [0, 2]\n"
            "  worst 2 elements:\n"
            "    index   actual  expected  abs error\n"
            "    [1, 2]  6       16        10\n"
            "    [0, 2]  3       0.5       2.5\n");
  // usable as a condition and a stream operand, as the header shows
  bool failed = false;
  if (!r) failed = true;
  EXPECT_TRUE(failed);
}

TEST(Allclose, AtMostFiveElementsListedWorstFirst) {
  std::vector<float> a(20, 0.f), e(20, 0.f);
  for (int k = 0; k < 10; ++k) a[static_cast<size_t>(2 * k)] = static_cast<float>(k + 1);
  auto r = plt::allclose(f32s(a, {4, 5}), f32s(e, {4, 5}));
  EXPECT_EQ(r.mismatches, 10);
  EXPECT_THAT(r.report, HasSubstr("10 of 20 elements of f32[4,5] differ"));
  EXPECT_THAT(r.report, HasSubstr("max rel error inf at [0, 0]"));  // expected 0: the first such element
  EXPECT_THAT(r.report, HasSubstr("worst 5 elements:\n    index   actual  expected  abs error\n    [3, 3]  10      0         10\n"
                                  "    [3, 1]  9       0         9\n"));
  EXPECT_THAT(r.report, ::testing::Not(HasSubstr("[1, 3]")));  // the sixth worst (value 5) is left out
}

TEST(Allclose, ToleranceIsAtolPlusRtolTimesExpected) {
  // f32 defaults at 100: 1e-5 + 1.3e-6 * 100 = 1.4e-4
  EXPECT_TRUE(plt::allclose(f32s({100.0001f}, {1}), f32s({100}, {1})));
  EXPECT_FALSE(plt::allclose(f32s({100.0002f}, {1}), f32s({100}, {1})));
  EXPECT_TRUE(plt::allclose(f32s({100.4f}, {1}), f32s({100}, {1}), {.rtol = 0, .atol = 0.5}));
  EXPECT_TRUE(plt::allclose(f32s({101}, {1}), f32s({100}, {1}), {.rtol = 0.01, .atol = 0}));
  EXPECT_FALSE(plt::allclose(f32s({101.01f}, {1}), f32s({100}, {1}), {.rtol = 0.01, .atol = 0}));
  EXPECT_TRUE(throws_error([] { plt::allclose(f32s({1}, {1}), f32s({1}, {1}), {.rtol = -1}); },
                           {"pl::testing::allclose", "rtol=-1", "must be >= 0"}));
}

TEST(Allclose, NaNAndInfinities) {
  auto x = f32s({NAN, 1, INFINITY}, {3});
  EXPECT_TRUE(plt::allclose(x, f32s({NAN, 1, INFINITY}, {3})));
  auto strict = plt::allclose(x, f32s({NAN, 1, INFINITY}, {3}), {.equal_nan = false});
  EXPECT_FALSE(strict);
  EXPECT_EQ(strict.mismatches, 1);
  EXPECT_THAT(strict.report, HasSubstr("    [0]    nan     nan       nan\n"));
  auto one_nan = plt::allclose(x, f32s({2, 1, INFINITY}, {3}));
  EXPECT_FALSE(one_nan);
  EXPECT_THAT(one_nan.report, HasSubstr("1 of 3 elements"));
  auto inf = plt::allclose(x, f32s({NAN, 1, -INFINITY}, {3}));
  EXPECT_FALSE(inf);
  EXPECT_THAT(inf.report, HasSubstr("max abs error inf at [2]"));
  EXPECT_FALSE(plt::allclose(f32s({INFINITY}, {1}), f32s({3e38f}, {1})));
}

TEST(Allclose, ShapesDtypesAndSizesStatedPlainly) {
  auto a = f32s({1, 2, 3, 4, 5, 6}, {2, 3});
  auto shapes = plt::allclose(a, f32s({1, 2, 3, 4, 5, 6}, {3, 2}));
  EXPECT_FALSE(shapes);
  EXPECT_EQ(shapes.report, "allclose: shapes differ: actual is f32[2,3], expected is f32[3,2]\n");
  auto dtypes = plt::allclose(a, a.astype(pl::f64));
  EXPECT_FALSE(dtypes);
  EXPECT_EQ(dtypes.report,
            "allclose: dtypes differ: actual is f32[2,3], expected is f64[2,3]; convert one (Array::astype) or pass "
            ".check_dtype = false to compare the values\n");
  EXPECT_TRUE(plt::allclose(a, a.astype(pl::f64), {.check_dtype = false}));
  auto sizes = plt::allclose(a, std::vector<float>{1, 2, 3});
  EXPECT_FALSE(sizes);
  EXPECT_EQ(sizes.report, "allclose: the expected values number 3 but actual f32[2,3] has 6 elements\n");
  auto empty = plt::allclose(pl::Array(), a);
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.report, "allclose: actual is an empty Array (never assigned)\n");
}

// A host reference of any element type, in the array's shape; tolerances of the array's dtype.
TEST(Allclose, VectorReferences) {
  pl::Array b = pl::Array::full({2, 2}, 0.1, pl::bf16);  // 0.10009765625
  EXPECT_TRUE(plt::allclose(b, std::vector<double>(4, 0.1)));  // within bf16's rtol 1.6e-2
  auto tight = plt::allclose(b, std::vector<double>(4, 0.1), {.rtol = 1e-6, .atol = 0});
  EXPECT_FALSE(tight);
  EXPECT_THAT(tight.report, HasSubstr("    [0, 0]  0.1     0.1       9.77e-05\n"));  // bf16 0.1 vs double 0.1
  EXPECT_TRUE(plt::allclose(f32s({1, 2}, {2}), std::vector<float>{1, 2}));
  EXPECT_TRUE(plt::allclose(pl::Array::from_vector(std::vector<bool>{true, false}), std::vector<bool>{true, false}));
  EXPECT_FALSE(plt::allclose(pl::Array::from_vector(std::vector<int32_t>{1, 2, 3}), std::vector<int>{1, 2, 4}));
}

// Integers compare exactly as 64-bit integers: a double would merge 2^53 and 2^53 + 1.
TEST(Allclose, IntegersExactlyBeyondDoublePrecision) {
  int64_t big = int64_t{1} << 53;
  auto r = plt::allclose(pl::Array::scalar(big + 1), pl::Array::scalar(big));
  EXPECT_FALSE(r);
  EXPECT_THAT(r.report, HasSubstr("    []     9007199254740993  9007199254740992  1\n"));
  EXPECT_FALSE(plt::allclose(pl::Array::scalar(UINT64_MAX), pl::Array::scalar(UINT64_MAX - 1)));
  EXPECT_TRUE(plt::allclose(pl::Array::scalar(UINT64_MAX), pl::Array::scalar(UINT64_MAX)));
  EXPECT_TRUE(plt::allclose(pl::Array::from_vector(std::vector<int32_t>{5, 7}), pl::Array::from_vector(std::vector<int32_t>{6, 7}),
                            {.atol = 1}));
}

// A kernel's output against a host reference, as the tutorials check theirs (on either backend).
TEST(Allclose, KernelOutputAgainstAReference) {
  pl::Array x = pl::random::normal({48, 24}, pl::f32, 3);
  auto call = pl::pallas_call([](pl::Ref xr, pl::Ref o) { o[pl::all] = pl::exp(xr[pl::all]); }, pl::ShapeDtype({48, 24}, pl::f32),
                              {.grid = {pl::cdiv(48, 16)},
                               .in_specs = {pl::BlockSpec({16, 24}, [](V i) { return pl::idx(i, 0); })},
                               .out_specs = {pl::BlockSpec({16, 24}, [](V i) { return pl::idx(i, 0); })},
                               .name = "exp_rows"});
  pl::Array y = call(x);
  std::vector<double> ref = x.to_vector<double>();
  for (double& v : ref) v = std::exp(v);
  auto r = plt::allclose(y, ref);
  EXPECT_TRUE(r) << r.report;
  ref[5 * 24 + 7] += 1.0;
  auto bad = plt::allclose(y, ref);
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.mismatches, 1);
  EXPECT_THAT(bad.report, HasSubstr("worst element:\n    index   actual"));
  EXPECT_THAT(bad.report, HasSubstr("[5, 7]"));
}

// True unless PALLAS_BACKEND=cuda asks for a GPU that is not here (the suite's own main
// exits 77 before that can happen in its gpu half).
TEST(Allclose, BackendAvailableFollowsPallasBackend) {
  const char* b = std::getenv("PALLAS_BACKEND");
  bool wants_gpu = b && (std::string(b) == "cuda" || std::string(b) == "gpu");
  EXPECT_EQ(plt::backend_available(), !wants_gpu || pl::cuda_available());
}

}  // namespace
}  // namespace pt
