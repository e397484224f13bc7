#include "src/backends/cuda/compile.h"

#include <nvrtc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "src/backends/cuda/disk_cache.h"
#include "src/core/cache_dir.h"

namespace pallas::cuda {

namespace fs = std::filesystem;

std::string nvrtc_version() {
  int a = 0, b = 0;
  nvrtcVersion(&a, &b);
  return std::to_string(a) + "." + std::to_string(b);
}

namespace {

// Files kept on request (PALLAS_DUMP_DIR, PALLAS_DUMP_PASSES, debug): the directory is made
// where missing; a failed write leaves nothing behind (core::write_file_atomically).
void write_dump(const std::string& p, const std::string& data) {
  std::error_code ec;
  fs::create_directories(fs::path(p).parent_path(), ec);
  core::write_file_atomically(p, data);
}

std::string context(const std::string& src, int line) {
  std::istringstream in(src);
  std::string l, out;
  int n = 0;
  while (std::getline(in, l)) {
    ++n;
    if (n >= line - 4 && n <= line + 2) out += (n == line ? ">> " : "   ") + std::to_string(n) + ": " + l + "\n";
  }
  return out;
}

}  // namespace

// A kernel source's line (the #line directives the emitter writes before each located eqn)
// is found back in the generated code: the line after the last directive for that file at or
// above it, plus the difference.

std::string explain_nvrtc_error(const std::string& log, const std::string& src, const std::string& cu_name) {
  size_t p = log.find("): error");
  if (p == std::string::npos) p = log.find("error");
  size_t q = p == std::string::npos ? std::string::npos : log.rfind('(', p);
  int line = q == std::string::npos ? 0 : std::atoi(log.c_str() + q + 1);
  if (line <= 0) return "";
  size_t b = log.rfind('\n', q);
  std::string file = log.substr(b == std::string::npos ? 0 : b + 1, q - (b == std::string::npos ? 0 : b + 1));
  if (file.empty() || file == cu_name) return "\n" + context(src, line);
  std::istringstream in(src);
  std::string l, tag = "\"" + file + "\"";
  int n = 0, best_at = 0, best = 0;
  while (std::getline(in, l)) {
    ++n;
    size_t h = l.find("#line ");
    if (h == std::string::npos || l.find(tag) == std::string::npos) continue;
    int ld = std::atoi(l.c_str() + h + 6);
    if (ld <= line && ld > best) best = ld, best_at = n;
  }
  return best_at ? "\nin the code generated for " + file + ":" + std::to_string(line) + ":\n" + context(src, best_at + 1 + (line - best))
                 : "";
}

std::vector<std::string> nvrtc_options(const Target& target, bool ptxas_report) {
  const std::string& arch = target.arch;
  // -minimal leaves out what generated kernels never use (texture types, the device runtime's
  // API): the front end parses less, about 10 ms less a kernel.
  std::vector<std::string> o = {"--gpu-architecture=" + arch, "-std=c++17", "-default-device", "-minimal", "-diag-suppress=177,550"};
  if (target.lineinfo) o.push_back("-lineinfo");
  if (!target.fast_compile.empty()) o.push_back("--Ofast-compile=" + target.fast_compile);
  if (ptxas_report) o.push_back("--ptxas-options=-v");
  return o;
}

namespace {

void check(nvrtcResult r, const std::string& what) {
  if (r != NVRTC_SUCCESS) throw Error(what + ": " + nvrtcGetErrorString(r));
}

void dump(const Lowered& L, const std::string& ptx, const std::string& dir) {
  write_dump(dir + "/" + L.name + ".cu", L.source);
  if (!ptx.empty()) write_dump(dir + "/" + L.name + ".ptx", ptx);
}

}  // namespace

// The call's identity: its jaxpr objects (kept alive by the cache entry, so their addresses are
// never reused) and everything else of the call the code depends on, without printing the jaxprs.
std::string identity_key(const core::PallasCall& call) {
  std::string k = call.what + "|";
  auto ptr = [&](const ir::JaxprPtr& j) { k += std::to_string(reinterpret_cast<uintptr_t>(j.get())) + ","; };
  auto shape = [&](const Shape& s) {
    for (int64_t d : s) k += std::to_string(d) + "x";
    k += ";";
  };
  ptr(call.kernel);
  for (int64_t g : call.grid.grid) k += std::to_string(g) + "g";
  for (size_t a = 0; a < call.grid.semantics.size(); ++a) k += call.grid.sequential(a) ? 's' : 'p';
  for (auto& p : call.grid.prefetch) shape(p.shape), k += dtype_name(p.dtype);
  for (const auto* bs : {&call.grid.inputs, &call.grid.outputs})
    for (auto& b : *bs) {
      ptr(b.index_map);
      shape(b.array.shape);
      shape(b.block_shape);
      k += dtype_name(b.array.dtype);
      for (bool q : b.squeezed) k += q ? 'q' : '.';
      k += static_cast<char>('0' + static_cast<int>(b.space));
    }
  for (auto& s : call.grid.scratch) shape(s.shape), k += dtype_name(s.dtype);
  for (auto [i, o] : call.aliases) k += "a" + std::to_string(i) + ">" + std::to_string(o);
  return k;
}

std::string compile_params_key(const core::PallasCall& call, const Target& target) {
  const CompilerParams& cp = call.compiler_params;
  return "|warps " + std::to_string(cp.num_warps) + " stages " + std::to_string(cp.num_stages) + (call.debug ? " debug" : "") + " " +
         target.text();
}

namespace {

// NVRTC: the lowered kernel's cubin, or a pl::Error naming the kernel with NVRTC's log and the
// generated source around the error. With dump_dir, the source and PTX are kept there.
std::string nvrtc_compile(const Lowered& L, const Target& target, const std::string& what, const std::string& dump_dir) {
  nvrtcProgram prog;
  check(nvrtcCreateProgram(&prog, L.source.c_str(), (L.name + ".cu").c_str(), 0, nullptr, nullptr), what + ": NVRTC");
  struct Destroy {  // on every way out, a throwing check included
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&prog};
  // PALLAS_PTXAS_REPORT=1: ptxas' report of each kernel compiled (registers, spills, and
  // performance notes such as wgmma serialisation) on stderr. It does not change the cubin.
  bool report = std::getenv("PALLAS_PTXAS_REPORT") && std::string(std::getenv("PALLAS_PTXAS_REPORT")) != "0";
  std::vector<std::string> options = nvrtc_options(target, report);
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  std::string log(n, '\0');
  if (n) nvrtcGetProgramLog(prog, log.data());
  if (report && r == NVRTC_SUCCESS) std::fprintf(stderr, "%s (%s, %s):\n%s\n", L.name.c_str(), what.c_str(), target.arch.c_str(), log.c_str());
  if (r != NVRTC_SUCCESS) {
    if (!dump_dir.empty()) dump(L, "", dump_dir);
    throw Error(what + ": NVRTC failed to compile the generated CUDA kernel " + L.name + " for " + target.arch + ":\n" + log +
                explain_nvrtc_error(log, L.source, L.name + ".cu") + "(set PALLAS_DUMP_DIR to keep the generated source)");
  }
  size_t cn = 0;
  check(nvrtcGetCUBINSize(prog, &cn), what + ": NVRTC cubin");
  std::string cubin(cn, '\0');
  check(nvrtcGetCUBIN(prog, cubin.data()), what + ": NVRTC cubin");
  if (!dump_dir.empty()) {
    std::string ptx;
    size_t pn = 0;
    if (nvrtcGetPTXSize(prog, &pn) == NVRTC_SUCCESS && pn > 1) {
      ptx.resize(pn);
      nvrtcGetPTX(prog, ptx.data());
    }
    dump(L, ptx, dump_dir);
  }
  return cubin;
}

// The compiled kernels of this process. Two levels: the call's identity (cheap, asked by every
// interpreted call under PALLAS_CUDA_COMPILE_CHECK and every first run), then the full key: the
// call's text and compile_params_key (equal calls traced apart share one kernel). Both maps
// compare whole keys: a hit is never a hash that happened to match.
struct MemoryCache {
  struct ByIdentity {
    std::shared_ptr<const Compiled> compiled;
    std::vector<ir::JaxprPtr> keep_alive;
  };
  std::mutex mu;
  std::unordered_map<std::string, ByIdentity> by_identity;
  std::unordered_map<std::string, std::shared_ptr<const Compiled>> by_key;
};

MemoryCache& memory() {
  static MemoryCache m;
  return m;
}

}  // namespace

CompiledCubin cubin_for(const Lowered& L, const Target& target, const std::string& what, const std::string& dump_dir, bool read_disk) {
  CompiledCubin r;
  std::string dir = std::getenv("PALLAS_NO_DISK_CACHE") ? std::string() : core::private_cache_dir();
  std::string key;
  if (!dir.empty()) {
    key = cubin_key(L, target);
    r.entry = cubin_entry_path(dir, L, key);
  }
  // With a dump directory the kernel is compiled, so the PTX can be kept.
  if (!r.entry.empty() && dump_dir.empty() && read_disk) {
    std::string file, why;
    if (core::read_whole_file(r.entry, &file)) {
      if (decode_cubin_entry(file, key, &r.cubin, &why)) {
        r.from_disk = true;
        return r;
      }
      core::note_once("damaged " + r.entry, "pallas: not using the cache entry " + r.entry + ": " + why + "; compiling " + L.name + " again and replacing it");
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  r.cubin = nvrtc_compile(L, target, what, dump_dir);
  r.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!r.entry.empty()) {
    std::string why;
    if (!core::write_file_atomically(r.entry, encode_cubin_entry(key, r.cubin), &why))
      core::note_once("unwritable " + dir, "pallas: could not store a compiled kernel in the cache directory " + dir + " (" + why +
                                               "); kernels that cannot be stored are compiled again by later processes");
  }
  return r;
}

std::shared_ptr<const Compiled> compile_call(const core::PallasCall& call, const std::string& arch, bool tensor_maps, bool aligned) {
  MemoryCache& m = memory();
  // The switches are read here, once per request, and the passes see only this Target: the key
  // holds every one of them.
  const Target target = target_from_env(call.what, arch, tensor_maps, aligned);
  const std::string params = compile_params_key(call, target);
  std::string id_key = identity_key(call) + params;
  {
    std::lock_guard<std::mutex> g(m.mu);
    auto it = m.by_identity.find(id_key);
    if (it != m.by_identity.end()) return it->second.compiled;
  }
  MemoryCache::ByIdentity entry;
  entry.keep_alive.push_back(call.kernel);
  for (const auto* bs : {&call.grid.inputs, &call.grid.outputs})
    for (auto& b : *bs) entry.keep_alive.push_back(b.index_map);
  std::string key = call.text() + params;
  {
    std::lock_guard<std::mutex> g(m.mu);
    auto it = m.by_key.find(key);
    if (it != m.by_key.end()) {
      entry.compiled = it->second;
      m.by_identity[id_key] = entry;
      return it->second;
    }
  }
  auto c = std::make_shared<Compiled>();
  c->arch = arch;
  c->target = target;
  // Every kernel, the library's and the user's, takes the general lowering: none is recognised.
  c->lowered = lower(call, target);
  const Lowered& L = c->lowered;
  const char* dump_env = std::getenv("PALLAS_DUMP_DIR");
  std::string dump_dir = dump_env ? dump_env : call.debug ? core::private_cache_dir("dump") : "";
  CompiledCubin b = cubin_for(L, target, call.what, dump_dir);
  c->cubin = std::move(b.cubin);
  c->from_disk = b.from_disk;
  c->compile_ms = b.compile_ms;
  c->disk_entry = std::move(b.entry);
  std::lock_guard<std::mutex> g(m.mu);
  // Another thread may have compiled the same kernel meanwhile: keep the first, so every
  // caller shares one Compiled (and one loaded module).
  auto [it, inserted] = m.by_key.emplace(std::move(key), c);
  entry.compiled = it->second;
  m.by_identity[id_key] = entry;
  return it->second;
}

std::shared_ptr<const Compiled> recompile_refused(const std::shared_ptr<const Compiled>& refused, const std::string& what) {
  auto c = std::make_shared<Compiled>(*refused);
  // Compiled afresh (the entry on disk is what was refused), and the entry replaced.
  CompiledCubin b = cubin_for(c->lowered, c->target, what, "", /*read_disk=*/false);
  c->cubin = std::move(b.cubin);
  c->from_disk = false;
  c->compile_ms = b.compile_ms;
  c->disk_entry = std::move(b.entry);
  MemoryCache& m = memory();
  std::lock_guard<std::mutex> g(m.mu);
  // Later requests get the new one (a rare path: a walk over the maps is fine).
  for (auto& [k, v] : m.by_key)
    if (v == refused) v = c;
  for (auto& [k, e] : m.by_identity)
    if (e.compiled == refused) e.compiled = c;
  return c;
}

}  // namespace pallas::cuda
