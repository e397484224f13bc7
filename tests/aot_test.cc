// aot::generate (include/pallas/aot.h): the header it writes and its errors. The generated
// code itself runs in examples/aot (aot_demo, and aot_vs_jit on a GPU: JIT and AOT agree).
#include <pallas/aot.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/test_util.h"

namespace {
namespace pl = pallas;
using pt::throws_error;

std::string read(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

pl::Call add_call(int64_t n, bool alias = false, bool print = false) {
  auto spec = pl::BlockSpec({128}, [](pl::Value i) { return pl::idx(i); });
  pl::CallOptions o{.grid = {-1}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "aot_test_add"};
  if (alias) o.input_output_aliases = {{0, 0}};
  return pl::pallas_call(
      [print](pl::Ref x, pl::Ref y, pl::Ref out) {
        if (print) pl::debug_print("hello");
        out[pl::all] = x[pl::all] + y[pl::all];
      },
      pl::ShapeDtype({n}, pl::f32), o);
}

#ifdef PALLAS_TEST_HAVE_CUDA
TEST(Aot, WritesLaunchFunctionsWithEmbeddedCubins) {
  std::string h = ::testing::TempDir() + "/aot_test_kernels.h";
  pl::aot::generate({{"add", add_call(1000, true), {pl::ShapeDtype({1000}, pl::f32), pl::ShapeDtype({1000}, pl::f32)}}}, {"sm_90a", "sm_80"}, h, "mykernels");
  std::string t = read(h);
  EXPECT_THAT(t, ::testing::HasSubstr("namespace mykernels {"));
  // a dynamic grid bound is an int parameter, before the inputs and outputs
  EXPECT_THAT(t, ::testing::HasSubstr("inline CUresult add(CUstream stream, int bound0, const void* in0, const void* in1, void* out0)"));
  EXPECT_THAT(t, ::testing::HasSubstr("{\"sm_90a\", 9, 0, true, k_add_sm_90a"));
  EXPECT_THAT(t, ::testing::HasSubstr("{\"sm_80\", 8, 0, false, k_add_sm_80"));
  EXPECT_THAT(t, ::testing::HasSubstr("out0: f32[1000] (aliased to in0"));
  EXPECT_THAT(t, ::testing::HasSubstr("copy_if_distinct((CUdeviceptr)out0, (CUdeviceptr)in0, 4000u, stream)"));
  EXPECT_THAT(t, ::testing::HasSubstr("if ((long long)bound0 <= 0) return CUDA_SUCCESS;"));
  std::filesystem::remove(h);
}

TEST(Aot, RefusesWhatItCannotCompile) {
  std::string h = ::testing::TempDir() + "/aot_bad.h";
  std::vector<pl::ShapeDtype> in = {pl::ShapeDtype({256}, pl::f32), pl::ShapeDtype({256}, pl::f32)};
  EXPECT_TRUE(throws_error([&] { pl::aot::generate({{"p", add_call(256, false, true), in}}, {"sm_90a"}, h, "k"); },
                           {"aot entry 'p'", "debug_print"}));
  EXPECT_TRUE(throws_error([&] { pl::aot::generate({{"not a name", add_call(256), in}}, {"sm_90a"}, h, "k"); }, {"'not a name'", "not a C++ identifier"}));
  EXPECT_TRUE(throws_error([&] { pl::aot::generate({{"a", add_call(256), in}}, {"compute_90"}, h, "k"); }, {"'compute_90'", "sm_XY or sm_XYa"}));
  EXPECT_TRUE(throws_error([&] { pl::aot::generate({{"a", add_call(256), in}}, {}, h, "k"); }, {"no architecture"}));
  EXPECT_TRUE(throws_error([&] { pl::aot::generate({{"a", add_call(256), in}}, {"sm_90a"}, h, "9ns"); }, {"namespace '9ns'"}));
  // shapes the kernel cannot take: the trace error, naming the kernel
  EXPECT_TRUE(throws_error([&] { pl::aot::generate({{"a", add_call(256), {pl::ShapeDtype({256}, pl::f32)}}}, {"sm_90a"}, h, "k"); },
                           {"aot_test_add"}));
}

TEST(Aot, GeneratorMainParsesItsCommandLine) {
  std::string h = ::testing::TempDir() + "/aot_main.h";
  std::vector<pl::aot::Entry> e = {{"add", add_call(512), {pl::ShapeDtype({512}, pl::f32), pl::ShapeDtype({512}, pl::f32)}}};
  const char* ok[] = {"gen", "--out", h.c_str(), "--arch", "sm_80", "--namespace", "nsx"};
  EXPECT_EQ(pl::aot::generator_main(7, const_cast<char**>(ok), e), 0);
  EXPECT_THAT(read(h), ::testing::HasSubstr("namespace nsx {"));
  const char* bad[] = {"gen", "--out", h.c_str()};
  EXPECT_EQ(pl::aot::generator_main(3, const_cast<char**>(bad), e), 2);  // no --arch: usage
  const char* err[] = {"gen", "--out", h.c_str(), "--arch", "sm_9"};
  EXPECT_EQ(pl::aot::generator_main(5, const_cast<char**>(err), e), 1);
  std::filesystem::remove(h);
}
#else
TEST(Aot, NeedsTheCudaBackend) {
  EXPECT_TRUE(throws_error([] { pl::aot::generate({}, {"sm_90a"}, "x.h", "k"); }, {"no CUDA backend"}));
}
#endif

}  // namespace
