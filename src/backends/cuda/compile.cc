#include "src/backends/cuda/compile.h"

#include <nvrtc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>
#include <unistd.h>

namespace pallas::cuda {

namespace fs = std::filesystem;

std::string nvrtc_version() {
  int a = 0, b = 0;
  nvrtcVersion(&a, &b);
  return std::to_string(a) + "." + std::to_string(b);
}

namespace {

std::string cache_dir() {
  if (const char* d = std::getenv("PALLAS_CACHE_DIR")) return d;
  const char* h = std::getenv("HOME");
  return std::string(h ? h : "/tmp") + "/.cache/pallas-cpp";
}

bool read_file(const std::string& p, std::string* out) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  std::ostringstream s;
  s << f.rdbuf();
  *out = s.str();
  return !out->empty();
}

// Written to a unique temporary then renamed, so concurrent processes never see half files.
void write_file(const std::string& p, const std::string& data) {
  std::error_code ec;
  fs::create_directories(fs::path(p).parent_path(), ec);
  // unique per process and thread: two threads compiling the same kernel write one file each
  std::string tmp = p + ".tmp" + std::to_string(::getpid()) + "_" + std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()) & 0xffffff);
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return;
    f << data;
  }
  fs::rename(tmp, p, ec);
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

std::vector<std::string> nvrtc_options(const std::string& arch, bool lineinfo, bool ptxas_report) {
  // -minimal leaves out what generated kernels never use (texture types, the device runtime's
  // API): the front end parses less, about 10 ms less a kernel.
  std::vector<std::string> o = {"--gpu-architecture=" + arch, "-std=c++17", "-default-device", "-minimal", "-diag-suppress=177,550"};
  if (lineinfo) o.push_back("-lineinfo");
  if (ptxas_report) o.push_back("--ptxas-options=-v");
  return o;
}

namespace {

void check(nvrtcResult r, const std::string& what) {
  if (r != NVRTC_SUCCESS) throw Error(what + ": " + nvrtcGetErrorString(r));
}

void dump(const Lowered& L, const std::string& ptx, const std::string& dir) {
  write_file(dir + "/" + L.name + ".cu", L.source);
  if (!ptx.empty()) write_file(dir + "/" + L.name + ".ptx", ptx);
}

}  // namespace

std::string identity_key(const core::PallasCall& call) {
  std::string k;
  auto ptr = [&](const ir::JaxprPtr& j) { k += std::to_string(reinterpret_cast<uintptr_t>(j.get())) + ","; };
  auto shape = [&](const Shape& s) {
    for (int64_t d : s) k += std::to_string(d) + "x";
    k += ";";
  };
  ptr(call.kernel);
  for (int64_t g : call.grid.grid) k += std::to_string(g) + "g";
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
  k += call.debug ? "d" : "";
  return k;
}

std::shared_ptr<const Compiled> compile_call(const core::PallasCall& call, const std::string& arch, bool tensor_maps, bool aligned) {
  // Two levels: the call's identity (cheap on every call: the jaxpr objects, kept alive by the
  // entry so their addresses are never reused, and everything else the code depends on), then
  // its structural hash (equal calls traced apart share one kernel).
  struct ByIdentity {
    std::shared_ptr<const Compiled> compiled;
    std::vector<ir::JaxprPtr> keep_alive;
  };
  static std::mutex mu;
  static std::unordered_map<std::string, ByIdentity> by_identity;
  static std::unordered_map<std::string, std::shared_ptr<const Compiled>> mem;
  std::string tail = "/" + std::to_string(call.compiler_params.num_warps) + "/" + arch + (tensor_maps ? "" : "/no-tma") + (aligned ? "" : "/unaligned");
  std::string id_key = identity_key(call) + tail;
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = by_identity.find(id_key);
    if (it != by_identity.end()) return it->second.compiled;
  }
  ByIdentity entry;
  entry.keep_alive.push_back(call.kernel);
  for (const auto* bs : {&call.grid.inputs, &call.grid.outputs})
    for (auto& b : *bs) entry.keep_alive.push_back(b.index_map);
  std::string key = std::to_string(call.hash()) + tail;
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = mem.find(key);
    if (it != mem.end()) {
      entry.compiled = it->second;
      by_identity[id_key] = entry;
      return it->second;
    }
  }
  auto c = std::make_shared<Compiled>();
  c->arch = arch;
  // Every kernel, the library's and the user's, takes the general lowering: none is recognised.
  c->lowered = lower(call, arch, tensor_maps, aligned);
  const Lowered& L = c->lowered;
  // PALLAS_DUMP_PASSES=dir: each pass's plan of each kernel, one file per pass.
  if (const char* passes = std::getenv("PALLAS_DUMP_PASSES"); passes && *passes && !L.layout_text.empty())
    write_file(std::string(passes) + "/" + L.name + ".layout.txt", L.layout_text);
  if (const char* passes = std::getenv("PALLAS_DUMP_PASSES"); passes && *passes && !L.values_text.empty())
    write_file(std::string(passes) + "/" + L.name + ".values.txt", L.values_text);
  if (const char* passes = std::getenv("PALLAS_DUMP_PASSES"); passes && *passes && !L.dots_text.empty())
    write_file(std::string(passes) + "/" + L.name + ".dots.txt", L.dots_text);
  if (const char* passes = std::getenv("PALLAS_DUMP_PASSES"); passes && *passes && !L.grid_text.empty())
    write_file(std::string(passes) + "/" + L.name + ".grid.txt", L.grid_text);
  const char* dump_env = std::getenv("PALLAS_DUMP_DIR");
  std::string dump_dir = dump_env ? dump_env : call.debug ? cache_dir() + "/dump" : "";
  // The line table (-lineinfo) maps the cubin's instructions to the #line places of the kernel
  // source, for profilers' source views: with PALLAS_LINEINFO=1, or when a profiler injects
  // itself (Nsight Compute and Systems set CUDA_INJECTION64_PATH); PALLAS_LINEINFO=0 never.
  // It costs NVRTC about a tenth more time.
  const char* li = std::getenv("PALLAS_LINEINFO");
  bool lineinfo = li ? std::string(li) != "0" : std::getenv("CUDA_INJECTION64_PATH") != nullptr;
  // The cubin is named by everything that makes it: the source, NVRTC's version and options.
  std::string made_by = L.source + "|" + nvrtc_version();
  for (const std::string& o : nvrtc_options(arch, lineinfo, false)) made_by += "|" + o;
  char hb[32];
  std::snprintf(hb, sizeof hb, "%016llx", static_cast<unsigned long long>(ir::hash_text(made_by)));
  std::string disk = cache_dir() + "/" + L.name.substr(0, 48) + "_" + hb + ".cubin";
  bool no_disk = std::getenv("PALLAS_NO_DISK_CACHE") != nullptr;
  if (!no_disk && dump_dir.empty() && read_file(disk, &c->cubin)) {
    c->from_disk = true;
  } else {
    auto t0 = std::chrono::steady_clock::now();
    nvrtcProgram prog;
    check(nvrtcCreateProgram(&prog, L.source.c_str(), (L.name + ".cu").c_str(), 0, nullptr, nullptr), call.what + ": NVRTC");
    // PALLAS_PTXAS_REPORT=1: ptxas' report of each kernel compiled (registers, spills, and
    // performance notes such as wgmma serialisation) on stderr.
    bool report = std::getenv("PALLAS_PTXAS_REPORT") && std::string(std::getenv("PALLAS_PTXAS_REPORT")) != "0";
    std::vector<std::string> options = nvrtc_options(arch, lineinfo, report);
    std::vector<const char*> opts;
    for (const std::string& o : options) opts.push_back(o.c_str());
    nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    if (n) nvrtcGetProgramLog(prog, log.data());
    if (report && r == NVRTC_SUCCESS) std::fprintf(stderr, "%s (%s, %s):\n%s\n", L.name.c_str(), call.what.c_str(), arch.c_str(), log.c_str());
    if (r != NVRTC_SUCCESS) {
      nvrtcDestroyProgram(&prog);
      if (!dump_dir.empty()) dump(L, "", dump_dir);
      throw Error(call.what + ": NVRTC failed to compile the generated CUDA kernel " + L.name + " for " + arch + ":\n" + log +
                  explain_nvrtc_error(log, L.source, L.name + ".cu") + "(set PALLAS_DUMP_DIR to keep the generated source)");
    }
    size_t cn = 0;
    check(nvrtcGetCUBINSize(prog, &cn), call.what + ": NVRTC cubin");
    c->cubin.resize(cn);
    check(nvrtcGetCUBIN(prog, c->cubin.data()), call.what + ": NVRTC cubin");
    if (!dump_dir.empty()) {
      std::string ptx;
      size_t pn = 0;
      if (nvrtcGetPTXSize(prog, &pn) == NVRTC_SUCCESS && pn > 1) {
        ptx.resize(pn);
        nvrtcGetPTX(prog, ptx.data());
      }
      dump(L, ptx, dump_dir);
    }
    nvrtcDestroyProgram(&prog);
    c->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!no_disk) write_file(disk, c->cubin);
  }
  std::lock_guard<std::mutex> g(mu);
  // Another thread may have compiled the same kernel meanwhile: keep the first, so every
  // caller shares one Compiled (and one loaded module).
  auto [it, inserted] = mem.emplace(key, c);
  entry.compiled = it->second;
  by_identity[id_key] = entry;
  return it->second;
}

}  // namespace pallas::cuda
