// A fresh PALLAS_CACHE_DIR for one test (made by mkdtemp: the user's, mode 0700), restored and
// removed afterwards; and the messages the library prints on stderr meanwhile.
#pragma once
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace pt {

struct TempCacheDir {
  std::string old, dir;
  bool had_old = false;
  explicit TempCacheDir(const char* prefix = "pallas_cache") {
    if (const char* o = std::getenv("PALLAS_CACHE_DIR")) old = o, had_old = true;
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/" + prefix + "_XXXXXX";
    dir = mkdtemp(tmpl.data());
    setenv("PALLAS_CACHE_DIR", dir.c_str(), 1);
  }
  ~TempCacheDir() {
    if (had_old) setenv("PALLAS_CACHE_DIR", old.c_str(), 1);
    else unsetenv("PALLAS_CACHE_DIR");
    std::error_code ec;
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);  // a test may have locked it
    std::filesystem::remove_all(dir, ec);
  }
  TempCacheDir(const TempCacheDir&) = delete;
  TempCacheDir& operator=(const TempCacheDir&) = delete;
};

// The permission bits of a path (-1 when it does not exist).
inline int mode_of(const std::string& path) {
  struct stat s;
  return ::stat(path.c_str(), &s) == 0 ? static_cast<int>(s.st_mode & 07777) : -1;
}

}  // namespace pt
