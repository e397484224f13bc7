// pl::autotune (include/pallas/autotune.h): the fastest candidate is chosen, remembered in
// memory and on disk per device and shapes, failing candidates are reported, errors are
// clear. Timed on whichever backend runs the calls (the interpreter without a GPU).
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

#include <pallas/kernels.h>

#include "tests/temp_cache_dir.h"
#include "tests/test_util.h"

namespace {
namespace pl = pallas;
using pt::throws_error;

// A fresh PALLAS_CACHE_DIR for one test (the disk cache must start empty).
using TempCacheDir = pt::TempCacheDir;

// o = x + 1, after `work` rounds of throw-away exp (the slow candidates), in blocks of `bs`.
pl::Call plus_one(const pl::Config& c, const std::vector<pl::ShapeDtype>& in) {
  int64_t n = in.at(0).shape.at(0), bs = c.get("bs"), work = c.get("work");
  auto spec = pl::BlockSpec({bs}, [](pl::Value i) { return pl::idx(i); });
  return pl::pallas_call(
      [work](pl::Ref x, pl::Ref o) {
        pl::Value v = x[pl::all];
        pl::Value junk = pl::fori_loop(0, int(work), v, [](pl::Value, pl::Value a) { return pl::exp(a) * 0.f; });
        o[pl::all] = v + 1.f + junk * 0.f;
      },
      pl::ShapeDtype({n}, pl::f32), {.grid = {(n + bs - 1) / bs}, .in_specs = {spec}, .out_specs = {spec}, .name = "plus_one"});
}

std::vector<pl::Config> space() {
  return {pl::Config{{{"bs", 256}, {"work", 2000}}}, pl::Config{{{"bs", 512}, {"work", 0}}}, pl::Config{{{"bs", 128}, {"work", 2000}}}};
}

TEST(Autotune, PicksTheFastestAndRemembersIt) {
  TempCacheDir tmp;
  pl::Autotuned k = pl::autotune(plus_one, space(), {.name = "plus_one", .bench = {.warmup = 1, .reps = 3}});
  pl::Array x = pl::random::normal({4096}, pl::f32, 1);
  pl::TuningReport r = k.tune({x});
  EXPECT_FALSE(r.from_cache);
  EXPECT_EQ(r.best.str(), "bs=512 work=0");
  ASSERT_EQ(r.timings_ms.size(), 3u);
  EXPECT_TRUE(r.rejected.empty());
  std::vector<float> xs = x.to_vector<float>(), got = k(x).to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(got[i], xs[i] + 1.f);
  // in memory: the same report, no new timing
  EXPECT_EQ(k.tune({x}).timings_ms.size(), 3u);
  // on disk: a new tuner of the same kernel recalls the choice without timing
  pl::Autotuned again = pl::autotune(plus_one, space(), {.name = "plus_one"});
  pl::TuningReport r2 = again.tune({x});
  EXPECT_TRUE(r2.from_cache);
  EXPECT_TRUE(r2.timings_ms.empty());
  EXPECT_EQ(r2.best.str(), "bs=512 work=0");
  // other shapes are tuned on their own
  pl::TuningReport r3 = again.tune({pl::random::normal({1000}, pl::f32, 2)});
  EXPECT_FALSE(r3.from_cache);
  EXPECT_EQ(r3.timings_ms.size(), 3u);
}

// The choice on disk picks the code that runs: a cache directory others can write is neither
// read nor written (the kernel is tuned in memory), and a file cut short is ignored and replaced.
TEST(Autotune, DiskChoicesOnlyFromAPrivateDirectoryAndWhole) {
  pl::Array x = pl::random::normal({4096}, pl::f32, 1);
  const pl::AutotuneOptions opts{.name = "plus_one_disk", .bench = {.warmup = 0, .reps = 1}};
  {
    TempCacheDir tmp;
    ASSERT_EQ(chmod(tmp.dir.c_str(), 0777), 0);
    testing::internal::CaptureStderr();
    pl::TuningReport r = pl::autotune(plus_one, space(), opts).tune({x});
    pl::TuningReport again = pl::autotune(plus_one, space(), opts).tune({x});
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(r.from_cache);
    EXPECT_FALSE(again.from_cache);  // nothing was kept there
    EXPECT_FALSE(std::filesystem::exists(tmp.dir + "/autotune"));
    EXPECT_THAT(err, ::testing::HasSubstr("not using the cache directory " + tmp.dir));
    EXPECT_THAT(err, ::testing::HasSubstr("mode 777"));
  }
  TempCacheDir tmp;
  EXPECT_FALSE(pl::autotune(plus_one, space(), opts).tune({x}).from_cache);
  EXPECT_EQ(pt::mode_of(tmp.dir + "/autotune"), 0700);
  std::vector<std::filesystem::path> files;
  for (auto& e : std::filesystem::directory_iterator(tmp.dir + "/autotune")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(pt::mode_of(files[0].string()), 0600);
  std::filesystem::resize_file(files[0], std::filesystem::file_size(files[0]) / 2);
  EXPECT_FALSE(pl::autotune(plus_one, space(), opts).tune({x}).from_cache);  // cut: tuned again
  pl::TuningReport r = pl::autotune(plus_one, space(), opts).tune({x});       // and stored whole
  EXPECT_TRUE(r.from_cache);
  EXPECT_EQ(r.best.str(), "bs=512 work=0");
}

TEST(Autotune, FailingCandidatesAreReportedAndSkipped) {
  TempCacheDir tmp;
  std::vector<pl::Config> sp = space();
  sp.push_back(pl::Config{{{"bs", 64}}});  // no "work": the factory throws
  pl::Autotuned k = pl::autotune(plus_one, sp, {.name = "plus_one_bad", .bench = {.warmup = 0, .reps = 2}, .disk_cache = false});
  pl::TuningReport r = k.tune({pl::random::normal({2048}, pl::f32, 1)});
  EXPECT_EQ(r.best.str(), "bs=512 work=0");
  ASSERT_EQ(r.rejected.size(), 1u);
  EXPECT_EQ(r.rejected[0].first.str(), "bs=64");
  EXPECT_THAT(r.rejected[0].second, ::testing::HasSubstr("has no parameter 'work'"));
}

TEST(Autotune, ErrorsNameTheTunerAndEachFailure) {
  auto bad = [](const pl::Config& c, const std::vector<pl::ShapeDtype>&) -> pl::Call { throw pl::Error("no kernel for " + c.str()); };
  pl::Autotuned k = pl::autotune(bad, {pl::Config{{{"a", 1}}}, pl::Config{{{"a", 2}}}}, {.name = "broken", .disk_cache = false});
  EXPECT_TRUE(throws_error([&] { k(pl::random::normal({8}, pl::f32, 1)); },
                           {"autotune 'broken'", "every configuration failed", "f32[8]", "{a=1}: no kernel for a=1", "{a=2}: no kernel for a=2"}));
  EXPECT_TRUE(throws_error([] { pl::autotune(plus_one, {}, {.name = "empty"}); }, {"autotune 'empty'", "configuration space is empty"}));
  EXPECT_TRUE(throws_error([] { pl::autotune(nullptr, space()); }, {"no kernel factory"}));
  EXPECT_TRUE(throws_error([] { pl::Config{{{"x", 1}}}.get("y"); }, {"{x=1}", "no parameter 'y'"}));
}

}  // namespace

namespace {
// The kernel library tunes its matmul: a result equal to the reference whatever it picks.
TEST(Autotune, LibraryMatmulIsTuned) {
  TempCacheDir tmp;
  std::vector<pl::Config> sp = {pl::Config{{{"block_m", 32}, {"block_n", 32}, {"block_k", 32}, {"num_warps", 4}, {"num_stages", 2}}},
                                pl::Config{{{"block_m", 64}, {"block_n", 64}, {"block_k", 64}, {"num_warps", 4}, {"num_stages", 3}}}};
  pl::Autotuned mm = pl::kernels::tuned_matmul(pl::f32, sp);
  pl::Array a = pl::random::normal({96, 64}, pl::f32, 1), b = pl::random::normal({64, 80}, pl::f32, 2);
  pl::TuningReport r = mm.tune({a, b});
  EXPECT_EQ(r.timings_ms.size(), 2u);
  std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>(), c = mm(a, b).to_vector<float>();
  for (int i = 0; i < 96; i += 7)
    for (int j = 0; j < 80; j += 5) {
      double s = 0;
      for (int q = 0; q < 64; ++q) s += double(av[i * 64 + q]) * bv[q * 80 + j];
      ASSERT_NEAR(c[i * 80 + j], s, 1e-2 * (1 + std::fabs(s)));  // tf32 dots on the GPU
    }
}
}  // namespace
