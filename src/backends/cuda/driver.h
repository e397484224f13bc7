// The CUDA driver API, loaded with dlopen at first use (the library never links libcuda).
#pragma once
#include <cuda.h>

#include <cstddef>
#include <string>

namespace pallas::cuda {

// Types and enum values come from the toolkit's cuda.h; the entry points are loaded by their
// versioned symbol names (cuda.h's macros rename e.g. cuMemAlloc to cuMemAlloc_v2 in this code
// as well, consistently, so the members below read as the documented names).
struct Driver {
  bool ok = false;
  std::string why;  // when !ok
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuMemsetD16Async)(CUdeviceptr, unsigned short, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  // Optional (nullptr when the driver lacks them): streams and graphs, for tests and benchmarks
  // that play the part of a caller's program.
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;
  CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode) = nullptr;
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*) = nullptr;
  CUresult (*cuGraphInstantiate)(CUgraphExec*, CUgraph, unsigned long long) = nullptr;
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*cuGraphExecDestroy)(CUgraphExec) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph) = nullptr;
  // How many CUDA blocks of a kernel fit on a multiprocessor at once (persistent kernels).
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t) = nullptr;
  CUresult (*cuMemsetD32)(CUdeviceptr, unsigned, size_t);
  CUresult (*cuMemsetD16)(CUdeviceptr, unsigned short, size_t);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  // Tensor-copy descriptors (TMA) for the loop pipeliner.
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                     const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill) = nullptr;
  std::string arch;  // "sm_90a" etc. of device 0
  int max_smem_optin = 0;
};

// The stream calls on this thread launch on (pl::StreamScope; nullptr: the legacy stream).
CUstream launch_stream();
// Waits for the launch stream's work (the whole context on the legacy stream).
void sync_launch_stream(const std::string& what);

// Loaded and initialised once (device 0's primary context retained).
const Driver& driver();

// One GPU: its primary context (retained on first use) and what the compiler needs of it.
struct DeviceInfo {
  CUcontext ctx = nullptr;
  std::string arch;  // "sm_90a" etc.
  int max_smem_optin = 0;
  int multiprocessors = 0;
};
int device_count();  // 0 without a usable driver
// Throws a pl::Error for a device that does not exist (naming how many do).
const DeviceInfo& device_info(int device);
// Makes the device's context current on this thread (a no-op when it already is, as far as
// this library made it so).
void make_current(int device);
int current_device();  // the device this thread last made current (0 before any)
bool device_opened(int device);  // whether this process has used the device (its context retained)
// Throws a pl::Error naming what failed.
void check(CUresult r, const std::string& what);

}  // namespace pallas::cuda
