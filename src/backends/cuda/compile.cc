#include "src/backends/cuda/compile.h"

#include <nvrtc.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "pallas/error.h"
#include "src/ir/ir.h"

namespace pallas::cuda {

namespace fs = std::filesystem;

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

namespace {

const char* const kOptions[] = {"-std=c++17", "-default-device"};

std::string cache_dir() {
  if (const char* d = std::getenv("PALLAS_CACHE_DIR")) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME")) return std::string(x) + "/pallas";
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/pallas";
  return "";
}

// The lines of `source` around line `line` (1-based), numbered.
std::string excerpt(const std::string& source, int line) {
  std::istringstream in(source);
  std::string l, out;
  for (int n = 1; std::getline(in, l); ++n)
    if (n >= line - 3 && n <= line + 3) out += (n == line ? ">> " : "   ") + std::to_string(n) + ": " + l + "\n";
  return out;
}

std::string first_error_excerpt(const std::string& log, const std::string& source) {
  size_t p = log.find("): error");
  if (p == std::string::npos) return "";
  size_t open = log.rfind('(', p);
  if (open == std::string::npos) return "";
  int line = std::atoi(log.c_str() + open + 1);
  return line > 0 ? "\ngenerated source around line " + std::to_string(line) + ":\n" + excerpt(source, line) : "";
}

struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) nvrtcDestroyProgram(&p);
  }
};

std::string run_nvrtc(const std::string& source, const std::string& file, const std::string& arch, const std::string& what,
                      bool want_ptx, std::vector<char>* out) {
  Program prog;
  if (nvrtcCreateProgram(&prog.p, source.c_str(), file.c_str(), 0, nullptr, nullptr) != NVRTC_SUCCESS)
    throw Error(what + ": nvrtcCreateProgram failed");
  std::string arch_opt = "--gpu-architecture=" + (want_ptx ? "compute_" + arch.substr(3) : arch);
  std::vector<const char*> opts{arch_opt.c_str()};
  for (const char* o : kOptions) opts.push_back(o);
  nvrtcResult r = nvrtcCompileProgram(prog.p, static_cast<int>(opts.size()), opts.data());
  size_t n = 0;
  nvrtcGetProgramLogSize(prog.p, &n);
  std::string log(n, '\0');
  nvrtcGetProgramLog(prog.p, log.data());
  if (r != NVRTC_SUCCESS)
    throw Error(what + ": NVRTC could not compile the generated CUDA C++ for " + arch + ":\n" + log +
                first_error_excerpt(log, source));
  size_t size = 0;
  if (want_ptx) {
    nvrtcGetPTXSize(prog.p, &size);
    out->resize(size);
    nvrtcGetPTX(prog.p, out->data());
  } else {
    nvrtcGetCUBINSize(prog.p, &size);
    out->resize(size);
    nvrtcGetCUBIN(prog.p, out->data());
  }
  return log;
}

}  // namespace

std::shared_ptr<const Cubin> compile(const std::string& source, const std::string& entry, const std::string& arch,
                                     const std::string& what, bool debug) {
  static std::mutex mu;
  static std::unordered_map<uint64_t, std::shared_ptr<const Cubin>> memory;
  std::string key_text = source + "\n//" + arch + "|" + nvrtc_version();
  for (const char* o : kOptions) key_text += std::string("|") + o;
  uint64_t key = ir::hash_text(key_text);
  char hex[32];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key));
  const char* dump = std::getenv("PALLAS_DUMP_DIR");
  if (debug || dump) {
    std::string dir = dump ? dump : ".";
    std::error_code ec;
    fs::create_directories(dir, ec);
    std::ofstream(dir + "/" + entry + "_" + hex + ".cu") << source;
    std::vector<char> ptx;
    run_nvrtc(source, entry + ".cu", arch, what, true, &ptx);
    std::ofstream(dir + "/" + entry + "_" + hex + ".ptx") << std::string(ptx.data(), ptx.size() ? ptx.size() - 1 : 0);
    if (debug) std::printf("pallas: wrote %s/%s_%s.cu and .ptx\n", dir.c_str(), entry.c_str(), hex);
  }
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = memory.find(key);
    if (it != memory.end()) return it->second;
  }
  auto cubin = std::make_shared<Cubin>();
  cubin->arch = arch;
  std::string dir = cache_dir();
  std::string path = dir.empty() ? "" : dir + "/" + hex + ".cubin";
  if (!path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (in) cubin->image.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (cubin->image.empty()) {
    auto t0 = std::chrono::steady_clock::now();
    run_nvrtc(source, entry + ".cu", arch, what, false, &cubin->image);
    cubin->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!path.empty()) {  // write-then-rename: readers never see a partial file
      std::error_code ec;
      fs::create_directories(dir, ec);
      std::string tmp = path + ".tmp" + std::to_string(::getpid());
      {
        std::ofstream out(tmp, std::ios::binary);
        out.write(cubin->image.data(), static_cast<std::streamsize>(cubin->image.size()));
      }
      fs::rename(tmp, path, ec);
      if (ec) fs::remove(tmp, ec);
    }
  }
  std::lock_guard<std::mutex> g(mu);
  return memory.emplace(key, cubin).first->second;
}

}  // namespace pallas::cuda
