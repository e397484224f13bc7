// Disk cache entries of cubins (disk_cache.h).
#include "src/backends/cuda/disk_cache.h"

#include <cstdio>
#include <cstring>

#include "src/backends/cuda/compile.h"

namespace pallas::cuda {

namespace {

constexpr char kMagic[8] = {'P', 'L', 'C', 'U', 'B', 'I', 'N', '\0'};
constexpr size_t kHeader = 40;

uint64_t fnv1a(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 1099511628211ull;
  }
  return h;
}

void put(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t get(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(s[at + static_cast<size_t>(i)])} << (8 * i);
  return v;
}

}  // namespace

std::string cubin_key(const Lowered& L, const Target& target) {
  std::string k = "pallas cubin|nvrtc " + nvrtc_version();
  for (const std::string& o : nvrtc_options(target, false)) k += "|" + o;
  return k + "\n" + L.source;
}

std::string cubin_entry_path(const std::string& dir, const Lowered& L, const std::string& key) {
  char hb[32];
  std::snprintf(hb, sizeof hb, "%016llx", static_cast<unsigned long long>(fnv1a(key.data(), key.size())));
  return dir + "/" + L.name.substr(0, 48) + "_" + hb + ".pcubin";
}

std::string encode_cubin_entry(const std::string& key, const std::string& cubin) {
  std::string e(kMagic, sizeof kMagic);
  put(e, kCubinEntryVersion, 4);
  put(e, 0, 4);
  put(e, key.size(), 8);
  put(e, cubin.size(), 8);
  put(e, fnv1a(cubin.data(), cubin.size()), 8);
  e.reserve(kHeader + key.size() + cubin.size());
  return e + key + cubin;
}

bool decode_cubin_entry(const std::string& entry, const std::string& key, std::string* cubin, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (entry.size() < kHeader) return no("shorter than an entry's header (" + std::to_string(entry.size()) + " bytes)");
  if (std::memcmp(entry.data(), kMagic, sizeof kMagic) != 0) return no("not a cubin entry of the disk cache");
  if (get(entry, 8, 4) != kCubinEntryVersion) return no("an entry of format " + std::to_string(get(entry, 8, 4)));
  const uint64_t k = get(entry, 16, 8), n = get(entry, 24, 8);
  // Compared before they are added: damaged lengths must not overflow into a plausible size.
  if (k > entry.size() || n > entry.size() || kHeader + k + n != entry.size())
    return no("its lengths (key " + std::to_string(k) + ", cubin " + std::to_string(n) + ") do not add up to its size (" +
              std::to_string(entry.size()) + " bytes): truncated or damaged");
  if (k != key.size() || entry.compare(kHeader, k, key) != 0) return no("an entry for another kernel (its key differs)");
  const char* c = entry.data() + kHeader + k;
  if (fnv1a(c, n) != get(entry, 32, 8)) return no("its cubin's checksum does not match: damaged");
  if (n < 4 || std::memcmp(c, "\x7f" "ELF", 4) != 0) return no("its cubin is not an ELF image");
  cubin->assign(c, n);
  return true;
}

}  // namespace pallas::cuda
