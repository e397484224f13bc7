// The CUDA BackendRunner: compile (cached), load the module, move inputs to the device,
// allocate outputs (aliases copied from their inputs), launch one CUDA block per program.
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "src/backends/cuda/compile.h"
#include "src/backends/cuda/driver.h"
#include "src/core/backend_registry.h"
#include "src/runtime/buffer.h"

namespace pallas::cuda {

namespace {

struct Loaded {
  CUfunction fn = nullptr;
};

CUfunction load(const std::shared_ptr<const Compiled>& c, const std::string& what) {
  static std::mutex mu;
  static std::unordered_map<const Compiled*, Loaded> loaded;
  std::lock_guard<std::mutex> g(mu);
  auto it = loaded.find(c.get());
  if (it != loaded.end()) return it->second.fn;
  const Driver& d = driver();
  make_current(0);
  CUmodule m;
  check(d.cuModuleLoadData(&m, c->cubin.data()), what + ": loading the cubin of " + c->lowered.name);
  CUfunction f;
  check(d.cuModuleGetFunction(&f, m, c->lowered.name.c_str()), what + ": finding " + c->lowered.name);
  size_t smem = c->lowered.smem_bytes;
  if (smem > static_cast<size_t>(d.max_smem_optin))
    throw Error(what + ": the kernel needs " + std::to_string(smem) + " bytes of shared memory (scratch + exchanges) but the device allows " +
                std::to_string(d.max_smem_optin) + "; use smaller blocks");
  if (smem > 48 * 1024) check(d.cuFuncSetAttribute(f, 8, static_cast<int>(smem)), what + ": raising the shared-memory limit");
  loaded[c.get()] = {f};
  return f;
}

uint32_t poison_word(DType t) {
  switch (t) {
    case DType::F32: return 0x7fc00000u;
    case DType::I32: return 0x80000000u;
    case DType::U32: return 0xffffffffu;
    default: return 0;
  }
}

struct CudaRunner final : core::BackendRunner {
  bool available() const override { return !std::getenv("PALLAS_NO_CUDA") && driver().ok; }
  std::string why_unavailable() const override {
    return std::getenv("PALLAS_NO_CUDA") ? "PALLAS_NO_CUDA is set" : driver().why;
  }
  void compile_check(const core::PallasCall& call) const override {
    compile_call(call, call.compiler_params.arch.empty() ? "sm_90a" : call.compiler_params.arch);
  }
  std::vector<Array> run(const core::PallasCall& call, const std::vector<Array>& args) const override {
    const Driver& d = driver();
    make_current(0);
    auto c = compile_call(call, call.compiler_params.arch.empty() ? d.arch : call.compiler_params.arch);
    CUfunction f = load(c, call.what);
    const core::GridMapping& gm = call.grid;
    int nd = gm.num_dynamic_bounds();
    std::vector<int> dyn;
    for (int k = 0; k < nd; ++k) dyn.push_back(args[static_cast<size_t>(k)].to_host().to_vector<int32_t>()[0]);
    std::vector<Array> ins;
    for (size_t k = static_cast<size_t>(nd); k < args.size(); ++k)
      ins.push_back(args[k].device().is_host() ? args[k].to(Device::cuda(0)) : args[k]);
    std::vector<Array> outs;
    bool poison = call.debug || std::getenv("PALLAS_CUDA_POISON");
    for (size_t o = 0; o < gm.outputs.size(); ++o) {
      const ShapeDtype& sd = gm.outputs[o].array;
      Array out(sd.shape, sd.dtype, Device::cuda(0));
      bool aliased = false;
      for (auto [i, oi] : call.aliases)
        if (static_cast<size_t>(oi) == o) {
          check(d.cuMemcpyDtoD(reinterpret_cast<CUdeviceptr>(out.raw_data()), reinterpret_cast<CUdeviceptr>(ins[static_cast<size_t>(i)].raw_data()),
                               out.nbytes()),
                call.what + ": copying an aliased input");
          aliased = true;
        }
      if (!aliased && poison && itemsize(sd.dtype) == 4)
        check(d.cuMemsetD32(reinterpret_cast<CUdeviceptr>(out.raw_data()), poison_word(sd.dtype), static_cast<size_t>(out.size())),
              call.what + ": poisoning an output");
      outs.push_back(out);
    }
    int64_t total = 1;
    int di = 0;
    for (int64_t g : gm.grid) total *= g < 0 ? dyn[static_cast<size_t>(di++)] : g;
    if (total <= 0) return outs;
    std::vector<CUdeviceptr> ptrs;
    for (auto& a : ins) ptrs.push_back(reinterpret_cast<CUdeviceptr>(a.raw_data()));
    for (auto& a : outs) ptrs.push_back(reinterpret_cast<CUdeviceptr>(a.raw_data()));
    Array err;
    CUdeviceptr perr = 0;
    if (c->lowered.has_check) {
      err = Array(Shape{2}, DType::I32, Device::cuda(0));
      perr = reinterpret_cast<CUdeviceptr>(err.raw_data());
      check(d.cuMemsetD32(perr, 0x7fffffff, 2), call.what + ": check flag");
    }
    std::vector<void*> kp;
    for (auto& p : ptrs) kp.push_back(&p);
    kp.push_back(&perr);
    for (auto& x : dyn) kp.push_back(&x);
    unsigned gx = static_cast<unsigned>(std::min<int64_t>(total, INT_MAX));
    unsigned gy = static_cast<unsigned>((total + gx - 1) / gx);
    check(d.cuLaunchKernel(f, gx, gy, 1, static_cast<unsigned>(c->lowered.threads), 1, 1,
                           static_cast<unsigned>(c->lowered.smem_bytes), nullptr, kp.data(), nullptr),
          call.what + ": launching " + c->lowered.name);
    if (c->lowered.has_check) {
      auto e = err.to_host().to_vector<int32_t>();
      if (e[0] != 0x7fffffff) {
        std::string m = e[1] >= 0 && e[1] < static_cast<int>(c->lowered.check_messages.size()) ? c->lowered.check_messages[static_cast<size_t>(e[1])] : "";
        throw Error(call.what + ": a check failed in program " + std::to_string(e[0]) + " (linear id) on the GPU: " + m);
      }
    }
    return outs;
  }
};

}  // namespace

}  // namespace pallas::cuda

namespace pallas::core {
const BackendRunner* cuda_runner() {
  static cuda::CudaRunner r;
  return &r;
}
}  // namespace pallas::core
