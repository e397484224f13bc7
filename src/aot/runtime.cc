// pallas::aot::Kernel (include/pallas/aot_runtime.h): the driver calls an AOT launch needs.
#include "pallas/aot_runtime.h"

#include <dlfcn.h>

#include <type_traits>

namespace pallas::aot {

namespace {

// The driver entry points, loaded with dlopen so that a program using AOT kernels starts (and
// reports a clear error) on a machine without the driver; named apart from cuda.h's macros.
struct Api {
  bool ok = false;
  CUresult (*init)(unsigned);
  CUresult (*ctx_get_current)(CUcontext*);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*ctx_get_device)(CUdevice*);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
  CUresult (*module_load_data)(CUmodule*, const void*);
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*);
  CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**);
  CUresult (*memcpy_dtod_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*get_error_string)(CUresult, const char**);
  CUresult (*mem_alloc)(CUdeviceptr*, size_t);
  CUresult (*mem_free)(CUdeviceptr);
  CUresult (*memcpy_htod)(CUdeviceptr, const void*, size_t);
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, size_t);
  CUresult (*ctx_synchronize)();
};

const Api& api() {
  static const Api a = [] {
    Api x{};
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return x;
    bool all = true;
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(h, name));
      all = all && f;
    };
    sym(x.init, "cuInit");
    sym(x.ctx_get_current, "cuCtxGetCurrent");
    sym(x.ctx_set_current, "cuCtxSetCurrent");
    sym(x.ctx_get_device, "cuCtxGetDevice");
    sym(x.device_get, "cuDeviceGet");
    sym(x.device_get_attribute, "cuDeviceGetAttribute");
    sym(x.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    sym(x.module_load_data, "cuModuleLoadData");
    sym(x.module_get_function, "cuModuleGetFunction");
    sym(x.func_set_attribute, "cuFuncSetAttribute");
    sym(x.launch_kernel, "cuLaunchKernel");
    sym(x.memcpy_dtod_async, "cuMemcpyDtoDAsync_v2");
    sym(x.get_error_string, "cuGetErrorString");
    sym(x.mem_alloc, "cuMemAlloc_v2");
    sym(x.mem_free, "cuMemFree_v2");
    sym(x.memcpy_htod, "cuMemcpyHtoD_v2");
    sym(x.memcpy_dtoh, "cuMemcpyDtoH_v2");
    sym(x.ctx_synchronize, "cuCtxSynchronize");
    x.ok = all;
    return x;
  }();
  return a;
}
constexpr CUresult kNoDriver = CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
// A current context: the caller's (torch, JAX and the CUDA runtime make the device's primary
// context current), else device 0's primary context.
CUresult ensure_context() {
  if (!api().ok) return kNoDriver;
  CUcontext c = nullptr;
  CUresult r = api().ctx_get_current(&c);
  if (r == CUDA_ERROR_NOT_INITIALIZED) {
    if ((r = api().init(0)) != CUDA_SUCCESS) return r;
    r = api().ctx_get_current(&c);
  }
  if (r != CUDA_SUCCESS || c) return r;
  CUdevice d;
  if ((r = api().device_get(&d, 0)) != CUDA_SUCCESS) return r;
  if ((r = api().primary_ctx_retain(&c, d)) != CUDA_SUCCESS) return r;
  return api().ctx_set_current(c);
}
}  // namespace

const Image* Kernel::image_for_current_device(CUresult* r) {
  CUdevice d;
  int major = 0, minor = 0;
  if ((*r = api().ctx_get_device(&d)) != CUDA_SUCCESS) return nullptr;
  if ((*r = api().device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d)) != CUDA_SUCCESS) return nullptr;
  if ((*r = api().device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d)) != CUDA_SUCCESS) return nullptr;
  // an exact match first (arch-specific targets need one), else the newest of the same major
  // version not newer than the device (cubins run on later minor versions)
  const Image* best = nullptr;
  for (int i = 0; i < num_images_; ++i) {
    const Image& im = images_[i];
    if (im.major == major && im.minor == minor) return &im;
    if (!im.arch_specific && im.major == major && im.minor <= minor && (!best || im.minor > best->minor)) best = &im;
  }
  if (!best) *r = CUDA_ERROR_NO_BINARY_FOR_GPU;
  return best;
}

CUresult Kernel::function(Loaded* out) {
  CUresult r = ensure_context();
  if (r != CUDA_SUCCESS) return r;
  CUcontext c;
  if ((r = api().ctx_get_current(&c)) != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = loaded_.find(c); it != loaded_.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  const Image* im = image_for_current_device(&r);
  if (!im) return r;
  CUmodule m;
  CUfunction f;
  if ((r = api().module_load_data(&m, im->data)) != CUDA_SUCCESS) return r;
  if ((r = api().module_get_function(&f, m, symbol_)) != CUDA_SUCCESS) return r;
  if (im->smem_bytes > 48 * 1024 &&
      (r = api().func_set_attribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(im->smem_bytes))) != CUDA_SUCCESS)
    return r;
  *out = loaded_[c] = Loaded{f, im->smem_bytes};
  return CUDA_SUCCESS;
}

CUresult Kernel::launch(CUstream stream, unsigned gx, unsigned gy, void** params) {
  Loaded k;
  CUresult r = function(&k);
  if (r != CUDA_SUCCESS) return r;
  if (gx == 0 || gy == 0) return CUDA_SUCCESS;  // an empty grid runs no program
  return api().launch_kernel(k.f, gx, gy, 1, threads_, 1, 1, k.smem, stream, params, nullptr);
}

CUresult copy_if_distinct(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  if (dst == src || bytes == 0) return CUDA_SUCCESS;
  if (!api().ok) return kNoDriver;
  return api().memcpy_dtod_async(dst, src, bytes, stream);
}

CUresult device_alloc(CUdeviceptr* p, size_t bytes) {
  CUresult r = ensure_context();
  return r != CUDA_SUCCESS ? r : api().mem_alloc(p, bytes ? bytes : 1);
}
CUresult device_free(CUdeviceptr p) {
  CUresult r = ensure_context();
  return r != CUDA_SUCCESS ? r : api().mem_free(p);
}
CUresult copy_to_device(CUdeviceptr dst, const void* src, size_t bytes) {
  CUresult r = ensure_context();
  return r != CUDA_SUCCESS || !bytes ? r : api().memcpy_htod(dst, src, bytes);
}
CUresult copy_to_host(void* dst, CUdeviceptr src, size_t bytes) {
  CUresult r = ensure_context();
  return r != CUDA_SUCCESS || !bytes ? r : api().memcpy_dtoh(dst, src, bytes);
}
CUresult synchronize() {
  CUresult r = ensure_context();
  return r != CUDA_SUCCESS ? r : api().ctx_synchronize();
}

const char* error_string(CUresult r) {
  if (r == CUDA_ERROR_NO_BINARY_FOR_GPU) return "no AOT image of this kernel runs on this GPU (compile it for its architecture)";
  if (!api().ok) return "the CUDA driver (libcuda.so.1) was not found";
  const char* s = nullptr;
  api().get_error_string(r, &s);
  return s ? s : "unknown CUDA error";
}

}  // namespace pallas::aot
