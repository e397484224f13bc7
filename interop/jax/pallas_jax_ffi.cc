// XLA FFI handlers that run Pallas C++ kernels inside JAX programs (jax.ffi.ffi_call).
//
//   PallasGeluMulCuda / PallasGeluMulCpu   out = gelu(x) * y   (common/gelu_mul.h)
//   PallasSoftmaxCuda / PallasSoftmaxCpu   softmax over the last axis (pl::kernels::softmax)
//   PallasGeluMulBackwardCuda / ...Cpu     (x, y, g) -> (dx, dy), gelu_mul's backward kernel
//   PallasSoftmaxBackwardCuda / ...Cpu     (y, g) -> dx, the library's pl::kernels::softmax_bwd
//   (pallas_jax.py attaches the two backwards to the forwards with jax.custom_vjp)
//
// On the GPU the handler wraps XLA's buffers as non-owning pl::Array device views and writes
// the result with Call::into, so the kernel reads the operands and writes the result buffer
// XLA allocated, with no copy, on the stream XLA gives the call (pl::StreamScope): the launch
// is queued there and the handler returns at once. The CPU handlers run the same kernels on
// the Pallas interpreter (what the tests use where there is no GPU).
//
// Only XLA's header-only FFI API (jax.ffi.include_dir()) and the Pallas headers are needed to
// compile this file: no CUDA header, no jaxlib library.
#include <xla/ffi/api/ffi.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "common/gelu_mul.h"

namespace ffi = xla::ffi;
namespace pl = pallas;
namespace pi = pallas_interop;

// The CUDA runtime's stream handle type, declared as the runtime declares it, so that the
// stream XLA passes decodes without including CUDA headers.
typedef struct CUstream_st* cudaStream_t;

namespace {

pi::CallCache& cache() {
  static pi::CallCache c;
  return c;
}

// For the zero-copy test (pallas_jax_last_output below).
std::atomic<uintptr_t> g_last_out{0};
std::atomic<const char*> g_last_backend{"none"};

bool pallas_dtype(ffi::DataType t, pl::DType* out) {
  switch (t) {
    case ffi::DataType::F32: *out = pl::f32; return true;
    case ffi::DataType::F16: *out = pl::f16; return true;
    case ffi::DataType::BF16: *out = pl::bf16; return true;
    default: return false;
  }
}

// The checks shared by the handlers; an empty string means the operands are fine.
std::string check(const char* op, const ffi::AnyBuffer& x, const ffi::AnyBuffer& other, const char* other_name) {
  pl::DType dt;
  if (!pallas_dtype(x.element_type(), &dt))
    return std::string("pallas ") + op + ": unsupported dtype; supported: float32, float16, bfloat16";
  if (other.element_type() != x.element_type()) return std::string("pallas ") + op + ": " + other_name + " has another dtype than x";
  auto a = x.dimensions(), b = other.dimensions();
  bool same = a.size() == b.size();
  for (size_t i = 0; same && i < a.size(); ++i) same = a[i] == b[i];
  if (!same) return std::string("pallas ") + op + ": " + other_name + " has another shape than x";
  return {};
}

// Runs a call, on `stream` for the GPU (nullptr: the interpreter, on the host). pl::Error
// becomes an XLA error naming the kernel, which JAX raises as an exception.
template <class F>
ffi::Error launch(const char* op, cudaStream_t stream, bool gpu, const pl::Call& call, const pl::Array& out0, F run) {
  try {
    if (gpu) {
      pl::StreamScope scope(stream);
      run();
    } else {
      run();
    }
  } catch (const pl::Error& e) {
    return ffi::Error::Internal(std::string("pallas ") + op + ": the Pallas C++ kernel '" + call.name() + "' failed: " + e.what());
  }
  g_last_out = reinterpret_cast<uintptr_t>(out0.raw_data());
  g_last_backend = !gpu ? "interpreter" : call.backend_name() == "cuda" ? "cuda" : "interpreter";
  return ffi::Error::Success();
}

pl::Device device_for(bool gpu) { return gpu ? pl::Device::cuda(0) : pl::Device::host(); }

ffi::Error gelu_mul(cudaStream_t stream, int32_t ordinal, bool gpu, ffi::AnyBuffer x, ffi::AnyBuffer y,
                    ffi::Result<ffi::AnyBuffer> out) {
  if (gpu && ordinal != 0)
    return ffi::Error::InvalidArgument("pallas gelu_mul: runs on GPU 0 only so far (got device " + std::to_string(ordinal) + ")");
  if (std::string e = check("gelu_mul", x, y, "y"); !e.empty()) return ffi::Error::InvalidArgument(e);
  const int64_t n = static_cast<int64_t>(x.element_count());
  if (n == 0) return ffi::Error::Success();
  pl::DType dt;
  pallas_dtype(x.element_type(), &dt);
  pl::Backend be = gpu ? pl::Backend::Cuda : pl::Backend::Interpret;
  pl::Call call = cache().get(pi::cache_key("gelu_mul", {n}, dt, be), [&] { return pi::gelu_mul(n, dt, be); });
  // XLA's buffers are dense row-major (the default layout ffi_call asks for): flat views.
  pl::Array xv = pl::Array::view(x.untyped_data(), {n}, dt, device_for(gpu));
  pl::Array yv = pl::Array::view(y.untyped_data(), {n}, dt, device_for(gpu));
  pl::Array ov = pl::Array::view(out->untyped_data(), {n}, dt, device_for(gpu));
  return launch("gelu_mul", stream, gpu, call, ov, [&] { call.into({ov}, {xv, yv}); });
}

ffi::Error softmax(cudaStream_t stream, int32_t ordinal, bool gpu, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out) {
  if (gpu && ordinal != 0)
    return ffi::Error::InvalidArgument("pallas softmax: runs on GPU 0 only so far (got device " + std::to_string(ordinal) + ")");
  if (std::string e = check("softmax", x, *out, "the result"); !e.empty()) return ffi::Error::InvalidArgument(e);
  auto dims = x.dimensions();
  if (dims.size() == 0) return ffi::Error::InvalidArgument("pallas softmax: x must have at least one dimension");
  const int64_t n = static_cast<int64_t>(x.element_count()), cols = dims[dims.size() - 1];
  if (n == 0) return ffi::Error::Success();
  const int64_t rows = n / cols;
  pl::DType dt;
  pallas_dtype(x.element_type(), &dt);
  pl::Backend be = gpu ? pl::Backend::Auto : pl::Backend::Interpret;
  pl::Call call = cache().get(pi::cache_key("softmax", {rows, cols}, dt, be), [&] { return pi::softmax(rows, cols, dt, be); });
  pl::Array xv = pl::Array::view(x.untyped_data(), {rows, cols}, dt, device_for(gpu));
  pl::Array ov = pl::Array::view(out->untyped_data(), {rows, cols}, dt, device_for(gpu));
  return launch("softmax", stream, gpu, call, ov, [&] { call.into({ov}, {xv}); });
}

ffi::Error gelu_mul_backward(cudaStream_t stream, int32_t ordinal, bool gpu, ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::AnyBuffer g,
                             ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dy) {
  const char* op = "gelu_mul_backward";
  if (gpu && ordinal != 0)
    return ffi::Error::InvalidArgument(std::string("pallas ") + op + ": runs on GPU 0 only so far (got device " + std::to_string(ordinal) + ")");
  if (std::string e = check(op, x, y, "y"); !e.empty()) return ffi::Error::InvalidArgument(e);
  if (std::string e = check(op, x, g, "the cotangent"); !e.empty()) return ffi::Error::InvalidArgument(e);
  const int64_t n = static_cast<int64_t>(x.element_count());
  if (n == 0) return ffi::Error::Success();
  pl::DType dt;
  pallas_dtype(x.element_type(), &dt);
  pl::Backend be = gpu ? pl::Backend::Cuda : pl::Backend::Interpret;
  pl::Call call = cache().get(pi::cache_key(op, {n}, dt, be), [&] { return pi::gelu_mul_backward(n, dt, be); });
  pl::Array xv = pl::Array::view(x.untyped_data(), {n}, dt, device_for(gpu));
  pl::Array yv = pl::Array::view(y.untyped_data(), {n}, dt, device_for(gpu));
  pl::Array gv = pl::Array::view(g.untyped_data(), {n}, dt, device_for(gpu));
  pl::Array dxv = pl::Array::view(dx->untyped_data(), {n}, dt, device_for(gpu));
  pl::Array dyv = pl::Array::view(dy->untyped_data(), {n}, dt, device_for(gpu));
  return launch(op, stream, gpu, call, dxv, [&] { call.into({dxv, dyv}, {xv, yv, gv}); });
}

ffi::Error softmax_backward(cudaStream_t stream, int32_t ordinal, bool gpu, ffi::AnyBuffer y, ffi::AnyBuffer g,
                            ffi::Result<ffi::AnyBuffer> dx) {
  const char* op = "softmax_backward";
  if (gpu && ordinal != 0)
    return ffi::Error::InvalidArgument(std::string("pallas ") + op + ": runs on GPU 0 only so far (got device " + std::to_string(ordinal) + ")");
  if (std::string e = check(op, y, g, "the cotangent"); !e.empty()) return ffi::Error::InvalidArgument(e);
  auto dims = y.dimensions();
  if (dims.size() == 0) return ffi::Error::InvalidArgument(std::string("pallas ") + op + ": y must have at least one dimension");
  const int64_t n = static_cast<int64_t>(y.element_count()), cols = dims[dims.size() - 1];
  if (n == 0) return ffi::Error::Success();
  const int64_t rows = n / cols;
  pl::DType dt;
  pallas_dtype(y.element_type(), &dt);
  pl::Backend be = gpu ? pl::Backend::Auto : pl::Backend::Interpret;
  pl::Call call = cache().get(pi::cache_key(op, {rows, cols}, dt, be), [&] { return pi::softmax_backward(rows, cols, dt, be); });
  pl::Array yv = pl::Array::view(y.untyped_data(), {rows, cols}, dt, device_for(gpu));
  pl::Array gv = pl::Array::view(g.untyped_data(), {rows, cols}, dt, device_for(gpu));
  pl::Array dxv = pl::Array::view(dx->untyped_data(), {rows, cols}, dt, device_for(gpu));
  return launch(op, stream, gpu, call, dxv, [&] { call.into({dxv}, {yv, gv}); });
}

ffi::Error gelu_mul_cuda(cudaStream_t s, int32_t ordinal, ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::Result<ffi::AnyBuffer> o) {
  return gelu_mul(s, ordinal, true, x, y, o);
}
ffi::Error gelu_mul_cpu(ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::Result<ffi::AnyBuffer> o) {
  return gelu_mul(nullptr, 0, false, x, y, o);
}
ffi::Error softmax_cuda(cudaStream_t s, int32_t ordinal, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> o) {
  return softmax(s, ordinal, true, x, o);
}
ffi::Error softmax_cpu(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> o) { return softmax(nullptr, 0, false, x, o); }
ffi::Error gelu_mul_backward_cuda(cudaStream_t s, int32_t ordinal, ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::AnyBuffer g,
                                  ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dy) {
  return gelu_mul_backward(s, ordinal, true, x, y, g, dx, dy);
}
ffi::Error gelu_mul_backward_cpu(ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> dx,
                                 ffi::Result<ffi::AnyBuffer> dy) {
  return gelu_mul_backward(nullptr, 0, false, x, y, g, dx, dy);
}
ffi::Error softmax_backward_cuda(cudaStream_t s, int32_t ordinal, ffi::AnyBuffer y, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> dx) {
  return softmax_backward(s, ordinal, true, y, g, dx);
}
ffi::Error softmax_backward_cpu(ffi::AnyBuffer y, ffi::AnyBuffer g, ffi::Result<ffi::AnyBuffer> dx) {
  return softmax_backward(nullptr, 0, false, y, g, dx);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PallasGeluMulCuda, gelu_mul_cuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(PallasGeluMulCpu, gelu_mul_cpu,
                              ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(PallasSoftmaxCuda, softmax_cuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(PallasSoftmaxCpu, softmax_cpu, ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(PallasGeluMulBackwardCuda, gelu_mul_backward_cuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(PallasGeluMulBackwardCpu, gelu_mul_backward_cpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(PallasSoftmaxBackwardCuda, softmax_backward_cuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(PallasSoftmaxBackwardCpu, softmax_backward_cpu,
                              ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());

// For the tests (ctypes): the address of the output the last kernel wrote, and its backend.
extern "C" uintptr_t pallas_jax_last_output() { return g_last_out.load(); }
extern "C" const char* pallas_jax_last_backend() { return g_last_backend.load(); }

// The library's kernels registered the way a user registers theirs (pallas_jax_user.h), with
// their custom_vjp pairs: pallas_jax.kernels.* (pallas_jax.py).
#include "common/library_factories.h"
#include "pallas_jax_user.h"

PALLAS_JAX_FFI_TARGET(PallasKernelsRmsNorm, library_ops::rms_norm)
PALLAS_JAX_FFI_TARGET(PallasKernelsLayerNorm, library_ops::layer_norm)
PALLAS_JAX_FFI_TARGET(PallasKernelsSoftmax, library_ops::softmax)
PALLAS_JAX_FFI_TARGET(PallasKernelsCrossEntropy, library_ops::cross_entropy)
PALLAS_JAX_FFI_TARGET(PallasKernelsFlashAttention, library_ops::flash_attention)
PALLAS_JAX_FFI_TARGET(PallasKernelsMatmul, library_ops::matmul)
