#include "src/backends/cuda/driver.h"

#include <dlfcn.h>

#include <mutex>

#include "pallas/error.h"

namespace pallas::cuda {

Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      d.why_not = "libcuda.so.1 (the NVIDIA driver) was not found";
      return;
    }
#define PALLAS_X(name, type)                                        \
  d.name = reinterpret_cast<type>(dlsym(h, #name));                 \
  if (!d.name) {                                                    \
    d.why_not = std::string("the driver lacks ") + #name;           \
    return;                                                         \
  }
    PALLAS_CU_FN(PALLAS_X)
#undef PALLAS_X
    if (d.cuInit(0) != CUDA_SUCCESS || d.cuDeviceGetCount(&d.device_count) != CUDA_SUCCESS || d.device_count == 0) {
      d.why_not = "the driver reports no CUDA device";
      return;
    }
    CUdevice dev;
    d.cuDeviceGet(&dev, 0);
    d.cuDeviceGetAttribute(&d.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    d.cuDeviceGetAttribute(&d.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    d.cuDeviceGetAttribute(&d.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    d.cuDeviceGetAttribute(&d.max_smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
    if (d.cuDevicePrimaryCtxRetain(&d.ctx, dev) != CUDA_SUCCESS) {
      d.why_not = "could not retain the device's primary context";
      return;
    }
    d.loaded = true;
  });
  return d;
}

void check(CUresult r, const char* call, const std::string& what) {
  if (r == CUDA_SUCCESS) return;
  const char* msg = "unknown error";
  if (driver().cuGetErrorString) driver().cuGetErrorString(r, &msg);
  std::string hint;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) hint = " (the GPU is out of memory: free arrays or use smaller inputs)";
  throw Error(what + ": " + call + " failed: " + msg + hint);
}

void make_current() {
  Driver& d = driver();
  if (!d.loaded) throw Error("CUDA is not available: " + d.why_not);
  check(d.cuCtxSetCurrent(d.ctx), "cuCtxSetCurrent", "CUDA");
}

std::string device_arch() {
  Driver& d = driver();
  if (!d.loaded) return "sm_90a";
  std::string a = "sm_" + std::to_string(d.cc_major) + std::to_string(d.cc_minor);
  return d.cc_major == 9 ? a + "a" : a;
}

}  // namespace pallas::cuda
