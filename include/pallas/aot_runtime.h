// The run-time side of ahead-of-time compiled kernels (pallas::aot::generate writes the
// headers that use it). Needs only the CUDA driver: no tracing, no NVRTC, no Pallas library.
// Link pallas::aot_runtime (libcuda).
#pragma once
#include <cuda.h>

#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace pallas::aot {

// One compiled image of a kernel: a cubin for one architecture.
struct Image {
  const char* arch;  // "sm_90a", "sm_80", ...
  int major, minor;  // the compute capability it was built for
  bool arch_specific;  // "a" targets run only on exactly that capability
  const unsigned char* data;
  size_t size;
  unsigned smem_bytes;  // dynamic shared memory its lowering needs
};

// A kernel: its images, and the function loaded per CUDA context on first launch.
class Kernel {
 public:
  Kernel(const char* symbol, const Image* images, int num_images, unsigned threads)
      : symbol_(symbol), images_(images), num_images_(num_images), threads_(threads) {}
  // Launches on `stream` (0: the legacy default stream) over a gx x gy grid. params: pointers
  // to each kernel argument, in the generated header's order.
  CUresult launch(CUstream stream, unsigned gx, unsigned gy, void** params);
  // The image that runs on the current context's device (nullptr: none; see error_string).
  const Image* image_for_current_device(CUresult* r);

 private:
  struct Loaded {
    CUfunction f;
    unsigned smem;
  };
  CUresult function(Loaded* out);
  const char* symbol_;
  const Image* images_;
  int num_images_;
  unsigned threads_;
  std::mutex mu_;
  std::unordered_map<CUcontext, Loaded> loaded_;
};

// Copies `bytes` from src to dst on the stream unless they are the same memory (an aliased
// output given its input's own buffer is updated in place).
CUresult copy_if_distinct(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);

// Device memory for programs that have no allocator of their own (the driver's, on the current
// context, made current as launches do).
CUresult device_alloc(CUdeviceptr* p, size_t bytes);
CUresult device_free(CUdeviceptr p);
CUresult copy_to_device(CUdeviceptr dst, const void* src, size_t bytes);
CUresult copy_to_host(void* dst, CUdeviceptr src, size_t bytes);
CUresult synchronize();

// A readable message for the results launch functions return (CUDA_ERROR_NO_BINARY_FOR_GPU
// when no image matches the device, CUDA_ERROR_SHARED_OBJECT_INIT_FAILED when there is no
// driver, else the driver's own string).
const char* error_string(CUresult r);

}  // namespace pallas::aot
