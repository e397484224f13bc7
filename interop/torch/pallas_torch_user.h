// A user's own Pallas call as a torch custom op, in a few lines of C++ and no edit to Pallas:
//
//   #include "pallas_torch_user.h"
//   pl::Call make_rms_scale(const std::vector<pl::ShapeDtype>& in, pl::Backend backend) { ... }
//   PALLAS_TORCH_OP(my_ops, "rms_scale(Tensor x, Tensor w) -> (Tensor, Tensor)", make_rms_scale)
//
// registers torch.ops.my_ops.rms_scale (torch.library: the schema, then kernels for CPU, CUDA
// and Meta). The schema takes tensors and returns tensors, any number of each. The factory builds
// the call (or a pl::CustomVjp pair, whose backward then serves the op's gradient) for the
// arguments' shapes and dtypes (and the backend: the Pallas interpreter for CPU
// tensors, Backend::Auto for CUDA ones); one call is kept per (shapes, dtypes, backend). The
// outputs are new contiguous tensors of the call's out_shapes() on the arguments' device, from
// torch's allocator; the kernel writes them in place (zero copy) on torch's current stream. The
// Meta kernel gives the same shapes without running anything, so torch.compile and FakeTensor
// trace through the op. Autograd: PALLAS_TORCH_OP also defines <name>_vjp, the vjp of what the
// factory makes — a call's automatic vjp (pl::vjp: the kernel transposed) or a custom_vjp pair's
// backward — which pallas_torch.register_automatic_vjp attaches with
// torch.library.register_autograd. (A pair's outputs come from its own arrays, handed to torch
// by DLPack; a call's are written in place into torch's.) A pl::Error (from the factory or the call) becomes a torch error
// naming the op and the kernel.
#pragma once
#include <ATen/ATen.h>
#include <ATen/DLConvertor.h>
#include <ATen/core/stack.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <pallas/dlpack.h>
#include <pallas/pallas.h>

#include "common/user_calls.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pallas_torch_user {
namespace pl = pallas;

using pallas_interop::Made;

inline pl::DType to_pallas(at::ScalarType t, const std::string& op, size_t i) {
  switch (t) {
    case at::kFloat: return pl::f32;
    case at::kHalf: return pl::f16;
    case at::kBFloat16: return pl::bf16;
    case at::kDouble: return pl::f64;
    case at::kInt: return pl::i32;
    case at::kChar: return pl::i8;
    case at::kByte: return pl::u8;
    case at::kBool: return pl::bool_;
    case at::kFloat8_e4m3fn: return pl::f8e4m3;
    case at::kFloat8_e5m2: return pl::f8e5m2;
    default:
      TORCH_CHECK(false, op, ": argument ", i, " has dtype ", t,
                  "; Pallas takes float32, float16, bfloat16, float64, int32, int8, uint8, bool, float8_e4m3fn, float8_e5m2 here");
  }
  return pl::f32;
}

inline at::ScalarType to_torch(pl::DType t, const std::string& op) {
  switch (t) {
    case pl::DType::F32: return at::kFloat;
    case pl::DType::F16: return at::kHalf;
    case pl::DType::BF16: return at::kBFloat16;
    case pl::DType::F64: return at::kDouble;
    case pl::DType::I32: return at::kInt;
    case pl::DType::I8: return at::kChar;
    case pl::DType::U8: return at::kByte;
    case pl::DType::Bool: return at::kBool;
    case pl::DType::F8E4M3: return at::kFloat8_e4m3fn;
    case pl::DType::F8E5M2: return at::kFloat8_e5m2;
    default: TORCH_CHECK(false, op, ": the kernel writes an output of dtype ", pl::dtype_name(t), ", which has no torch dtype here");
  }
  return at::kFloat;
}

// One op: its name and its calls, per (argument shapes and dtypes, backend).
class Op {
 public:
  template <class F>
  Op(std::string name, F factory) : name_(std::move(name)), calls_(factory) {}
  const std::string& name() const { return name_; }
  Made get(const std::vector<pl::ShapeDtype>& in, pl::Backend backend) { return calls_.get(in, backend); }
  // get() for a dispatch on CUDA tensors (else the interpreter), a pl::Error raised as torch's
  // error naming `op`.
  Made made_for(const std::vector<pl::ShapeDtype>& in, bool cuda, const std::string& op) {
    try {
      return get(in, cuda ? pl::Backend::Auto : pl::Backend::Interpret);
    } catch (const pl::Error& e) {
      TORCH_CHECK(false, op, ": ", e.what());
    }
    return {};
  }

 private:
  std::string name_;
  pallas_interop::MadeCalls calls_;
};

// A non-owning view of a contiguous tensor (zero copy), on its device; `what` and `i` name it in
// the message for one that is not contiguous.
inline pl::Array view_of(const at::Tensor& t, size_t i, const std::string& op, const char* what) {
  TORCH_CHECK(t.is_contiguous(), op, ": ", what, " ", i, " is not contiguous (strides ", t.strides(), "); call .contiguous() on it first");
  pl::Device dev = t.is_cuda() ? pl::Device::cuda(t.device().index()) : pl::Device::host();
  return pl::Array::view(t.data_ptr(), pl::Shape(t.sizes().begin(), t.sizes().end()), to_pallas(t.scalar_type(), op, i), dev);
}

// A Pallas array handed to torch without a copy (DLPack).
inline at::Tensor to_torch_tensor(const pl::Array& a) {
  return at::fromDLPack(reinterpret_cast<DLManagedTensor*>(pl::dlpack::to_dlpack(a)));
}

// The boxed kernel of one dispatch key (CPU, CUDA or Meta) for an op: arguments off the stack,
// outputs allocated and (but for Meta) written by the Pallas call, pushed back.
class Kernel final : public c10::OperatorKernel {
 public:
  Kernel(std::shared_ptr<Op> op, c10::DispatchKey key) : op_(std::move(op)), key_(key) {}

  void operator()(const c10::OperatorHandle& handle, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const std::string op = "pallas op " + op_->name();
    const size_t n = handle.schema().arguments().size();
    std::vector<at::Tensor> ts;
    for (const c10::IValue& v : torch::jit::last(*stack, n)) {
      TORCH_CHECK(v.isTensor(), op, ": every argument must be a tensor");
      ts.push_back(v.toTensor());
    }
    torch::jit::drop(*stack, n);
    TORCH_CHECK(!ts.empty(), op, ": takes one tensor argument at least");
    std::vector<pl::ShapeDtype> in;
    for (size_t i = 0; i < ts.size(); ++i) {
      TORCH_CHECK(ts[i].device() == ts[0].device(), op, ": argument ", i, " is on ", ts[i].device(), " but argument 0 is on ", ts[0].device());
      in.push_back(pl::ShapeDtype(pl::Shape(ts[i].sizes().begin(), ts[i].sizes().end()), to_pallas(ts[i].scalar_type(), op, i)));
    }
    const bool cuda = key_ == c10::DispatchKey::CUDA;
    Made m = op_->made_for(in, cuda, op);
    const pl::Call& call = m.call;
    const std::vector<pl::ShapeDtype>& outs = m.outs;
    TORCH_CHECK(outs.size() == handle.schema().returns().size(), op, ": the kernel '", call.name(), "' has ", outs.size(),
                " outputs; the schema returns ", handle.schema().returns().size());
    std::vector<at::Tensor> results;
    if (m.vjp && key_ != c10::DispatchKey::Meta) {
      // a custom_vjp pair: its primal outputs (its primal call's, else the forward's first ones)
      std::vector<pl::Array> args;
      for (size_t i = 0; i < ts.size(); ++i) args.push_back(view_of(ts[i], i, op, "argument"));
      std::optional<pl::StreamScope> scope;
      if (cuda) scope.emplace(c10::cuda::getCurrentCUDAStream(ts[0].device().index()).stream());
      try {
        for (const pl::Array& a : (*m.vjp)(args)) results.push_back(to_torch_tensor(a));
      } catch (const pl::Error& e) {
        TORCH_CHECK(false, op, ": the Pallas C++ kernel '", call.name(), "' failed: ", e.what());
      }
      for (at::Tensor& t : results) torch::jit::push(*stack, std::move(t));
      return;
    }
    for (const pl::ShapeDtype& o : outs)
      results.push_back(at::empty(std::vector<int64_t>(o.shape.begin(), o.shape.end()), ts[0].options().dtype(to_torch(o.dtype, op))));
    if (key_ != c10::DispatchKey::Meta) {
      std::vector<pl::Array> args, out_views;
      for (size_t i = 0; i < ts.size(); ++i) args.push_back(view_of(ts[i], i, op, "argument"));
      for (size_t o = 0; o < results.size(); ++o) out_views.push_back(view_of(results[o], o, op, "output"));
      std::optional<pl::StreamScope> scope;
      if (cuda) scope.emplace(c10::cuda::getCurrentCUDAStream(ts[0].device().index()).stream());
      try {
        call.into(out_views, args);
      } catch (const pl::Error& e) {
        TORCH_CHECK(false, op, ": the Pallas C++ kernel '", call.name(), "' failed: ", e.what());
      }
    }
    for (at::Tensor& t : results) torch::jit::push(*stack, std::move(t));
  }

 private:
  std::shared_ptr<Op> op_;
  c10::DispatchKey key_;
};

// The op's automatic vjp, ns::<name>_vjp(Tensor[] primals, Tensor[] cotangents) -> Tensor[]: pl::vjp
// of the op's call (the kernel transposed, docs/transforms.md "vjp"; its forward runs again),
// one cotangent per primal (zeros for integer primals), zero copy back to torch (DLPack). An
// undefined cotangent tensor counts as zero.
class VjpKernel final : public c10::OperatorKernel {
 public:
  VjpKernel(std::shared_ptr<Op> op, c10::DispatchKey key) : op_(std::move(op)), key_(key) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const std::string op = "pallas op " + op_->name() + "_vjp";
    std::vector<at::Tensor> cots = torch::jit::pop(*stack).toTensorVector();
    std::vector<at::Tensor> prims = torch::jit::pop(*stack).toTensorVector();
    TORCH_CHECK(!prims.empty(), op, ": takes the op's arguments as primals");
    std::vector<at::Tensor> grads;
    if (key_ == c10::DispatchKey::Meta) {
      for (const at::Tensor& p : prims) grads.push_back(at::empty_like(p));
      torch::jit::push(*stack, grads);
      return;
    }
    const bool cuda = key_ == c10::DispatchKey::CUDA;
    std::vector<pl::ShapeDtype> in;
    std::vector<pl::Array> pv;
    for (size_t i = 0; i < prims.size(); ++i) {
      pv.push_back(view_of(prims[i], i, op, "primal"));
      in.push_back(pv.back().shape_dtype());
    }
    Made m = op_->made_for(in, cuda, op);
    const pl::Call& call = m.call;
    const std::vector<pl::ShapeDtype>& outs = m.outs;
    TORCH_CHECK(cots.size() == outs.size(), op, ": got ", cots.size(), " cotangents for the kernel '", call.name(), "''s ", outs.size(), " outputs");
    std::vector<pl::Array> cv;
    for (size_t o = 0; o < cots.size(); ++o) {
      if (!cots[o].defined() || !pl::is_float(outs[o].dtype)) {
        cv.push_back(pl::Array());  // zero
        continue;
      }
      at::Tensor c = cots[o].to(to_torch(outs[o].dtype, op)).contiguous();
      cots[o] = c;  // kept alive until the pullback has run
      TORCH_CHECK(std::vector<int64_t>(c.sizes().begin(), c.sizes().end()) == outs[o].shape, op, ": cotangent ", o, " has shape ", c.sizes(),
                  "; the output is ", pl::shape_str(outs[o].shape, outs[o].dtype));
      cv.push_back(view_of(c, o, op, "cotangent"));
    }
    std::optional<pl::StreamScope> scope;
    if (cuda) scope.emplace(c10::cuda::getCurrentCUDAStream(prims[0].device().index()).stream());
    std::vector<pl::Array> g;
    try {
      auto [fwd_outs, pullback] = m.vjp ? pl::vjp(*m.vjp, pv) : pl::vjp(call, pv);
      g = pullback(cv);
    } catch (const pl::Error& e) {
      TORCH_CHECK(false, op, ": the vjp of the Pallas C++ kernel '", call.name(), "' failed: ", e.what());
    }
    for (size_t i = 0; i < prims.size(); ++i) {
      if (i < g.size() && g[i].defined())
        grads.push_back(to_torch_tensor(g[i]));
      else
        grads.push_back(at::zeros_like(prims[i]));
    }
    torch::jit::push(*stack, grads);
  }

 private:
  std::shared_ptr<Op> op_;
  c10::DispatchKey key_;
};

// Defines ns::<name> with `schema` and its CPU, CUDA and Meta kernels, and ns::<name>_vjp
// (PALLAS_TORCH_OP).
template <class F>
bool register_op(const char* ns, const std::string& schema, F factory, const char* file, uint32_t line) {
  static std::vector<std::unique_ptr<torch::Library>> libraries;  // registrations live as long as the process
  const std::string name = schema.substr(0, schema.find('('));
  auto op = std::make_shared<Op>(std::string(ns) + "::" + name, factory);
  auto def = std::make_unique<torch::Library>(torch::Library::FRAGMENT, ns, std::nullopt, file, line);
  def->def(schema.c_str());
  def->def((name + "_vjp(Tensor[] primals, Tensor[] cotangents) -> Tensor[]").c_str());
  libraries.push_back(std::move(def));
  for (c10::DispatchKey key : {c10::DispatchKey::CPU, c10::DispatchKey::CUDA, c10::DispatchKey::Meta}) {
    auto impl = std::make_unique<torch::Library>(torch::Library::IMPL, ns, key, file, line);
    impl->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>(op, key)));
    impl->impl((name + "_vjp").c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<VjpKernel>(op, key)));
    libraries.push_back(std::move(impl));
  }
  return true;
}

}  // namespace pallas_torch_user

#define PALLAS_TORCH_OP_CAT2(a, b) a##b
#define PALLAS_TORCH_OP_CAT(a, b) PALLAS_TORCH_OP_CAT2(a, b)
// Registers torch.ops.<ns>.<name> (name: the schema's, before its "(") backed by the call the
// factory pl::Call(const std::vector<pl::ShapeDtype>&, pl::Backend) makes.
#define PALLAS_TORCH_OP(ns, schema, factory)                                    \
  static const bool PALLAS_TORCH_OP_CAT(pallas_torch_op_registered_, __COUNTER__) = \
      pallas_torch_user::register_op(#ns, schema, factory, __FILE__, __LINE__);
