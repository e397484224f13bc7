// The CUDA driver API, loaded with dlopen at run time: the library builds, and compiles
// kernels to cubins, on machines without a GPU or libcuda.
#pragma once
#include <cuda.h>

#include <string>
#include <type_traits>

namespace pallas::cuda {

struct Driver {
#define PALLAS_CU_FN(X)                                                                                      \
  X(cuInit, CUresult (*)(unsigned))                                                                           \
  X(cuGetErrorString, CUresult (*)(CUresult, const char**))                                                   \
  X(cuDeviceGetCount, CUresult (*)(int*))                                                                     \
  X(cuDeviceGet, CUresult (*)(CUdevice*, int))                                                                \
  X(cuDeviceGetAttribute, CUresult (*)(int*, CUdevice_attribute, CUdevice))                                   \
  X(cuDevicePrimaryCtxRetain, CUresult (*)(CUcontext*, CUdevice))                                             \
  X(cuCtxSetCurrent, CUresult (*)(CUcontext))                                                                 \
  X(cuCtxSynchronize, CUresult (*)())                                                                         \
  X(cuMemAlloc_v2, CUresult (*)(CUdeviceptr*, size_t))                                                        \
  X(cuMemFree_v2, CUresult (*)(CUdeviceptr))                                                                  \
  X(cuMemcpyHtoD_v2, CUresult (*)(CUdeviceptr, const void*, size_t))                                          \
  X(cuMemcpyDtoH_v2, CUresult (*)(void*, CUdeviceptr, size_t))                                                \
  X(cuMemcpyDtoD_v2, CUresult (*)(CUdeviceptr, CUdeviceptr, size_t))                                          \
  X(cuMemsetD8_v2, CUresult (*)(CUdeviceptr, unsigned char, size_t))                                          \
  X(cuModuleLoadData, CUresult (*)(CUmodule*, const void*))                                                   \
  X(cuModuleGetFunction, CUresult (*)(CUfunction*, CUmodule, const char*))                                    \
  X(cuFuncSetAttribute, CUresult (*)(CUfunction, CUfunction_attribute, int))                                  \
  X(cuLaunchKernel, CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,      \
                                 unsigned, CUstream, void**, void**))                                         \
  X(cuStreamSynchronize, CUresult (*)(CUstream))                                                              \
  X(cuEventCreate, CUresult (*)(CUevent*, unsigned))                                                          \
  X(cuEventRecord, CUresult (*)(CUevent, CUstream))                                                           \
  X(cuEventSynchronize, CUresult (*)(CUevent))                                                                \
  X(cuEventElapsedTime, CUresult (*)(float*, CUevent, CUevent))                                               \
  X(cuTensorMapEncodeTiled,                                                                                   \
    CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,  \
                 const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,             \
                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill))
#define PALLAS_X(name, type) std::type_identity_t<type> name = nullptr;
  PALLAS_CU_FN(PALLAS_X)
#undef PALLAS_X

  bool loaded = false;
  std::string why_not;  // when not loaded or no device
  int device_count = 0;
  CUcontext ctx = nullptr;
  int cc_major = 0, cc_minor = 0, sm_count = 0, max_smem_optin = 0;
};

// The process-wide driver (loaded and initialised on first use; never throws).
Driver& driver();
// Throws a pl::Error "<what>: <call> failed: <driver message>" when r is not CUDA_SUCCESS.
void check(CUresult r, const char* call, const std::string& what);
// Makes the primary context of device 0 current on this thread (throws when unavailable).
void make_current();
// "sm_90a" on Hopper (wgmma and TMA need the a-suffixed target), else sm_<major><minor>.
std::string device_arch();

}  // namespace pallas::cuda
