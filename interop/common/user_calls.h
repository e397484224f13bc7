// What the framework registrations of a user's kernel (interop/jax/pallas_jax_user.h,
// interop/torch/pallas_torch_user.h) keep per target or op, framework-free: the factory's product
// for each set of operand shapes and dtypes and backend, made and traced once.
#pragma once
#include <pallas/pallas.h>
#include <pallas/transforms.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pallas_interop {
namespace pl = pallas;

// What a factory makes for the operands' shapes: a call (its gradient is its automatic vjp) or a
// custom_vjp pair (its gradient is the pair's backward, e.g. the library's hand-written kernels).
struct Made {
  pl::Call call;                    // the call; for a pair, its forward (with the residuals)
  std::optional<pl::CustomVjp> vjp;  // the pair
  std::vector<pl::ShapeDtype> outs;  // the results (a pair's primal outputs)
};

inline Made made(pl::Call c) { return Made{c, std::nullopt, c.out_shapes()}; }
inline Made made(const pl::CustomVjp& f) {
  std::vector<pl::ShapeDtype> o = f.fwd().out_shapes();
  o.resize(static_cast<size_t>(f.num_outputs()));
  return Made{f.fwd(), f, o};
}

// A factory pl::Call or pl::CustomVjp (const std::vector<pl::ShapeDtype>&, pl::Backend) and what
// it made, per (shapes and dtypes, backend).
class MadeCalls {
 public:
  template <class F>
  explicit MadeCalls(F factory)
      : make_([factory](const std::vector<pl::ShapeDtype>& in, pl::Backend b) { return made(factory(in, b)); }) {}

  Made get(const std::vector<pl::ShapeDtype>& in, pl::Backend backend) {
    std::string key = backend == pl::Backend::Interpret ? "interpret" : "auto";
    for (const pl::ShapeDtype& s : in) key += " " + pl::shape_str(s.shape, s.dtype);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = made_.find(key);
    if (it != made_.end()) return it->second;
    Made m = make_(in, backend);
    m.call.trace(in);
    return made_.emplace(key, m).first->second;
  }

 private:
  std::function<Made(const std::vector<pl::ShapeDtype>&, pl::Backend)> make_;
  std::mutex mu_;
  std::map<std::string, Made> made_;
};

}  // namespace pallas_interop
