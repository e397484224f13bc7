// PyTorch operators backed by Pallas C++ kernels: torch.ops.pallas.*.
//
//   gelu_mul(x, y) -> out                  out = gelu(x) * y, a kernel written here (common/gelu_mul.h)
//   gelu_mul_out(x, y, out) -> ()          the same, written into the caller's `out`
//   gelu_mul_backward(x, y, g) -> (dx, dy) its backward, one Pallas kernel
//   softmax(x) -> out                      the library's pl::kernels::softmax over the last axis
//   softmax_backward(y, g) -> dx           its backward, the library's pl::kernels::softmax_bwd
//   debug_last_launch() -> (int, str, int, int)  for the tests: see debug_last_launch below
//
// Zero-copy: torch's memory is wrapped as non-owning pl::Array views and outputs are written
// with Call::into, so on the GPU the kernel reads and writes the tensors' own storage. CUDA
// tensors run on torch's current stream (pl::StreamScope), asynchronously, like torch's own
// ops. CPU tensors run on the Pallas interpreter (no GPU needed: the tests use it).
//
// Plain C++ (no .cu): Pallas compiles its kernels at run time with NVRTC, so torch's CUDA
// compiler checks never come into play. The CUDA runtime headers are only needed for
// c10/cuda/CUDAStream.h. Shape functions (Meta) are registered here; autograd formulas are
// registered in Python (pallas_torch.py), the form torch.compile traces best.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <atomic>
#include <optional>
#include <tuple>

#include "common/gelu_mul.h"

namespace {
namespace pl = pallas;
namespace pi = pallas_interop;

pi::CallCache& cache() {
  static pi::CallCache c;
  return c;
}

// What the last launch saw, for the tests (debug_last_launch).
std::atomic<int64_t> g_last_out{0};
std::atomic<const char*> g_last_backend{"none"};

pl::DType pallas_dtype(const at::Tensor& t, const char* op, const char* arg) {
  switch (t.scalar_type()) {
    case at::kFloat: return pl::f32;
    case at::kHalf: return pl::f16;
    case at::kBFloat16: return pl::bf16;
    default:
      TORCH_CHECK(false, "pallas::", op, ": ", arg, " has dtype ", t.scalar_type(),
                  "; supported: float32, float16, bfloat16");
  }
  return pl::f32;  // unreachable
}

// The checks every op makes, on real and on meta tensors alike (so torch.compile reports them
// at trace time): same shape, dtype and device for every tensor argument.
void check_same(const at::Tensor& a, const at::Tensor& b, const char* op, const char* an, const char* bn) {
  TORCH_CHECK(a.sizes() == b.sizes(), "pallas::", op, ": ", bn, " has shape ", b.sizes(), " but ", an, " has shape ",
              a.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "pallas::", op, ": ", bn, " is ", b.scalar_type(), " but ", an,
              " is ", a.scalar_type());
  TORCH_CHECK(a.device() == b.device(), "pallas::", op, ": ", bn, " is on ", b.device(), " but ", an, " is on ",
              a.device());
}

// A non-owning view of a tensor's storage, flattened to `shape` (no copy). Kernels address
// row-major blocks, so the tensor must be contiguous. A call runs on the device its arrays
// live on (torch's cuda:n is Pallas' cuda:n: both use the device's primary context).
pl::Array view_of(const at::Tensor& t, pl::Shape shape, const char* op, const char* arg) {
  TORCH_CHECK(t.is_contiguous(), "pallas::", op, ": ", arg, " is not contiguous (sizes ", t.sizes(), ", strides ",
              t.strides(), "); call .contiguous() on it first");
  pl::DType dt = pallas_dtype(t, op, arg);
  if (t.is_cuda()) return pl::Array::view(t.data_ptr(), std::move(shape), dt, pl::Device::cuda(t.device().index()));
  TORCH_CHECK(t.is_cpu(), "pallas::", op, ": ", arg, " is on ", t.device(), "; supported: cuda, cpu");
  return pl::Array::view(t.data_ptr(), std::move(shape), dt, pl::Device::host());
}

pl::Backend backend_for(const at::Tensor& t) { return t.is_cuda() ? pl::Backend::Cuda : pl::Backend::Interpret; }

// Runs a call on the tensors' device: for CUDA, on torch's current stream (the launch is
// queued there and returns at once); pl::Error becomes a torch error naming the kernel.
template <class F>
void launch(const char* op, const at::Tensor& like, const pl::Call& call, const pl::Array& out0, F run) {
  std::optional<pl::StreamScope> scope;
  if (like.is_cuda()) scope.emplace(c10::cuda::getCurrentCUDAStream(like.device().index()).stream());
  try {
    run();
  } catch (const pl::Error& e) {
    TORCH_CHECK(false, "pallas::", op, ": the Pallas C++ kernel '", call.name(), "' failed: ", e.what());
  }
  g_last_out = reinterpret_cast<int64_t>(out0.raw_data());
  g_last_backend = like.is_cuda() ? "cuda" : "interpreter";
}

// ---- gelu_mul ----

void gelu_mul_into(const at::Tensor& x, const at::Tensor& y, const at::Tensor& out, const char* op) {
  check_same(x, y, op, "x", "y");
  check_same(x, out, op, "x", "out");
  const int64_t n = x.numel();
  if (n == 0) return;
  pl::DType dt = pallas_dtype(x, op, "x");
  pl::Backend be = backend_for(x);
  pl::Call call = cache().get(pi::cache_key("gelu_mul", {n}, dt, be), [&] { return pi::gelu_mul(n, dt, be); });
  pl::Array xv = view_of(x, {n}, op, "x"), yv = view_of(y, {n}, op, "y"), ov = view_of(out, {n}, op, "out");
  launch(op, x, call, ov, [&] { call.into({ov}, {xv, yv}); });
}

at::Tensor gelu_mul(const at::Tensor& x, const at::Tensor& y) {
  at::Tensor out = at::empty(x.sizes(), x.options());  // contiguous, on torch's allocator and stream
  gelu_mul_into(x, y, out, "gelu_mul");
  return out;
}

void gelu_mul_out(const at::Tensor& x, const at::Tensor& y, const at::Tensor& out) {
  gelu_mul_into(x, y, out, "gelu_mul_out");
}

std::tuple<at::Tensor, at::Tensor> gelu_mul_backward(const at::Tensor& x, const at::Tensor& y, const at::Tensor& g) {
  const char* op = "gelu_mul_backward";
  check_same(x, y, op, "x", "y");
  check_same(x, g, op, "x", "grad");
  at::Tensor dx = at::empty(x.sizes(), x.options()), dy = at::empty(x.sizes(), x.options());
  const int64_t n = x.numel();
  if (n == 0) return {dx, dy};
  pl::DType dt = pallas_dtype(x, op, "x");
  pl::Backend be = backend_for(x);
  pl::Call call =
      cache().get(pi::cache_key(op, {n}, dt, be), [&] { return pi::gelu_mul_backward(n, dt, be); });
  pl::Array xv = view_of(x, {n}, op, "x"), yv = view_of(y, {n}, op, "y"), gv = view_of(g, {n}, op, "grad");
  pl::Array dxv = view_of(dx, {n}, op, "dx"), dyv = view_of(dy, {n}, op, "dy");
  launch(op, x, call, dxv, [&] { call.into({dxv, dyv}, {xv, yv, gv}); });
  return {dx, dy};
}

// ---- softmax over the last axis ----

void check_softmax(const at::Tensor& x) {
  TORCH_CHECK(x.dim() >= 1, "pallas::softmax: x must have at least one dimension (got a scalar)");
}

at::Tensor softmax(const at::Tensor& x) {
  const char* op = "softmax";
  check_softmax(x);
  at::Tensor out = at::empty(x.sizes(), x.options());
  const int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  if (x.numel() == 0) return out;
  pl::DType dt = pallas_dtype(x, op, "x");
  pl::Backend be = backend_for(x);
  pl::Call call = cache().get(pi::cache_key(op, {rows, cols}, dt, be), [&] { return pi::softmax(rows, cols, dt, be); });
  pl::Array xv = view_of(x, {rows, cols}, op, "x"), ov = view_of(out, {rows, cols}, op, "out");
  launch(op, x, call, ov, [&] { call.into({ov}, {xv}); });
  // Backend::Auto may fall back to the interpreter for a kernel the GPU cannot lower; say so
  // rather than let the zero-copy test believe the GPU wrote the output.
  if (x.is_cuda()) g_last_backend = call.backend_name() == "cuda" ? "cuda" : "interpreter";
  return out;
}

// softmax's backward, the library's kernel: dx = y (g - sum(g y)) over the last axis.
at::Tensor softmax_backward(const at::Tensor& y, const at::Tensor& g) {
  const char* op = "softmax_backward";
  check_softmax(y);
  check_same(y, g, op, "y", "grad");
  at::Tensor dx = at::empty(y.sizes(), y.options());
  const int64_t cols = y.size(-1), rows = cols == 0 ? 0 : y.numel() / cols;
  if (y.numel() == 0) return dx;
  pl::DType dt = pallas_dtype(y, op, "y");
  pl::Backend be = backend_for(y);
  pl::Call call = cache().get(pi::cache_key(op, {rows, cols}, dt, be), [&] { return pi::softmax_backward(rows, cols, dt, be); });
  pl::Array yv = view_of(y, {rows, cols}, op, "y"), gv = view_of(g, {rows, cols}, op, "grad"), dxv = view_of(dx, {rows, cols}, op, "dx");
  launch(op, y, call, dxv, [&] { call.into({dxv}, {yv, gv}); });
  return dx;
}

// (address of the output the last kernel wrote, the backend it ran on, calls run on the GPU
// so far in this process, traced calls cached): the tests check zero-copy by pointer identity,
// that CUDA tensors ran on the GPU, and that repeated calls reuse their traced Call.
std::tuple<int64_t, std::string, int64_t, int64_t> debug_last_launch() {
  return {g_last_out.load(), g_last_backend.load(), pl::run_counts().cuda, static_cast<int64_t>(cache().size())};
}

// ---- shape functions (Meta): what torch.compile and FakeTensor use to trace the ops ----

at::Tensor gelu_mul_meta(const at::Tensor& x, const at::Tensor& y) {
  check_same(x, y, "gelu_mul", "x", "y");
  return at::empty(x.sizes(), x.options());
}
void gelu_mul_out_meta(const at::Tensor& x, const at::Tensor& y, const at::Tensor& out) {
  check_same(x, y, "gelu_mul_out", "x", "y");
  check_same(x, out, "gelu_mul_out", "x", "out");
}
std::tuple<at::Tensor, at::Tensor> gelu_mul_backward_meta(const at::Tensor& x, const at::Tensor& y,
                                                          const at::Tensor& g) {
  check_same(x, y, "gelu_mul_backward", "x", "y");
  check_same(x, g, "gelu_mul_backward", "x", "grad");
  return {at::empty(x.sizes(), x.options()), at::empty(x.sizes(), x.options())};
}
at::Tensor softmax_meta(const at::Tensor& x) {
  check_softmax(x);
  return at::empty(x.sizes(), x.options());
}
at::Tensor softmax_backward_meta(const at::Tensor& y, const at::Tensor& g) {
  check_softmax(y);
  check_same(y, g, "softmax_backward", "y", "grad");
  return at::empty(y.sizes(), y.options());
}

}  // namespace

TORCH_LIBRARY(pallas, m) {
  m.def("gelu_mul(Tensor x, Tensor y) -> Tensor");
  m.def("gelu_mul_out(Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("gelu_mul_backward(Tensor x, Tensor y, Tensor grad) -> (Tensor, Tensor)");
  m.def("softmax(Tensor x) -> Tensor");
  m.def("softmax_backward(Tensor y, Tensor grad) -> Tensor");
  m.def("debug_last_launch() -> (int, str, int, int)", &debug_last_launch);
}

TORCH_LIBRARY_IMPL(pallas, CUDA, m) {
  m.impl("gelu_mul", &gelu_mul);
  m.impl("gelu_mul_out", &gelu_mul_out);
  m.impl("gelu_mul_backward", &gelu_mul_backward);
  m.impl("softmax", &softmax);
  m.impl("softmax_backward", &softmax_backward);
}

TORCH_LIBRARY_IMPL(pallas, CPU, m) {
  m.impl("gelu_mul", &gelu_mul);
  m.impl("gelu_mul_out", &gelu_mul_out);
  m.impl("gelu_mul_backward", &gelu_mul_backward);
  m.impl("softmax", &softmax);
  m.impl("softmax_backward", &softmax_backward);
}

TORCH_LIBRARY_IMPL(pallas, Meta, m) {
  m.impl("gelu_mul", &gelu_mul_meta);
  m.impl("gelu_mul_out", &gelu_mul_out_meta);
  m.impl("gelu_mul_backward", &gelu_mul_backward_meta);
  m.impl("softmax", &softmax_meta);
  m.impl("softmax_backward", &softmax_backward_meta);
}
