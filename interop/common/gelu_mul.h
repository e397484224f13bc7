// The kernels the framework clients (interop/torch, interop/jax) run, and a cache of their
// traced calls. Header-only: each client compiles it into its own shared object.
//
// gelu_mul is written the way a user writes a kernel in their own code with pl::pallas_call;
// the other kernel the clients run is the library's own pl::kernels::softmax.
#pragma once
#include <pallas/kernels.h>
#include <pallas/pallas.h>

#include <map>
#include <mutex>
#include <string>

namespace pallas_interop {
namespace pl = pallas;

// Elementwise kernels see the tensor flattened to n elements, 1024 per program. The last block
// may overhang the array: its padding reads NaN and its writes there are dropped.
inline constexpr int64_t kBlock = 1024;

inline pl::BlockSpec flat_block() {
  return pl::BlockSpec({kBlock}, [](pl::Value i) { return pl::idx(i); });
}
inline int64_t flat_grid(int64_t n) { return (n + kBlock - 1) / kBlock; }

// GELU, tanh approximation: torch's gelu(approximate="tanh"), jax.nn.gelu(approximate=True).
inline constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
inline constexpr double kGeluA = 0.044715;

// out = gelu(x) * y, computed in f32 whatever the storage dtype (f32, f16, bf16).
inline pl::Call gelu_mul(int64_t n, pl::DType dtype, pl::Backend backend) {
  auto kernel = [dtype](pl::Ref x, pl::Ref y, pl::Ref o) {
    pl::Value v = x[pl::all].astype(pl::f32);
    pl::Value t = pl::tanh(kGeluC * (v + kGeluA * v * v * v));
    o[pl::all] = (0.5 * v * (1.0 + t) * y[pl::all].astype(pl::f32)).astype(dtype);
  };
  return pl::pallas_call(kernel, pl::ShapeDtype({n}, dtype),
                         {.grid = {flat_grid(n)},
                          .in_specs = {flat_block(), flat_block()},
                          .out_specs = {flat_block()},
                          .name = "gelu_mul",
                          .backend = backend});
}

// The backward of out = gelu(x) * y for the incoming gradient g, in one pass (two outputs):
//   dx = g * y * gelu'(x),  dy = g * gelu(x),
//   gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2),  t = tanh(c (x + a x^3)).
inline pl::Call gelu_mul_backward(int64_t n, pl::DType dtype, pl::Backend backend) {
  auto kernel = [dtype](pl::Ref x, pl::Ref y, pl::Ref g, pl::Ref dx, pl::Ref dy) {
    pl::Value v = x[pl::all].astype(pl::f32);
    pl::Value gv = g[pl::all].astype(pl::f32);
    pl::Value t = pl::tanh(kGeluC * (v + kGeluA * v * v * v));
    pl::Value gelu = 0.5 * v * (1.0 + t);
    pl::Value dgelu = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * kGeluA * v * v);
    dx[pl::all] = (gv * y[pl::all].astype(pl::f32) * dgelu).astype(dtype);
    dy[pl::all] = (gv * gelu).astype(dtype);
  };
  pl::ShapeDtype out({n}, dtype);
  return pl::pallas_call(kernel, std::vector<pl::ShapeDtype>{out, out},
                         {.grid = {flat_grid(n)},
                          .in_specs = {flat_block(), flat_block(), flat_block()},
                          .out_specs = {flat_block(), flat_block()},
                          .name = "gelu_mul_backward",
                          .backend = backend});
}

// The library's row softmax over the last axis of a [rows, cols] view. Backend::Auto: the GPU
// where there is one (the clients check backend_name() where it matters), else the interpreter.
inline pl::Call softmax(int64_t rows, int64_t cols, pl::DType dtype, pl::Backend backend) {
  return pl::kernels::softmax(rows, cols, dtype, {.interpret = backend == pl::Backend::Interpret});
}

// Its backward, the library's softmax_bwd: dx = y (g - sum(g y)) over the last axis, from the
// forward's output y and the cotangent g, both [rows, cols].
inline pl::Call softmax_backward(int64_t rows, int64_t cols, pl::DType dtype, pl::Backend backend) {
  return pl::kernels::softmax_bwd(rows, cols, dtype, {.interpret = backend == pl::Backend::Interpret});
}

// A Call traces its kernel on first use for its shapes; building a new Call per framework call
// would retrace (and look up the compiled kernel) every time. Calls are kept per key (kernel,
// shape, dtype, backend) for the life of the process. Thread-safe: autograd runs backward on
// its own threads.
class CallCache {
 public:
  template <class Make>
  pl::Call get(const std::string& key, Make make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(key);
    if (it == calls_.end()) it = calls_.emplace(key, make()).first;
    return it->second;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_.size();
  }

 private:
  std::mutex mu_;
  std::map<std::string, pl::Call> calls_;
};

inline std::string cache_key(const char* kernel, std::initializer_list<int64_t> dims, pl::DType dtype,
                             pl::Backend backend) {
  std::string k = kernel;
  for (int64_t d : dims) k += "," + std::to_string(d);
  return k + "," + pl::dtype_name(dtype) + (backend == pl::Backend::Interpret ? ",interpret" : ",cuda");
}

}  // namespace pallas_interop
