// The cubins of the disk cache: one file per compiled kernel, in core::private_cache_dir()
// (src/core/cache_dir.h), named NAME_HASH.pcubin, HASH a 64-bit FNV-1a of the key. The name is
// only where to look: a file is used only when it is whole and holds the very key asked for.
//
// An entry, all integers little-endian:
//   0  8 bytes  magic "PLCUBIN\0"
//   8  u32      format version (kCubinEntryVersion)
//  12  u32      0
//  16  u64      key length K
//  24  u64      cubin length N
//  32  u64      FNV-1a 64 of the cubin
//  40  K bytes  the key: everything the cubin is made from (NVRTC's version and options, the
//               generated source), compared in full with the key of the kernel asked for
//  40+K N bytes the cubin (an ELF image)
// A file of any other length, another magic, version or key, a cubin whose checksum differs or
// that is no ELF image is refused before the driver sees it; the kernel is then compiled again
// and the entry replaced. So is an entry the driver refuses to load (runner.cc).
#pragma once
#include <cstdint>
#include <string>

#include "src/backends/cuda/lower.h"

namespace pallas::cuda {

inline constexpr uint32_t kCubinEntryVersion = 1;

// The key of a lowered kernel's cubin for this target: NVRTC's version and options, then the source.
std::string cubin_key(const Lowered& L, const Target& target);
// Where the disk cache keeps that cubin in `dir`.
std::string cubin_entry_path(const std::string& dir, const Lowered& L, const std::string& key);

std::string encode_cubin_entry(const std::string& key, const std::string& cubin);
// The cubin of an entry made for `key`; false, with the reason in *why, for anything else.
bool decode_cubin_entry(const std::string& entry, const std::string& key, std::string* cubin, std::string* why);

}  // namespace pallas::cuda
