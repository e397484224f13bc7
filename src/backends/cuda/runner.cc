// The CUDA backend's entry: device memory for Arrays, and running PallasCalls on the GPU.
//
// What runs on the GPU today: calls the sm_90a fast paths take (src/backends/cuda/sm90:
// matmul loops and flash attention, lowered to warp-specialised wgmma/TMA kernels). Every
// other call reports that it has no GPU lowering, so Backend::Auto runs it on the
// interpreter and Backend::Cuda fails with a message naming the kernel.
#include <cmath>
#include <mutex>
#include <unordered_map>

#include "src/backends/cuda/compile.h"
#include "src/backends/cuda/driver.h"
#include "src/backends/cuda/lower_elementwise.h"
#include "src/backends/cuda/sm90/attention_plan.h"
#include "src/backends/cuda/sm90/matmul_plan.h"
#include "src/core/backend_registry.h"
#include "src/runtime/buffer.h"

namespace pallas::cuda {

namespace {

// ---- device memory for Arrays ----
// Freed blocks are kept by size and reused (as the frameworks' caching allocators do), so a
// call does not pay for cuMemAlloc/cuMemFree; on out-of-memory the cache is released first.
struct Pool {
  std::mutex mu;
  std::unordered_multimap<size_t, CUdeviceptr> free;
  std::unordered_map<CUdeviceptr, size_t> size_of;
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: Arrays may be freed during static destruction
  return *p;
}
size_t bucket(size_t bytes) { return bytes <= 512 ? 512 : (bytes + 4095) / 4096 * 4096; }

void* dev_alloc(int device, size_t bytes) {
  if (!driver().loaded || device != 0)
    throw Error("Array on cuda:" + std::to_string(device) + ": no CUDA backend can run here (" +
                (driver().loaded ? std::string("only cuda:0 is used") : driver().why_not) + ")");
  size_t b = bucket(bytes);
  Pool& pl = pool();
  {
    std::lock_guard<std::mutex> g(pl.mu);
    auto it = pl.free.find(b);
    if (it != pl.free.end()) {
      CUdeviceptr p = it->second;
      pl.free.erase(it);
      return reinterpret_cast<void*>(p);
    }
  }
  make_current();
  CUdeviceptr p = 0;
  CUresult r = driver().cuMemAlloc_v2(&p, b);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    std::lock_guard<std::mutex> g(pl.mu);
    for (auto& [sz, q] : pl.free) {
      driver().cuMemFree_v2(q);
      pl.size_of.erase(q);
    }
    pl.free.clear();
    r = driver().cuMemAlloc_v2(&p, b);
  }
  check(r, "cuMemAlloc", "Array of " + std::to_string(bytes) + " bytes on cuda:0");
  std::lock_guard<std::mutex> g(pl.mu);
  pl.size_of[p] = b;
  return reinterpret_cast<void*>(p);
}
void dev_free(int, void* ptr) {
  Pool& pl = pool();
  std::lock_guard<std::mutex> g(pl.mu);
  auto it = pl.size_of.find(reinterpret_cast<CUdeviceptr>(ptr));
  if (it != pl.size_of.end()) pl.free.emplace(it->second, it->first);
}
void to_dev(int, void* dst, const void* src, size_t n) {
  make_current();
  check(driver().cuMemcpyHtoD_v2(reinterpret_cast<CUdeviceptr>(dst), src, n), "cuMemcpyHtoD", "Array::to(cuda)");
}
void to_host(int, void* dst, const void* src, size_t n) {
  make_current();
  check(driver().cuMemcpyDtoH_v2(dst, reinterpret_cast<CUdeviceptr>(src), n), "cuMemcpyDtoH", "Array::to_host");
}
void dev_copy(int, void* dst, const void* src, size_t n) {
  make_current();
  check(driver().cuMemcpyDtoD_v2(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), n),
        "cuMemcpyDtoD", "Array::copy");
}

const bool g_hooks_installed = [] {
  set_device_memory_hooks({dev_alloc, dev_free, to_dev, to_host, dev_copy});
  return true;
}();

// ---- prepared kernels ----
struct Prepared {
  std::optional<sm90::MatmulPlan> matmul;
  std::optional<sm90::AttentionPlan> attention;
  std::optional<ElementwisePlan> elementwise;
  std::string why_not;  // when neither applies
  CUfunction fn = nullptr;
  ir::JaxprPtr keep;    // keeps the cache key's address alive
};

CUfunction load(const std::string& source, const std::string& entry, int smem, const core::PallasCall& call) {
  auto cubin = compile(source, entry, device_arch(), call.what, call.debug);
  make_current();
  CUmodule mod;
  check(driver().cuModuleLoadData(&mod, cubin->image.data()), "cuModuleLoadData", call.what);
  CUfunction fn;
  check(driver().cuModuleGetFunction(&fn, mod, entry.c_str()), "cuModuleGetFunction", call.what);
  if (smem > driver().max_smem_optin)
    throw Error(call.what + ": the kernel needs " + std::to_string(smem) + " bytes of shared memory but the device allows " +
                std::to_string(driver().max_smem_optin));
  check(driver().cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "cuFuncSetAttribute",
        call.what);
  return fn;
}

std::shared_ptr<Prepared> prepare(const core::PallasCall& call, bool compile_now) {
  static std::mutex mu;
  static std::unordered_map<const ir::Jaxpr*, std::shared_ptr<Prepared>> cache;
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = cache.find(call.kernel.get());
    if (it != cache.end() && (it->second->fn || !compile_now || !it->second->why_not.empty())) return it->second;
  }
  auto p = std::make_shared<Prepared>();
  p->keep = call.kernel;
  std::string why_mm, why_at, why_el;
  bool sm90 = device_arch() == "sm_90a";
  if (sm90 && (p->matmul = sm90::plan_matmul(call, &why_mm))) {
    if (compile_now) p->fn = load(p->matmul->source, p->matmul->entry, p->matmul->smem_bytes, call);
  } else if (sm90 && (p->attention = sm90::plan_attention(call, &why_at))) {
    if (compile_now) p->fn = load(p->attention->source, p->attention->entry, p->attention->smem_bytes, call);
  } else if ((p->elementwise = lower_elementwise(call, &why_el))) {
    if (compile_now) p->fn = load(p->elementwise->source, p->elementwise->entry, 0, call);
  } else {
    p->why_not = sm90 ? "not a matmul loop (" + why_mm + "), nor the flash-attention kernel (" + why_at +
                            "), nor blockwise elementwise (" + why_el + ")"
                      : "not blockwise elementwise (" + why_el + "), and the matmul/attention paths need sm_90a";
  }
  std::lock_guard<std::mutex> g(mu);
  cache[call.kernel.get()] = p;
  return p;
}

void encode_2d(CUtensorMap* m, DType t, const void* base, uint64_t inner, uint64_t outer, uint32_t box_inner,
               uint32_t box_outer, const std::string& what) {
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {inner * itemsize(t)};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t es[2] = {1, 1};
  CUtensorMapDataType dt = t == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  check(driver().cuTensorMapEncodeTiled(m, dt, 2, const_cast<void*>(base), dims, strides, box, es,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled", what);
}

class CudaRunner final : public core::BackendRunner {
 public:
  bool available() const override { return driver().loaded; }
  std::string why_unavailable() const override { return driver().why_not; }

  bool can_run(const core::PallasCall& call) const override {
    return available() && prepare(call, false)->why_not.empty();
  }

  std::vector<Array> run(const core::PallasCall& call, const std::vector<Array>& args) const override {
    auto p = prepare(call, true);
    if (!p->why_not.empty())
      throw Error(call.what + ": the CUDA backend cannot run this kernel yet: " + p->why_not +
                  "; use Backend::Auto (which runs it on the interpreter) or Backend::Interpret");
    make_current();
    Device dev = Device::cuda(0);
    bool host_io = true;
    std::vector<Array> in;
    for (auto& a : args) {
      host_io = host_io && a.device().is_host();
      in.push_back(a.device().is_host() ? a.to(dev) : a);
    }
    std::vector<Array> outs;
    for (auto& o : call.grid.outputs) outs.emplace_back(o.array.shape, o.array.dtype, dev);
    Array out = outs[0];
    void* cptr = out.raw_data();
    alignas(128) CUtensorMap maps[3];
    if (p->elementwise) {
      std::vector<void*> ptrs;
      for (size_t k = call.grid.num_dynamic_bounds(); k < in.size(); ++k) ptrs.push_back(in[k].raw_data());
      for (auto& o : outs) ptrs.push_back(o.raw_data());
      std::vector<void*> params;
      for (auto& q : ptrs) params.push_back(&q);
      check(driver().cuLaunchKernel(p->fn, static_cast<unsigned>(p->elementwise->programs), 1, 1,
                                    p->elementwise->threads, 1, 1, 0, nullptr, params.data(), nullptr),
            "cuLaunchKernel", call.what);
    } else if (p->matmul) {
      const auto& m = *p->matmul;
      encode_2d(&maps[0], m.in, in[0].raw_data(), m.k, m.m, 64, 128, call.what);
      encode_2d(&maps[1], m.in, in[1].raw_data(), m.n, m.k, 64, 64, call.what);
      int M = static_cast<int>(m.m), N = static_cast<int>(m.n), K = static_cast<int>(m.k);
      void* params[] = {&maps[0], &maps[1], &cptr, &M, &N, &K};
      check(driver().cuLaunchKernel(p->fn, static_cast<unsigned>(m.grid), 1, 1, m.threads, 1, 1, m.smem_bytes, nullptr,
                                    params, nullptr),
            "cuLaunchKernel", call.what);
    } else {
      const auto& a = *p->attention;
      uint64_t rows = static_cast<uint64_t>(a.batch * a.heads * a.seq);
      for (int k = 0; k < 3; ++k) encode_2d(&maps[k], a.dtype, in[k].raw_data(), 128, rows, 64, 128, call.what);
      int seq = static_cast<int>(a.seq);
      float scale_log2 = static_cast<float>(a.scale * 1.4426950408889634);
      void* params[] = {&maps[0], &maps[1], &maps[2], &cptr, &seq, &scale_log2};
      check(driver().cuLaunchKernel(p->fn, static_cast<unsigned>(a.grid_x), static_cast<unsigned>(a.grid_y), 1, a.threads,
                                    1, 1, a.smem_bytes, nullptr, params, nullptr),
            "cuLaunchKernel", call.what);
    }
    if (call.debug) check(driver().cuCtxSynchronize(), "the kernel", call.what);
    if (host_io)
      for (auto& o : outs) o = o.to_host();
    return outs;
  }
};

}  // namespace

}  // namespace pallas::cuda

namespace pallas::core {
const BackendRunner* cuda_runner() {
  static cuda::CudaRunner r;
  (void)cuda::g_hooks_installed;
  return &r;
}
}  // namespace pallas::core
