// Internal interface of the transformations: the jvp and batching rule tables and the
// PallasCall -> PallasCall rewrites.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "pallas/transforms.h"
#include "src/core/pallas_call.h"
#include "src/ir/primitive.h"

namespace pallas::transforms {

// ---- jvp ----
struct JvpScope;
struct JvpArgs {
  const ir::Eqn& eqn;
  std::vector<Value> x;  // primal inputs, in the new jaxpr
  std::vector<Value> t;  // their tangents; an undefined Value is a symbolic zero
  JvpScope& scope;
};
struct JvpOut {
  std::vector<Value> y;  // primal outputs
  std::vector<Value> t;  // their tangents (undefined: zero)
};
using JvpRule = std::function<JvpOut(JvpArgs&)>;
const ir::RuleTable<JvpRule>& jvp_rules();
// Primitives whose jvp rule refuses some uses, with the reason (the rule-coverage test reads it).
const std::map<ir::PrimId, std::string>& jvp_partial();

struct JvpCall {
  core::PallasCall call;
  std::vector<bool> in_tangent;  // inputs that got a tangent input (after the fixed point)
};
// in_tangent: inputs with a nonzero tangent. A kernel that stores a nonzero tangent into an
// input without one gets a tangent input for it too (the caller passes zeros).
JvpCall jvp_pallas_call(const core::PallasCall& c, std::vector<bool> in_tangent);

// Tie-splitting selector for max/min, in like's dtype: 1 where a wins, 1/2 at ties (jvp's and
// vjp's rules for max, min and the reductions agree on it).
Value wins(const Value& a, const Value& b, bool is_max, const Value& like);

// ---- vjp ----
// The transposed call of a straight-line kernel (vjp.cc): inputs, then one cotangent per
// output, then zeros for each floating input's cotangent; outputs: those cotangents (aliased to
// the zeros). Throws a pl::Error naming what it cannot transpose, pointing to custom_vjp.
// With VjpCarries::Saved, a tape output per carry of each top-level loop that carries state
// (static bounds) follows the cotangents: [programs, steps, carry shape...], for the kernel only.
core::PallasCall vjp_pallas_call(const core::PallasCall& c, VjpOptions opts = {});

// ---- batching ----
// Rewrites one equation of a kernel placed under `shift` new leading grid axes.
using BatchRule = std::function<ir::Eqn(const ir::Eqn&, int shift)>;
const ir::RuleTable<BatchRule>& batch_rules();
const std::map<ir::PrimId, std::string>& unbatchable();
ir::JaxprPtr batch_kernel(const ir::Jaxpr& j, int shift);

// Thrown by the build of a vmap that is an explicit loop of calls (not one PallasCall).
struct LoopOnly : Error {
  using Error::Error;
};

// The batched PallasCall; in_axes are normalised, one per input (prefetch included).
core::PallasCall vmap_pallas_call(const core::PallasCall& c, const std::vector<std::optional<int>>& in_axes,
                                  int64_t batch);

// ---- ragged batching ----
// A batched call (grid {B, ...}) whose grid axis 1 + grid_axis walks a ragged dimension in
// steps of `block` elements: a lengths operand i32[B] becomes the first scalar-prefetch
// operand; programs whose block starts at or past their element's length skip the kernel,
// and every index map clamps that grid index to the element's last block.
core::PallasCall ragged_pallas_call(const core::PallasCall& batched, int grid_axis, int64_t block);

// ---- checkify ----
core::PallasCall checkify_pallas_call(const core::PallasCall& c);  // checks as `check` equations
struct CheckMeta {
  std::string fmt;
  std::vector<std::pair<DType, Shape>> values;
  ir::SourceLoc loc;  // the pl::check's line, for the message
};
// Checks as extra outputs: per program, the 1-based index of its first failing check (0: ok)
// in an i32 output shaped grid + [1], and that check's values in an f64 output grid + [payload].
struct SlotCall {
  core::PallasCall call;
  std::vector<CheckMeta> checks;
  int64_t payload = 1;
  size_t num_outputs = 0;  // the user's outputs, before the two error outputs
};
SlotCall slot_pallas_call(const core::PallasCall& c);
std::string format_check(const CheckMeta& m, const double* values);
// Bind j's equations into the current trace frame with its invars set to args.
std::vector<Value> inline_jaxpr(const ir::Jaxpr& j, const std::vector<Value>& args);

// ---- host helpers ----
// A contiguous copy of a with `axis` moved to the front.
Array move_axis_to_front(const Array& a, int axis);
Array take(const Array& a, int axis, int64_t i);  // a[..., i, ...] along axis, contiguous
Array stack(const std::vector<Array>& xs);        // along a new axis 0

// The PallasCall of a Call for these input shapes (tracing or building it).
const core::PallasCall& pallas_call_of(const Call& c, const std::vector<ShapeDtype>& inputs);
// A Call holding a lazily built PallasCall.
Call make_transformed(std::string what, std::string name, std::vector<int64_t> grid_for_args, int num_outputs,
                      std::function<core::PallasCall(const std::vector<ShapeDtype>&)> build,
                      std::function<std::vector<Array>(const std::vector<Array>&)> run = {});
// Number of dynamic grid bounds a Call takes before its inputs.
int num_dynamic_args(const Call& c);

// A rewrite of `call` made once per call and key, kept while the call lives, so that repeated
// transforms reuse the backend's compiled kernel (its caches are keyed by the kernel). One
// cache per (Key, T); entries of calls that are gone are dropped as new ones come.
template <class T, class Key>
std::shared_ptr<const T> cached_rewrite(const Call& call, const Key& key, const std::function<T()>& make) {
  static std::mutex mu;
  static std::map<std::pair<const detail::CallState*, Key>, std::pair<std::weak_ptr<detail::CallState>, std::shared_ptr<const T>>> cache;
  std::lock_guard<std::mutex> g(mu);
  auto k = std::make_pair(call.state().get(), key);
  auto it = cache.find(k);
  if (it != cache.end() && it->second.first.lock() == call.state()) return it->second.second;
  for (auto i = cache.begin(); i != cache.end();) i = i->second.first.expired() ? cache.erase(i) : std::next(i);
  auto made = std::make_shared<const T>(make());
  cache[k] = {call.state(), made};
  return made;
}

}  // namespace pallas::transforms
