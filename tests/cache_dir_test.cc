// The on-disk caches' directory (src/core/cache_dir.h): made private to the user, refused (with
// one note on stderr) when anyone else could write it, never /tmp's shared .cache; and writes
// that fail part-way leave nothing behind.
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "src/core/cache_dir.h"
#include "tests/temp_cache_dir.h"
#include "tests/test_util.h"

namespace {
namespace core = pallas::core;
namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string slurp(const std::string& p) {
  std::string s;
  EXPECT_TRUE(core::read_whole_file(p, &s)) << p;
  return s;
}

TEST(CacheDir, MadePrivateWhereMissing) {
  pt::TempCacheDir tmp;
  std::string root = tmp.dir + "/a/b";
  setenv("PALLAS_CACHE_DIR", (root + "/").c_str(), 1);
  EXPECT_EQ(core::cache_root(), root);
  EXPECT_EQ(core::private_cache_dir("autotune"), root + "/autotune");
  for (const std::string& d : {tmp.dir + "/a", root, root + "/autotune"}) EXPECT_EQ(pt::mode_of(d), 0700) << d;
}

// Files there run with the caller's rights (cubins in the caller's GPU context): a directory
// that group or others can write is not used, and stderr says so once, with the fix.
TEST(CacheDir, RefusedWhenOthersCanWrite) {
  pt::TempCacheDir tmp;
  EXPECT_EQ(core::unsafe_dir_reason(tmp.dir), "");
  EXPECT_EQ(core::private_cache_dir(), tmp.dir);
  for (mode_t m : {0777, 0770, 0722, 01777}) {
    SCOPED_TRACE(m);
    ASSERT_EQ(chmod(tmp.dir.c_str(), m), 0);
    EXPECT_THAT(core::unsafe_dir_reason(tmp.dir), HasSubstr("users other than its owner can write to it"));
  }
  ASSERT_EQ(chmod(tmp.dir.c_str(), 0777), 0);
  testing::internal::CaptureStderr();
  EXPECT_EQ(core::private_cache_dir("autotune"), "");
  EXPECT_EQ(core::private_cache_dir(), "");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("not using the cache directory " + tmp.dir + ": users other than its owner can write to it (mode 777)"));
  EXPECT_THAT(err, HasSubstr("chmod 700"));
  EXPECT_EQ(err.find("not using", err.find("not using") + 1), std::string::npos) << "said once: " << err;
  EXPECT_FALSE(fs::exists(tmp.dir + "/autotune"));  // nothing made inside it
  ASSERT_EQ(chmod(tmp.dir.c_str(), 0755), 0);  // readable by others is fine
  EXPECT_EQ(core::private_cache_dir(), tmp.dir);
  std::ofstream(tmp.dir + "/file") << "x";
  EXPECT_THAT(core::unsafe_dir_reason(tmp.dir + "/file"), HasSubstr("not a directory"));
  EXPECT_THAT(core::unsafe_dir_reason(tmp.dir + "/missing/x"), HasSubstr("cannot be used"));
}

// A symlink to the user's own directory is followed; one that someone else owns (who could
// point it elsewhere after the check) is not, nor a directory someone else owns. Changing
// owners takes root: as another user only the symlink of one's own is checked.
TEST(CacheDir, SymlinksAndOtherUsersDirectories) {
  pt::TempCacheDir tmp;
  fs::create_directory(tmp.dir + "/real");
  ASSERT_EQ(chmod((tmp.dir + "/real").c_str(), 0700), 0);
  fs::create_directory_symlink(tmp.dir + "/real", tmp.dir + "/link");
  EXPECT_EQ(core::unsafe_dir_reason(tmp.dir + "/link"), "");
  if (geteuid() != 0) return;
  const uid_t nobody = 65534;
  ASSERT_EQ(lchown((tmp.dir + "/link").c_str(), nobody, nobody), 0);
  EXPECT_THAT(core::unsafe_dir_reason(tmp.dir + "/link"), HasSubstr("a symlink owned by user 65534"));
  ASSERT_EQ(chown((tmp.dir + "/real").c_str(), nobody, nobody), 0);
  EXPECT_THAT(core::unsafe_dir_reason(tmp.dir + "/real"), HasSubstr("belongs to user 65534, not to this user"));
  setenv("PALLAS_CACHE_DIR", (tmp.dir + "/real").c_str(), 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(core::private_cache_dir(), "");
  EXPECT_THAT(testing::internal::GetCapturedStderr(), HasSubstr("belongs to user 65534"));
}

// Without HOME the default is the account's home (passwd), never a directory every user shares
// such as /tmp/.cache.
TEST(CacheDir, DefaultWithoutHomeIsNotShared) {
  pt::TempCacheDir tmp;
  unsetenv("PALLAS_CACHE_DIR");
  const char* h = std::getenv("HOME");
  const std::string home = h ? h : "";
  if (h) EXPECT_EQ(core::cache_root(), home + "/.cache/pallas-cpp");
  unsetenv("HOME");
  const std::string root = core::cache_root();
  if (!home.empty()) setenv("HOME", home.c_str(), 1);
  const passwd* pw = getpwuid(geteuid());
  std::string want = pw && pw->pw_dir && *pw->pw_dir ? std::string(pw->pw_dir) + "/.cache/pallas-cpp" : "/tmp/pallas-cpp-" + std::to_string(geteuid());
  EXPECT_EQ(root, want);
}

// A write that fails part-way (here the file-size limit, as a full disk would) is removed,
// never renamed over the file: the old file stays whole, and no temporary is left.
TEST(CacheDir, AFailedWriteIsNeverRenamedIntoPlace) {
  pt::TempCacheDir tmp;
  const std::string path = tmp.dir + "/entry";
  ASSERT_TRUE(core::write_file_atomically(path, "old and whole"));
  EXPECT_EQ(pt::mode_of(path), 0600);
  EXPECT_EQ(slurp(path), "old and whole");
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);  // the write then fails with EFBIG instead of killing the process
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string why;
  bool wrote = core::write_file_atomically(path, std::string(100000, 'x'), &why);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(wrote);
  EXPECT_THAT(why, HasSubstr("writing"));
  EXPECT_EQ(slurp(path), "old and whole");
  size_t files = 0;
  for (auto& e : fs::directory_iterator(tmp.dir)) {
    ++files;
    EXPECT_EQ(e.path().string(), path);
  }
  EXPECT_EQ(files, 1u);
  // and where the directory cannot be written at all
  EXPECT_FALSE(core::write_file_atomically(tmp.dir + "/missing/entry", "x", &why));
  EXPECT_THAT(why, HasSubstr("creating"));
}

}  // namespace
