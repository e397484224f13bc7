// The on-disk caches' directory and atomic writes (cache_dir.h).
#include "src/core/cache_dir.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

namespace pallas::core {

namespace {

std::string home_dir() {
  if (const char* h = std::getenv("HOME"); h && *h) return h;
  // No HOME (a service, a container's init): the account's home, not a directory of all users.
  struct passwd pw, *found = nullptr;
  char buf[4096];
  if (getpwuid_r(geteuid(), &pw, buf, sizeof buf, &found) == 0 && found && found->pw_dir && *found->pw_dir) return found->pw_dir;
  return "";
}

std::string without_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// mkdir -p, each directory it makes private to the user (an existing one is left as it is).
void make_private_dirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at)
    if (at == dir.size() || dir[at] == '/') ::mkdir(dir.substr(0, at).c_str(), 0700);
}

bool trusted_owner(uid_t u) { return u == geteuid() || u == 0; }

std::string mode_text(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%03o", static_cast<unsigned>(m & 0777));
  return b;
}

}  // namespace

std::string cache_root() {
  if (const char* d = std::getenv("PALLAS_CACHE_DIR"); d && *d) return without_trailing_slashes(d);
  std::string home = home_dir();
  if (!home.empty()) return without_trailing_slashes(home) + "/.cache/pallas-cpp";
  return "/tmp/pallas-cpp-" + std::to_string(geteuid());
}

std::string unsafe_dir_reason(const std::string& path) {
  const std::string dir = without_trailing_slashes(path);
  struct stat l;
  if (::lstat(dir.c_str(), &l) != 0) return std::string("it cannot be used (") + std::strerror(errno) + ")";
  // A symlink someone else owns can be pointed elsewhere after it is checked.
  if (S_ISLNK(l.st_mode) && !trusted_owner(l.st_uid)) return "it is a symlink owned by user " + std::to_string(l.st_uid);
  struct stat s;
  if (::stat(dir.c_str(), &s) != 0) return std::string("it cannot be used (") + std::strerror(errno) + ")";
  if (!S_ISDIR(s.st_mode)) return "it is not a directory";
  if (!trusted_owner(s.st_uid)) return "it belongs to user " + std::to_string(s.st_uid) + ", not to this user (" + std::to_string(geteuid()) + ")";
  if (s.st_mode & (S_IWGRP | S_IWOTH)) return "users other than its owner can write to it (mode " + mode_text(s.st_mode) + ")";
  return "";
}

void note_once(const std::string& key, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> g(mu);
  if (said.insert(key).second) std::fprintf(stderr, "%s\n", message.c_str());
}

std::string private_cache_dir(const std::string& sub) {
  const std::string root = cache_root();
  auto usable = [&](const std::string& dir) {
    std::string why = unsafe_dir_reason(dir);
    if (why.empty()) return true;
    note_once("unsafe dir " + dir, "pallas: not using the cache directory " + dir + ": " + why +
                                       "; compiled kernels and autotuning choices are kept in memory only. Make it a directory of "
                                       "your own that only you can write (chmod 700), or set PALLAS_CACHE_DIR to one "
                                       "(PALLAS_NO_DISK_CACHE=1 turns the disk cache off).");
    return false;
  };
  make_private_dirs(root);
  if (!usable(root)) return "";
  if (sub.empty()) return root;
  // Made only inside a usable root: nothing is created where others could write.
  const std::string dir = root + "/" + sub;
  ::mkdir(dir.c_str(), 0700);
  return usable(dir) ? dir : "";
}

bool write_file_atomically(const std::string& path, const std::string& data, std::string* why) {
  static std::atomic<unsigned long long> counter{0};
  // Unique per process and write: two threads (or processes) storing one file each write their own.
  const std::string tmp = path + ".tmp" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1));
  auto fail = [&](const char* step, int fd) {
    int e = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    if (why) *why = std::string(step) + " " + tmp + ": " + std::strerror(e);
    return false;
  };
  // O_EXCL | O_NOFOLLOW: never through a file or link someone put there first.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return fail("creating", -1);
  for (size_t done = 0; done < data.size();) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return fail("writing", fd);
    }
    done += static_cast<size_t>(n);
  }
  // close reports a write the file system could not complete (NFS, quotas).
  if (::close(fd) != 0) return fail("closing", -1);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("renaming", -1);
  return true;
}

bool read_whole_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) return false;
  *out = s.str();
  return true;
}

}  // namespace pallas::core
