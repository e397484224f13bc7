#include "src/backends/cuda/driver.h"

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "pallas/stream.h"

#include <dlfcn.h>

#include <cstdlib>
#include <type_traits>
#include <mutex>
#include <unordered_map>

#include "pallas/error.h"
#include "src/runtime/buffer.h"

namespace pallas::cuda {

namespace {

int g_count = 0;
// One entry per device, made on first use (device 0 when the driver loads); never freed, so
// references stay valid while other threads add devices.
std::mutex g_devices_mu;
std::vector<std::unique_ptr<DeviceInfo>> g_devices;
thread_local int t_current = -1;

// (g_devices_mu held) retains the device's primary context and reads its properties.
DeviceInfo* open_device(const Driver& d, int n, std::string* why) {
  CUdevice dev;
  auto info = std::make_unique<DeviceInfo>();
  int major = 0, minor = 0;
  if (d.cuDeviceGet(&dev, n) != 0 || d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != 0 ||
      d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != 0) {
    *why = "could not query CUDA device " + std::to_string(n);
    return nullptr;
  }
  d.cuDeviceGetAttribute(&info->max_smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
  d.cuDeviceGetAttribute(&info->multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  info->arch = "sm_" + std::to_string(major) + std::to_string(minor) + (major == 9 ? "a" : "");
  if (d.cuDevicePrimaryCtxRetain(&info->ctx, dev) != 0) {
    *why = "could not create a CUDA context on device " + std::to_string(n);
    return nullptr;
  }
  if (g_devices.size() <= static_cast<size_t>(n)) g_devices.resize(static_cast<size_t>(n) + 1);
  g_devices[static_cast<size_t>(n)] = std::move(info);
  return g_devices[static_cast<size_t>(n)].get();
}

Driver load() {
  Driver d;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    d.why = "libcuda.so.1 could not be loaded (no NVIDIA driver)";
    return d;
  }
  bool all = true;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (!fn) all = false;
  };
  sym(d.cuInit, "cuInit");
  sym(d.cuDeviceGetCount, "cuDeviceGetCount");
  sym(d.cuDeviceGet, "cuDeviceGet");
  sym(d.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  sym(d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  sym(d.cuCtxSetCurrent, "cuCtxSetCurrent");
  sym(d.cuCtxSynchronize, "cuCtxSynchronize");
  sym(d.cuModuleLoadData, "cuModuleLoadData");
  sym(d.cuModuleGetFunction, "cuModuleGetFunction");
  sym(d.cuFuncSetAttribute, "cuFuncSetAttribute");
  sym(d.cuLaunchKernel, "cuLaunchKernel");
  sym(d.cuMemAlloc, "cuMemAlloc_v2");
  sym(d.cuMemFree, "cuMemFree_v2");
  sym(d.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  sym(d.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  sym(d.cuMemcpyDtoD, "cuMemcpyDtoD_v2");
  sym(d.cuMemsetD32, "cuMemsetD32_v2");
  sym(d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  sym(d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  sym(d.cuMemsetD32Async, "cuMemsetD32Async");
  sym(d.cuMemsetD16Async, "cuMemsetD16Async");
  sym(d.cuMemsetD8Async, "cuMemsetD8Async");
  sym(d.cuStreamSynchronize, "cuStreamSynchronize");
  sym(d.cuMemsetD16, "cuMemsetD16_v2");
  sym(d.cuMemsetD8, "cuMemsetD8_v2");
  sym(d.cuGetErrorString, "cuGetErrorString");
  sym(d.cuEventCreate, "cuEventCreate");
  sym(d.cuEventDestroy, "cuEventDestroy_v2");
  sym(d.cuEventRecord, "cuEventRecord");
  sym(d.cuEventSynchronize, "cuEventSynchronize");
  sym(d.cuEventElapsedTime, "cuEventElapsedTime_v2");
  if (!d.cuEventElapsedTime) {
    all = true;
    sym(d.cuEventElapsedTime, "cuEventElapsedTime");
  }
  d.cuTensorMapEncodeTiled = reinterpret_cast<decltype(d.cuTensorMapEncodeTiled)>(dlsym(h, "cuTensorMapEncodeTiled"));
  auto optional = [&](auto& f, const char* name) { f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(h, name)); };
  optional(d.cuStreamCreate, "cuStreamCreate");
  optional(d.cuStreamDestroy, "cuStreamDestroy_v2");
  optional(d.cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  optional(d.cuStreamEndCapture, "cuStreamEndCapture");
  optional(d.cuGraphInstantiate, "cuGraphInstantiateWithFlags");
  optional(d.cuGraphLaunch, "cuGraphLaunch");
  optional(d.cuGraphExecDestroy, "cuGraphExecDestroy");
  optional(d.cuGraphDestroy, "cuGraphDestroy");
  optional(d.cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  if (!all) {
    d.why = "libcuda lacks a driver API entry point Pallas needs (driver too old?)";
    return d;
  }
  int n = 0;
  if (d.cuInit(0) != 0 || d.cuDeviceGetCount(&n) != 0 || n == 0) {
    d.why = "the NVIDIA driver reports no usable CUDA device";
    return d;
  }
  g_count = n;
  std::lock_guard<std::mutex> g(g_devices_mu);
  DeviceInfo* dev0 = open_device(d, 0, &d.why);
  if (!dev0) return d;
  d.arch = dev0->arch;
  d.max_smem_optin = dev0->max_smem_optin;
  d.ok = true;
  return d;
}

// A small caching allocator: freed blocks are kept by size (up to 8 GiB in all), so that a
// steady stream of calls does not pay cuMemAlloc/cuMemFree each time.
// Blocks are pooled per device and stream (the launch stream when they were allocated): a
// freed block is reused only by allocations on the same stream, whose work is ordered after the
// old user's.
struct Pool {
  struct Block {
    int device;
    size_t size;
    CUstream stream;
  };
  using Key = std::tuple<int, CUstream, size_t>;
  std::mutex mu;
  std::map<Key, std::vector<CUdeviceptr>> free;
  std::unordered_map<CUdeviceptr, Block> blocks;
  size_t cached = 0;
  void release_device(int device) {  // (mu held, the device current) give its cached blocks back to the driver
    for (auto it = free.begin(); it != free.end();) {
      if (std::get<0>(it->first) != device) {
        ++it;
        continue;
      }
      for (CUdeviceptr q : it->second) driver().cuMemFree(q), blocks.erase(q), cached -= std::get<2>(it->first);
      it = free.erase(it);
    }
  }
};
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}
size_t round_size(size_t b) { return b <= 512 ? 512 : (b + 4095) & ~size_t{4095}; }

void* dev_alloc(int device, size_t bytes) {
  make_current(device);
  size_t n = round_size(bytes);
  CUstream st = launch_stream();
  Pool& P = pool();
  {
    std::lock_guard<std::mutex> g(P.mu);
    auto it = P.free.find({device, st, n});
    if (it != P.free.end() && !it->second.empty()) {
      CUdeviceptr p = it->second.back();
      it->second.pop_back();
      P.cached -= n;
      return reinterpret_cast<void*>(p);
    }
  }
  CUdeviceptr p = 0;
  CUresult r = driver().cuMemAlloc(&p, n);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {  // give the cache back and try once more
    std::lock_guard<std::mutex> g(P.mu);
    P.release_device(device);
    r = driver().cuMemAlloc(&p, n);
  }
  check(r, "allocating " + std::to_string(bytes) + " bytes of device memory");
  std::lock_guard<std::mutex> g(P.mu);
  P.blocks[p] = {device, n, st};
  return reinterpret_cast<void*>(p);
}
void dev_free(int device, void* ptr) {
  make_current(device);
  CUdeviceptr p = reinterpret_cast<CUdeviceptr>(ptr);
  Pool& P = pool();
  std::lock_guard<std::mutex> g(P.mu);
  auto it = P.blocks.find(p);
  if (it == P.blocks.end()) return;
  if (P.cached + it->second.size <= (size_t{8} << 30)) {
    P.free[{it->second.device, it->second.stream, it->second.size}].push_back(p);
    P.cached += it->second.size;
    return;
  }
  P.blocks.erase(it);
  driver().cuMemFree(p);
}
void to_dev(int device, void* dst, const void* src, size_t n) {
  make_current(device);
  check(driver().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, n), "copying to the device");
}
void to_host(int device, void* dst, const void* src, size_t n) {
  make_current(device);
  if (launch_stream()) sync_launch_stream("waiting for the stream before copying to the host");  // a non-blocking stream's results
  check(driver().cuMemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), n), "copying to the host");
}
void dev_copy(int device, void* dst, const void* src, size_t n) {
  make_current(device);
  check(driver().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), n, launch_stream()),
        "copying on the device");
}

void dev_zero(int device, void* dst, size_t n) {
  make_current(device);
  check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(dst), 0, n, launch_stream()), "zeroing device memory");
}

}  // namespace

const Driver& driver() {
  static Driver d = [] {
    Driver r = load();
    if (r.ok) {
      DeviceMemoryHooks h;
      h.alloc = dev_alloc;
      h.free = dev_free;
      h.copy_to_device = to_dev;
      h.copy_to_host = to_host;
      h.copy_device = dev_copy;
      h.zero = dev_zero;
      set_device_memory_hooks(h);
    }
    return r;
  }();
  return d;
}

int device_count() { return driver().ok ? g_count : 0; }

const DeviceInfo& device_info(int device) {
  const Driver& d = driver();
  if (!d.ok) throw Error("no CUDA device: " + d.why);
  if (device < 0 || device >= g_count)
    throw Error("cuda:" + std::to_string(device) + " does not exist: this machine has " + std::to_string(g_count) + " CUDA device" +
                (g_count == 1 ? "" : "s") + " (cuda:0" + (g_count > 1 ? " to cuda:" + std::to_string(g_count - 1) : std::string()) + ")");
  std::lock_guard<std::mutex> g(g_devices_mu);
  if (static_cast<size_t>(device) < g_devices.size() && g_devices[static_cast<size_t>(device)])
    return *g_devices[static_cast<size_t>(device)];
  std::string why;
  DeviceInfo* info = open_device(d, device, &why);
  if (!info) throw Error(why);
  return *info;
}

void make_current(int device) {
  if (device == t_current && device >= 0) return;  // (t_current starts at -1: not a device)
  const DeviceInfo& info = device_info(device);
  check(driver().cuCtxSetCurrent(info.ctx), "making cuda:" + std::to_string(device) + "'s context current");
  t_current = device;
}

int current_device() { return t_current < 0 ? 0 : t_current; }

bool device_opened(int device) {
  std::lock_guard<std::mutex> g(g_devices_mu);
  return device >= 0 && static_cast<size_t>(device) < g_devices.size() && g_devices[static_cast<size_t>(device)] != nullptr;
}

CUstream launch_stream() { return static_cast<CUstream>(current_stream()); }

void sync_launch_stream(const std::string& what) {
  CUstream s = launch_stream();
  check(s ? driver().cuStreamSynchronize(s) : driver().cuCtxSynchronize(), what);
}

void check(CUresult r, const std::string& what) {
  if (r == 0) return;
  const char* s = nullptr;
  if (driver().cuGetErrorString) driver().cuGetErrorString(r, &s);
  std::string msg = std::string("CUDA error ") + std::to_string(r) + " (" + (s ? s : "?") + ") " + what;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) msg += ": out of device memory";
  throw Error(msg);
}

// Installs the memory hooks as soon as the library loads where a GPU is present, so that
// Array::to(Device::cuda()) works before any call.
namespace {
[[maybe_unused]] const bool g_hooks = [] {
  if (std::getenv("PALLAS_NO_CUDA")) return false;
  return driver().ok;
}();
}  // namespace

}  // namespace pallas::cuda
