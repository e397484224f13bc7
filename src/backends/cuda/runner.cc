// The CUDA BackendRunner: compile (cached), load the module, move inputs to the device,
// allocate outputs (aliases copied from their inputs), launch one CUDA block per program.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
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

// The kernel's module loaded into a device's context (one per device: modules belong to a
// context). With `may_refuse`, null when the driver refuses a cubin that came from the disk
// cache: the caller compiles it again (recompile_refused) rather than fail on a damaged or
// stale file. Any other refusal is a pl::Error.
const Loaded* load(const std::shared_ptr<const Compiled>& c, const std::string& what, int device, bool may_refuse = false) {
  static std::mutex mu;
  static std::map<std::pair<const Compiled*, int>, Loaded> loaded;
  std::lock_guard<std::mutex> g(mu);
  auto it = loaded.find({c.get(), device});
  if (it != loaded.end()) return &it->second;
  const Driver& d = driver();
  make_current(device);
  const int max_smem = device_info(device).max_smem_optin;
  CUmodule m;
  CUresult r = d.cuModuleLoadData(&m, c->cubin.data());
  // A cubin from disk the driver cannot use (a damaged or foreign image) is compiled again; any
  // other failure (out of memory, a lost context) is the caller's error, not the cache's.
  bool bad_image = r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_PTX ||
                   r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
  if (bad_image && c->from_disk && may_refuse) return nullptr;
  check(r, what + ": loading the cubin of " + c->lowered.name);
  CUfunction f;
  check(d.cuModuleGetFunction(&f, m, c->lowered.name.c_str()), what + ": finding " + c->lowered.name);
  size_t smem = c->lowered.smem_bytes;
  if (smem > static_cast<size_t>(max_smem))
    throw Error(what + ": the kernel needs " + std::to_string(smem) + " bytes of shared memory (scratch + exchanges) but the device allows " +
                std::to_string(max_smem) + "; use smaller blocks (or fewer stages)");
  if (smem > 48 * 1024) check(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem)), what + ": raising the shared-memory limit");
  return &(loaded[{c.get(), device}] = {f, nvtxDomainRegisterStringA(nvtx_domain(), what.c_str()), c});
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

// PALLAS_CUDA_POISON, read once (the first GPU call): a getenv on every call costs more than
// the rest of the call's checks.
bool poison_env() {
  static const bool on = std::getenv("PALLAS_CUDA_POISON") != nullptr;
  return on;
}

// Small arrays of a launch's parameters: on the stack for the usual few, else on the heap.
template <class T, size_t N>
struct SmallArray {
  explicit SmallArray(size_t n) : p(n <= N ? local : (heap = std::make_unique<T[]>(n)).get()) {}
  T& operator[](size_t i) { return p[i]; }
  T* data() { return p; }
  T local[N];
  std::unique_ptr<T[]> heap;
  T* p;
};

// Everything about a call's launches that depends on the call alone, made by its first run
// and kept in the PallasCall (core::BoundSlot), so that a cached call does no compile-cache
// lookup (whose key is a string built from the whole call), no module-table lookup, no walk of
// the jaxpr and no string building. Immutable once installed: calls from several threads
// read it without a lock.
struct Bound final : core::BoundState {
  std::shared_ptr<const Compiled> compiled;  // keeps the module's Compiled (and `fn`) alive
  int device = 0;  // whose context `fn` belongs to (launches on another device look theirs up)
  std::string arch;
  CUfunction fn = nullptr;
  nvtxStringHandle_t range = nullptr;
  size_t num_dynamic = 0, num_inputs = 0, num_outputs = 0;
  // Per input (after the dynamic bounds): the kernel writes its ref, so it gets a private copy.
  std::vector<char> writes;
  // Per output: the inputs aliased to it (input_output_aliases, in input order).
  std::vector<std::vector<size_t>> aliased_from;
  bool has_check = false, has_print = false;
  // The launch's dimensions where the grid has no dynamic bounds (`empty`: no programs).
  bool static_grid = false, empty = false;
  unsigned gx = 1, gy = 1;
  // A persistent kernel (Lowered::persistent) launches at most this many CUDA blocks: as many
  // as fit on the device at once (0: not persistent).
  int64_t resident_blocks = 0;
  unsigned threads = 0, smem = 0;
  std::string launching;  // the message of a failed launch
  // The kernel for unaligned arrays (unaligned_bound), made on the first call given one.
  mutable std::mutex unaligned_mu;
  mutable std::unique_ptr<Bound> unaligned;
};

// The call's Bound, made (compiled, loaded, laid out) on its first run. Two threads may both
// make one at first; compile_call and load hand both the same kernel, and the first to
// install wins.
std::unique_ptr<Bound> make_bound(const core::PallasCall& call, const std::string& arch, int device, std::shared_ptr<const Compiled> compiled) {
  auto b = std::make_unique<Bound>();
  const Loaded* kernel = load(compiled, call.what, device, /*may_refuse=*/true);
  if (!kernel) {
    compiled = recompile_refused(compiled, call.what);
    kernel = load(compiled, call.what, device);  // compiled afresh: a refusal now is an error
  }
  b->compiled = std::move(compiled);
  b->device = device;
  b->arch = arch;
  const Compiled& c = *b->compiled;
  b->fn = kernel->fn;
  b->range = kernel->range;
  const core::GridMapping& gm = call.grid;
  b->num_dynamic = static_cast<size_t>(gm.num_dynamic_bounds());
  b->num_inputs = gm.prefetch.size() + gm.inputs.size();
  b->num_outputs = gm.outputs.size();
  for (size_t k = 0; k < b->num_inputs; ++k) b->writes.push_back(ir::writes_ref(*call.kernel, call.kernel->invars[k].id));
  b->aliased_from.resize(b->num_outputs);
  for (auto [i, o] : call.aliases) b->aliased_from[static_cast<size_t>(o)].push_back(static_cast<size_t>(i));
  b->has_check = c.lowered.has_check;
  b->has_print = !c.lowered.print_sites.empty();
  b->threads = static_cast<unsigned>(c.lowered.threads);
  b->smem = static_cast<unsigned>(c.lowered.smem_bytes);
  b->static_grid = b->num_dynamic == 0;
  if (c.lowered.persistent) {
    const Driver& d = driver();
    int per_sm = 1;
    if (d.cuOccupancyMaxActiveBlocksPerMultiprocessor &&
        d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, b->fn, static_cast<int>(b->threads), b->smem) != CUDA_SUCCESS)
      per_sm = 1;
    b->resident_blocks = std::max<int64_t>(1, int64_t{std::max(per_sm, 1)} * std::max(device_info(device).multiprocessors, 1));
  }
  if (b->static_grid) {
    int64_t total = 1, all = 1;
    for (size_t a = 0; a < gm.grid.size(); ++a) {
      all *= gm.grid[a];
      if (!gm.sequential(a)) total *= gm.grid[a];
    }
    b->empty = all <= 0;
    if (b->resident_blocks) total = std::min(total, b->resident_blocks);
    b->gx = static_cast<unsigned>(std::min<int64_t>(total, INT_MAX));
    b->gy = b->gx ? static_cast<unsigned>((total + b->gx - 1) / b->gx) : 1;
  }
  b->launching = call.what + ": launching " + c.lowered.name;
  return b;
}

const Bound& bound(const core::PallasCall& call, const std::string& arch, int device) {
  if (const core::BoundState* b = call.bound.get()) return static_cast<const Bound&>(*b);
  return static_cast<const Bound&>(*call.bound.install(make_bound(call, arch, device, compile_call(call, arch))));
}

// The call's kernel for arrays that are not 16-byte aligned (lower.h, `aligned`), made on the
// first such run: its own launch dimensions, threads and shared memory.
const Bound& unaligned_bound(const Bound& b, const core::PallasCall& call) {
  std::lock_guard<std::mutex> g(b.unaligned_mu);
  if (!b.unaligned) b.unaligned = make_bound(call, b.arch, b.device, compile_call(call, b.arch, /*tensor_maps=*/false, /*aligned=*/false));
  return *b.unaligned;
}

// Fills a device array with the interpreter's poison (NaN, bool true, int min, uint max).
void poison_fill(const Array& a, const std::string& what) {
  const Driver& d = driver();
  auto dev = reinterpret_cast<CUdeviceptr>(a.raw_data());
  size_t n = static_cast<size_t>(a.size());
  uint64_t bits = 0;
  switch (a.dtype()) {
    case DType::F16: bits = 0x7e00; break;
    case DType::BF16: bits = 0x7fc0; break;
    case DType::F8E4M3:
    case DType::F8E5M2: bits = 0x7f; break;
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
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, spec.swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        what + ": encoding a tensor map");
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
  // PALLAS_NO_CUDA is read once (asked on every call by core::resolve_backend).
  static bool no_cuda() {
    static const bool set = std::getenv("PALLAS_NO_CUDA") != nullptr;
    return set;
  }
  bool available() const override { return !no_cuda() && driver().ok; }
  std::string why_unavailable() const override { return no_cuda() ? "PALLAS_NO_CUDA is set" : driver().why; }
  void compile_check(const core::PallasCall& call, bool lower_only) const override {
    const std::string arch = call.compiler_params.arch.empty() ? "sm_90a" : call.compiler_params.arch;
    if (lower_only) lower(call, arch);
    else compile_call(call, arch);
  }
  // With `into`, the outputs are written there and nothing is returned (core::execute).
  std::vector<Array> run(const core::PallasCall& call, const std::vector<Array>& args, const std::vector<Array>* into) const override {
    return launch(call, args, into);
  }

  std::vector<double> time_runs(const std::function<void()>& fn, int warmup, int reps, bool flush_l2) const override {
    const Driver& d = driver();
    // On the device this thread used last (the events are its context's).
    const int dev = current_device();
    make_current(dev);
    for (int i = 0; i < warmup; ++i) fn();
    make_current(dev);
    // Larger than any GPU's L2 (50 MiB on H100/H200); kept for the process, one per device.
    static std::mutex flush_mu;
    static std::map<int, Array> flushes;
    Array flush;
    if (flush_l2) {
      std::lock_guard<std::mutex> g(flush_mu);
      Array& f = flushes[dev];
      if (!f.defined()) f = Array(Shape{64 << 20}, DType::U32, Device::cuda(dev));
      flush = f;
    }
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
  int device_count() const override { return cuda::device_count(); }
  std::string device_name() const override { return driver().arch + " smem " + std::to_string(driver().max_smem_optin); }

  // The caller's stream where one is in scope; else every device this process has used.
  void synchronize() const override {
    if (launch_stream()) {
      sync_launch_stream("synchronize");
      return;
    }
    int back = current_device();
    for (int n = 0; n < device_count(); ++n)
      if (device_opened(n)) {
        make_current(n);
        sync_launch_stream("synchronize cuda:" + std::to_string(n));
      }
    make_current(back);
  }

 private:
  // What a call does on the host, in order: check where the arguments live; make the context
  // current (once per thread); take the call's Bound (made on the first run); read dynamic grid
  // bounds; give host inputs and inputs the kernel writes a device copy of their own; make or
  // take the outputs (aliased inputs copied in, poison in debug runs); launch; then, in debug
  // runs only, print the kernel's log and report a failed check. A cached call of a kernel
  // without dynamic bounds, prints or checks allocates only its new outputs (none for into).
  std::vector<Array> launch(const core::PallasCall& call, const std::vector<Array>& args, const std::vector<Array>* into) const {
    const Driver& d = driver();
    // The device: the one the arguments live on (host arguments are copied there), else where
    // into() wants the outputs, else cuda:0 (as JAX's default device).
    int dev = -1;
    for (const Array& a : args) {
      if (a.device().is_host()) continue;
      if (dev >= 0 && a.device().index != dev)
        throw Error(call.what + ": its arguments live on cuda:" + std::to_string(dev) + " and " + a.device().str() +
                    "; a call runs on one device: move them to one (Array::to)");
      dev = a.device().index;
    }
    if (dev < 0 && into)
      for (const Array& o : *into)
        if (!o.device().is_host()) dev = o.device().index;
    if (dev < 0) dev = 0;
    make_current(dev);
    // The cached call on its first device: no lookup, lock or string work.
    const Bound* bp = static_cast<const Bound*>(call.bound.get());
    if (!bp || dev != bp->device) {
      const std::string arch = call.compiler_params.arch.empty() ? device_info(dev).arch : call.compiler_params.arch;
      bp = &bound(call, arch, dev);
      if (arch != bp->arch)
        throw Error(call.what + ": ran on a " + bp->arch + " device before and now on cuda:" + std::to_string(dev) + " (" + arch +
                    "); a call runs on GPUs of one architecture (make one call per architecture)");
    }
    const Bound& b = *bp;
    CUfunction fn = dev == b.device ? b.fn : load(b.compiled, call.what, dev)->fn;
    NvtxRange range(b.range);
    const core::GridMapping& gm = call.grid;
    const size_t nd = b.num_dynamic, nin = b.num_inputs, nout = b.num_outputs;
    SmallArray<int, 4> dyn(nd);
    for (size_t k = 0; k < nd; ++k) {
      // an integer scalar (core::check_arguments): converted in place, no arrays made
      Array h = args[k].to_host();
      int64_t v = 0;
      convert_elements(h.dtype(), h.raw_data(), DType::I64, &v, 1);
      core::check_dynamic_bound(call, static_cast<size_t>(k), v);
      if (v > INT_MAX) throw Error(call.what + ": dynamic grid bound " + std::to_string(k) + " is " + std::to_string(v) + "; at most 2^31-1 per axis");
      dyn[k] = static_cast<int>(v);
    }
    // The kernel's pointer parameters: inputs, then outputs.
    SmallArray<CUdeviceptr, 16> ptrs(nin + nout);
    std::vector<Array> temps;  // device copies of inputs, alive until the launch is queued
    for (size_t k = 0; k < nin; ++k) {
      const Array& given = args[nd + k];
      const Array* a = &given;
      if (given.device().is_host()) {
        temps.push_back(given.to(Device::cuda(dev)));
        a = &temps.back();
      } else if (b.writes[k]) {
        // An input the kernel writes (its block ref, or a scalar-prefetch ref) is a private
        // copy, as in the interpreter: the caller's array never changes.
        temps.push_back(given.copy());
        a = &temps.back();
      }
      ptrs[k] = reinterpret_cast<CUdeviceptr>(a->raw_data());
    }
    // Outputs: the caller's where into() gives one on this device (written in place), else new
    // ones (into() then copies them to the caller's at the end).
    std::vector<Array> outs;
    if (!into) outs.resize(nout);
    const bool poison = call.debug || poison_env();
    for (size_t o = 0; o < nout; ++o) {
      const Array* out;
      if (into && (*into)[o].device() == Device::cuda(dev)) {
        out = &(*into)[o];
      } else {
        if (outs.empty()) outs.resize(nout);
        const ShapeDtype& sd = gm.outputs[o].array;
        outs[o] = Array(sd.shape, sd.dtype, Device::cuda(dev));
        out = &outs[o];
      }
      ptrs[nin + o] = reinterpret_cast<CUdeviceptr>(out->raw_data());
      for (size_t i : b.aliased_from[o]) {
        if (ptrs[nin + o] == ptrs[i] || out->nbytes() == 0) continue;  // in place
        if (CUresult r = d.cuMemcpyDtoDAsync(ptrs[nin + o], ptrs[i], out->nbytes(), launch_stream()))
          check(r, call.what + ": copying an aliased input");
      }
      if (b.aliased_from[o].empty() && poison) poison_fill(*out, call.what);
    }
    // Vector accesses, cp.async and tensor copies need 16-byte-aligned arrays: a call given
    // another (a caller's view of its own memory) runs the kernel compiled without them
    // (lower.h, `aligned`: one element per access, no TMA, not persistent),
    // compiled once and kept beside the call's kernel.
    bool aligned = true;
    for (size_t k = 0; k < nin + nout; ++k) aligned = aligned && ptrs[k] % 16 == 0;
    const Bound& u = aligned ? b : unaligned_bound(b, call);
    if (!aligned) fn = dev == u.device ? u.fn : load(u.compiled, call.what, dev)->fn;
    const Compiled& cu = *u.compiled;
    // One CUDA block per program of the parallel axes (at most `resident_blocks` for a persistent
    // kernel); the sequential ones loop inside it.
    unsigned gx = u.gx, gy = u.gy;
    if (!u.static_grid) {
      int64_t total = 1, all = 1;
      size_t di = 0;
      for (size_t a = 0; a < gm.grid.size(); ++a) {
        int64_t g = gm.grid[a] < 0 ? dyn[di++] : gm.grid[a];
        all *= g;
        if (!gm.sequential(a)) total *= g;
      }
      if (all <= 0) return finish(into, std::move(outs));
      if (u.resident_blocks) total = std::min(total, u.resident_blocks);
      gx = static_cast<unsigned>(std::min<int64_t>(total, INT_MAX));
      gy = static_cast<unsigned>((total + gx - 1) / gx);
    } else if (u.empty) {
      return finish(into, std::move(outs));
    }
    Array err;
    CUdeviceptr perr = 0;
    if (u.has_check) {
      err = Array(Shape{2}, DType::I32, Device::cuda(dev));
      perr = reinterpret_cast<CUdeviceptr>(err.raw_data());
      check(d.cuMemsetD32Async(perr, 0x7fffffff, 2, launch_stream()), call.what + ": check flag");
    }
    // debug_print's log: [used slots, capacity, records...] (lower.h, PrintSite).
    Array log;
    CUdeviceptr plog = 0;
    constexpr uint64_t kLogSlots = uint64_t{1} << 21;  // 16 MiB
    if (u.has_print) {
      log = Array(Shape{static_cast<int64_t>(kLogSlots + 2)}, DType::U64, Device::cuda(dev));
      plog = reinterpret_cast<CUdeviceptr>(log.raw_data());
      uint64_t head[2] = {0, kLogSlots};
      check(d.cuMemcpyHtoDAsync(plog, head, sizeof head, launch_stream()), call.what + ": print log");
      sync_launch_stream(call.what + ": print log");  // `head` is on this stack
    }
    // The parameters, in the order lower() declares them: pointers, check flag, print log,
    // poison flag, dynamic bounds.
    int poison_flag = poison ? 1 : 0;
    // Then the loop pipeliner's TMA tensor maps (lower.h, TensorMapSpec), encoded over this
    // call's arrays.
    struct alignas(64) Map {
      unsigned char bytes[128];
    };
    const std::vector<TensorMapSpec>& specs = cu.lowered.tensor_maps;
    SmallArray<Map, 4> maps(specs.size());
    // Tiles too large for shared memory are exchanged through global scratch, one region per
    // CUDA block (Lowered::global_exchange_bytes): the last parameter.
    Array exchange;
    CUdeviceptr pgx = 0;
    if (size_t per_block = cu.lowered.global_exchange_bytes) {
      const uint64_t total = uint64_t{per_block} * gx * gy;
      constexpr uint64_t kMaxExchange = uint64_t{4} << 30;
      if (total > kMaxExchange)
        throw Error(call.what + ": a tile exchanged through global memory needs " + std::to_string(per_block) + " bytes per CUDA block, " +
                    std::to_string(total >> 20) + " MiB for " + std::to_string(uint64_t{gx} * gy) +
                    " blocks (at most 4 GiB); use smaller blocks, or fewer programs of the parallel axes");
      exchange = Array(Shape{static_cast<int64_t>(total)}, DType::U8, Device::cuda(dev));
      pgx = reinterpret_cast<CUdeviceptr>(exchange.raw_data());
    }
    SmallArray<void*, 24> kp(nin + nout + 3 + nd + specs.size() + (pgx ? 1 : 0));
    size_t np = 0;
    for (size_t k = 0; k < nin + nout; ++k) kp[np++] = &ptrs[k];
    kp[np++] = &perr;
    kp[np++] = &plog;
    kp[np++] = &poison_flag;
    for (size_t k = 0; k < nd; ++k) kp[np++] = &dyn[k];
    for (size_t m = 0; m < specs.size(); ++m) {
      encode_map(&maps[m], specs[m], reinterpret_cast<const void*>(ptrs[static_cast<size_t>(specs[m].param)]), call.what);
      kp[np++] = &maps[m];
    }
    if (pgx) kp[np++] = &pgx;
    if (CUresult r = d.cuLaunchKernel(fn, gx, gy, 1, u.threads, 1, 1, u.smem, launch_stream(), kp.data(), nullptr))
      check(r, u.launching);
    if (plog || u.has_check) {
      auto program_id = [&](int64_t lin) {
        std::vector<int64_t> pid(gm.grid.size());
        for (size_t a = pid.size(), dk = nd; a-- > 0;) {
          int64_t g = gm.grid[a] < 0 ? dyn[--dk] : gm.grid[a];
          pid[a] = lin % g;
          lin /= g;
        }
        return pid;
      };
      if (plog) print_log(cu.lowered.print_sites, plog, kLogSlots, program_id, call.what);
      if (u.has_check) {
        auto e = err.to_host().to_vector<int32_t>();
        if (e[0] != 0x7fffffff) {
          std::string m = e[1] >= 0 && e[1] < static_cast<int>(cu.lowered.check_messages.size()) ? cu.lowered.check_messages[static_cast<size_t>(e[1])] : "";
          throw Error(call.what + ": a check failed in program " + core::program_id_text(program_id(e[0])) + ": " + m);
        }
      }
    }
    return finish(into, std::move(outs));
  }

  // The call's result: its new outputs; or, for into(), nothing, after copying the outputs
  // made here (the caller's were not on this device) into the caller's arrays.
  static std::vector<Array> finish(const std::vector<Array>* into, std::vector<Array> outs) {
    if (!into) return outs;
    for (size_t o = 0; o < outs.size(); ++o)
      if (outs[o].defined()) (*into)[o].copy_from(outs[o]);
    return {};
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
