// The CUDA BackendRunner: compile (cached), load the module, move inputs to the device,
// allocate outputs (aliases copied from their inputs), launch one CUDA block per program.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <nvtx3/nvToolsExt.h>

#include "src/backends/cuda/compile.h"
#include "src/backends/cuda/driver.h"
#include "src/core/backend_registry.h"
#include "src/core/print_format.h"

#include "src/ir/dependence.h"
#include "src/runtime/buffer.h"

namespace pallas::cuda {

namespace {

struct Loaded {
  CUfunction fn = nullptr;
  nvtxStringHandle_t range = nullptr;  // the NVTX range name of its calls
  // Keeps the Compiled alive, so its address (the key) is never reused by another kernel.
  std::shared_ptr<const Compiled> keep;
};

// NVTX ranges around each launch, named after the call ("kernel 'softmax' (file.cc:12)"), in
// the domain "Pallas C++": Nsight Systems shows Pallas calls by name. NVTX 3 is header-only
// and costs a null check per call when no tool is attached.
nvtxDomainHandle_t nvtx_domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("Pallas C++");
  return d;
}

const Loaded& load(const std::shared_ptr<const Compiled>& c, const std::string& what) {
  static std::mutex mu;
  static std::unordered_map<const Compiled*, Loaded> loaded;
  std::lock_guard<std::mutex> g(mu);
  auto it = loaded.find(c.get());
  if (it != loaded.end()) return it->second;
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
  if (smem > 48 * 1024) check(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem)), what + ": raising the shared-memory limit");
  return loaded[c.get()] = {f, nvtxDomainRegisterStringA(nvtx_domain(), what.c_str()), c};
}

// An NVTX range for the scope of one launch.
struct NvtxRange {
  explicit NvtxRange(nvtxStringHandle_t name) {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = name;
    nvtxDomainRangePushEx(nvtx_domain(), &a);
  }
  ~NvtxRange() { nvtxDomainRangePop(nvtx_domain()); }
};

// Fills a device array with the interpreter's poison (NaN, bool true, int min, uint max).
void poison_fill(Array& a, const std::string& what) {
  const Driver& d = driver();
  auto dev = reinterpret_cast<CUdeviceptr>(a.raw_data());
  size_t n = static_cast<size_t>(a.size());
  uint64_t bits = 0;
  switch (a.dtype()) {
    case DType::F16: bits = 0x7e00; break;
    case DType::BF16: bits = 0x7fc0; break;
    case DType::F32: bits = 0x7fc00000u; break;
    case DType::F64: bits = 0x7ff8000000000000ull; break;
    case DType::Bool: bits = 1; break;
    case DType::I8: bits = 0x80; break;
    case DType::I16: bits = 0x8000; break;
    case DType::I32: bits = 0x80000000u; break;
    case DType::I64: bits = 0x8000000000000000ull; break;
    case DType::U8: bits = 0xff; break;
    case DType::U16: bits = 0xffff; break;
    case DType::U32: bits = 0xffffffffu; break;
    case DType::U64: bits = ~0ull; break;
  }
  CUstream s = launch_stream();
  switch (itemsize(a.dtype())) {
    case 1: check(d.cuMemsetD8Async(dev, static_cast<unsigned char>(bits), n, s), what + ": poisoning an output"); return;
    case 2: check(d.cuMemsetD16Async(dev, static_cast<unsigned short>(bits), n, s), what + ": poisoning an output"); return;
    case 4: check(d.cuMemsetD32Async(dev, static_cast<unsigned>(bits), n, s), what + ": poisoning an output"); return;
    default: {  // 8-byte words: a host pattern copied over (debug runs only; waits for it)
      std::vector<uint64_t> host(n, bits);
      check(d.cuMemcpyHtoDAsync(dev, host.data(), n * 8, s), what + ": poisoning an output");
      sync_launch_stream(what + ": poisoning an output");
    }
  }
}

// A 2-D tensor map with the 128-byte swizzle, as the sm_90a mainloops expect.
void encode_2d(void* map, DType t, const void* base, uint64_t inner, uint64_t outer, unsigned box_inner, unsigned box_outer,
               const std::string& what) {
  const Driver& d = driver();
  if (!d.cuTensorMapEncodeTiled) throw Error(what + ": the driver lacks cuTensorMapEncodeTiled (too old for TMA)");
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {inner * itemsize(t)};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t es[2] = {1, 1};
  CUtensorMapDataType dt = t == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  check(d.cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(map), dt, 2, const_cast<void*>(base), dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        what + ": encoding a tensor map");
}

// A tensor map of the general lowering's loop pipeliner (lower.h, TensorMapSpec) over `base`:
// the whole row-major array, boxes of spec.box, the 128-byte swizzle, zeros outside.
void encode_map(void* map, const TensorMapSpec& spec, const void* base, const std::string& what) {
  const Driver& d = driver();
  if (!d.cuTensorMapEncodeTiled) throw Error(what + ": the driver lacks cuTensorMapEncodeTiled (too old for TMA)");
  if (reinterpret_cast<uintptr_t>(base) % 16)
    throw Error(what + ": an input's device pointer is not 16-byte aligned, which the kernel's tensor copies need; pass an aligned array "
                "(or set PALLAS_NO_TMA=1)");
  size_t rank = spec.array_shape.size(), item = itemsize(spec.dtype);
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], es[5];
  cuuint64_t stride = item;
  for (size_t i = 0; i < rank; ++i) {  // innermost first
    size_t dim = rank - 1 - i;
    dims[i] = static_cast<cuuint64_t>(spec.array_shape[dim]);
    box[i] = static_cast<cuuint32_t>(spec.box[dim]);
    es[i] = 1;
    if (i) strides[i - 1] = stride;
    stride *= dims[i];
  }
  CUtensorMapDataType dt = item == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : item == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT32;
  check(d.cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(map), dt, static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims, strides, box, es,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        what + ": encoding a tensor map");
}

// Launches a kernel of the sm_90a fast paths (TMA descriptors as parameters).
void launch_fast(const Compiled& c, CUfunction f, const std::vector<Array>& ins, Array& out, const std::string& what) {
  const Driver& d = driver();
  struct alignas(128) Map {
    unsigned char bytes[128];
  } maps[3];
  void* cptr = out.raw_data();
  if (c.matmul) {
    const auto& m = *c.matmul;
    encode_2d(&maps[0], m.in, ins[0].raw_data(), m.k, m.m, 64, 128, what);
    encode_2d(&maps[1], m.in, ins[1].raw_data(), m.n, m.k, 64, 64, what);
    int M = static_cast<int>(m.m), N = static_cast<int>(m.n), K = static_cast<int>(m.k);
    void* params[] = {&maps[0], &maps[1], &cptr, &M, &N, &K};
    check(d.cuLaunchKernel(f, static_cast<unsigned>(m.grid), 1, 1, m.threads, 1, 1, m.smem_bytes, launch_stream(), params, nullptr),
          what + ": launching " + m.entry);
  } else {
    const auto& a = *c.attention;
    uint64_t rows = static_cast<uint64_t>(a.batch * a.heads * a.seq);
    for (int k = 0; k < 3; ++k) encode_2d(&maps[k], a.dtype, ins[k].raw_data(), 128, rows, 64, 128, what);
    int seq = static_cast<int>(a.seq);
    float scale_log2 = static_cast<float>(a.scale * 1.4426950408889634);
    void* params[] = {&maps[0], &maps[1], &maps[2], &cptr, &seq, &scale_log2};
    check(d.cuLaunchKernel(f, static_cast<unsigned>(a.grid_x), static_cast<unsigned>(a.grid_y), 1, a.threads, 1, 1,
                           a.smem_bytes, launch_stream(), params, nullptr),
          what + ": launching " + a.entry);
  }
}

// Prints debug_print's records after the kernel: in program order (the order of the
// interpreter), a program's own prints in the order it made them.
void print_log(const std::vector<PrintSite>& sites, CUdeviceptr plog, uint64_t capacity,
               const std::function<std::vector<int64_t>(int64_t)>& program_id, const std::string& what) {
  const Driver& d = driver();
  uint64_t used = 0;
  sync_launch_stream(what + ": waiting for the kernel's prints");
  check(d.cuMemcpyDtoH(&used, plog, sizeof used), what + ": reading the print log");
  uint64_t n = std::min(used, capacity);
  std::vector<uint64_t> slots(n);
  if (n) check(d.cuMemcpyDtoH(slots.data(), plog + 16, n * 8), what + ": reading the print log");
  struct Line {
    int64_t program;
    std::string text;
  };
  std::vector<Line> lines;
  for (uint64_t at = 0; at + 2 <= n;) {
    uint64_t id = slots[at];
    if (id >= sites.size()) break;
    const PrintSite& s = sites[id];
    uint64_t r = static_cast<uint64_t>(s.slots());
    if (at + r > n) break;
    std::vector<std::string> vals;
    uint64_t v = at + 2;
    for (auto& a : s.values) {
      vals.push_back(core::format_print_value(a.dtype, a.shape, slots.data() + v));
      v += static_cast<uint64_t>(shape_size(a.shape));
    }
    int64_t lin = static_cast<int64_t>(slots[at + 1]);
    lines.push_back({lin, "[program " + core::program_id_text(program_id(lin)) + "] " + core::fill_print_format(s.fmt, vals)});
    at += r;
  }
  std::stable_sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) { return a.program < b.program; });
  static std::mutex mu;  // lines of calls from several threads do not interleave
  std::lock_guard<std::mutex> g(mu);
  for (auto& l : lines) std::printf("%s\n", l.text.c_str());
  if (used > capacity)
    std::printf("[%s: debug_print output truncated: the kernel printed more than %llu values]\n", what.c_str(),
                static_cast<unsigned long long>(capacity));
  std::fflush(stdout);
}

struct CudaRunner final : core::BackendRunner {
  bool available() const override { return !std::getenv("PALLAS_NO_CUDA") && driver().ok; }
  std::string why_unavailable() const override {
    return std::getenv("PALLAS_NO_CUDA") ? "PALLAS_NO_CUDA is set" : driver().why;
  }
  void compile_check(const core::PallasCall& call) const override {
    compile_call(call, call.compiler_params.arch.empty() ? "sm_90a" : call.compiler_params.arch);
  }
  std::vector<Array> run(const core::PallasCall& call, const std::vector<Array>& args, const std::vector<Array>* into) const override {
    std::vector<Array> outs = launch(call, args, into);
    if (!into) return outs;
    for (size_t k = 0; k < outs.size(); ++k) (*into)[k].copy_from(outs[k]);  // a no-op where written in place
    return *into;
  }

  std::vector<double> time_runs(const std::function<void()>& fn, int warmup, int reps, bool flush_l2) const override {
    const Driver& d = driver();
    make_current(0);
    for (int i = 0; i < warmup; ++i) fn();
    // Larger than any GPU's L2 (50 MiB on H100/H200); kept for the process.
    static Array flush;
    if (flush_l2 && !flush.defined()) flush = Array(Shape{64 << 20}, DType::U32, Device::cuda(0));
    CUevent a, b;
    check(d.cuEventCreate(&a, 0), "do_bench: creating an event");
    check(d.cuEventCreate(&b, 0), "do_bench: creating an event");
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      CUstream st = launch_stream();
      if (flush_l2)
        check(d.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(flush.raw_data()), static_cast<unsigned>(i), static_cast<size_t>(flush.size()), st),
              "do_bench: flushing the L2");
      check(d.cuEventRecord(a, st), "do_bench: recording an event");
      fn();
      check(d.cuEventRecord(b, st), "do_bench: recording an event");
      check(d.cuEventSynchronize(b), "do_bench: waiting for the timed run");
      float ms = 0;
      check(d.cuEventElapsedTime(&ms, a, b), "do_bench: reading the events");
      t.push_back(ms);
    }
    d.cuEventDestroy(a);
    d.cuEventDestroy(b);
    return t;
  }

  void precompile(const core::PallasCall& call) const override {
    compile_call(call, call.compiler_params.arch.empty() ? driver().arch : call.compiler_params.arch);
  }
  std::string device_name() const override { return driver().arch + " smem " + std::to_string(driver().max_smem_optin); }

  void synchronize() const override {
    make_current(0);
    sync_launch_stream("synchronize");
  }

 private:
  std::vector<Array> launch(const core::PallasCall& call, const std::vector<Array>& args, const std::vector<Array>* into) const {
    const Driver& d = driver();
    for (const Array& a : args)
      if (!a.device().is_host() && a.device().index != 0)
        throw Error(call.what + ": an argument lives on " + a.device().str() + "; this backend runs on cuda:0 only so far");
    make_current(0);
    auto c = compile_call(call, call.compiler_params.arch.empty() ? d.arch : call.compiler_params.arch);
    const Loaded& kernel = load(c, call.what);
    CUfunction f = kernel.fn;
    NvtxRange range(kernel.range);
    const core::GridMapping& gm = call.grid;
    int nd = gm.num_dynamic_bounds();
    std::vector<int> dyn;
    for (int k = 0; k < nd; ++k) {
      int64_t v = args[static_cast<size_t>(k)].to_host().astype(DType::I64).to_vector<int64_t>()[0];
      if (v < 0) throw Error(call.what + ": dynamic grid bound " + std::to_string(k) + " is negative (" + std::to_string(v) + ")");
      if (v > INT_MAX) throw Error(call.what + ": dynamic grid bound " + std::to_string(k) + " is " + std::to_string(v) + "; at most 2^31-1 per axis");
      dyn.push_back(static_cast<int>(v));
    }
    std::vector<Array> ins;
    for (size_t k = static_cast<size_t>(nd); k < args.size(); ++k) {
      Array a = args[k].device().is_host() ? args[k].to(Device::cuda(0)) : args[k];
      // An input the kernel writes (its block ref, or a scalar-prefetch ref) is a private copy,
      // as in the interpreter: the caller's array never changes.
      if (a.raw_data() == args[k].raw_data() && ir::writes_ref(*call.kernel, call.kernel->invars[k - static_cast<size_t>(nd)].id))
        a = a.copy();
      ins.push_back(a);
    }
    std::vector<Array> outs;
    bool poison = call.debug || std::getenv("PALLAS_CUDA_POISON");
    for (size_t o = 0; o < gm.outputs.size(); ++o) {
      const ShapeDtype& sd = gm.outputs[o].array;
      // an output array given on the device is written in place (Call::into); else a new one
      bool given = into && (*into)[o].device() == Device::cuda(0);
      Array out = given ? (*into)[o] : Array(sd.shape, sd.dtype, Device::cuda(0));
      bool aliased = false;
      for (auto [i, oi] : call.aliases)
        if (static_cast<size_t>(oi) == o) {
          aliased = true;
          if (out.raw_data() == ins[static_cast<size_t>(i)].raw_data() || out.nbytes() == 0) continue;  // in place
          check(d.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(out.raw_data()), reinterpret_cast<CUdeviceptr>(ins[static_cast<size_t>(i)].raw_data()),
                                    out.nbytes(), launch_stream()),
                call.what + ": copying an aliased input");
        }
      if (!aliased && poison) poison_fill(out, call.what);
      outs.push_back(out);
    }
    if (c->matmul || c->attention) {
      launch_fast(*c, f, ins, outs[0], call.what);
      return outs;
    }
    // One CUDA block per program of the parallel axes; the sequential ones loop inside it.
    int64_t total = 1, all = 1;
    int di = 0;
    for (size_t a = 0; a < gm.grid.size(); ++a) {
      int64_t g = gm.grid[a] < 0 ? dyn[static_cast<size_t>(di++)] : gm.grid[a];
      all *= g;
      if (!gm.sequential(a)) total *= g;
    }
    if (all <= 0) return outs;
    std::vector<CUdeviceptr> ptrs;
    for (auto& a : ins) ptrs.push_back(reinterpret_cast<CUdeviceptr>(a.raw_data()));
    for (auto& a : outs) ptrs.push_back(reinterpret_cast<CUdeviceptr>(a.raw_data()));
    Array err;
    CUdeviceptr perr = 0;
    if (c->lowered.has_check) {
      err = Array(Shape{2}, DType::I32, Device::cuda(0));
      perr = reinterpret_cast<CUdeviceptr>(err.raw_data());
      check(d.cuMemsetD32Async(perr, 0x7fffffff, 2, launch_stream()), call.what + ": check flag");
    }
    // debug_print's log: [used slots, capacity, records...] (lower.h, PrintSite).
    Array log;
    CUdeviceptr plog = 0;
    constexpr uint64_t kLogSlots = uint64_t{1} << 21;  // 16 MiB
    if (!c->lowered.print_sites.empty()) {
      log = Array(Shape{static_cast<int64_t>(kLogSlots + 2)}, DType::U64, Device::cuda(0));
      plog = reinterpret_cast<CUdeviceptr>(log.raw_data());
      uint64_t head[2] = {0, kLogSlots};
      check(d.cuMemcpyHtoDAsync(plog, head, sizeof head, launch_stream()), call.what + ": print log");
      sync_launch_stream(call.what + ": print log");  // `head` is on this stack
    }
    std::vector<void*> kp;
    for (auto& p : ptrs) kp.push_back(&p);
    kp.push_back(&perr);
    kp.push_back(&plog);
    int poison_flag = poison ? 1 : 0;
    kp.push_back(&poison_flag);
    for (auto& x : dyn) kp.push_back(&x);
    struct alignas(64) Map {
      unsigned char bytes[128];
    };
    std::vector<Map> maps(c->lowered.tensor_maps.size());
    for (size_t m = 0; m < maps.size(); ++m) {
      const TensorMapSpec& spec = c->lowered.tensor_maps[m];
      encode_map(&maps[m], spec, reinterpret_cast<const void*>(ptrs[static_cast<size_t>(spec.param)]), call.what);
      kp.push_back(&maps[m]);
    }
    unsigned gx = static_cast<unsigned>(std::min<int64_t>(total, INT_MAX));
    unsigned gy = static_cast<unsigned>((total + gx - 1) / gx);
    check(d.cuLaunchKernel(f, gx, gy, 1, static_cast<unsigned>(c->lowered.threads), 1, 1,
                           static_cast<unsigned>(c->lowered.smem_bytes), launch_stream(), kp.data(), nullptr),
          call.what + ": launching " + c->lowered.name);
    auto program_id = [&](int64_t lin) {
      std::vector<int64_t> pid(gm.grid.size());
      for (size_t a = pid.size(), dk = dyn.size(); a-- > 0;) {
        int64_t g = gm.grid[a] < 0 ? dyn[--dk] : gm.grid[a];
        pid[a] = lin % g;
        lin /= g;
      }
      return pid;
    };
    if (plog) print_log(c->lowered.print_sites, plog, kLogSlots, program_id, call.what);
    if (c->lowered.has_check) {
      auto e = err.to_host().to_vector<int32_t>();
      if (e[0] != 0x7fffffff) {
        std::string m = e[1] >= 0 && e[1] < static_cast<int>(c->lowered.check_messages.size()) ? c->lowered.check_messages[static_cast<size_t>(e[1])] : "";
        throw Error(call.what + ": a check failed in program " + core::program_id_text(program_id(e[0])) + ": " + m);
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
