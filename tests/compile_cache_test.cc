// The CUDA backend's compile caches (src/backends/cuda/compile.h, disk_cache.h): every thing
// that changes a kernel's code is in its key (num_stages, debug, the environment's switches),
// a hit is the whole key, and a damaged disk entry (cut short, corrupt, another kernel's, one
// the driver refuses) is compiled again and replaced, never handed to the driver. No GPU
// needed: NVRTC compiles here, and the stub driver stands in for the driver's refusal.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <pallas/kernels.h>

#include "src/core/cache_dir.h"
#include "src/core/pallas_call.h"
#include "tests/temp_cache_dir.h"
#include "tests/test_util.h"
#ifdef PALLAS_TEST_HAVE_CUDA
#include "src/backends/cuda/compile.h"
#include "src/backends/cuda/disk_cache.h"
#include "src/backends/cuda/driver.h"
#endif

#ifdef PALLAS_TEST_HAVE_CUDA
namespace {
namespace pl = pallas;
namespace cu = pallas::cuda;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

const pl::ShapeDtype kVec({1024}, pl::f32);

pl::BlockSpec row(int64_t b) { return pl::BlockSpec({b}, [](pl::Value i) { return pl::idx(i); }); }

// A small kernel with a check (compiled in only with debug), traced.
pl::Call small(const std::string& name, bool debug = false, pl::Backend backend = pl::Backend::Auto) {
  pl::Call k = pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::Value v = x[pl::all];
        pl::check(v == v, "a NaN");
        o[pl::all] = v * 3.f - 1.f;
      },
      kVec, {.grid = {4}, .in_specs = {row(256)}, .out_specs = {row(256)}, .debug = debug, .name = name, .backend = backend});
  k.trace({kVec});
  return k;
}

const pallas::core::PallasCall& traced(const pl::Call& k) { return k.state()->get_traced(); }

std::string slurp(const std::string& p) {
  std::string s;
  EXPECT_TRUE(pallas::core::read_whole_file(p, &s)) << p;
  return s;
}

void overwrite(const std::string& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << data;
}

// One kernel (same name, same body) at num_stages 2 and 4: two kernels, each lowered with its
// own stages (the loop pipeline's plan says so), not the first one twice.
TEST(CompileCache, StagesAreInTheKey) {
  auto mm = [](int stages) {
    pl::Call k = pl::kernels::matmul(256, 256, 256, pl::bf16, pl::f32,
                                     {.block_m = 64, .block_n = 64, .block_k = 32, .compiler_params = {.num_warps = 4, .num_stages = stages}});
    pl::ShapeDtype a({256, 256}, pl::bf16);
    k.trace({a, a});
    return k;
  };
  pl::Call two = mm(2), four = mm(4);
  EXPECT_EQ(traced(two).text(), traced(four).text());  // the calls differ only in their params
  auto c2 = cu::compile_call(traced(two), "sm_90a"), c4 = cu::compile_call(traced(four), "sm_90a");
  EXPECT_NE(c2.get(), c4.get());
  EXPECT_THAT(c2->lowered.section("loop-plans"), HasSubstr("loop: 2 stages"));
  EXPECT_THAT(c4->lowered.section("loop-plans"), HasSubstr("loop: 4 stages"));
  EXPECT_NE(c2->lowered.source, c4->lowered.source);
  EXPECT_NE(c2->cubin, c4->cubin);
  // each is found again by its own key
  EXPECT_EQ(cu::compile_call(traced(mm(2)), "sm_90a").get(), c2.get());
  EXPECT_EQ(cu::compile_call(traced(mm(4)), "sm_90a").get(), c4.get());
}

// debug (checks compiled in) and each environment switch a pass reads give their own kernels.
TEST(CompileCache, DebugAndSwitchesAreInTheKey) {
  auto plain = cu::compile_call(traced(small("keyed")), "sm_90a");
  testing::internal::CaptureStdout();  // debug prints the IR
  auto debug = cu::compile_call(traced(small("keyed", true)), "sm_90a");
  testing::internal::GetCapturedStdout();
  EXPECT_NE(plain.get(), debug.get());
  EXPECT_FALSE(plain->lowered.has_check);
  EXPECT_TRUE(debug->lowered.has_check);
  setenv("PALLAS_CUDA_VECTOR_WIDTH", "1", 1);
  auto scalar = cu::compile_call(traced(small("keyed")), "sm_90a");
  unsetenv("PALLAS_CUDA_VECTOR_WIDTH");
  EXPECT_NE(scalar.get(), plain.get());
  EXPECT_THAT(plain->lowered.section("blocked-layout"), HasSubstr("runs of 4 element(s)"));
  EXPECT_THAT(scalar->lowered.section("blocked-layout"), HasSubstr("runs of 1 element(s)"));
  EXPECT_EQ(cu::compile_call(traced(small("keyed")), "sm_90a").get(), plain.get());
  // every switch is in the target's text, so in the keys
  cu::Target t;
  std::string base = t.text();
  for (auto set : {+[](cu::Target& x) { x.no_tma = true; }, +[](cu::Target& x) { x.vector_width = 2; },
                   +[](cu::Target& x) { x.no_rotation = true; }, +[](cu::Target& x) { x.pingpong = true; },
                   +[](cu::Target& x) { x.lineinfo = true; }, +[](cu::Target& x) { x.aligned = false; },
                   +[](cu::Target& x) { x.tensor_maps = false; }, +[](cu::Target& x) { x.arch = "sm_80"; }}) {
    cu::Target u;
    set(u);
    EXPECT_NE(u.text(), base);
  }
  setenv("PALLAS_CUDA_VECTOR_WIDTH", "3", 1);
  EXPECT_TRUE(pt::throws_error([] { cu::compile_call(traced(small("bad_width")), "sm_90a"); },
                               {"kernel 'bad_width'", "PALLAS_CUDA_VECTOR_WIDTH must be 1, 2, 4, 8 or 16 (got '3')"}));
  unsetenv("PALLAS_CUDA_VECTOR_WIDTH");
}

// The disk half of compile_call on one lowered kernel: compiled and stored, then read back.
struct DiskCase {
  pt::TempCacheDir dir;
  pl::Call k;
  cu::Target target;
  cu::Lowered L;
  cu::CompiledCubin first;
  explicit DiskCase(const std::string& name) : k(small(name)) {
    target = cu::target_from_env(traced(k).what, "sm_90a");
    L = cu::lower(traced(k), target);
    first = cu::cubin_for(L, target, traced(k).what);
  }
  cu::CompiledCubin again() { return cu::cubin_for(L, target, traced(k).what); }
};

TEST(CompileCache, EntriesAreStoredWholeAndReadBack) {
  DiskCase c("disk_roundtrip");
  EXPECT_FALSE(c.first.from_disk);
  ASSERT_EQ(c.first.entry.rfind(c.dir.dir + "/pallas_disk_roundtrip_", 0), 0u) << c.first.entry;
  EXPECT_EQ(pt::mode_of(c.first.entry), 0600);
  EXPECT_EQ(slurp(c.first.entry), cu::encode_cubin_entry(cu::cubin_key(c.L, c.target), c.first.cubin));
  cu::CompiledCubin b = c.again();
  EXPECT_TRUE(b.from_disk);
  EXPECT_EQ(b.cubin, c.first.cubin);
  // the entry holds the whole key: the same file name with another key inside is not a hit
  std::string cubin, why;
  std::string entry = slurp(c.first.entry);
  EXPECT_TRUE(cu::decode_cubin_entry(entry, cu::cubin_key(c.L, c.target), &cubin, &why)) << why;
  EXPECT_FALSE(cu::decode_cubin_entry(entry, cu::cubin_key(c.L, c.target) + " ", &cubin, &why));
  EXPECT_EQ(why, "an entry for another kernel (its key differs)");
}

// Every cached cubin cut to half its length (a crash mid-copy, a full disk under an older
// writer): detected before the driver sees it, compiled again, the entry replaced.
TEST(CompileCache, ATruncatedEntryIsRecompiledAndReplaced) {
  DiskCase c("disk_truncated");
  const std::string whole = slurp(c.first.entry);
  for (size_t keep : {whole.size() / 2, whole.size() - 1, size_t{20}, size_t{0}}) {
    SCOPED_TRACE(keep);
    fs::resize_file(c.first.entry, keep);
    testing::internal::CaptureStderr();
    cu::CompiledCubin b = c.again();
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(b.from_disk);
    EXPECT_EQ(b.cubin, c.first.cubin);
    EXPECT_EQ(slurp(c.first.entry), whole);  // replaced by a whole entry
    EXPECT_TRUE(c.again().from_disk);
    if (keep == whole.size() / 2) EXPECT_THAT(err, HasSubstr("not using the cache entry " + c.first.entry + ": its lengths"));
  }
}

// A corrupt entry: a flipped bit in the cubin (the checksum), in the key, in the header's
// lengths; a file of another format; another kernel's entry under this name; a cubin whose
// checksum holds but that is no ELF image. Each is compiled again and replaced.
TEST(CompileCache, ACorruptEntryIsRecompiledAndReplaced) {
  DiskCase c("disk_corrupt");
  const std::string whole = slurp(c.first.entry);
  const std::string key = cu::cubin_key(c.L, c.target);
  auto flipped = [&](size_t at) {
    std::string s = whole;
    s[at] = static_cast<char>(s[at] ^ 0x10);
    return s;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {flipped(whole.size() - c.first.cubin.size() / 2), "checksum does not match"},
      {flipped(40 + key.size() / 2), "its key differs"},
      {flipped(24), "do not add up"},
      {flipped(17 + 8 - 1), "do not add up"},  // the key length's top byte: no overflow into a plausible size
      {flipped(0), "not a cubin entry"},
      {flipped(8), "an entry of format"},
      {c.first.cubin, "not a cubin entry"},  // a bare cubin (no header)
      {cu::encode_cubin_entry(key + "another kernel", c.first.cubin), "its key differs"},
      {cu::encode_cubin_entry(key, std::string(64, 'x')), "not an ELF image"},
  };
  for (auto& [bad, why] : cases) {
    SCOPED_TRACE(why);
    overwrite(c.first.entry, bad);
    std::string cubin, reason;
    EXPECT_FALSE(cu::decode_cubin_entry(bad, key, &cubin, &reason));
    EXPECT_THAT(reason, HasSubstr(why));
    cu::CompiledCubin b = c.again();
    EXPECT_FALSE(b.from_disk);
    EXPECT_EQ(b.cubin, c.first.cubin);
    EXPECT_EQ(slurp(c.first.entry), whole);
  }
}

// A store that fails part-way (the file-size limit here, a full disk elsewhere) leaves no
// entry and no temporary: the kernel is still compiled, and stored by a later compile.
TEST(CompileCache, AFailedStoreLeavesNoEntry) {
  pt::TempCacheDir dir;
  pl::Call k = small("disk_full");
  cu::Target t = cu::target_from_env(traced(k).what, "sm_90a");
  cu::Lowered L = cu::lower(traced(k), t);
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails (EFBIG) instead of killing
  struct rlimit small_files = old;
  small_files.rlim_cur = 8192;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small_files), 0);
  testing::internal::CaptureStderr();
  cu::CompiledCubin b = cu::cubin_for(L, t, traced(k).what);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(b.cubin.empty());
  EXPECT_FALSE(fs::exists(b.entry));
  EXPECT_TRUE(fs::is_empty(dir.dir)) << "a temporary was left";
  EXPECT_THAT(err, HasSubstr("could not store a compiled kernel in the cache directory " + dir.dir));
  cu::CompiledCubin later = cu::cubin_for(L, t, traced(k).what);
  EXPECT_FALSE(later.from_disk);
  EXPECT_GT(fs::file_size(later.entry), 8192u);  // the limit was what stopped it
  EXPECT_TRUE(cu::cubin_for(L, t, traced(k).what).from_disk);
}

// A cache directory others can write is neither read (its cubins would run in the caller's
// GPU context) nor written; the call still compiles, and stderr says why once.
TEST(CompileCache, AWorldWritableDirectoryIsNotUsed) {
  pt::TempCacheDir dir;
  pl::Call k = small("shared_dir");
  cu::Target t = cu::target_from_env(traced(k).what, "sm_90a");
  cu::Lowered L = cu::lower(traced(k), t);
  const std::string key = cu::cubin_key(L, t), path = cu::cubin_entry_path(dir.dir, L, key);
  // a well-formed entry someone planted where the kernel's would go
  std::string planted = std::string("\x7f") + "ELF" + std::string(60, '\x01');
  overwrite(path, cu::encode_cubin_entry(key, planted));
  ASSERT_EQ(chmod(dir.dir.c_str(), 0777), 0);
  testing::internal::CaptureStderr();
  cu::CompiledCubin b = cu::cubin_for(L, t, traced(k).what);
  auto c = cu::compile_call(traced(k), "sm_90a");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(b.from_disk);
  EXPECT_EQ(b.entry, "");
  EXPECT_NE(b.cubin, planted);
  EXPECT_FALSE(c->from_disk);
  EXPECT_EQ(c->cubin, b.cubin);
  EXPECT_THAT(err, HasSubstr("not using the cache directory " + dir.dir));
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir.dir)) {
    ++files;
    EXPECT_EQ(e.path().string(), path);
  }
  EXPECT_EQ(files, 1u) << "nothing written there";
  // debug's dump goes under the cache directory too: not into this one
  testing::internal::CaptureStdout();
  cu::compile_call(traced(small("shared_dir", true)), "sm_90a");
  testing::internal::GetCapturedStdout();
  EXPECT_FALSE(fs::exists(dir.dir + "/dump"));
}

// Where the disk cache keeps a traced call's cubin for sm_90a (the kernel lowered again here).
std::string entry_of(const pl::Call& k, const std::string& dir) {
  cu::Target t = cu::target_from_env(traced(k).what, "sm_90a");
  cu::Lowered L = cu::lower(traced(k), t);
  return cu::cubin_entry_path(dir, L, cu::cubin_key(L, t));
}

// pl::compile_for(calls, arch, threads): every call compiled (its entry on disk before anything
// else asks for it), a call listed twice once, and later requests served from memory.
TEST(CompileCache, SeveralCallsCompileAtOnce) {
  pt::TempCacheDir dir;
  testing::internal::CaptureStdout();  // debug prints the IR
  pl::Call a = small("batch_a"), b = small("batch_b", true);
  pl::Call mm = pl::kernels::matmul(128, 128, 128, pl::bf16, pl::f32, {.block_m = 64, .block_n = 64, .block_k = 32});
  pl::ShapeDtype m({128, 128}, pl::bf16);
  mm.trace({m, m});
  std::vector<std::string> entries = {entry_of(a, dir.dir), entry_of(b, dir.dir), entry_of(mm, dir.dir)};
  for (const std::string& e : entries) EXPECT_FALSE(fs::exists(e)) << e;  // nothing compiled them yet
  pl::compile_for({a, b, mm, a}, "sm_90a", 3);
  testing::internal::GetCapturedStdout();
  for (const std::string& e : entries) ASSERT_FALSE(e.empty());
  for (const std::string& e : entries) EXPECT_TRUE(fs::exists(e)) << e;
  size_t files = 0;
  for (auto& f : fs::directory_iterator(dir.dir)) files += f.path().extension() == ".pcubin";
  EXPECT_EQ(files, 3u);  // `a` twice in the list, compiled once
  // the memory cache has them: the same kernel, compiled by NVRTC in this process
  auto ca = cu::compile_call(traced(a), "sm_90a");
  EXPECT_FALSE(ca->from_disk);
  EXPECT_GT(ca->compile_ms, 0);
  EXPECT_EQ(ca->disk_entry, entries[0]);
  EXPECT_TRUE(cu::compile_call(traced(b), "sm_90a")->lowered.has_check);
  EXPECT_TRUE(pt::throws_error([&] { pl::compile_for({a}, "sm_90a", -1); }, {"num_threads is -1"}));
  pl::compile_for({}, "sm_90a");  // nothing to do
}

// A call that fails does not stop the others; the first failure in the list is thrown, with
// how many others failed.
TEST(CompileCache, SeveralCallsReportTheFirstFailure) {
  pt::TempCacheDir dir;
  auto untraced = [](const std::string& name) {
    return pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all]; }, kVec, {.name = name});
  };
  pl::Call ok = small("batch_after_failure");
  EXPECT_TRUE(pt::throws_error([&] { pl::compile_for({untraced("never_traced"), ok}, "sm_90a", 2); },
                               {"kernel 'never_traced'", "has not been traced yet"}));
  EXPECT_TRUE(fs::exists(entry_of(ok, dir.dir)));  // compiled although listed after the failure
  EXPECT_TRUE(pt::throws_error([&] { pl::compile_for({ok, untraced("first_bad"), untraced("second_bad")}, "sm_90a"); },
                               {"kernel 'first_bad'", "has not been traced yet", "1 other of the 3 calls failed too"}));
}

}  // namespace

// Under the stub driver (ctest -R stub.CacheRefusedCubin), whose cuModuleLoadData refuses what
// is not a CUDA ELF image as the driver does: an entry that passes every check of the disk
// cache but that the driver refuses is compiled again and replaced, and the call runs.
TEST(CacheStubDriver, ACachedCubinTheDriverRefusesIsRecompiled) {
  if (!std::getenv("STUB_CUDA_DEVICES")) GTEST_SKIP() << "runs under the stub driver only (ctest -R stub.CacheRefusedCubin)";
  ASSERT_TRUE(pl::cuda_available());
  pt::TempCacheDir dir;
  pl::Call k = small("refused_by_driver", false, pl::Backend::Cuda);
  cu::Target t = cu::target_from_env(traced(k).what, cu::driver().arch);
  cu::Lowered L = cu::lower(traced(k), t);
  const std::string key = cu::cubin_key(L, t), path = cu::cubin_entry_path(dir.dir, L, key);
  const std::string refused = std::string("\x7f") + "ELF" + std::string(60, '\0');  // an ELF header of no machine
  overwrite(path, cu::encode_cubin_entry(key, refused));
  pl::Array out = k(pl::Array::full({1024}, 1, pl::f32));
  EXPECT_EQ(out.device(), pl::Device::cuda(0));
  std::string cubin, why;
  ASSERT_TRUE(cu::decode_cubin_entry(slurp(path), key, &cubin, &why)) << why;
  EXPECT_NE(cubin, refused);
  ASSERT_GT(cubin.size(), 20u);
  EXPECT_EQ((static_cast<unsigned char>(cubin[18]) | static_cast<unsigned char>(cubin[19]) << 8), 190) << "EM_CUDA";
  // later calls of the kernel (traced again) use the new one
  EXPECT_EQ(small("refused_by_driver", false, pl::Backend::Cuda)(pl::Array::full({1024}, 1, pl::f32)).device(), pl::Device::cuda(0));
}
#endif
