// A stand-in for the NVIDIA driver library (libcuda.so.1), for measuring and profiling the
// host side of a Pallas call on a machine without a GPU: the CUDA backend loads it, believes
// an sm_90 H200 is present, compiles kernels with the real NVRTC, "loads" their cubins and
// "launches" them (cuLaunchKernel does nothing). Device memory is host memory, so copies and
// memsets work and results read back are the inputs' bytes, not kernel results.
//
// Never installed and never on a default search path: it is built only with
// -DPALLAS_BUILD_STUB_DRIVER=ON, into its own directory (build/stub_driver/), and used only by
// putting that directory on LD_LIBRARY_PATH (scripts/launch_overhead.sh). The library's own
// dlopen("libcuda.so.1") otherwise finds the real driver or none.
//
// Every entry point src/backends/cuda/driver.cc resolves is defined here. They are written
// under their documented names with cuda.h included, so its macros give them the versioned
// symbol names (cuMemAlloc -> cuMemAlloc_v2, ...) and its prototypes check the signatures.
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

// Handles are pointers to these; their contents are never read by the library.
struct Object {
  int kind;
};
Object g_context{1};
Object g_module{2};
Object g_function{3};
Object g_graph{4};
Object g_graph_exec{5};

std::atomic<unsigned long long> g_launches{0};
std::atomic<unsigned> g_last_block{0}, g_last_smem{0};

struct Event {
  double ms = 0;  // host time at the last record: elapsed times are host intervals
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class T>
void fill(CUdeviceptr dst, T value, size_t n) {
  T* p = reinterpret_cast<T*>(dst);
  for (size_t i = 0; i < n; ++i) p[i] = value;
}

}  // namespace

extern "C" {

// The launch count, for a measuring program that wants to check the calls reached the driver
// (looked up with dlsym; not a driver API).
unsigned long long pallas_stub_launch_count() { return g_launches.load(); }
// The last launch's threads per CUDA block and dynamic shared memory (a test checks which kernel
// shape a call launched).
void pallas_stub_last_launch(unsigned* block_x, unsigned* smem) {
  *block_x = g_last_block.load();
  *smem = g_last_smem.load();
}

CUresult cuInit(unsigned) { return CUDA_SUCCESS; }
// NVRTC itself looks for the driver (it dlopens libcuda.so.1 and calls these when present);
// it compiles without one, so the stub declines: no export tables, and the toolkit's version.
CUresult cuGetExportTable(const void** table, const CUuuid*) {
  *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuDriverGetVersion(int* v) {
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}
// STUB_CUDA_DEVICES=n: that many devices (default 1), for checking the library's device routing.
int stub_devices() {
  const char* e = std::getenv("STUB_CUDA_DEVICES");
  return e && std::atoi(e) > 0 ? std::atoi(e) : 1;
}
CUresult cuDeviceGetCount(int* n) {
  *n = stub_devices();
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= stub_devices()) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
// An H200 (sm_90): the attributes the library and a caller's program are likely to ask for.
CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 227 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 48 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 228 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 60 * 1024 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1980000; break;  // kHz
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 6144; break;
    default: *v = 0;
  }
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) {
  *c = reinterpret_cast<CUcontext>(&g_context);
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }
// Refuses what the real driver refuses first: an image that is no CUDA ELF object (its ELF
// magic, and EM_CUDA, 190, as the machine). The library's tests of cached cubins the driver
// refuses (tests/compile_cache_test.cc) rely on it.
CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  const auto* b = static_cast<const unsigned char*>(image);
  if (!b || std::memcmp(b, "\x7f" "ELF", 4) != 0 || (b[18] | b[19] << 8) != 190) return CUDA_ERROR_INVALID_IMAGE;
  *m = reinterpret_cast<CUmodule>(&g_module);
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule) { return CUDA_SUCCESS; }  // (cuda_bench's raw_driver_launch)
CUresult cuModuleGetFunction(CUfunction* f, CUmodule, const char*) {
  *f = reinterpret_cast<CUfunction>(&g_function);
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) { return CUDA_SUCCESS; }
CUresult cuLaunchKernel(CUfunction f, unsigned, unsigned, unsigned, unsigned bx, unsigned, unsigned, unsigned smem, CUstream, void**, void**) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  g_launches.fetch_add(1, std::memory_order_relaxed);
  g_last_block.store(bx);
  g_last_smem.store(smem);
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr* p, size_t n) {
  void* q = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (!q) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<CUdeviceptr>(q);
  return CUDA_SUCCESS;
}
CUresult cuMemFree(CUdeviceptr p) {
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD(CUdeviceptr d, const void* s, size_t n) {
  std::memcpy(reinterpret_cast<void*>(d), s, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH(void* d, CUdeviceptr s, size_t n) {
  std::memcpy(d, reinterpret_cast<const void*>(s), n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) {
  std::memmove(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s), n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream) { return cuMemcpyDtoD(d, s, n); }
CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void* s, size_t n, CUstream) { return cuMemcpyHtoD(d, s, n); }
CUresult cuMemsetD32(CUdeviceptr d, unsigned v, size_t n) {
  fill<uint32_t>(d, v, n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n) {
  fill<uint16_t>(d, v, n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  std::memset(reinterpret_cast<void*>(d), v, n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream) { return cuMemsetD32(d, v, n); }
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream) { return cuMemsetD16(d, v, n); }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream) { return cuMemsetD8(d, v, n); }

CUresult cuStreamCreate(CUstream* s, unsigned) {
  *s = reinterpret_cast<CUstream>(new Object{6});
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy(CUstream s) {
  delete reinterpret_cast<Object*>(s);
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
// Graphs: a capture records nothing (launches are no-ops anyway) and a replay does nothing.
CUresult cuStreamBeginCapture(CUstream, CUstreamCaptureMode) { return CUDA_SUCCESS; }
CUresult cuStreamEndCapture(CUstream, CUgraph* g) {
  *g = reinterpret_cast<CUgraph>(&g_graph);
  return CUDA_SUCCESS;
}
CUresult cuGraphInstantiate(CUgraphExec* e, CUgraph, unsigned long long) {
  *e = reinterpret_cast<CUgraphExec>(&g_graph_exec);
  return CUDA_SUCCESS;
}
CUresult cuGraphLaunch(CUgraphExec, CUstream) { return CUDA_SUCCESS; }
CUresult cuGraphExecDestroy(CUgraphExec) { return CUDA_SUCCESS; }
CUresult cuGraphDestroy(CUgraph) { return CUDA_SUCCESS; }

CUresult cuGetErrorString(CUresult r, const char** s) {
  *s = r == CUDA_SUCCESS ? "no error" : r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory (stub driver)" : "error (stub driver)";
  return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent* e, unsigned) {
  *e = reinterpret_cast<CUevent>(new Event);
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent e) {
  delete reinterpret_cast<Event*>(e);
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent e, CUstream) {
  reinterpret_cast<Event*>(e)->ms = now_ms();
  return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  *ms = static_cast<float>(reinterpret_cast<Event*>(b)->ms - reinterpret_cast<Event*>(a)->ms);
  return CUDA_SUCCESS;
}

CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  std::memset(map, 0, sizeof *map);
  return CUDA_SUCCESS;
}

}  // extern "C"
