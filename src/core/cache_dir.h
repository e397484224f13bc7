// The directory of the on-disk caches (PALLAS_CACHE_DIR) and how files get into it.
//
// What is read from there runs with the caller's rights: a cached cubin is loaded into the
// caller's GPU context (it reads and writes the caller's device memory), and a cached autotuning
// choice picks which code runs. So a directory that someone else can write is never used, for
// reading or writing: it must be the user's (or root's), writable by no one else, and a symlink
// to it must be the user's (or root's) too. Directories the library creates are mode 0700. An
// unusable directory is not an error: the caches work in memory only, and stderr says so once
// per directory (with the fix), whether the directory came from PALLAS_CACHE_DIR or the default.
// The directories above it are not checked (a home directory's parents are root's).
#pragma once
#include <string>

namespace pallas::core {

// PALLAS_CACHE_DIR; else $HOME/.cache/pallas-cpp; else the user's home (passwd) likewise; else
// /tmp/pallas-cpp-<uid> (never a directory shared by every user, such as /tmp/.cache).
std::string cache_root();

// cache_root()/sub (sub "" = the root itself), made where missing (mode 0700), when the root and
// it are safe to use; else "" after a note on stderr, once per directory.
std::string private_cache_dir(const std::string& sub = "");

// Why a directory may not hold a cache ("" when it may): missing, not a directory, someone
// else's, writable by group or others, or a symlink that is someone else's.
std::string unsafe_dir_reason(const std::string& dir);

// Writes data to path through a new temporary file in the same directory, renamed over path
// only once every byte is written and the file closed without error: a reader never sees a
// half-written file, and a failed write (a full disk, a file-size limit) leaves nothing behind.
// False (with the reason in *why) when nothing was written.
bool write_file_atomically(const std::string& path, const std::string& data, std::string* why = nullptr);

// The whole file; false when it is missing or cannot be read.
bool read_whole_file(const std::string& path, std::string* out);

// Prints `message` on stderr the first time this process passes `key`.
void note_once(const std::string& key, const std::string& message);

}  // namespace pallas::core
