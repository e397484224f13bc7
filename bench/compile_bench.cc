// First-call compile cost of the benchmarks' kernels (bench/user_kernels.h), on any machine with
// the CUDA toolkit: no GPU needed. For each kernel: the public path's cold compile
// (Call::compile_for: trace, lower, NVRTC to an sm_90a cubin), then, on the generated source,
// the lowering alone and NVRTC split into its front end (CUDA C++ -> PTX) and ptxas (the rest),
// medians of COMPILE_BENCH_REPS (default 3), with the source size and ptxas' registers.
// Measured with our disk cache off. The
// nvrtc columns never hit NVRTC's own cache (see nvrtc_ms); the first compile does on a GPU
// machine where another process compiled the same kernel before, so run this one first there.
// COMPILE_BENCH_ONLY=substring[,substring...] keeps the kernels whose label contains one.
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <pallas/pallas.h>

#include "bench/user_kernels.h"
#include "src/backends/cuda/compile.h"
#include "src/backends/cuda/lower.h"
#include "src/core/pallas_call.h"

namespace {

namespace pl = pallas;

double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One NVRTC compile of src for arch; returns its time, and its log in *log.
// Where a driver is installed, NVRTC 13 keeps what it compiled in a cache of its own, keyed by
// the preprocessed source (CUDA_CACHE_DISABLE does not turn it off, and a comment, removed by
// the preprocessor, does not miss it): each compile here gets a source no compile saw before,
// by a device variable of its own at the end.
double nvrtc_ms(const std::string& kernel_src, const std::string& arch, bool report, std::string* log) {
  static int compiles = 0;
  const std::string src = kernel_src + "\n__device__ int compile_bench_nonce_" +
                          std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "_" + std::to_string(++compiles) + ";\n";
  std::vector<std::string> options = pl::cuda::nvrtc_options(arch, false, report);
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

  std::printf("kernel,first_compile_ms,lower_ms,nvrtc_ms,front_end_ms,ptxas_ms,source_kb,registers\n");
  for (const Case& c : cases) {
    if (!selected(c.label)) continue;
    try {
      double t0 = now_ms();
      pl::Call call = c.make();
      call.trace(c.inputs);
      call.compile_for(arch);  // the public path, cold: trace + lower + NVRTC (in-memory cache empty for this kernel)
      double first = now_ms() - t0;
      const pallas::core::PallasCall& traced = call.state()->get_traced();
      std::vector<double> lower_t, cubin_t, ptx_t;
      std::string src, log;
      for (int r = 0; r < reps; ++r) {
        double l0 = now_ms();
        src = pl::cuda::lower(traced, arch).source;
        lower_t.push_back(now_ms() - l0);
      }
      for (int r = 0; r < reps; ++r) cubin_t.push_back(nvrtc_ms(src, arch, false, &log));
      for (int r = 0; r < reps; ++r) ptx_t.push_back(nvrtc_ms(src, "compute_90a", false, &log));
      nvrtc_ms(src, arch, true, &log);
      double cubin = median(cubin_t), front = median(ptx_t);
      std::printf("%s,%.0f,%.1f,%.0f,%.0f,%.0f,%.1f,%d\n", c.label.c_str(), first, median(lower_t), cubin, front, cubin - front,
                  src.size() / 1024.0, registers(log));
    } catch (const std::exception& e) {
      std::printf("%s,error,%.200s\n", c.label.c_str(), e.what());
    }
  }
  return 0;
}
