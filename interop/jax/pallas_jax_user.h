// A user's own Pallas call as a JAX FFI target, in a few lines of C++ and no edit to Pallas:
//
//   #include "pallas_jax_user.h"
//   pl::Call make_swiglu(const std::vector<pl::ShapeDtype>& in, pl::Backend backend) { ... }
//   PALLAS_JAX_FFI_TARGET(MySwiglu, make_swiglu)
//
// defines the handler symbols MySwigluCpu and MySwigluCuda, and MySwigluVjpCpu / MySwigluVjpCuda,
// the call's automatic vjp (pl::vjp: the kernel transposed). A factory may make a pl::CustomVjp
// pair instead: the target then runs its primal outputs (copied into XLA's buffers) and its vjp
// is the pair's backward. In Python:
//
//   pallas_jax.register_targets(lib_path, {"my_swiglu": "MySwiglu"})
//   out = jax.ffi.ffi_call("my_swiglu", jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
//
// The factory builds the call for the operands' shapes and dtypes (and the backend: the
// Pallas interpreter for JAX's CPU, Backend::Auto for its GPU); the handler keeps one call per
// (shapes, dtypes, backend), checks that the results JAX asked for are the call's outputs
// (shapes and dtypes), and runs it on XLA's buffers without a copy, on the stream XLA gives it
// (the GPU handler), or on the interpreter (the CPU handler). Any number of operands and
// results; f32, f16, bf16, f64, i32, i8, u8, bool, f8e4m3fn and f8e5m2 operands. A pl::Error (a bad shape, an error
// the call raises) becomes an XLA error that JAX raises with the kernel's message.
//
// Needs only XLA's header-only FFI API (jax.ffi.include_dir()) and the Pallas headers; link the
// library with libpallas.a (pallas_jax.build_user_library does both).
#pragma once
#include <xla/ffi/api/ffi.h>

#include <pallas/pallas.h>

#include "common/user_calls.h"

#include <optional>
#include <string>
#include <vector>

namespace pallas_jax_user {
namespace ffi = xla::ffi;
namespace pl = pallas;

// The CUDA runtime's stream handle type, declared as the runtime declares it.
typedef struct CUstream_st* cudaStream_t;

using pallas_interop::Made;

inline bool to_pallas(ffi::DataType t, pl::DType* out) {
  switch (t) {
    case ffi::DataType::F32: *out = pl::f32; return true;
    case ffi::DataType::F16: *out = pl::f16; return true;
    case ffi::DataType::BF16: *out = pl::bf16; return true;
    case ffi::DataType::F64: *out = pl::f64; return true;
    case ffi::DataType::S32: *out = pl::i32; return true;
    case ffi::DataType::S8: *out = pl::i8; return true;
    case ffi::DataType::U8: *out = pl::u8; return true;
    case ffi::DataType::PRED: *out = pl::bool_; return true;
    case ffi::DataType::F8E4M3FN: *out = pl::f8e4m3; return true;
    case ffi::DataType::F8E5M2: *out = pl::f8e5m2; return true;
    default: return false;
  }
}

inline std::string shape_text(const pl::ShapeDtype& s) { return std::string(pl::dtype_name(s.dtype)) + pl::shape_str(s.shape); }

// One target's calls, per (operand shapes and dtypes, backend).
class Target {
 public:
  template <class F>
  Target(std::string name, F factory) : name_(std::move(name)), calls_(factory) {}

  ffi::Error run(cudaStream_t stream, int32_t ordinal, bool gpu, ffi::RemainingArgs args, ffi::RemainingRets rets) {
    const std::string op = "pallas " + name_;
    if (gpu && ordinal != 0) return ffi::Error::InvalidArgument(op + ": runs on GPU 0 only so far (got device " + std::to_string(ordinal) + ")");
    std::vector<pl::ShapeDtype> in;
    std::vector<void*> in_data;
    if (std::string e = operands(op, args, in, in_data); !e.empty()) return ffi::Error::InvalidArgument(e);
    pl::Backend backend = gpu ? pl::Backend::Auto : pl::Backend::Interpret;
    Made m;
    try {
      m = get(in, backend);
    } catch (const pl::Error& e) {
      return ffi::Error::InvalidArgument(op + ": " + e.what());
    }
    const pl::Call& call = m.call;
    const std::vector<pl::ShapeDtype>& want = m.outs;
    if (want.size() != rets.size())
      return ffi::Error::InvalidArgument(op + ": the kernel '" + call.name() + "' has " + std::to_string(want.size()) + " outputs; the call asked for " +
                                         std::to_string(rets.size()) + " results");
    pl::Device dev = gpu ? pl::Device::cuda(0) : pl::Device::host();
    std::vector<pl::Array> in_views, out_views;
    for (size_t i = 0; i < in.size(); ++i) in_views.push_back(pl::Array::view(in_data[i], in[i].shape, in[i].dtype, dev));
    for (size_t o = 0; o < rets.size(); ++o) {
      auto r = rets.get<ffi::AnyBuffer>(o);
      if (r.has_error()) return ffi::Error::InvalidArgument(op + ": result " + std::to_string(o) + " is not a buffer");
      pl::DType dt;
      auto dims = (*r)->dimensions();
      pl::ShapeDtype got(pl::Shape(dims.begin(), dims.end()), to_pallas((*r)->element_type(), &dt) ? dt : pl::DType::U8);
      if (!to_pallas((*r)->element_type(), &dt) || got.shape != want[o].shape || got.dtype != want[o].dtype)
        return ffi::Error::InvalidArgument(op + ": result " + std::to_string(o) + " of the call is " + shape_text(got) + "; the kernel '" +
                                           call.name() + "' writes " + shape_text(want[o]));
      out_views.push_back(pl::Array::view((*r)->untyped_data(), want[o].shape, want[o].dtype, dev));
    }
    try {
      std::optional<pl::StreamScope> scope;
      if (gpu) scope.emplace(stream);
      if (m.vjp) {  // a pair: its primal outputs, copied into XLA's buffers
        std::vector<pl::Array> r = (*m.vjp)(in_views);
        for (size_t o = 0; o < r.size(); ++o) out_views[o].copy_from(r[o]);
      } else {
        call.into(out_views, in_views);
      }
    } catch (const pl::Error& e) {
      return ffi::Error::Internal(op + ": the Pallas C++ kernel '" + call.name() + "' failed: " + e.what());
    }
    return ffi::Error::Success();
  }

  // The automatic vjp (<Name>Vjp): operands are the primals (the first num_primals) then one
  // cotangent per output of the call; results, one per primal, its cotangent by pl::vjp of the
  // call (the kernel transposed; its forward runs again), zeros for an integer primal.
  ffi::Error run_vjp(cudaStream_t stream, int32_t ordinal, bool gpu, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t num_primals) {
    const std::string op = "pallas " + name_ + " vjp";
    if (gpu && ordinal != 0) return ffi::Error::InvalidArgument(op + ": runs on GPU 0 only so far (got device " + std::to_string(ordinal) + ")");
    std::vector<pl::ShapeDtype> in;
    std::vector<void*> in_data;
    if (std::string e = operands(op, args, in, in_data); !e.empty()) return ffi::Error::InvalidArgument(e);
    if (num_primals < 1 || static_cast<size_t>(num_primals) > in.size() || rets.size() != static_cast<size_t>(num_primals))
      return ffi::Error::InvalidArgument(op + ": num_primals is " + std::to_string(num_primals) + " for " + std::to_string(in.size()) +
                                         " operands and " + std::to_string(rets.size()) + " results (one per primal)");
    const size_t np = static_cast<size_t>(num_primals);
    std::vector<pl::ShapeDtype> prim(in.begin(), in.begin() + static_cast<long>(np));
    pl::Backend backend = gpu ? pl::Backend::Auto : pl::Backend::Interpret;
    pl::Device dev = gpu ? pl::Device::cuda(0) : pl::Device::host();
    try {
      Made m = get(prim, backend);
      const pl::Call& call = m.call;
      const std::vector<pl::ShapeDtype>& outs = m.outs;
      if (in.size() - np != outs.size())
        return ffi::Error::InvalidArgument(op + ": " + std::to_string(in.size() - np) + " cotangents for the kernel '" + call.name() + "''s " +
                                           std::to_string(outs.size()) + " outputs");
      std::vector<pl::Array> pv, cv;
      for (size_t i = 0; i < np; ++i) pv.push_back(pl::Array::view(in_data[i], in[i].shape, in[i].dtype, dev));
      for (size_t o = 0; o < outs.size(); ++o) {
        const pl::ShapeDtype& c = in[np + o];
        if (c.shape != outs[o].shape || c.dtype != outs[o].dtype)
          return ffi::Error::InvalidArgument(op + ": cotangent " + std::to_string(o) + " is " + shape_text(c) + "; the output is " + shape_text(outs[o]));
        cv.push_back(pl::is_float(c.dtype) ? pl::Array::view(in_data[np + o], c.shape, c.dtype, dev) : pl::Array());
      }
      std::optional<pl::StreamScope> scope;
      if (gpu) scope.emplace(stream);
      auto [fwd_outs, pullback] = m.vjp ? pl::vjp(*m.vjp, pv) : pl::vjp(call, pv);
      std::vector<pl::Array> g = pullback(cv);
      for (size_t i = 0; i < np; ++i) {
        auto r = rets.get<ffi::AnyBuffer>(i);
        if (r.has_error()) return ffi::Error::InvalidArgument(op + ": result " + std::to_string(i) + " is not a buffer");
        pl::Array out = pl::Array::view((*r)->untyped_data(), prim[i].shape, prim[i].dtype, dev);
        if ((*r)->element_count() != static_cast<size_t>(out.size()))
          return ffi::Error::InvalidArgument(op + ": result " + std::to_string(i) + " must have primal " + std::to_string(i) + "'s shape " +
                                             shape_text(prim[i]));
        out.copy_from(i < g.size() && g[i].defined() ? g[i] : pl::Array::zeros(prim[i].shape, prim[i].dtype, dev));
      }
    } catch (const pl::Error& e) {
      return ffi::Error::Internal(op + ": " + e.what());
    }
    return ffi::Error::Success();
  }

 private:
  // The operands' shapes, dtypes and data; an error message, or "" when they are fine.
  static std::string operands(const std::string& op, const ffi::RemainingArgs& args, std::vector<pl::ShapeDtype>& in, std::vector<void*>& data) {
    for (size_t i = 0; i < args.size(); ++i) {
      auto b = args.get<ffi::AnyBuffer>(i);
      if (b.has_error()) return op + ": operand " + std::to_string(i) + " is not a buffer";
      pl::DType dt;
      if (!to_pallas(b->element_type(), &dt))
        return op + ": operand " + std::to_string(i) + " has a dtype Pallas does not take here (f32, f16, bf16, f64, i32, i8, u8, bool, f8e4m3fn, f8e5m2)";
      auto dims = b->dimensions();
      in.push_back(pl::ShapeDtype(pl::Shape(dims.begin(), dims.end()), dt));
      data.push_back(b->untyped_data());
    }
    return {};
  }

  Made get(const std::vector<pl::ShapeDtype>& in, pl::Backend backend) { return calls_.get(in, backend); }

  std::string name_;
  pallas_interop::MadeCalls calls_;
};

}  // namespace pallas_jax_user

// Defines the FFI handler symbols <Name>Cpu and <Name>Cuda for a factory
// pl::Call(const std::vector<pl::ShapeDtype>&, pl::Backend).
#define PALLAS_JAX_FFI_TARGET(Name, factory)                                                                                         \
  namespace {                                                                                                                       \
  pallas_jax_user::Target& Name##_target() {                                                                                        \
    static pallas_jax_user::Target t(#Name, factory);                                                                              \
    return t;                                                                                                                       \
  }                                                                                                                                 \
  xla::ffi::Error Name##_cuda(pallas_jax_user::cudaStream_t s, int32_t ordinal, xla::ffi::RemainingArgs a, xla::ffi::RemainingRets r) { \
    return Name##_target().run(s, ordinal, true, a, r);                                                                             \
  }                                                                                                                                 \
  xla::ffi::Error Name##_cpu(xla::ffi::RemainingArgs a, xla::ffi::RemainingRets r) {                                                \
    return Name##_target().run(nullptr, 0, false, a, r);                                                                            \
  }                                                                                                                                 \
  xla::ffi::Error Name##_vjp_cuda(pallas_jax_user::cudaStream_t s, int32_t ordinal, xla::ffi::RemainingArgs a,                      \
                                  xla::ffi::RemainingRets r, int64_t num_primals) {                                                 \
    return Name##_target().run_vjp(s, ordinal, true, a, r, num_primals);                                                           \
  }                                                                                                                                 \
  xla::ffi::Error Name##_vjp_cpu(xla::ffi::RemainingArgs a, xla::ffi::RemainingRets r, int64_t num_primals) {                       \
    return Name##_target().run_vjp(nullptr, 0, false, a, r, num_primals);                                                          \
  }                                                                                                                                 \
  }                                                                                                                                 \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(Name##Cuda, Name##_cuda,                                                                            \
                                xla::ffi::Ffi::Bind()                                                                               \
                                    .Ctx<xla::ffi::PlatformStream<pallas_jax_user::cudaStream_t>>()                                 \
                                    .Ctx<xla::ffi::DeviceOrdinal>()                                                                 \
                                    .RemainingArgs()                                                                                \
                                    .RemainingRets());                                                                              \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(Name##Cpu, Name##_cpu, xla::ffi::Ffi::Bind().RemainingArgs().RemainingRets());                    \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(Name##VjpCuda, Name##_vjp_cuda,                                                                     \
                                xla::ffi::Ffi::Bind()                                                                               \
                                    .Ctx<xla::ffi::PlatformStream<pallas_jax_user::cudaStream_t>>()                                 \
                                    .Ctx<xla::ffi::DeviceOrdinal>()                                                                 \
                                    .RemainingArgs()                                                                                \
                                    .RemainingRets()                                                                                \
                                    .Attr<int64_t>("num_primals"));                                                                 \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(Name##VjpCpu, Name##_vjp_cpu,                                                                       \
                                xla::ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attr<int64_t>("num_primals"));
