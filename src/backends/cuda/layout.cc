#include "src/backends/cuda/layout.h"
#include "src/backends/cuda/plan/passes.h"

#include "src/backends/cuda/lower.h"  // row_major_strides

#include <algorithm>
#include <cstdlib>
#include <numeric>

namespace pallas::cuda {
using ir::IndexDim;
using ir::PrimId;

namespace {

constexpr int64_t kAligned = int64_t{1} << 30;  // "divisible by anything we ask"

int64_t gcd(int64_t a, int64_t b) { return std::gcd(a < 0 ? -a : a, b < 0 ? -b : b); }
int64_t cap_mul(int64_t a, int64_t b) { return a >= kAligned / std::max<int64_t>(b, 1) ? kAligned : a * b; }
int64_t div_of_size(int64_t n) { return n == 0 ? kAligned : n; }

// What the pass knows about a ref: divisors (in elements) of its base offset, of each
// dimension's stride, and of the distance from its origin to the array's edge along the last
// dimension (so a run of V elements is in or out of the array as a whole).
struct RefFacts {
  std::string what;  // "input 0", "output 1", "scratch 0", "prefetch 0"
  DType dtype = DType::F32;
  Shape shape;
  int64_t base = kAligned;
  std::vector<int64_t> stride;
  int64_t last_edge = kAligned;
  bool unaligned_array = false;  // in global memory, at an address not known 16-byte aligned
};

RefFacts whole(const std::string& what, const ShapeDtype& sd) {
  RefFacts f;
  f.what = what;
  f.dtype = sd.dtype;
  f.shape = sd.shape;
  f.stride = row_major_strides(sd.shape);
  f.last_edge = sd.shape.empty() ? kAligned : div_of_size(sd.shape.back());
  return f;
}

// A block view: origin = block index * block shape (any block index), strides of the array
// in global memory, or of the block when the emitter keeps it in shared memory; both count.
RefFacts block(const core::BlockMapping& bm) {
  RefFacts f;
  f.what = bm.what;
  f.dtype = bm.array.dtype;
  auto ast = row_major_strides(bm.array.shape), bst = row_major_strides(bm.block_shape);
  f.base = 0;
  for (size_t d = 0; d < ast.size(); ++d) f.base = gcd(f.base, bm.block_shape[d] * ast[d]);
  if (f.base == 0) f.base = kAligned;
  for (size_t d = 0; d < ast.size(); ++d) {
    if (bm.squeezed[d]) continue;
    f.shape.push_back(bm.block_shape[d]);
    f.stride.push_back(gcd(ast[d], bst[d]));
  }
  if (!bm.array.shape.empty() && !bm.squeezed.back())
    f.last_edge = gcd(div_of_size(bm.array.shape.back()), div_of_size(bm.block_shape.back()));
  return f;
}

struct Pass {
  std::unordered_map<int64_t, RefFacts> refs;
  std::unordered_map<int64_t, int64_t> divisor;
  struct Site {
    const ir::Eqn* eqn;
    const RefFacts* ref;
    ir::Aval value;  // the tile moved
  };
  std::vector<Site> sites;

  int64_t div(const ir::Atom& a) const {
    if (auto* l = std::get_if<ir::Literal>(&a)) return is_float(l->dtype) ? 1 : l->i == 0 ? kAligned : (l->i < 0 ? -l->i : l->i);
    auto it = divisor.find(std::get<ir::Var>(a).id);
    return it == divisor.end() ? 1 : it->second;
  }

  void bind_ref(const ir::Var& inner, const ir::Atom& outer) {
    if (!inner.aval.is_ref) return;
    auto it = refs.find(std::get<ir::Var>(outer).id);
    if (it != refs.end()) refs[inner.id] = it->second;
  }
  void bind_div(const ir::Var& inner, const ir::Atom& outer) {
    if (!inner.aval.is_ref) divisor[inner.id] = div(outer);
  }

  void walk(const ir::Jaxpr& j) {
    for (const ir::Eqn& e : j.eqns) {
      PrimId id = e.prim->id;
      int64_t d = 1;
      switch (id) {
        case PrimId::multiple_of: {
          auto v = e.params.get<std::vector<int64_t>>("values");
          d = v.empty() ? 1 : std::max<int64_t>(v[0], div(e.in[0]));
          break;
        }
        case PrimId::mul: d = cap_mul(div(e.in[0]), div(e.in[1])); break;
        case PrimId::add:
        case PrimId::sub:
        case PrimId::rem: d = gcd(div(e.in[0]), div(e.in[1])); break;  // a % b = a - q * b
        case PrimId::shift_left:
          if (auto* l = std::get_if<ir::Literal>(&e.in[1]); l && l->i >= 0 && l->i < 30) d = cap_mul(div(e.in[0]), int64_t{1} << l->i);
          break;
        case PrimId::convert_element_type:
        case PrimId::max_contiguous:
        case PrimId::stop_gradient: d = is_float(e.out[0].aval.dtype) ? 1 : div(e.in[0]); break;
        case PrimId::load:
        case PrimId::store:
        case PrimId::swap:
        case PrimId::addupdate: {
          auto it = refs.find(std::get<ir::Var>(e.in[0]).id);
          if (it != refs.end()) sites.push_back({&e, &it->second, id == PrimId::load || id == PrimId::swap ? e.out[0].aval : ir::atom_aval(e.in[1])});
          break;
        }
        case PrimId::fori_loop: {
          const ir::Jaxpr& body = *e.params.get<ir::JaxprPtr>("body");
          size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
          divisor[body.invars[0].id] = 1;
          for (size_t c = 0; c < nc; ++c) divisor[body.invars[1 + c].id] = 1;  // carries change
          for (size_t q = 1 + nc; q < body.invars.size(); ++q) bind_ref(body.invars[q], e.in[1 + q]), bind_div(body.invars[q], e.in[1 + q]);
          walk(body);
          break;
        }
        case PrimId::while_loop: {
          const ir::Jaxpr& cj = *e.params.get<ir::JaxprPtr>("cond_jaxpr");
          const ir::Jaxpr& bj = *e.params.get<ir::JaxprPtr>("body_jaxpr");
          size_t nc = static_cast<size_t>(e.params.get_int("num_carry"));
          size_t ncc = static_cast<size_t>(e.params.get_int("cond_nconsts"));
          for (size_t q = nc; q < nc + ncc && q < cj.invars.size(); ++q) bind_ref(cj.invars[q], e.in[q]), bind_div(cj.invars[q], e.in[q]);
          for (size_t q = nc; q < bj.invars.size(); ++q) bind_ref(bj.invars[q], e.in[ncc + q]), bind_div(bj.invars[q], e.in[ncc + q]);
          walk(cj);
          walk(bj);
          break;
        }
        case PrimId::cond:
          for (auto& b : e.params.get<std::vector<ir::JaxprPtr>>("branches")) {
            for (size_t q = 0; q < b->invars.size(); ++q) bind_ref(b->invars[q], e.in[1 + q]), bind_div(b->invars[q], e.in[1 + q]);
            walk(*b);
          }
          break;
        default: break;
      }
      if (e.out.size() == 1 && !is_float(e.out[0].aval.dtype) && d > 1) divisor[e.out[0].id] = d;
    }
  }

  // Elements per vector access of this site with runs of V, or 1 and why not.
  LayoutPlan::Access check(const Site& s, int V) const {
    const ir::Eqn& e = *s.eqn;
    const RefFacts& r = *s.ref;
    auto no = [](const std::string& why) { return LayoutPlan::Access{1, why}; };
    if (r.unaligned_array) return no("the array is not 16-byte aligned (a caller's view)");
    if (V == 1) return no("vector width 1");
    if (s.value.shape.empty() || s.value.size() == 1) return no("one element");
    if (r.shape.empty()) return no("a rank-0 ref");
    PrimId id = e.prim->id;
    if (id == PrimId::swap || id == PrimId::addupdate) return no(std::string(e.prim->name) + " is not vectorised yet");
    if (id == PrimId::store && e.params.get_bool("has_mask")) return no("a masked store");
    const auto& ix = e.params.get<ir::NDIndexer>("idx");
    size_t start = static_cast<size_t>(e.params.get_int("idx_start"));
    if (ix.dims.size() != r.shape.size()) return no("a partial indexer");
    for (auto& x : ix.dims)
      if (x.kind == IndexDim::Kind::Array) return no("index arrays");
    const IndexDim& last = ix.dims.back();
    if (last.kind == IndexDim::Kind::Index || last.kind == IndexDim::Kind::DynIndex) return no("the last dimension is indexed");
    if (last.stride != 1) return no("a strided last dimension");
    if (last.size % V) return no("the last dimension's size " + std::to_string(last.size) + " is not a multiple of " + std::to_string(V));
    int64_t sd = last.kind == IndexDim::Kind::Slice ? div_of_size(last.start) : div(e.in[start + static_cast<size_t>(last.operand)]);
    if (sd % V) return no("the last dimension's start is not a known multiple of " + std::to_string(V) + " (pl::multiple_of)");
    if (r.stride.back() != 1) return no("the ref's last dimension is not contiguous");
    for (size_t d = 0; d + 1 < r.stride.size(); ++d)
      if (r.stride[d] % V) return no("a row stride not a multiple of " + std::to_string(V));
    if (r.base % V) return no("the block origin is not a multiple of " + std::to_string(V) + " elements");
    if (r.last_edge % V) return no("the array's last dimension is not a multiple of " + std::to_string(V));
    if (r.shape.back() % V) return no("the ref's last dimension is not a multiple of " + std::to_string(V));
    int per16 = static_cast<int>(16 / itemsize(r.dtype));
    return {std::min(V, std::max(per16, 1)), ""};
  }
};

}  // namespace

LayoutPlan plan_layout(const core::PallasCall& call, int threads, bool aligned, int force_vec) {
  const core::GridMapping& gm = call.grid;
  const ir::Jaxpr& k = *call.kernel;
  Pass P;
  size_t np = gm.prefetch.size(), nin = gm.inputs.size(), nout = gm.outputs.size();
  for (size_t a = 0; a < np; ++a) P.refs[k.invars[a].id] = whole("prefetch " + std::to_string(a), gm.prefetch[a]);
  for (size_t a = 0; a < nin; ++a) P.refs[k.invars[np + a].id] = block(gm.inputs[a]);
  for (size_t a = 0; a < nout; ++a) P.refs[k.invars[np + nin + a].id] = block(gm.outputs[a]);
  if (!aligned)
    for (size_t a = 0; a < np + nin + nout; ++a) P.refs[k.invars[a].id].unaligned_array = true;
  for (size_t s = 0; s < gm.scratch.size(); ++s) P.refs[k.invars[np + nin + nout + s].id] = whole("scratch " + std::to_string(s), gm.scratch[s]);
  P.walk(k);

  // V: the run length that moves the most bytes in full 16-byte accesses; the smallest such.
  size_t min_item = 8;
  for (auto& s : P.sites) min_item = std::min(min_item, itemsize(s.value.dtype));
  LayoutPlan plan;
  double best = 0;
  for (int V = static_cast<int>(16 / min_item); V >= 2; V /= 2) {
    double score = 0;
    for (auto& s : P.sites) {
      auto a = P.check(s, V);
      if (a.width > 1) score += static_cast<double>(s.value.size()) * std::min<double>(16, a.width * itemsize(s.value.dtype));
    }
    if (score > 0 && score >= best) best = score, plan.vec = V;
  }
  // PALLAS_CUDA_VECTOR_WIDTH=n (Target::vector_width) forces V, to tell a layout bug from any other.
  if (force_vec > 0) plan.vec = force_vec;
  std::string t = "layout: blocked, runs of " + std::to_string(plan.vec) + " element(s) per thread, " + std::to_string(threads) + " threads\n";
  for (size_t i = 0; i < P.sites.size(); ++i) {
    const auto& s = P.sites[i];
    auto a = P.check(s, plan.vec);
    plan.access[s.eqn] = a;
    t += "  #" + std::to_string(i) + " " + s.eqn->prim->name + " " + s.ref->what + " " + dtype_name(s.value.dtype) + "[";
    for (size_t d = 0; d < s.value.shape.size(); ++d) t += (d ? "," : "") + std::to_string(s.value.shape[d]);
    t += "]: ";
    t += a.width > 1 ? "vector " + std::to_string(a.width) + " x " + dtype_name(s.value.dtype) + " (" +
                           std::to_string(a.width * itemsize(s.value.dtype)) + " B)"
                     : "scalar (" + a.why + ")";
    t += "\n";
  }
  plan.divisor = P.divisor;
  plan.text = t;
  return plan;
}

}  // namespace pallas::cuda

namespace pallas::cuda {

void plan_blocked_layout(const core::PallasCall& call, KernelPlan& P) {
  P.layout = plan_layout(call, P.threads, P.target.aligned, P.target.vector_width);
  P.sections.push_back({"blocked-layout", P.layout.text});
}

}  // namespace pallas::cuda
