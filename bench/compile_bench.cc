// First-call compile cost of the benchmarks' kernels (bench/user_kernels.h), on any machine with
// the CUDA toolkit: no GPU needed. For each kernel: the public path's cold compile
// (Call::compile_for: trace, lower, NVRTC to an sm_90a cubin), then, on the generated source,
// the lowering alone and NVRTC split into its front end (CUDA C++ -> PTX) and ptxas (the rest),
// medians of COMPILE_BENCH_REPS (default 3), with the source size and ptxas' registers.
// The front end is split again by NVRTC's own clock (--time): cxx_ms, parsing the C++ (the
// prelude included) into NVVM IR, and nvvm_ms, NVVM's optimiser and code generation to PTX
// (whole milliseconds). disk_hit_ms: a first call served by the disk cache (trace, lower, the
// entry read and checked; no NVRTC; loading it on a GPU is not included).
// Three reference rows come last: an empty kernel alone, after the prelude, and after the
// prelude and tma.cuh (what every generated kernel pays before its own code).
// Measured with our disk cache off (but for disk_hit_ms, in a private temporary directory). The
// nvrtc columns never hit NVRTC's own cache (see nvrtc_ms); the first compile does on a GPU
// machine where another process compiled the same kernel before, so run this one first there.
// COMPILE_BENCH_ONLY=substring[,substring...] keeps the kernels whose label contains one.
// COMPILE_BENCH_PARALLEL=T: instead, the selected kernels traced, then pl::compile_for(calls,
// "sm_90a", T) timed as a whole (cold, disk cache off); T = 1 is the sequential sum.
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <pallas/pallas.h>

#include "bench/user_kernels.h"
#include "src/backends/cuda/compile.h"
#include "src/backends/cuda/device/device_sources.inc"  // kTmaCuh
#include "src/backends/cuda/lower.h"
#include "src/core/pallas_call.h"

namespace {

namespace pl = pallas;

double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One NVRTC compile of src for arch with the library's options (and `extra`); returns its
// time, and its log in *log.
// Where a driver is installed, NVRTC 13 keeps what it compiled in a cache of its own, keyed by
// the preprocessed source (CUDA_CACHE_DISABLE does not turn it off, and a comment, removed by
// the preprocessor, does not miss it): each compile here gets a source no compile saw before,
// by a device variable of its own at the end.
double nvrtc_ms(const std::string& kernel_src, const std::string& arch, bool report, std::string* log,
                const std::vector<std::string>& extra = {}) {
  static int compiles = 0;
  const std::string src = kernel_src + "\n__device__ int compile_bench_nonce_" +
                          std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "_" + std::to_string(++compiles) + ";\n";
  pl::cuda::Target target = pl::cuda::target_from_env("compile_bench", arch);  // PALLAS_FAST_COMPILE applies here too
  target.lineinfo = false;
  std::vector<std::string> options = pl::cuda::nvrtc_options(target, report);
  options.insert(options.end(), extra.begin(), extra.end());
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  double t0 = now_ms();
  nvrtcProgram p;
  nvrtcCreateProgram(&p, src.c_str(), "k.cu", 0, nullptr, nullptr);
  nvrtcResult r = nvrtcCompileProgram(p, static_cast<int>(opts.size()), opts.data());
  double ms = now_ms() - t0;
  size_t n = 0;
  nvrtcGetProgramLogSize(p, &n);
  log->assign(n, '\0');
  if (n) nvrtcGetProgramLog(p, log->data());
  nvrtcDestroyProgram(&p);
  if (r != NVRTC_SUCCESS) throw pl::Error("NVRTC failed: " + log->substr(0, 400));
  return ms;
}

// A phase's milliseconds from NVRTC's --time=- table in a log ("k.cu, NVVM Optimizer, 19, ms").
double phase_ms(const std::string& log, const std::string& phase) {
  size_t p = log.find(", " + phase + ", ");
  return p == std::string::npos ? -1 : std::atof(log.c_str() + p + phase.size() + 4);
}

// The front end of src (to PTX), medians of reps: the whole, and NVRTC's C++ and NVVM phases.
struct FrontEnd {
  double ms = 0, cxx = 0, nvvm = 0;
};
FrontEnd front_end(const std::string& src, int reps) {
  std::vector<double> t, cxx, nvvm;
  std::string log;
  for (int r = 0; r < reps; ++r) {
    t.push_back(nvrtc_ms(src, "compute_90a", false, &log, {"--time=-"}));
    cxx.push_back(phase_ms(log, "CUDA C++ Frontend"));
    nvvm.push_back(phase_ms(log, "NVVM Optimizer"));
  }
  return {median(t), median(cxx), median(nvvm)};
}

// ptxas' "Used N registers" from a -v log (the kernel's entry; 0 if absent).
int registers(const std::string& log) {
  size_t p = log.find("Used ");
  return p == std::string::npos ? 0 : std::atoi(log.c_str() + p + 5);
}

bool selected(const std::string& label) {
  const char* only = std::getenv("COMPILE_BENCH_ONLY");
  if (!only || !*only) return true;
  std::string list = only;
  for (size_t b = 0; b <= list.size();) {
    size_t e = list.find(',', b);
    if (e == std::string::npos) e = list.size();
    if (e > b && label.find(list.substr(b, e - b)) != std::string::npos) return true;
    b = e + 1;
  }
  return false;
}

}  // namespace

int main() {
  setenv("PALLAS_NO_DISK_CACHE", "1", 1);

  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int reps = std::getenv("COMPILE_BENCH_REPS") ? std::max(1, std::atoi(std::getenv("COMPILE_BENCH_REPS"))) : 3;
  const std::string arch = "sm_90a";
  using bench::Epilogue;
  using bench::MatmulCase;
  struct Case {
    std::string label;
    std::function<pl::Call()> make;
    std::vector<pl::ShapeDtype> inputs;
  };
  const int64_t N28 = int64_t{1} << 28, N26 = int64_t{1} << 26;
  auto f32 = [](pl::Shape s) { return pl::ShapeDtype(s, pl::f32); };
  auto bf16 = [](pl::Shape s) { return pl::ShapeDtype(s, pl::bf16); };
  std::vector<Case> cases = {
      {"small_exp_1024", [] {
         auto spec = pl::BlockSpec({128}, [](pl::Value i) { return pl::idx(i); });
         return pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::exp(x[pl::all]) * 2.f; }, pl::ShapeDtype({1024}, pl::f32),
                                {.grid = {8}, .in_specs = {spec}, .out_specs = {spec}, .name = "first"});
       },
       {f32({1024})}},
      {"f32_add_block1024_w4", [=] { return bench::add(N28, 1024, 4); }, {f32({N28}), f32({N28})}},
      {"f32_add_block4096_w8", [=] { return bench::add(N28, 4096, 8); }, {f32({N28}), f32({N28})}},
      {"f32_softmax_16384x4096_w8", [] { return bench::softmax(16384, 4096, 8); }, {f32({16384, 4096})}},
      {"f32_layer_norm_16384x4096", [] { return bench::layer_norm(16384, 4096); }, {f32({16384, 4096})}},
      {"f32_gelu_mul_2^26", [=] { return bench::gelu_mul(N26, 4096); }, {f32({N26}), f32({N26})}},
      {"bf16_rms_norm_1row", [] { return bench::rms_norm(16384, 4096, 1); }, {bf16({16384, 4096}), bf16({1, 4096})}},
      {"bf16_rms_norm_8rows", [] { return bench::rms_norm(16384, 4096, 8); }, {bf16({16384, 4096}), bf16({1, 4096})}},
      {"f32_row_argmax_8rows", [] { return bench::row_argmax(16384, 4096, 8); }, {f32({16384, 4096})}},
      {"f32_column_sum_grid_axis", [] { return bench::column_sum(16384, 4096, 256, 32); }, {f32({16384, 4096})}},
  };
  for (const MatmulCase& mc : {MatmulCase{"bf16_matmul_bias_relu", pl::bf16, false, false, Epilogue::BiasRelu, 4096, 4096, 4096},
                               MatmulCase{"bf16_matmul_bias_relu", pl::bf16, false, false, Epilogue::BiasRelu, 4096, 4096, 4096, 256},
                               MatmulCase{"bf16_matmul_residual", pl::bf16, false, false, Epilogue::Residual, 4096, 4096, 4096},
                               MatmulCase{"bf16_x_wT", pl::bf16, false, true, Epilogue::None, 4096, 4096, 4096, 256},
                               MatmulCase{"bf16_aT_b", pl::bf16, true, false, Epilogue::None, 4096, 4096, 4096},
                               MatmulCase{"bf16_matmul_edge", pl::bf16, false, false, Epilogue::None, 4000, 4000, 4096},
                               MatmulCase{"f32_tf32_matmul", pl::f32, false, false, Epilogue::None, 4096, 4096, 4096},
                               MatmulCase{"i8_matmul", pl::i8, false, false, Epilogue::None, 4096, 4096, 4096},
                               MatmulCase{"i8_matmul", pl::i8, false, false, Epilogue::None, 4096, 4096, 4096, 256},
                               MatmulCase{"i8_matmul", pl::i8, false, false, Epilogue::None, 4096, 4096, 4096, 128, 128, 128},
                               MatmulCase{"i8_matmul", pl::i8, false, false, Epilogue::None, 4096, 4096, 4096, 256, 128, 128}})
  {
    std::vector<pl::ShapeDtype> in = {pl::ShapeDtype(mc.ta ? pl::Shape{mc.K, mc.M} : pl::Shape{mc.M, mc.K}, mc.t),
                                      pl::ShapeDtype(mc.tb ? pl::Shape{mc.N, mc.K} : pl::Shape{mc.K, mc.N}, mc.t)};
    if (mc.epi != Epilogue::None) in.push_back(pl::ShapeDtype(mc.epi == Epilogue::Residual ? pl::Shape{mc.M, mc.N} : pl::Shape{1, mc.N}, mc.t));
    cases.push_back({mc.label(), [mc] { return bench::matmul(mc); }, in});
  }
  cases.push_back({"bf16_batched_matmul_16x2048^3", [] { return bench::batched_matmul(16, 2048, 2048, 2048); },
                   {bf16({16, 2048, 2048}), bf16({16, 2048, 2048})}});
  for (bench::AttentionCase c : {bench::AttentionCase{8, 16, 2048, 64, 128, 64, 8}, bench::AttentionCase{4, 16, 4096, 128, 128, 64, 8},
                                 bench::AttentionCase{4, 16, 4096, 128, 128, 64, 8, true}, bench::AttentionCase{4, 16, 4096, 256, 64, 64, 4}})
    cases.push_back({c.label(), [c] { return bench::attention(c); }, {bf16({c.B, c.H, c.S, c.D}), bf16({c.B, c.H, c.S, c.D}), bf16({c.B, c.H, c.S, c.D})}});

  if (const char* par = std::getenv("COMPILE_BENCH_PARALLEL"); par && *par) {
    // Traced first (not timed), then compiled together: what pl::compile_for gives a program
    // that compiles its kernels ahead.
    const int threads = std::max(1, std::atoi(par));
    std::vector<pl::Call> calls;
    for (const Case& c : cases)
      if (selected(c.label)) calls.push_back(c.make()), calls.back().trace(c.inputs);
    double t0 = now_ms();
    pl::compile_for(calls, arch, threads);
    std::printf("kernels,threads,compile_for_ms\n%zu,%d,%.0f\n", calls.size(), threads, now_ms() - t0);
    return 0;
  }

  // The disk cache of disk_hit_ms: a private temporary directory (mkdtemp: the user's, 0700).
  std::string tmpl = "/tmp/compile_bench_cache_XXXXXX";
  if (!mkdtemp(tmpl.data())) throw pl::Error("compile_bench: could not make a temporary cache directory");
  const std::string disk_dir = tmpl;
  auto with_disk_cache = [&](const std::function<void()>& f) {
    unsetenv("PALLAS_NO_DISK_CACHE");
    setenv("PALLAS_CACHE_DIR", disk_dir.c_str(), 1);
    try {
      f();
    } catch (...) {
      setenv("PALLAS_NO_DISK_CACHE", "1", 1);
      throw;
    }
    setenv("PALLAS_NO_DISK_CACHE", "1", 1);
  };

  std::printf("kernel,first_compile_ms,lower_ms,nvrtc_ms,front_end_ms,ptxas_ms,cxx_ms,nvvm_ms,disk_hit_ms,source_kb,registers\n");
  for (const Case& c : cases) {
    if (!selected(c.label)) continue;
    try {
      double t0 = now_ms();
      pl::Call call = c.make();
      call.trace(c.inputs);
      call.compile_for(arch);  // the public path, cold: trace + lower + NVRTC (in-memory cache empty for this kernel)
      double first = now_ms() - t0;
      const pallas::core::PallasCall& traced = call.state()->get_traced();
      std::vector<double> lower_t, cubin_t, hit_t;
      std::string src, log;
      for (int r = 0; r < reps; ++r) {
        double l0 = now_ms();
        src = pl::cuda::lower(traced, arch).source;
        lower_t.push_back(now_ms() - l0);
      }
      for (int r = 0; r < reps; ++r) cubin_t.push_back(nvrtc_ms(src, arch, false, &log));
      FrontEnd fe = front_end(src, reps);
      nvrtc_ms(src, arch, true, &log);
      // A first call in a process whose disk cache holds the kernel: trace, lower, read the entry.
      with_disk_cache([&] {
        const pl::cuda::Target target = pl::cuda::target_from_env(traced.what, arch);
        pl::cuda::cubin_for(pl::cuda::lower(traced, target), target, traced.what);  // stores it
        for (int r = 0; r < reps; ++r) {
          double h0 = now_ms();
          pl::Call again = c.make();
          again.trace(c.inputs);
          const pallas::core::PallasCall& t = again.state()->get_traced();
          const pl::cuda::Target tt = pl::cuda::target_from_env(t.what, arch);
          pl::cuda::CompiledCubin hit = pl::cuda::cubin_for(pl::cuda::lower(t, tt), tt, t.what);
          hit_t.push_back(now_ms() - h0);
          if (!hit.from_disk) throw pl::Error("the disk cache did not serve " + c.label + " (entry " + hit.entry + ")");
        }
      });
      double cubin = median(cubin_t);
      std::printf("%s,%.0f,%.1f,%.0f,%.0f,%.0f,%.0f,%.0f,%.1f,%.1f,%d\n", c.label.c_str(), first, median(lower_t), cubin, fe.ms, cubin - fe.ms,
                  fe.cxx, fe.nvvm, median(hit_t), src.size() / 1024.0, registers(log));
    } catch (const std::exception& e) {
      std::printf("%s,error,%.200s\n", c.label.c_str(), e.what());
    }
  }
  // Last (the first kernel above pays NVRTC's start in this process, as a user's first call
  // does). What every kernel pays before its own code: NVRTC on an empty kernel, then after the prelude,
  // then after the prelude and tma.cuh (TMA kernels).
  const std::string empty = "extern \"C\" __global__ void k(float* o) { o[threadIdx.x] = 1.f; }\n";
  for (auto [label, src] : {std::pair<const char*, std::string>{"(empty kernel)", empty},
                            {"(prelude + empty kernel)", std::string(pl::cuda::prelude()) + empty},
                            {"(prelude + tma.cuh + empty kernel)", std::string(pl::cuda::prelude()) + kTmaCuh + empty}}) {
    std::string log;
    std::vector<double> cubin_t;
    for (int r = 0; r < std::max(reps, 5); ++r) cubin_t.push_back(nvrtc_ms(src, arch, false, &log));
    FrontEnd fe = front_end(src, std::max(reps, 5));
    double cubin = median(cubin_t);
    std::printf("%s,,,%.0f,%.0f,%.0f,%.0f,%.0f,,%.1f,\n", label, cubin, fe.ms, cubin - fe.ms, fe.cxx, fe.nvvm, src.size() / 1024.0);
  }
  std::error_code ec;
  std::filesystem::remove_all(disk_dir, ec);
  return 0;
}
