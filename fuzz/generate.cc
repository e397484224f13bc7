// The generator of random well-typed kernels.
//
// A kernel is generated while it is traced: every op is applied through the public API as
// soon as it is chosen (Builder::apply), so the library gives each value its shape and dtype,
// and the generator only decides what is legal. Beside each value the generator keeps what
// the comparison between backends needs to know about it (Meta):
//   - exact: every backend must produce the same bits (integers, bools, moves, comparisons,
//     IEEE add/sub/mul/div/sqrt, conversions, ...). Values of transcendental functions,
//     float reductions and dots are approximate, with a relative tolerance that grows along
//     the chain. Discontinuous ops (comparisons, float->int, floor, argmax, indices, masks,
//     bitcasts, rem, ...) only take exact operands, so an ulp of difference never turns
//     into a different branch or index.
//   - product: an f32/f64 product; an add of it may be contracted into an FMA on the GPU,
//     so such an add is approximate.
//   - taint: lanes of an unmasked load of an overhanging block (outside the array) or a
//     masked load without `other` (masked-off lanes) hold poison, which differs between
//     backends by design. Tainted values only flow lane-wise (elementwise ops) into a store
//     that writes exactly the same lanes back (the same block geometry, or the same mask).
// Outputs are fully written before they are read or partially written (or aliased to an
// input), so no backend's uninitialised memory is ever compared.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

#include "fuzz/fuzz_check.h"
#include "fuzz/kernel.h"

namespace fuzz {

const char* const kFeatures[] = {"overhang", "squeezed", "whole", "mask", "dslice", "gather", "scatter", "fori",
                                 "while", "cond", "switch", "when", "reduce", "argreduce", "cumsum", "dot", "atomic",
                                 "shared_atomic", "revisit", "alias", "multi_out", "scratch", "shape", "bitcast",
                                 "weak", "num_warps", "swap", "addupdate", "transcendental", "dynamic_grid", "any",
                                 "matmul", "prefetch", "past_end", "gather2", "negative_index",
                                 "add_duplicates", "dim_sem", nullptr};

namespace {

using pl::DType;

double base_tol(DType t) {
  switch (t) {
    case DType::F16: return 2e-3;
    case DType::BF16: return 1.6e-2;
    case DType::F32: return 2e-6;
    case DType::F64: return 4e-15;
    default: return 0;
  }
}
// The largest tolerance a value may carry into an output of dtype t.
double cap_tol(DType t) {
  switch (t) {
    case DType::F16: return 2e-2;
    case DType::BF16: return 1e-1;
    case DType::F32: return 2e-4;
    case DType::F64: return 1e-10;
    default: return 0;
  }
}
bool is_wide_float(DType t) { return t == DType::F32 || t == DType::F64; }

struct Meta {
  bool exact = true;
  double tol = 0;
  bool product = false;
  bool may_nan = true;
  int taint = 0;  // 0 clean; else a geometry key (< 1000000) or 1000000 + mask id
  bool has_range = false;
  int64_t lo = 0, hi = 0;  // integer scalars: known inclusive range
  bool usable = true;      // weak constants and discarded atomic results are not picked
};

Meta join(const Meta& a, const Meta& b) {
  Meta m;
  m.exact = a.exact && b.exact;
  m.tol = std::max(a.tol, b.tol);
  m.may_nan = a.may_nan || b.may_nan;
  m.taint = a.taint ? a.taint : b.taint;
  return m;
}

enum Fam { FB = 1, FI = 2, FF = 4 };
int fam(DType t) { return t == DType::Bool ? FB : pl::is_float(t) ? FF : FI; }

struct UnaryInfo {
  const char* name;
  int fams;
  bool approx;     // result approximate
  bool approx_ok;  // may take an approximate operand
  bool nan_safe;   // no NaN out of a NaN-free operand
};
const UnaryInfo kUnary[] = {
    {"neg", FF | FI, false, true, true},        {"abs", FF | FI, false, true, true},
    {"sign", FF | FI, false, false, true},      {"ceil", FF, false, false, true},
    {"floor", FF, false, false, true},          {"round", FF, false, false, true},
    {"exp", FF | FI | FB, true, false, false},  {"exp2", FF | FI, true, false, false},
    {"expm1", FF | FI, true, false, false},     {"log", FF | FI, true, false, false},
    {"log1p", FF | FI, true, false, false},     {"sqrt", FF | FI, false, false, false},
    {"cbrt", FF | FI, true, false, false},      {"rsqrt", FF | FI, true, false, false},
    {"sin", FF | FI, true, false, false},       {"cos", FF | FI, true, false, false},
    {"tan", FF | FI, true, false, false},       {"asin", FF | FI, true, false, false},
    {"acos", FF | FI, true, false, false},      {"atan", FF | FI, true, true, false},
    {"sinh", FF | FI, true, false, false},      {"cosh", FF | FI, true, false, false},
    {"tanh", FF | FI | FB, true, true, false},  {"asinh", FF | FI, true, false, false},
    {"acosh", FF | FI, true, false, false},     {"atanh", FF | FI, true, false, false},
    {"logistic", FF | FI, true, true, false},   {"erf", FF | FI, true, true, false},
    {"erf_inv", FF | FI, true, false, false},   {"is_finite", FF, false, false, true},
    {"population_count", FI, false, false, true}, {"clz", FI, false, false, true},
    {"bitwise_not", FI | FB, false, false, true}, {"logical_not", FB, false, false, true},
    {"square", FF | FI, false, true, false},    {"stop_gradient", FF | FI | FB, false, true, true},
};
bool is_transcendental(const UnaryInfo& u) { return u.approx || std::string(u.name) == "sqrt"; }

struct BinaryInfo {
  const char* name;
  int fams;  // of the promoted dtype
  bool approx;
  bool approx_ok;
  bool float_only;  // integer operands become f32
};
const BinaryInfo kBinary[] = {
    {"add", FF | FI, false, true, false},     {"sub", FF | FI, false, true, false},
    {"mul", FF | FI, false, true, false},     {"div", FF | FI, false, true, false},
    {"rem", FF | FI, false, false, false},    {"pow", FF | FI, true, false, true},
    {"atan2", FF | FI, true, false, true},    {"maximum", FF | FI | FB, false, true, false},
    {"minimum", FF | FI | FB, false, true, false}, {"nextafter", FF, false, false, false},
    {"bitwise_and", FI | FB, false, false, false}, {"bitwise_or", FI | FB, false, false, false},
    {"bitwise_xor", FI | FB, false, false, false}, {"shift_left", FI, false, false, false},
    {"shift_right_arithmetic", FI, false, false, false}, {"shift_right_logical", FI, false, false, false},
    {"eq", FF | FI | FB, false, false, false}, {"ne", FF | FI | FB, false, false, false},
    {"lt", FF | FI | FB, false, false, false}, {"le", FF | FI | FB, false, false, false},
    {"gt", FF | FI | FB, false, false, false}, {"ge", FF | FI | FB, false, false, false},
};

// What a ref is used for, and what the generator knows of its contents.
struct RefState {
  enum Role { Input, Plain, Revisit, SharedAtomic, Scratch } role = Input;
  bool overhang = false;   // some block may stick out of the array
  int geom = 0;            // geometry key (taint of unmasked full loads when overhang)
  bool initialized = false;  // fully written (or aliased): may be read and partially written
  bool exact = true;       // contents compare bit for bit
  double tol = 0;          // else their tolerance
  std::vector<int> ignored_axes;  // Revisit: the grid axes the index map ignores
  bool revisit_init_done = false;
  std::string shared_fn;  // SharedAtomic: the one op every program applies (ops of two kinds do not commute)
};

struct GenFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Gen : public Builder {
 public:
  Gen(Kernel& k, const GenOptions& o, uint64_t seed) : Builder(k), o_(o), rng_(seed) {}

  bool on(const char* f) const { return !o_.disabled.count(f); }
  int uni(int n) { return n <= 1 ? 0 : static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  int range(int lo, int hi) { return lo + uni(hi - lo + 1); }
  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[static_cast<size_t>(uni(static_cast<int>(v.size())))]; }
  void feature(const std::string& f) { k_.features.insert(f); }

  // ---------------- arrays, grid ----------------
  DType random_dtype() {
    static const std::pair<DType, int> w[] = {{DType::F32, 30}, {DType::I32, 14}, {DType::BF16, 10}, {DType::F16, 8},
                                              {DType::F64, 7},  {DType::Bool, 5}, {DType::I8, 4},    {DType::I16, 3},
                                              {DType::I64, 4},  {DType::U8, 4},   {DType::U16, 3},   {DType::U32, 4},
                                              {DType::U64, 3},  {DType::F8E4M3, 2}, {DType::F8E5M2, 2}};
    int total = 0;
    for (auto& [t, n] : w)
      if (o_.dtypes.count(t)) total += n;
    if (!total) throw GenFailure("no dtype allowed");
    int r = uni(total);
    for (auto& [t, n] : w)
      if (o_.dtypes.count(t) && (r -= n) < 0) return t;
    return DType::F32;
  }
  bool allowed(DType t) const { return o_.dtypes.count(t) > 0; }
  // Whether two dtypes promote implicitly: an 8-bit float only with itself, integers and bool.
  static bool promotable(DType a, DType b) {
    if (!pl::is_float8(a) && !pl::is_float8(b)) return true;
    return a == b || !pl::is_float(a) || !pl::is_float(b);
  }

  int64_t block_size(int64_t budget) {
    static const int64_t sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 12, 16, 16, 17, 24, 31, 32, 32, 33, 48, 64, 100, 128};
    for (int t = 0; t < 8; ++t) {
      int64_t b = sizes[uni(sizeof sizes / sizeof sizes[0])];
      if (b <= budget) return b;
    }
    return 1;
  }

  // Array length for a dimension whose blocks of size b are indexed 0..nblocks-1.
  int64_t length(int64_t b, int64_t nblocks, bool* overhang) {
    if (on("overhang") && b > 1 && coin(0.45)) {
      *overhang = true;
      return (nblocks - 1) * b + range(1, static_cast<int>(b) - 1);
    }
    return nblocks * b;
  }

  // A blocked input or output. Each grid axis in must_use indexes one dimension (i or n-1-i);
  // an output's other dimensions are taken whole (index 0), so its blocks are all visited.
  // An input's may also be indexed by any axis, i % m or a scalar-prefetch value.
  ArrayDesc random_array(DType t, bool output, const std::vector<int>& must_use, RefState& st) {
    ArrayDesc a;
    a.dtype = t;
    const auto& g = k_.grid;
    int rank = range(1, 3);
    rank = std::max<int>(rank, static_cast<int>(must_use.size()));
    a.whole = false;
    int64_t budget = rank == 3 ? 512 : 2048;
    std::vector<int> axes_left = must_use;
    std::vector<int> dims(static_cast<size_t>(rank));
    std::iota(dims.begin(), dims.end(), 0);
    std::shuffle(dims.begin(), dims.end(), rng_);
    a.block.assign(static_cast<size_t>(rank), 1);
    a.shape.assign(static_cast<size_t>(rank), 1);
    a.map.assign(static_cast<size_t>(rank), DimMap{});
    int64_t tile = 1;
    for (int d : dims) {
      DimMap m;
      bool ov = false;
      int64_t b = block_size(std::max<int64_t>(1, budget / tile));
      if (!axes_left.empty()) {
        m.kind = output ? (coin(0.25) ? MapKind::Rev : MapKind::Axis) : MapKind::Axis;
        m.axis = axes_left.back();
        axes_left.pop_back();
      } else if (!output && !g.empty() && coin(0.5)) {
        m.axis = uni(static_cast<int>(g.size()));
        int r = uni(10);
        m.kind = r < 6 ? MapKind::Axis : r < 8 ? MapKind::Rev : MapKind::Mod;
        if (m.kind == MapKind::Mod) m.mod = range(1, std::max<int>(1, static_cast<int>(g[static_cast<size_t>(m.axis)]) - 1));
        if (k_.num_prefetch() && coin(0.4)) {
          m.kind = MapKind::Pref;  // a data-dependent block index
          m.mod = range(1, 4);
          feature("prefetch:index_map");
        }
      } else {
        m.kind = MapKind::Zero;
      }
      int64_t nblocks = m.kind == MapKind::Zero ? 1 : m.kind == MapKind::Mod || m.kind == MapKind::Pref ? m.mod : g[static_cast<size_t>(m.axis)];
      if (m.kind != MapKind::Zero && on("squeezed") && coin(0.15)) {
        a.block[static_cast<size_t>(d)] = pl::squeezed;
        a.shape[static_cast<size_t>(d)] = nblocks;
        feature("squeezed");
      } else {
        a.block[static_cast<size_t>(d)] = b;
        a.shape[static_cast<size_t>(d)] = length(b, nblocks, &ov);
        tile *= b;
      }
      if (ov) st.overhang = true, feature("overhang");
      a.map[static_cast<size_t>(d)] = m;
    }
    return a;
  }

  ArrayDesc whole_array(DType t) {
    ArrayDesc a;
    a.dtype = t;
    a.whole = true;
    int rank = uni(4);
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) {
      int64_t s = block_size(std::max<int64_t>(1, 1024 / n));
      a.shape.push_back(s);
      n *= s;
    }
    return a;
  }

  int geometry_key(const ArrayDesc& a) {
    std::string s;
    for (int64_t x : a.shape) s += std::to_string(x) + ",";
    s += "|";
    for (int64_t x : a.block) s += std::to_string(x) + ",";
    s += "|";
    for (auto& m : a.map) s += std::to_string(static_cast<int>(m.kind)) + ":" + std::to_string(m.axis) + ":" + std::to_string(m.mod) + ",";
    auto it = geoms_.find(s);
    if (it != geoms_.end()) return it->second;
    int key = static_cast<int>(geoms_.size()) + 1;
    geoms_[s] = key;
    return key;
  }

  // The matmul of kernels/matmul.cc (a K loop accumulating dots of ds slices), with random
  // sizes and dtypes: half at multiples of 128 x 128 x 64 with blocks up to 128 x 256 (the
  // large wgmma tiles; these once took the sm_90a matmul fast path, retired on 2026-12-05).
  bool matmul_ = false;
  int64_t mm_bm_ = 0, mm_bn_ = 0, mm_bk_ = 0, mm_steps_ = 0;
  bool mm_epilogue_ = false;
  void setup_matmul() {
    matmul_ = true;
    feature("matmul");
    DType t = allowed(DType::BF16) && (!allowed(DType::F16) || coin(0.6)) ? DType::BF16 : DType::F16;
    std::vector<DType> outs;
    for (DType o : {DType::F32, DType::BF16, DType::F16})
      if (allowed(o)) outs.push_back(o);
    DType ot = outs.empty() ? DType::F32 : pick(outs);
    bool fast = coin(0.5);
    mm_epilogue_ = coin(0.3);  // then the general lowering: tiles small enough to compile quickly
    bool general = !fast || mm_epilogue_;
    mm_bm_ = general ? pick(std::vector<int64_t>{16, 32, 48, 64}) : pick(std::vector<int64_t>{64, 128});
    mm_bn_ = general ? pick(std::vector<int64_t>{16, 32, 64, 96, 128}) : pick(std::vector<int64_t>{64, 128, 256});
    mm_bk_ = fast ? pick(std::vector<int64_t>{32, 64}) : pick(std::vector<int64_t>{16, 32, 64});
    mm_steps_ = range(1, 4);
    int64_t gm = range(1, 3), gn = range(1, 2);
    if (fast) {  // multiples of the large tiles
      if (mm_bm_ * gm % 128) gm = 2;
      if (mm_bn_ * gn % 128) gn = 2;
      if (mm_bk_ * mm_steps_ % 64) mm_steps_ = 2;
      feature("matmul:fast_shape");
    }
    k_.grid = {gm, gn};
    k_.dynamic = {false, false};
    int64_t M = gm * mm_bm_, N = gn * mm_bn_, K = mm_bk_ * mm_steps_;
    ArrayDesc a, b, c;
    a.dtype = b.dtype = t;
    c.dtype = ot;
    a.whole = b.whole = c.whole = false;
    a.shape = {M, K}, a.block = {mm_bm_, K}, a.map = {DimMap{MapKind::Axis, 0}, DimMap{}};
    b.shape = {K, N}, b.block = {K, mm_bn_}, b.map = {DimMap{}, DimMap{MapKind::Axis, 1}};
    c.shape = {M, N}, c.block = {mm_bm_, mm_bn_}, c.map = {DimMap{MapKind::Axis, 0}, DimMap{MapKind::Axis, 1}};
    RefState in;
    in.geom = geometry_key(a);
    k_.ins.push_back(a);
    ins_.push_back(in);
    in.geom = geometry_key(b);
    k_.ins.push_back(b);
    ins_.push_back(in);
    RefState out;
    out.role = RefState::Plain;
    out.exact = false;
    out.tol = cap_tol(ot);
    add_output(c, out);
    for (size_t i = 0; i < k_.ins.size(); ++i) k_.in_seeds.push_back(mix(mix(k_.seed, static_cast<uint64_t>(k_.index)), i));
    k_.in_edges = {0, 0};  // long dot rows would mostly meet a NaN or an infinity
  }

  void kernel_matmul() {
    int z = full({mm_bm_, mm_bn_}, 0, DType::F32);
    Op f;
    f.k = K::Fori;
    f.p = {0, mm_steps_, coin(0.2) ? 2 : 1};
    f.in = {z};
    f.body.resize(1);
    Program& b = f.body[0];
    int pi = new_id(), pacc = new_id();
    b.params = {pi, pacc};
    auto op = [&](K kind, std::vector<int> in) {
      Op o;
      o.k = kind;
      o.in = std::move(in);
      o.out = {new_id()};
      return o;
    };
    Op w = op(K::Weak, {});
    w.c = static_cast<double>(mm_bk_);
    Op m = op(K::Binary, {pi, w.out[0]});
    m.fn = "mul";
    Op la = op(K::Load, {});
    la.ref = 0;
    la.idx = {Idx{}, Idx{Idx::DynSlice, 0, mm_bk_, 1, m.out[0]}};
    Op lb = op(K::Load, {});
    lb.ref = 1;
    lb.idx = {Idx{Idx::DynSlice, 0, mm_bk_, 1, m.out[0]}, Idx{}};
    Op d = op(K::Dot, {la.out[0], lb.out[0]});
    Op y = op(K::Binary, coin(0.5) ? std::vector<int>{pacc, d.out[0]} : std::vector<int>{d.out[0], pacc});
    y.fn = "add";
    b.ops = {w, m, la, lb, d, y};
    b.yields = {y.out[0]};
    f.out = {new_id()};
    cur_->ops.push_back(std::move(f));
    apply(cur_->ops.back());
    Meta am;
    am.exact = false;
    am.tol = 8 * base_tol(DType::F32);
    int acc = cur_->ops.back().out[0];
    record(acc, am);
    if (mm_epilogue_) {  // an epilogue: the general lowering
      acc = coin(0.5) ? binary("maximum", acc, weak_float(0.0), M(acc)) : binary("mul", acc, weak_float(0.5), M(acc));
      feature("matmul:epilogue");
    }
    int r = static_cast<int>(k_.ins.size());
    Op st;
    st.k = K::Store;
    st.ref = r;
    st.in = {convert(acc, rdtype(r))};
    st.idx.assign(2, Idx{});
    emit(st, Meta(), 0);
    k_.out_tol = {cap_tol(rdtype(r))};
  }

  void setup() {
    if (on("matmul") && coin(0.04) && (allowed(DType::BF16) || allowed(DType::F16))) return setup_matmul();
    // grid
    int gr = std::min(3, pick(std::vector<int>{0, 1, 1, 1, 2, 2, 2, 3, 3}));
    int64_t prod = 1;
    for (int a = 0; a < gr; ++a) {
      int64_t e = range(1, 4);
      if (prod * e > 24) e = 1;
      k_.grid.push_back(e);
      prod *= e;
    }
    feature("grid_rank:" + std::to_string(gr));
    for (int a = 0; a < gr; ++a) {
      k_.dynamic.push_back(on("dynamic_grid") && coin(0.15));
      if (k_.dynamic.back()) feature("dynamic_grid");
    }
    std::vector<int> big_axes;  // extent > 1
    for (int a = 0; a < gr; ++a)
      if (k_.grid[static_cast<size_t>(a)] > 1) big_axes.push_back(a);
    if (on("num_warps") && coin(0.3)) k_.num_warps = pick(std::vector<int>{1, 2, 8}), feature("num_warps");

    if (on("prefetch") && gr > 0 && coin(0.15)) {
      ArrayDesc p;
      p.dtype = DType::I32;
      p.shape = {static_cast<int64_t>(range(1, 6))};
      p.whole = true;
      p.prefetch = true;
      RefState st;
      st.geom = geometry_key(p);
      k_.ins.push_back(p);
      ins_.push_back(st);
      feature("prefetch");
    }
    int nin = range(1, 4);
    for (int i = 0; i < nin; ++i) {
      RefState st;
      st.role = RefState::Input;
      DType t = random_dtype();
      ArrayDesc a = (on("whole") && coin(0.2)) ? whole_array(t) : random_array(t, false, {}, st);
      if (a.whole) feature("whole");
      if (a.whole && !a.shape.empty() && on("any") && coin(0.35)) a.any = true, feature("memory_space_any");
      st.geom = geometry_key(a);
      k_.ins.push_back(a);
      ins_.push_back(st);
    }
    int nout = on("multi_out") ? pick(std::vector<int>{1, 1, 1, 2, 2, 3}) : 1;
    if (nout > 1) feature("multi_out");
    for (int o = 0; o < nout; ++o) {
      RefState st;
      DType t = random_dtype();
      int r = uni(100);
      bool alias = on("alias") && coin(0.2);
      DType at = pick(std::vector<DType>{DType::F32, DType::I32, DType::U32, DType::I64, DType::U64, DType::F64});
      if (on("shared_atomic") && on("alias") && r < 10 && allowed(at)) {
        // every program adds atomically into the whole (aliased) output
        ArrayDesc a = whole_array(at);
        if (a.shape.empty()) a.shape = {static_cast<int64_t>(range(1, 40))};
        st.role = RefState::SharedAtomic;
        st.initialized = true;
        st.exact = !pl::is_float(at);
        st.tol = st.exact ? 0 : cap_tol(at);
        add_aliased_output(a, st);
        feature("shared_atomic");
        continue;
      }
      if (on("revisit") && !big_axes.empty() && r < 35) {
        // an index map that ignores at least one grid axis of extent > 1
        std::vector<int> use, ignored;
        for (int a : big_axes) (coin(0.5) ? use : ignored).push_back(a);
        if (ignored.empty()) ignored.push_back(use.back()), use.pop_back();
        ArrayDesc a = random_array(t, true, use, st);
        st.role = RefState::Revisit;
        st.ignored_axes = ignored;
        set_content_class(st, t);
        feature("revisit");
        if (alias) {
          st.initialized = true;
          add_aliased_output(a, st);
        } else {
          add_output(a, st);
        }
        continue;
      }
      {
        // mirror an input's geometry (so lane-wise work on an overhanging block can be stored back)
        ArrayDesc a;
        bool mirrored = false;
        for (size_t i = 0; i < k_.ins.size() && !mirrored; ++i) {
          const ArrayDesc& in = k_.ins[i];
          if (in.whole || !coin(0.5)) continue;
          std::vector<int> used;
          bool ok = true;
          for (auto& m : in.map) {
            if (m.kind == MapKind::Mod || m.kind == MapKind::Pref) ok = false;
            if (m.kind == MapKind::Axis || m.kind == MapKind::Rev) {
              if (std::find(used.begin(), used.end(), m.axis) != used.end()) ok = false;
              used.push_back(m.axis);
            }
          }
          for (int b : big_axes)
            if (std::find(used.begin(), used.end(), b) == used.end()) ok = false;
          if (!ok) continue;
          a = in;
          a.dtype = t;
          st.overhang = ins_[i].overhang;
          mirrored = true;
        }
        if (!mirrored) a = random_array(t, true, big_axes, st);
        st.role = RefState::Plain;
        set_content_class(st, t);
        if (alias) {
          st.initialized = true;
          add_aliased_output(a, st);
        } else {
          add_output(a, st);
        }
      }
    }
    if (on("scratch") && coin(0.2)) {
      DType t = random_dtype();
      pl::Shape s;
      int rank = range(1, 2);
      for (int d = 0; d < rank; ++d) s.push_back(block_size(64));
      k_.scratch.emplace_back(s, t);
      RefState st;
      st.role = RefState::Scratch;
      set_content_class(st, t);
      scratch_.push_back(st);
      feature("scratch");
    }
    for (size_t i = 0; i < k_.ins.size(); ++i) k_.in_seeds.push_back(mix(mix(k_.seed, static_cast<uint64_t>(k_.index)), i));
    if (on("dim_sem") && gr > 0 && coin(0.3)) {
      // declared: sequential where a revisited output needs it, else mostly parallel (shared
      // atomic outputs then take adds from programs running at once)
      for (int a = 0; a < gr; ++a) {
        bool seq = false;
        for (auto& o : outs_)
          if (o.role == RefState::Revisit && std::find(o.ignored_axes.begin(), o.ignored_axes.end(), a) != o.ignored_axes.end())
            seq = true;
        k_.dim_sem.push_back(seq || coin(0.3) ? 1 : 0);
      }
      feature("dim_sem");
    }
  }

  void set_content_class(RefState& st, DType t) {
    st.exact = !pl::is_float(t) || coin(0.5);
    st.tol = st.exact ? 0 : cap_tol(t);
  }

  void add_output(ArrayDesc a, RefState st) {
    st.geom = geometry_key(a);
    k_.outs.push_back(a);
    outs_.push_back(st);
  }
  void add_aliased_output(ArrayDesc a, RefState st) {
    // the aliased input: same array, its own (whole) spec
    ArrayDesc in;
    in.dtype = a.dtype;
    in.shape = a.shape;
    in.whole = true;
    RefState is;
    is.geom = geometry_key(in);
    k_.aliases[static_cast<int>(k_.ins.size())] = static_cast<int>(k_.outs.size());
    k_.ins.push_back(in);
    ins_.push_back(is);
    feature("alias");
    add_output(a, st);
  }

  RefState& rs(int r) {
    int ni = static_cast<int>(ins_.size()), no = static_cast<int>(outs_.size());
    if (r < ni) return ins_[static_cast<size_t>(r)];
    if (r < ni + no) return outs_[static_cast<size_t>(r - ni)];
    return scratch_[static_cast<size_t>(r - ni - no)];
  }
  bool is_output(int r) const { return r >= static_cast<int>(ins_.size()) && r < static_cast<int>(ins_.size() + outs_.size()); }
  // The array description behind ref r (scratch: a whole array).
  ArrayDesc desc(int r) const {
    int ni = static_cast<int>(k_.ins.size()), no = static_cast<int>(k_.outs.size());
    if (r < ni) return k_.ins[static_cast<size_t>(r)];
    if (r < ni + no) return k_.outs[static_cast<size_t>(r - ni)];
    ArrayDesc a;
    a.whole = true;
    a.shape = k_.scratch[static_cast<size_t>(r - ni - no)].shape;
    a.dtype = k_.scratch[static_cast<size_t>(r - ni - no)].dtype;
    return a;
  }
  pl::Shape view(int r) const { return desc(r).view(); }
  DType rdtype(int r) const { return desc(r).dtype; }

  // ---------------- emitting ops ----------------
  int new_id() { return k_.next_id++; }

  // Appends op to the current program, applies it (the library types its results) and
  // records their meta.
  int emit(Op op, const Meta& m, int nres = 1) {
    for (int i = 0; i < nres; ++i) op.out.push_back(new_id());
    cur_->ops.push_back(std::move(op));
    Op& o = cur_->ops.back();
    apply(o);
    for (int id : o.out) record(id, m);
    return o.out.empty() ? -1 : o.out[0];
  }
  void record(int id, Meta m) {
    if (static_cast<size_t>(id) >= meta_.size()) meta_.resize(static_cast<size_t>(id) + 1);
    const ValueType& t = types[static_cast<size_t>(id)];
    if (t.weak) m.usable = false;
    if (!pl::is_float(t.dtype)) {  // integers and bools are exact and never NaN
      m.exact = true, m.tol = 0, m.may_nan = false, m.product = false;
    }
    if (!m.exact && m.tol == 0) m.tol = base_tol(t.dtype);
    meta_[static_cast<size_t>(id)] = m;
    scopes_.back().push_back(id);
  }
  const Meta& M(int id) const { return meta_.at(static_cast<size_t>(id)); }
  const ValueType& T(int id) const { return types.at(static_cast<size_t>(id)); }
  DType D(int id) const { return T(id).dtype; }
  const pl::Shape& S(int id) const { return T(id).shape; }
  bool scalar(int id) const { return S(id).empty(); }

  std::vector<int> visible() const {
    std::vector<int> r;
    for (auto& s : scopes_) r.insert(r.end(), s.begin(), s.end());
    return r;
  }
  // A usable value satisfying f, recent ones preferred; -1 if none.
  template <class F>
  int find(F&& f) {
    std::vector<int> c;
    for (int id : visible())
      if (M(id).usable && f(id)) c.push_back(id);
    if (c.empty()) return -1;
    if (coin(0.6)) {
      size_t from = c.size() > 6 ? c.size() - 6 : 0;
      return c[from + static_cast<size_t>(uni(static_cast<int>(c.size() - from)))];
    }
    return pick(c);
  }

  // ---- small value makers ----
  int weak_int(int64_t c) {
    Op op;
    op.k = K::Weak;
    op.c = static_cast<double>(c);
    Meta m;
    m.has_range = true, m.lo = c, m.hi = c, m.may_nan = false;
    return emit(op, m);
  }
  int weak_float(double c) {
    Op op;
    op.k = K::Weak;
    op.c = c;
    op.f1 = true;
    Meta m;
    m.may_nan = false;
    return emit(op, m);
  }
  int constant(double c, DType t) {
    Op op;
    op.k = K::Const;
    op.c = c;
    op.dt = t;
    Meta m;
    m.may_nan = false;
    if (!pl::is_float(t)) m.has_range = true, m.lo = m.hi = static_cast<int64_t>(c);
    return emit(op, m);
  }
  int binary(const std::string& fn, int x, int y, Meta m) {
    Op op;
    op.k = K::Binary;
    op.fn = fn;
    op.in = {x, y};
    return emit(op, m);
  }
  int unary(const std::string& fn, int x, Meta m) {
    Op op;
    op.k = K::Unary;
    op.fn = fn;
    op.in = {x};
    return emit(op, m);
  }
  int convert(int x, DType t) {
    if (D(x) == t) return x;
    Meta m = M(x);
    m.product = false;
    m.has_range = false;
    if (!m.exact) m.tol += base_tol(t);
    if (!pl::is_float(D(x))) m.may_nan = false;
    Op op;
    op.k = K::Convert;
    op.in = {x};
    op.dt = t;
    return emit(op, m);
  }
  int program_id(int a) {
    Op op;
    op.k = K::ProgramId;
    op.p = {a};
    Meta m;
    m.has_range = true, m.lo = 0, m.hi = k_.grid[static_cast<size_t>(a)] - 1;
    return emit(op, m);
  }
  int full(pl::Shape s, double c, DType t) {
    Op op;
    op.k = K::Full;
    op.p = s;
    op.c = c;
    op.dt = t;
    Meta m;
    m.may_nan = false;
    return emit(op, m);
  }
  int iota(DType t, pl::Shape s, int dim) {
    Op op;
    op.k = K::Iota;
    op.dt = t;
    op.p = {dim};
    op.p.insert(op.p.end(), s.begin(), s.end());
    Meta m;
    m.may_nan = false;
    return emit(op, m);
  }
  int broadcast(int x, pl::Shape s) {
    if (S(x) == s) return x;
    Op op;
    op.k = K::Broadcast;
    op.in = {x};
    op.p = s;
    Meta m = M(x);
    m.product = false, m.has_range = false;
    return emit(op, m);
  }
  int reshape(int x, pl::Shape s) {
    if (S(x) == s) return x;
    Op op;
    op.k = K::Reshape;
    op.in = {x};
    op.p = s;
    Meta m = M(x);
    m.product = false, m.has_range = false;
    return emit(op, m);
  }

  double const_for(DType t) {
    if (t == DType::Bool) return uni(2);
    if (pl::is_unsigned_int(t)) return range(0, 9);
    if (pl::is_integer(t)) return range(-5, 9);
    return pick(std::vector<double>{0.0, 1.0, -1.0, 0.5, 2.0, -3.25, 1e-3, 100.0});
  }

  // An i32 scalar in [0, m) that changes with the program (or loop), exact.
  int index_scalar(int64_t m) {
    if (m <= 1) return constant(0, DType::I32);
    std::vector<int> srcs;
    for (int id : visible())
      if (M(id).usable && M(id).has_range && scalar(id) && pl::is_integer(D(id)) && M(id).lo >= 0 && M(id).hi < (1 << 20) && M(id).hi > M(id).lo)
        srcs.push_back(id);
    int x = -1;
    int r = uni(10);
    if (!srcs.empty() && r < 6) {
      x = convert(pick(srcs), DType::I32);
    } else if (!k_.grid.empty() && r < 8) {
      x = program_id(uni(static_cast<int>(k_.grid.size())));
    } else {
      int d = find([&](int id) { return scalar(id) && pl::is_integer(D(id)) && M(id).taint == 0; });
      if (d >= 0) {
        // ((x % m) + m) % m: in [0, m) for any integer
        int xi = convert(d, DType::I32);
        int r1 = binary("rem", xi, weak_int(m), Meta());
        int r2 = binary("add", r1, weak_int(m), Meta());
        Meta rm;
        rm.has_range = true, rm.lo = 0, rm.hi = m - 1;
        return binary("rem", r2, weak_int(m), rm);
      }
      if (k_.grid.empty()) return constant(range(0, static_cast<int>(m) - 1), DType::I32);
      x = program_id(uni(static_cast<int>(k_.grid.size())));
    }
    const Meta& xm = M(x);
    if (xm.hi < m && coin(0.4)) {
      if (on("weak") && coin(0.3)) {
        Op op;
        op.k = K::Hint;
        op.fn = coin(0.5) ? "multiple_of" : "max_contiguous";
        op.in = {x};
        op.p = {1};
        Meta hm = xm;
        return emit(op, hm);
      }
      return x;
    }
    int c1 = range(1, 7), c2 = range(0, 5);
    int t = binary("mul", x, weak_int(c1), Meta());
    int u = binary("add", t, weak_int(c2), Meta());
    Meta rm;
    rm.has_range = true, rm.lo = 0, rm.hi = m - 1;
    return binary("rem", u, weak_int(m), rm);
  }

  // An i32 tile of shape s with values in [0, m); distinct values when perm (then s is 1-D
  // with s[0] <= m).
  // Index arrays of refs may also address from the end: entries in [-m, 0) (negative_index).
  int ref_index_array(pl::Shape s, int64_t m, bool perm) {
    int ix = index_array(s, m, perm);
    if (on("negative_index") && coin(0.25)) {
      ix = binary("sub", ix, weak_int(m), Meta());
      feature("index:negative");
    }
    return ix;
  }

  int index_array(pl::Shape s, int64_t m, bool perm) {
    if (!perm && coin(0.5)) {
      int d = find([&](int id) { return S(id) == s && pl::is_integer(D(id)) && M(id).taint == 0; });
      if (d >= 0) {
        int xi = convert(d, DType::I32);
        int r1 = binary("rem", xi, weak_int(m), Meta());
        int r2 = binary("add", r1, weak_int(m), Meta());
        return binary("rem", r2, weak_int(m), Meta());
      }
    }
    int io = iota(DType::I32, s, uni(static_cast<int>(s.size())));
    int64_t c1 = 1;
    for (int t = 0; t < 8; ++t) {
      int64_t c = range(1, 7);
      if (std::gcd(c, m) == 1) {
        c1 = c;
        break;
      }
    }
    int64_t c2 = range(0, static_cast<int>(m));
    int a = binary("mul", io, weak_int(c1), Meta());
    int b = binary("add", a, weak_int(c2), Meta());
    return binary("rem", b, weak_int(m), Meta());
  }

  // A bool tile of shape s (exact, clean).
  int make_mask(pl::Shape s) {
    int r = uni(10);
    if (r < 4) {
      int x = find([&](int id) { return S(id) == s && M(id).exact && M(id).taint == 0 && D(id) != DType::Bool; });
      if (x >= 0) {
        static const char* cmp[] = {"lt", "le", "gt", "ge", "ne", "eq"};
        double c = pl::is_float(D(x)) ? 0.0 : pl::is_unsigned_int(D(x)) ? 5 : 0;
        return binary(cmp[uni(6)], x, pl::is_float(D(x)) ? weak_float(c) : weak_int(static_cast<int64_t>(c)), Meta());
      }
    }
    if (r < 6) {
      int x = find([&](int id) { return S(id) == s && D(id) == DType::Bool && M(id).taint == 0; });
      if (x >= 0) return x;
    }
    if (s.empty()) return binary("lt", index_scalar(5), weak_int(range(1, 4)), Meta());
    int d = uni(static_cast<int>(s.size()));
    int io = iota(DType::I32, s, d);
    if (coin(0.5)) {
      int lim = index_scalar(s[static_cast<size_t>(d)] + 1);
      return binary(coin(0.5) ? "lt" : "ge", io, lim, Meta());
    }
    int m = binary("rem", io, weak_int(range(2, 3)), Meta());
    return binary("eq", m, weak_int(0), Meta());
  }

  // The block index of array dimension d of ref r, as an i32 scalar.
  int block_index(const ArrayDesc& a, size_t d) {
    const DimMap& m = a.map[d];
    switch (m.kind) {
      case MapKind::Zero: return constant(0, DType::I32);
      case MapKind::Axis: return program_id(m.axis);
      case MapKind::Rev: return binary("sub", constant(static_cast<double>(k_.grid[static_cast<size_t>(m.axis)] - 1), DType::I32), program_id(m.axis), Meta());
      case MapKind::Mod: return binary("rem", program_id(m.axis), weak_int(m.mod), Meta());
      case MapKind::Pref: {
        Op ld;
        ld.k = K::Load;
        ld.ref = 0;
        ld.idx = {Idx{Idx::Dyn, 0, 0, 1, binary("rem", program_id(m.axis), weak_int(k_.ins[0].shape[0]), Meta())}};
        int s = emit(ld, Meta());
        int r1 = binary("rem", s, weak_int(m.mod), Meta());
        int r2 = binary("add", r1, weak_int(m.mod), Meta());
        return binary("rem", r2, weak_int(m.mod), Meta());
      }
    }
    return -1;
  }
  // True where the lane of ref r's view lies inside the array.
  int bounds_mask(int r) {
    ArrayDesc a = desc(r);
    pl::Shape vs = a.view();
    int mask = -1;
    int vd = 0;
    for (size_t d = 0; d < a.shape.size(); ++d) {
      if (a.block[d] == pl::squeezed) continue;
      int64_t b = a.block[d];
      MapKind mk = a.map[d].kind;
      int64_t nblocks = mk == MapKind::Zero ? 1 : mk == MapKind::Mod || mk == MapKind::Pref ? a.map[d].mod : k_.grid[static_cast<size_t>(a.map[d].axis)];
      if (a.shape[d] < nblocks * b) {
        int io = iota(DType::I32, vs, vd);
        int bi = block_index(a, d);
        int st = binary("mul", bi, weak_int(b), Meta());
        int g = binary("add", io, st, Meta());
        int in = binary("lt", g, weak_int(a.shape[d]), Meta());
        mask = mask < 0 ? in : binary("bitwise_and", mask, in, Meta());
      }
      ++vd;
    }
    return mask < 0 ? full(vs, 1, DType::Bool) : mask;
  }

  // Content meta of a read of ref r. A ref the kernel writes may hold an f32/f64 product
  // that the compiler forwards from the store, so an add of what is read may be contracted.
  Meta content(int r) {
    const RefState& st = rs(r);
    Meta m;
    m.exact = st.exact;
    m.tol = st.tol;
    m.product = st.role != RefState::Input && is_wide_float(rdtype(r));
    return m;
  }

  // ---------------- coercion ----------------
  // A value of exactly (shape s, dtype t) derived from x, or -1. need_exact: the result must
  // be exact; tol_cap: else its tolerance bound.
  int coerce(int x, pl::Shape s, DType t, bool need_exact, double tol_cap) {
    const Meta& m = M(x);
    if (need_exact && !m.exact) return -1;
    if (!m.exact && m.tol > tol_cap) return -1;
    if (!m.exact && !pl::is_float(t)) return -1;
    if (m.taint && S(x) != s) return -1;
    int y = x;
    if (S(y) != s) {
      const pl::Shape xs = S(y);
      if (xs.empty() || broadcastable(xs, s)) {
        y = broadcast(y, s);
      } else if (pl::shape_size(xs) == pl::shape_size(s)) {
        y = reshape(y, s);
      } else {
        // reduce to a scalar, then broadcast
        Op op;
        op.k = K::Reduce;
        op.fn = D(y) == DType::Bool ? "max" : coin(0.5) ? "max" : "min";
        op.in = {y};
        Meta rm = M(y);
        rm.product = false, rm.has_range = false;
        y = emit(op, rm);
        y = broadcast(y, s);
      }
    }
    y = convert(y, t);
    if (!M(y).exact && M(y).tol > tol_cap) return -1;
    return y;
  }
  static bool broadcastable(const pl::Shape& from, const pl::Shape& to) {
    if (from.size() > to.size()) return false;
    size_t off = to.size() - from.size();
    for (size_t i = 0; i < from.size(); ++i)
      if (from[i] != 1 && from[i] != to[off + i]) return false;
    return true;
  }

  // A value of (s, t) from the pool, a load, or a fresh iota/full.
  int make_value(pl::Shape s, DType t, bool need_exact, double tol_cap, bool clean = true) {
    int x = find([&](int id) {
      return S(id) == s && D(id) == t && (!need_exact || M(id).exact) && (M(id).exact || M(id).tol <= tol_cap) && (!clean || !M(id).taint);
    });
    if (x >= 0 && coin(0.7)) return x;
    for (int tries = 0; tries < 3; ++tries) {
      int y = find([&](int id) { return M(id).taint == 0 && (pl::shape_size(S(id)) == pl::shape_size(s) || S(id).empty() || broadcastable(S(id), s)); });
      if (y >= 0) {
        int z = coerce(y, s, t, need_exact, tol_cap);
        if (z >= 0) return z;
      }
    }
    if (x >= 0) return x;
    if (t != DType::Bool && coin(0.6) && !s.empty()) {
      int io = iota(t == DType::BF16 || t == DType::F16 ? DType::F32 : t, s, uni(static_cast<int>(s.size())));
      return convert(io, t);
    }
    return full(s, const_for(t), t);
  }

  // ---------------- loads ----------------
  bool readable(int r) {
    const RefState& st = rs(r);
    if (st.role == RefState::SharedAtomic) return false;
    if (st.role == RefState::Input) return true;
    return st.initialized;
  }

  int gen_load() {
    std::vector<int> rs_ok;
    for (int r = 0; r < k_.num_refs(); ++r)
      if (readable(r)) rs_ok.push_back(r);
    if (rs_ok.empty()) return -1;
    int r = pick(rs_ok);
    return load_from(r);
  }

  int load_from(int r) {
    const RefState& st = rs(r);
    pl::Shape vs = view(r);
    Meta m = content(r);
    Op op;
    op.k = K::Load;
    op.ref = r;
    int kind = uni(100);
    if (vs.empty()) {  // a rank-0 ref
      return emit(op, m);
    }
    if (r < static_cast<int>(k_.ins.size()) && k_.ins[static_cast<size_t>(r)].prefetch) {  // scalars of an SMEM ref
      op.idx = {coin(0.5) ? Idx{Idx::Static, range(0, static_cast<int>(vs[0]) - 1)} : Idx{Idx::Dyn, 0, 0, 1, index_scalar(vs[0])}};
      feature("prefetch:load");
      return emit(op, m);
    }
    if (st.overhang) {
      // whole view: masked to the array (clean) or not (tainted lanes)
      op.idx.assign(vs.size(), Idx{});
      if (on("mask") && coin(0.6)) {
        int bm = bounds_mask(r);
        if (coin(0.4)) bm = binary("bitwise_and", bm, make_mask(vs), Meta());
        op.mask = bm;
        op.other = constant(const_for(rdtype(r)), rdtype(r));
        feature("load:bounds_mask");
      } else {
        m.taint = st.geom;
        feature("load:overhang_taint");
      }
      return emit(op, m);
    }
    if (kind < 30 || !on("dslice")) {
      op.idx.assign(vs.size(), Idx{});
      if (on("mask") && coin(0.35)) {
        op.mask = make_mask(vs);
        if (coin(0.75)) {
          op.other = coin(0.5) ? constant(const_for(rdtype(r)), rdtype(r)) : weak_or_const(rdtype(r));
          feature("load:mask_other");
        } else {
          m.taint = 1000000 + op.mask;
          feature("load:mask_no_other");
        }
      }
      return emit(op, m);
    }
    if (kind < 38 && vs.size() >= 2 && on("gather") && on("gather2") && rs(r).role == RefState::Input) {
      // two index arrays broadcast together ([p,1] and [1,q]); NumPy places the [p,q] block
      size_t d0 = static_cast<size_t>(uni(static_cast<int>(vs.size()))), d1 = d0;
      while (d1 == d0) d1 = static_cast<size_t>(uni(static_cast<int>(vs.size())));
      int64_t rest = std::max<int64_t>(1, pl::shape_size(vs) / (vs[d0] * vs[d1]));
      int64_t p = range(1, 6), q = range(1, 6);
      while (p * q * rest > 4096 && (p > 1 || q > 1)) (p > q ? p : q) -= 1;  // keep the tile small
      int a0 = ref_index_array({p, 1}, vs[d0], false), a1 = ref_index_array({1, q}, vs[d1], false);
      op.idx.assign(vs.size(), Idx{});
      op.idx[d0] = Idx{Idx::Array, 0, 0, 1, a0};
      op.idx[d1] = Idx{Idx::Array, 0, 0, 1, a1};
      if (coin(0.3)) {  // an integer beside them is an advanced index too
        for (size_t i = 0; i < vs.size(); ++i)
          if (i != d0 && i != d1) {
            op.idx[i] = Idx{Idx::Static, range(0, static_cast<int>(vs[i]) - 1)};
            break;
          }
      }
      feature("load:gather2");
      return emit(op, m);
    }
    if (kind < 44 && on("past_end") && on("mask")) {
      // a masked slice reaching past the ref (the Triton idiom); the mask keeps it inside
      size_t d = static_cast<size_t>(uni(static_cast<int>(vs.size())));
      int64_t B = vs[d], start = range(0, static_cast<int>(B) - 1), n = B - start + range(1, 8);
      op.idx.assign(vs.size(), Idx{});
      op.idx[d] = Idx{Idx::Slice, start, n, 1, -1};
      pl::Shape rs_ = vs;
      rs_[d] = n;
      int io = iota(DType::I32, rs_, static_cast<int>(d));
      int in = binary("lt", io, weak_int(B - start), Meta());
      if (coin(0.3)) in = binary("bitwise_and", in, make_mask(rs_), Meta());
      op.mask = in;
      if (coin(0.8)) {
        op.other = constant(const_for(rdtype(r)), rdtype(r));
      } else {
        m.taint = 1000000 + op.mask;
      }
      feature("load:past_end");
      return emit(op, m);
    }
    if (kind < 50 && on("gather") && rs(r).role == RefState::Input) {
      // one index array on one dimension
      size_t d = static_cast<size_t>(uni(static_cast<int>(vs.size())));
      int64_t cap = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, pl::shape_size(vs) / vs[d]));  // result elements
      pl::Shape is = {std::min<int64_t>(cap, range(1, 16))};
      if (coin(0.3)) is = {std::min<int64_t>(cap, range(1, 4)), 1}, is[1] = std::max<int64_t>(1, std::min<int64_t>(cap / is[0], range(1, 6)));
      int ix = ref_index_array(is, vs[d], false);
      for (size_t i = 0; i < vs.size(); ++i) {
        Idx x;
        if (i == d) x.kind = Idx::Array, x.v = ix;
        op.idx.push_back(x);
      }
      feature("load:gather");
      return emit(op, m);
    }
    // slices and indices per dimension (at most one index array)
    bool array_used = false;
    for (size_t i = 0; i < vs.size(); ++i) {
      Idx x;
      int64_t B = vs[i];
      int c = uni(11);
      if (c == 10 && on("gather") && !array_used && st.role == RefState::Input) {
        x.kind = Idx::Array;
        x.v = ref_index_array({std::min<int64_t>(std::max<int64_t>(1, 4096 / std::max<int64_t>(1, pl::shape_size(vs) / B)), range(1, 8))}, B, false);
        array_used = true;
        feature("load:mixed_gather");
      } else if (c < 3 || c == 10) {
        x.kind = Idx::All;
      } else if (c < 5) {
        x.kind = Idx::Static;
        x.start = range(0, static_cast<int>(B) - 1);
        if (coin(0.2)) x.start -= B;  // negative indices count from the end
      } else if (c < 6) {
        x.kind = Idx::Dyn;
        x.v = index_scalar(B);
        feature("load:dyn_index");
      } else {
        int64_t n = range(1, static_cast<int>(B));
        int64_t stride = (n > 1 && coin(0.2)) ? range(1, 3) : 1;
        while ((n - 1) * stride >= B) --n;
        int64_t span = (n - 1) * stride + 1;
        x.size = n;
        x.stride = stride;
        if (coin(0.5)) {
          x.kind = Idx::Slice;
          x.start = range(0, static_cast<int>(B - span));
        } else {
          x.kind = Idx::DynSlice;
          x.v = index_scalar(B - span + 1);
          feature("load:dyn_slice");
        }
        if (stride > 1) feature("load:strided");
      }
      op.idx.push_back(x);
    }
    feature("load:indexed");
    return emit(op, m);
  }

  int weak_or_const(DType t) {
    if (!on("weak") || t == DType::Bool) return constant(const_for(t), t);
    return pl::is_float(t) ? weak_float(const_for(t)) : weak_int(static_cast<int64_t>(const_for(t)));
  }

  // ---------------- elementwise ----------------
  int gen_unary() {
    int x = find([&](int) { return true; });
    if (x < 0) return -1;
    std::vector<const UnaryInfo*> c;
    for (const UnaryInfo& u : kUnary) {
      if (!(u.fams & fam(D(x)))) continue;
      if (!M(x).exact && !u.approx_ok) continue;
      if (is_transcendental(u) && !on("transcendental")) continue;
      if (!pl::is_float(D(x)) && (u.approx || std::string(u.name) == "sqrt") && !allowed(DType::F32)) continue;
      c.push_back(&u);
    }
    if (c.empty()) return -1;
    const UnaryInfo& u = *pick(c);
    Meta m = M(x);
    m.has_range = false;
    bool to_f32 = (u.fams & FF) && !pl::is_float(D(x)) && (u.approx || std::string(u.name) == "sqrt");
    DType rt = to_f32 ? DType::F32 : D(x);
    m.product = false;
    if (u.approx) {
      m.exact = false;
      m.tol = (M(x).exact ? 0 : M(x).tol) + base_tol(rt);
    }
    if (!u.nan_safe) m.may_nan = true;
    if (std::string(u.name) == "neg") m.product = M(x).product;
    if (std::string(u.name) == "square" && is_wide_float(rt)) m.product = true;
    if (to_f32) m.may_nan = true;
    feature(std::string("unary:") + u.name);
    return unary(u.name, x, m);
  }

  int gen_binary() {
    int x = find([&](int) { return true; });
    if (x < 0) return -1;
    // partner: same shape or scalar (or a weak C++ scalar); a tainted x keeps its lanes
    int y = -1;
    bool weak = false;
    int r = uni(10);
    if (r < 2 && on("weak") && D(x) != DType::Bool) {
      weak = true;
    } else {
      y = find([&](int id) {
        if (id == x && coin(0.7)) return false;
        if (!promotable(D(x), D(id))) return false;
        if (M(x).taint && M(id).taint && M(id).taint != M(x).taint) return false;
        if (S(id) == S(x) || scalar(id)) return true;
        return scalar(x) && !M(id).taint && !M(x).taint;
      });
      if (y < 0) weak = D(x) != DType::Bool;
      if (y < 0 && !weak) return -1;
    }
    std::vector<const BinaryInfo*> c;
    DType pt = weak ? D(x) : pl::promote_types(D(x), false, D(y), false).dtype;
    for (const BinaryInfo& b : kBinary) {
      DType rt = pt;
      if (b.float_only) {
        if (pt == DType::Bool) continue;
        if (!pl::is_float(pt)) {
          if (!allowed(DType::F32)) continue;
          rt = DType::F32;
        }
      } else if (!(b.fams & fam(pt))) {
        continue;
      }
      bool xa = !M(x).exact, ya = !weak && !M(y).exact;
      if ((xa || ya) && !b.approx_ok) continue;
      std::string n = b.name;
      if (n == "div" && ya) continue;
      if (b.approx && !on("transcendental")) continue;
      // two products added: an FMA may keep one of them exact, cancellation would show it
      if ((n == "add" || n == "sub") && is_wide_float(rt) && M(x).product && !weak && M(y).product) continue;
      c.push_back(&b);
    }
    if (c.empty()) return -1;
    const BinaryInfo& b = *pick(c);
    std::string n = b.name;
    if (weak) {
      // shift amounts small, other constants from the dtype's range
      DType t = D(x);
      if (pl::is_float(t) || (b.float_only)) {
        y = weak_float(pl::is_float(t) ? const_for(t) : 0.5);
      } else {
        int64_t c2 = n.rfind("shift", 0) == 0 ? range(0, bit_width(t) + 2) : static_cast<int64_t>(const_for(t));
        if (coin(0.1)) c2 = 300;  // wraps in narrow types
        y = weak_int(c2);
      }
      feature("weak");
    }
    Meta m = join(M(x), M(y));
    m.has_range = false;
    DType rt = pt;
    if (b.float_only && !pl::is_float(pt)) rt = DType::F32;
    bool cmp = n == "eq" || n == "ne" || n == "lt" || n == "le" || n == "gt" || n == "ge";
    if (b.approx) {
      m.exact = false;
      m.tol = std::max(M(x).exact ? 0 : M(x).tol, M(y).exact ? 0 : M(y).tol) + base_tol(rt);
    } else if ((n == "add" || n == "sub") && is_wide_float(rt) && (M(x).product || M(y).product)) {
      m.exact = false;
      m.tol = std::max(M(x).exact ? 0 : M(x).tol, M(y).exact ? 0 : M(y).tol) + base_tol(rt);
      feature("fma_candidate");
    } else if (!m.exact && pl::is_float(rt)) {
      m.tol += base_tol(rt);
    }
    m.product = n == "mul" && is_wide_float(rt);
    if (!(n == "maximum" || n == "minimum") || cmp) m.may_nan = true;
    if (cmp) m.may_nan = false;
    feature("binary:" + n);
    return binary(n, x, y, m);
  }

  int gen_where() {
    int x = find([&](int) { return true; });
    if (x < 0) return -1;
    int y = find([&](int id) { return D(id) == D(x) && (S(id) == S(x) || scalar(id)) && (!M(id).taint || M(id).taint == M(x).taint); });
    if (y < 0) return -1;
    int c;
    if (M(x).taint || M(y).taint) {
      c = find([&](int id) { return D(id) == DType::Bool && (scalar(id) || S(id) == S(x)) && !M(id).taint; });
      if (c < 0) c = make_mask(S(x));
    } else {
      c = make_mask(S(x));
    }
    Meta m = join(M(x), M(y));
    m.taint = M(x).taint ? M(x).taint : M(y).taint;
    m.has_range = false;
    m.product = M(x).product || M(y).product;  // an add may be folded into the select, then contracted
    int r = uni(10);
    if (r < 6 || S(y) != S(x)) {
      Op op;
      op.k = K::Where;
      op.in = {c, x, y};
      feature("where");
      return emit(op, m);
    }
    if (r < 8) {
      Op op;
      op.k = K::SelectN;
      op.in = {c, x, y};
      feature("select_n:bool");
      return emit(op, m);
    }
    // i32 selector over three cases, clamped
    int z = find([&](int id) { return D(id) == D(x) && S(id) == S(x) && !M(id).taint; });
    if (z < 0 || M(x).taint || M(y).taint || S(y) != S(x)) return -1;
    int w = S(x).empty() ? index_scalar(4) : coerce(index_array(S(x), 4, false), S(x), DType::I32, true, 0);
    if (w < 0) return -1;
    Op op;
    op.k = K::SelectN;
    op.in = {w, x, y, z};
    m = join(m, M(z));
    feature("select_n:i32");
    return emit(op, m);
  }

  int gen_clamp() {
    int x = find([&](int id) { return D(id) != DType::Bool; });
    if (x < 0) return -1;
    DType t = D(x);
    double a = const_for(t), b = const_for(t);
    if (coin(0.8) && a > b) std::swap(a, b);  // sometimes lo > hi
    Op op;
    op.k = K::Clamp;
    op.in = {constant(a, t), x, constant(b, t)};
    Meta m = M(x);
    m.product = false, m.has_range = false;
    feature("clamp");
    return emit(op, m);
  }

  int gen_intpow() {
    int x = find([&](int id) { return D(id) != DType::Bool && (M(id).exact || pl::is_float(D(id))); });
    if (x < 0) return -1;
    int n = pl::is_float(D(x)) ? range(-2, 4) : range(0, 4);
    if (!M(x).exact && n < 0) n = 2;
    Meta m = M(x);
    m.has_range = false;
    m.product = n == 2 && is_wide_float(D(x));
    m.may_nan = true;
    if (pl::is_float(D(x)) && (n >= 3 || n < 0)) {  // 1/x may come from pow(x, -1): approximate too
      m.exact = false;
      m.tol = (M(x).exact ? 0 : M(x).tol) + 2 * base_tol(D(x));
    }
    Op op;
    op.k = K::IntPow;
    op.in = {x};
    op.p = {n};
    feature("integer_pow");
    return emit(op, m);
  }

  int gen_convert() {
    int x = find([&](int) { return true; });
    if (x < 0) return -1;
    DType t = random_dtype();
    if (!M(x).exact && !pl::is_float(t)) return -1;
    feature(std::string("convert:") + (pl::is_float(D(x)) ? "f" : pl::is_integer(D(x)) ? "i" : "b") + "->" +
            (pl::is_float(t) ? "f" : pl::is_integer(t) ? "i" : "b"));
    return convert(x, t);
  }

  int gen_bitcast() {
    int x = find([&](int id) { return D(id) != DType::Bool && (!pl::is_float(D(id)) || (M(id).exact && !M(id).may_nan)); });
    if (x < 0) return -1;
    std::vector<DType> c;
    for (DType t : {DType::I8, DType::U8, DType::I16, DType::U16, DType::F16, DType::BF16, DType::I32, DType::U32, DType::F32,
                    DType::I64, DType::U64, DType::F64})
      if (t != D(x) && pl::bit_width(t) == pl::bit_width(D(x)) && allowed(t)) c.push_back(t);
    if (c.empty()) return -1;
    DType t = pick(c);
    Meta m = M(x);
    m.has_range = false, m.product = false;
    m.may_nan = pl::is_float(t);
    Op op;
    op.k = K::Bitcast;
    op.in = {x};
    op.dt = t;
    feature("bitcast");
    return emit(op, m);
  }

  // ---------------- shapes ----------------
  pl::Shape random_shape(int max_rank, int64_t budget) {
    pl::Shape s;
    int rank = range(0, max_rank);
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) {
      int64_t b = block_size(std::max<int64_t>(1, budget / n));
      s.push_back(b);
      n *= b;
    }
    return s;
  }

  int gen_shape() {
    int x = find([&](int id) { return !M(id).taint; });
    if (x < 0) return -1;
    pl::Shape s = S(x);
    int64_t n = pl::shape_size(s);
    Meta m = M(x);
    m.product = false, m.has_range = false;
    Op op;
    op.in = {x};
    int r = uni(12);
    if (r < 3) {  // broadcast: a new leading dim and/or stretch size-1 dims
      pl::Shape t = s;
      for (auto& d : t)
        if (d == 1 && coin(0.6)) d = range(2, 6);
      if (coin(0.6) || t == s) t.insert(t.begin(), range(1, 5));
      if (pl::shape_size(t) > 4096 || t.size() > 4) return -1;
      op.k = K::Broadcast;
      op.p = t;
      feature("broadcast");
    } else if (r < 6) {  // reshape
      if (n == 0) return -1;
      std::vector<int64_t> divs;
      for (int64_t d = 1; d <= n; ++d)
        if (n % d == 0) divs.push_back(d);
      pl::Shape t;
      int rank = range(0, 4);
      int64_t rest = n;
      for (int d = 0; d + 1 < rank; ++d) {
        std::vector<int64_t> dv;
        for (int64_t q : divs)
          if (rest % q == 0) dv.push_back(q);
        int64_t q = pick(dv);
        t.push_back(q);
        rest /= q;
      }
      if (rank > 0) t.push_back(rest);
      else if (rest != 1) t.push_back(rest);
      op.k = K::Reshape;
      op.p = t;
      feature("reshape");
    } else if (r < 8) {
      if (s.size() < 2) return -1;
      std::vector<int64_t> perm(s.size());
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng_);
      op.k = K::Transpose;
      op.p = perm;
      feature("transpose");
    } else if (r < 10) {
      if (s.size() >= 4) return -1;
      op.k = K::ExpandDims;
      op.p = {range(0, static_cast<int>(s.size()))};
      feature("expand_dims");
    } else {
      std::vector<int64_t> ones;
      for (size_t d = 0; d < s.size(); ++d)
        if (s[d] == 1) ones.push_back(static_cast<int64_t>(d));
      if (ones.empty()) return -1;
      op.k = K::Squeeze;
      if (coin(0.5)) op.p = {pick(ones)};
      feature("squeeze");
    }
    return emit(op, m);
  }

  int gen_iota_full() {
    pl::Shape s = random_shape(2, 512);
    DType t = random_dtype();
    if (t == DType::Bool || coin(0.4)) return full(s, const_for(t), t);
    if (s.empty()) s = {static_cast<int64_t>(range(1, 40))};
    feature("iota");
    return iota(t, s, uni(static_cast<int>(s.size())));
  }

  // ---------------- reductions, dot ----------------
  int gen_reduce() {
    int x = find([&](int id) { return !M(id).taint && !scalar(id); });
    if (x < 0) return -1;
    DType t = D(x);
    std::vector<std::string> fns = {"max", "min"};
    if (t != DType::Bool) fns.insert(fns.end(), {"sum", "sum", "prod"});
    std::string fn = pick(fns);
    Op op;
    op.k = K::Reduce;
    op.fn = fn;
    op.in = {x};
    int rank = static_cast<int>(S(x).size());
    if (coin(0.7)) {
      for (int d = 0; d < rank; ++d)
        if (coin(0.5)) op.p.push_back(d);
      if (op.p.empty()) op.p.push_back(uni(rank));
      if (coin(0.3) && op.p.size() > 1) std::reverse(op.p.begin(), op.p.end());
    }
    op.f1 = coin(0.3);
    Meta m = M(x);
    m.product = false, m.has_range = false;
    if (pl::is_float(t) && (fn == "sum" || fn == "prod")) {
      m.exact = false;
      m.tol = (M(x).exact ? 0 : M(x).tol) + 8 * base_tol(t == DType::F64 ? t : DType::F32) + base_tol(t);
      m.may_nan = true;
    }
    feature("reduce:" + fn);
    return emit(op, m);
  }

  int gen_argreduce() {
    int x = find([&](int id) { return !M(id).taint && !scalar(id) && M(id).exact && D(id) != DType::Bool; });
    if (x < 0) return -1;
    Op op;
    op.k = K::ArgReduce;
    op.fn = coin(0.5) ? "argmax" : "argmin";
    op.in = {x};
    op.p = {uni(static_cast<int>(S(x).size()))};
    op.f1 = coin(0.3);
    feature("reduce:" + op.fn);
    return emit(op, Meta());
  }

  int gen_cumsum() {
    int x = find([&](int id) { return !M(id).taint && !scalar(id) && D(id) != DType::Bool; });
    if (x < 0) return -1;
    Op op;
    op.k = K::Cumsum;
    op.in = {x};
    op.p = {uni(static_cast<int>(S(x).size()))};
    Meta m = M(x);
    m.product = false, m.has_range = false;
    if (pl::is_float(D(x))) {
      m.exact = false;
      m.tol = (M(x).exact ? 0 : M(x).tol) + 8 * base_tol(D(x) == DType::F64 ? DType::F64 : DType::F32) + base_tol(D(x));
      m.may_nan = true;
    }
    feature("cumsum");
    return emit(op, m);
  }

  int gen_dot() {
    std::vector<DType> c;
    for (DType t : {DType::BF16, DType::F16, DType::F32, DType::F64, DType::I8, DType::I32})
      if (allowed(t)) c.push_back(t);
    if (c.empty()) return -1;
    DType t = pick(c);
    bool ta = coin(0.3), tb = coin(0.3);
    // A from a 2-D value when there is one
    int a0 = find([&](int id) { return S(id).size() == 2 && !M(id).taint && S(id)[0] <= 64 && S(id)[1] <= 64 && (M(id).exact || pl::is_float(t)); });
    int64_t M_, K_, N_;
    if (a0 >= 0) {
      M_ = ta ? S(a0)[1] : S(a0)[0];
      K_ = ta ? S(a0)[0] : S(a0)[1];
    } else {
      M_ = block_size(64), K_ = block_size(64);
    }
    int b0 = find([&](int id) { return S(id).size() == 2 && !M(id).taint && S(id)[tb ? 1 : 0] == K_ && S(id)[tb ? 0 : 1] <= 64 && (M(id).exact || pl::is_float(t)); });
    N_ = b0 >= 0 ? S(b0)[tb ? 0 : 1] : block_size(64);
    pl::Shape as = ta ? pl::Shape{K_, M_} : pl::Shape{M_, K_};
    pl::Shape bs = tb ? pl::Shape{N_, K_} : pl::Shape{K_, N_};
    double cap = cap_tol(DType::F32);
    int a = a0 >= 0 ? coerce(a0, as, t, !pl::is_float(t), cap) : -1;
    if (a < 0) a = make_value(as, t, !pl::is_float(t), cap);
    int b = b0 >= 0 ? coerce(b0, bs, t, !pl::is_float(t), cap) : -1;
    if (b < 0) b = make_value(bs, t, !pl::is_float(t), cap);
    if (M(a).taint || M(b).taint) return -1;
    Op op;
    op.k = K::Dot;
    op.in = {a, b};
    op.f1 = ta, op.f2 = tb;
    op.prec = t == DType::F32 ? uni(3) : 0;
    DType acc = pl::is_float(t) ? (t == DType::F64 ? DType::F64 : DType::F32) : DType::I32;
    if (coin(0.2)) {
      if (pl::is_float(t) && t != DType::F64) op.pref = static_cast<int>(pick(std::vector<DType>{DType::F32, t}));
      else op.pref = static_cast<int>(acc);
      if (!allowed(static_cast<DType>(op.pref))) op.pref = -1;
    }
    Meta m = join(M(a), M(b));
    m.product = false, m.has_range = false;
    if (pl::is_float(t)) {
      m.exact = false;
      DType rt = op.pref >= 0 ? static_cast<DType>(op.pref) : acc;
      m.tol = std::max(M(a).exact ? 0 : M(a).tol, M(b).exact ? 0 : M(b).tol) + 8 * base_tol(acc) + base_tol(rt);
      m.may_nan = true;
    }
    feature(std::string("dot:") + pl::dtype_name(t) + (ta ? ":ta" : "") + (tb ? ":tb" : ""));
    return emit(op, m);
  }

  // ---------------- writes ----------------
  // Whether value x may be stored into ref r (content class and taint).
  bool storable(int x, int r) {
    const RefState& st = rs(r);
    const Meta& m = M(x);
    if (st.exact && !m.exact) return false;
    if (!m.exact && m.tol > st.tol) return false;
    return true;
  }

  // A value for the lanes `s` of ref r: reuse, coerce, or make.
  int value_for(int r, pl::Shape s) {
    DType t = rdtype(r);
    const RefState& st = rs(r);
    int x = find([&](int id) { return !M(id).taint && (S(id) == s || scalar(id)) && D(id) == t && storable(id, r); });
    if (x >= 0 && coin(0.6)) return x;
    int y = find([&](int id) { return !M(id).taint; });
    if (y >= 0) {
      int z = coerce(y, s, t, st.exact, st.tol);
      if (z >= 0) return z;
    }
    return make_value(s, t, st.exact, st.tol);
  }

  // The first, full write of a Plain output or scratch ref (or of a Revisit output under
  // `when`): a full-view store, of a tainted value when its geometry matches.
  void init_write(int r) {
    pl::Shape vs = view(r);
    const RefState& st = rs(r);
    int x = -1;
    if (st.overhang && coin(0.6))
      x = find([&](int id) { return M(id).taint == st.geom && S(id) == vs && storable(id, r); });
    if (x >= 0 && D(x) != rdtype(r)) x = convert(x, rdtype(r));
    if (x >= 0 && !storable(x, r)) x = -1;
    if (x < 0) x = value_for(r, vs);
    if (x >= 0 && M(x).taint == st.geom && st.geom) feature("store:overhang_taint");
    Op op;
    op.k = K::Store;
    op.ref = r;
    op.in = {x};
    op.idx.assign(vs.size(), Idx{});
    emit(op, Meta(), 0);
  }

  bool gen_write() {
    std::vector<int> rs_ok;
    for (int r = static_cast<int>(ins_.size()); r < k_.num_refs(); ++r)
      if (rs(r).initialized) rs_ok.push_back(r);
    if (rs_ok.empty()) return false;
    int r = pick(rs_ok);
    RefState& st = rs(r);
    if (st.role == RefState::SharedAtomic) return gen_shared_atomic(r);
    pl::Shape vs = view(r);
    DType t = rdtype(r);
    int kind = uni(100);
    Op op;
    op.ref = r;
    if (kind < 15 && on("mask")) {
      // a masked full store; mask-tainted values go back under their own mask
      int x = find([&](int id) { return M(id).taint >= 1000000 && S(id) == vs && D(id) == t && storable(id, r); });
      op.k = K::Store;
      op.idx.assign(vs.size(), Idx{});
      if (x >= 0) {
        op.mask = M(x).taint - 1000000;
        feature("store:mask_taint");
      } else {
        x = value_for(r, vs);
        op.mask = make_mask(vs);
        feature("store:masked");
      }
      op.in = {x};
      emit(op, Meta(), 0);
      return true;
    }
    if (kind < 30 && on("addupdate") && t != DType::Bool) {
      int x = value_for(r, vs);
      if (is_wide_float(t) && st.exact) return false;  // old + x may be contracted with a forwarded product
      if (!st.exact || M(x).exact) {
        op.k = K::AddUpdate;
        op.idx.assign(vs.size(), Idx{});
        op.in = {x};
        emit(op, Meta(), 0);
        feature("addupdate");
        return true;
      }
      return false;
    }
    if (kind < 36 && !vs.empty() && on("past_end") && on("mask")) {
      // a masked store through a slice reaching past the ref
      size_t d = static_cast<size_t>(uni(static_cast<int>(vs.size())));
      int64_t B = vs[d], start = range(0, static_cast<int>(B) - 1), n = B - start + range(1, 8);
      pl::Shape s = vs;
      s[d] = n;
      op.k = K::Store;
      op.idx.assign(vs.size(), Idx{});
      op.idx[d] = Idx{Idx::Slice, start, n, 1, -1};
      int x = value_for(r, s);
      int io = iota(DType::I32, s, static_cast<int>(d));
      op.mask = binary("lt", io, weak_int(B - start), Meta());
      op.in = {x};
      feature("store:past_end");
      emit(op, Meta(), 0);
      return true;
    }
    if (kind < 39 && !vs.empty() && on("add_duplicates") && on("addupdate") && t != DType::Bool && (!st.exact || !pl::is_float(t))) {
      // ref[idx] += v with repeated indices: every duplicate adds (np.add.at; atomics on the GPU)
      int64_t n = range(1, 24);
      int ix = ref_index_array({n}, vs[0], false);
      pl::Shape s = vs;
      s[0] = n;
      int x = value_for(r, s);
      op.k = K::AddUpdate;
      op.idx.assign(vs.size(), Idx{});
      op.idx[0] = Idx{Idx::Array, 0, 0, 1, ix};
      op.in = {x};
      feature("addupdate:duplicates");
      emit(op, Meta(), 0);
      return true;
    }
    if (kind < 42 && on("swap") && !st.overhang) {
      int x = value_for(r, vs);
      op.k = K::Swap;
      op.idx.assign(vs.size(), Idx{});
      op.in = {x};
      Meta m = join(content(r), M(x));  // masked-off lanes return x (Pallas)
      m.product = content(r).product || M(x).product;
      if (on("mask") && coin(0.3)) op.mask = make_mask(vs), feature("swap:masked");
      feature("swap");
      emit(op, m);
      return true;
    }
    if (kind < 62 && on("atomic") && st.role == RefState::Plain && atomic_ok(t)) return gen_private_atomic(r);
    if (!vs.empty() && (on("dslice") || on("scatter"))) {
      // a store, += or swap through indexers: slices (strided, static or dynamic), indices
      // (negative ones count from the end) and at most one index array of distinct values
      pl::Shape s;
      std::vector<Idx> ix = write_indexers(vs, &s);
      int x = value_for(r, s);
      int w = uni(10);
      op.idx = ix;
      op.in = {x};
      if (w < 2 && on("addupdate") && t != DType::Bool && (!st.exact || (M(x).exact && !is_wide_float(t)))) {
        op.k = K::AddUpdate;
        feature("addupdate:indexed");
        emit(op, Meta(), 0);
      } else if (w < 4 && on("swap") && !st.overhang) {
        op.k = K::Swap;
        Meta m = join(content(r), M(x));  // masked-off lanes return x (Pallas)
        m.product = content(r).product || M(x).product;
        if (on("mask") && coin(0.3)) op.mask = make_mask(s), feature("swap:masked");
        feature("swap:indexed");
        emit(op, m);
      } else {
        op.k = K::Store;
        if (on("mask") && coin(0.25)) op.mask = make_mask(s);
        feature("store:indexed");
        emit(op, Meta(), 0);
      }
      return true;
    }
    int x = value_for(r, vs);
    op.k = K::Store;
    op.idx.assign(vs.size(), Idx{});
    op.in = {x};
    emit(op, Meta(), 0);
    return true;
  }

  // Indexers for a write into a view of shape vs that touch distinct elements; *s gets the
  // shape of the value written. An index array is not mixed with integer indices, whose
  // placement rules differ between numpy (integers count as advanced indices) and this
  // library (integers drop their dimension); docs/fuzzing.md.
  std::vector<Idx> write_indexers(const pl::Shape& vs_in, pl::Shape* s) {
    pl::Shape vs = vs_in;
    std::vector<Idx> ix(vs.size());
    s->clear();
    bool array_used = false, int_used = false;
    size_t first = static_cast<size_t>(uni(static_cast<int>(vs.size())));
    for (size_t i = 0; i < vs.size(); ++i) {
      int64_t B = vs[i];
      Idx& x = ix[i];
      int c = i == first ? range(1, 9) : uni(14);
      if (c >= 9 || c == 0) {
        x.kind = Idx::All;
        s->push_back(B);
      } else if (c <= 2 && on("dslice") && !array_used) {
        int_used = true;
        x.kind = c == 1 ? Idx::Static : Idx::Dyn;
        if (c == 1) {
          x.start = range(0, static_cast<int>(B) - 1);
          if (coin(0.3)) x.start -= B;
        } else {
          x.v = index_scalar(B);
        }
        feature("store:index");
      } else if (c <= 4 && on("scatter") && !array_used && !int_used) {
        int64_t n = range(1, static_cast<int>(B));
        x.kind = Idx::Array;
        x.v = ref_index_array({n}, B, true);
        s->push_back(n);
        array_used = true;
        feature("store:scatter");
      } else if (on("dslice")) {
        int64_t n = range(1, static_cast<int>(B));
        int64_t stride = (n > 1 && coin(0.25)) ? range(2, 3) : 1;
        while (n > 1 && (n - 1) * stride >= B) --n;
        int64_t span = (n - 1) * stride + 1;
        x.size = n;
        x.stride = stride;
        if (coin(0.5)) {
          x.kind = Idx::Slice;
          x.start = range(0, static_cast<int>(B - span));
        } else {
          x.kind = Idx::DynSlice;
          x.v = index_scalar(B - span + 1);
        }
        s->push_back(n);
        feature(stride > 1 ? "store:strided" : "store:slice");
      } else {
        x.kind = Idx::All;
        s->push_back(B);
      }
    }
    return ix;
  }

  static bool atomic_ok(DType t) {
    return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::I32 || t == DType::U32 || t == DType::I64 ||
           t == DType::U64;
  }

  // Atomics on a program's own block: distinct addresses, so the returned old values are
  // defined too.
  bool gen_private_atomic(int r) {
    pl::Shape vs = view(r);
    DType t = rdtype(r);
    const RefState& st = rs(r);
    std::vector<std::string> ops = {"add"};
    if (t != DType::F16) ops.insert(ops.end(), {"max", "min", "xchg"});
    if (pl::is_integer(t)) ops.insert(ops.end(), {"and", "or", "xor", "cas"});
    std::string fn = pick(ops);
    Op op;
    op.ref = r;
    op.idx.assign(vs.size(), Idx{});
    pl::Shape s = vs;
    if (!vs.empty() && coin(0.4)) {
      int64_t B = vs[0];
      int64_t n = range(1, static_cast<int>(B));
      op.idx[0] = Idx{Idx::Array, 0, 0, 1, ref_index_array({n}, B, true)};
      s[0] = n;
    }
    int x = value_for(r, s);
    // f32 atomic adds flush subnormals to zero on the GPU (the hardware's atom.add.f32), so
    // they are compared with a tolerance (which allows a smallest-normal difference)
    bool exact_add = !pl::is_float(t) || (t != DType::F32 && !(M(x).product && is_wide_float(t)) && M(x).exact);
    if (st.exact && !exact_add && fn == "add") return false;
    if (fn == "cas") {
      // compare with the current contents (a load of the same lanes): many lanes swap
      Op ld;
      ld.k = K::Load;
      ld.ref = r;
      ld.idx = op.idx;
      int cur = emit(ld, content(r));
      int cmp = coin(0.7) ? cur : value_for(r, s);
      op.k = K::AtomicCas;
      op.in = {cmp, x};
    } else {
      op.k = K::Atomic;
      op.fn = fn;
      op.in = {x};
      if (on("mask") && coin(0.3)) op.mask = make_mask(s);
    }
    Meta m = content(r);
    if (op.mask >= 0) m.taint = 1000000 + op.mask;  // masked-off lanes of the old values
    if (st.overhang) m.taint = op.idx.empty() || op.idx[0].kind == Idx::All ? st.geom : 999999;
    if ((st.overhang && m.taint == 999999) || (st.overhang && op.mask >= 0)) m.usable = false;
    feature("atomic:" + fn);
    emit(op, m);
    return true;
  }

  // Atomics from every program into one shared aliased output: one commutative op per output
  // (min after add from another program differs from add after min), the old values are not
  // used (their order differs between backends).
  bool gen_shared_atomic(int r) {
    pl::Shape vs = view(r);
    DType t = rdtype(r);
    std::vector<std::string> ops = {"add", "add"};
    if (t != DType::F16) ops.insert(ops.end(), {"max", "min"});
    if (pl::is_integer(t)) ops.insert(ops.end(), {"and", "or", "xor"});
    if (rs(r).shared_fn.empty()) rs(r).shared_fn = pick(ops);
    std::string fn = rs(r).shared_fn;
    Op op;
    op.k = K::Atomic;
    op.fn = fn;
    op.ref = r;
    op.idx.assign(vs.size(), Idx{});
    pl::Shape s = vs;
    if (!vs.empty() && on("gather") && coin(0.5)) {
      // duplicates welcome: an index array with repeats
      int64_t n = range(1, 24);
      op.idx[0] = Idx{Idx::Array, 0, 0, 1, ref_index_array({n}, vs[0], false)};
      s[0] = n;
      feature("atomic:shared_gather");
    } else if (!vs.empty() && coin(0.3)) {
      op.idx[0] = Idx{Idx::Dyn, 0, 0, 1, index_scalar(vs[0])};
      s.erase(s.begin());
    }
    int x = value_for(r, s);
    if (pl::is_float(t) && fn == "add" && !M(x).exact && M(x).tol > rs(r).tol / 4) return false;
    op.in = {x};
    if (on("mask") && coin(0.3)) op.mask = make_mask(s);
    Meta m;
    m.usable = false;
    feature("atomic:shared_" + fn);
    emit(op, m);
    return true;
  }

  // ---------------- control flow ----------------
  struct BodyPlan {
    std::vector<Meta> param_meta;   // per params entry
    std::vector<ValueType> yield_types;
    std::vector<Meta> yield_req;    // what each yield must satisfy (exactness, tol)
    int nops = 0;
    int kind = 0;  // 0 fori, 1 while cond, 2 while body, 3 branch, 4 when
    int counter = -1;  // while: index of the counter carry
    int64_t bound_hi = 4;
    std::vector<Meta> yield_meta;   // filled after generation
  };
  std::vector<std::pair<const Op*, std::vector<BodyPlan>>> pending_;

  std::vector<pl::Value> run_body(Op& op, size_t b, const std::vector<pl::Value>& params) override {
    BodyPlan* pp = nullptr;
    for (auto& e : pending_)
      if (e.first == &op && b < e.second.size() && e.second[b].kind >= 0) pp = &e.second[b];
    if (!pp) return Builder::run_body(op, b, params);  // generated already: a re-trace replays
    {
      BodyPlan& plan = *pp;  // element addresses of the inner vector survive pending_ growing
      Program& p = op.body[b];
      Program* saved = cur_;
      cur_ = &p;
      scopes_.emplace_back();
      ++depth_;
      for (size_t i = 0; i < params.size(); ++i) {
        int id = new_id();
        p.params.push_back(id);
        set(id, params[i]);
        record(id, plan.param_meta[i]);
      }
      if (plan.kind == 1) {  // while cond: counter < bound
        int c = p.params[static_cast<size_t>(plan.counter)];
        int bound = constant(static_cast<double>(plan.bound_hi), DType::I32);
        int pred = binary("lt", c, bound, Meta());
        if (coin(0.3)) {
          int extra = find([&](int id) { return D(id) == DType::Bool && scalar(id); });
          if (extra >= 0) pred = binary("bitwise_and", pred, extra, Meta());
        }
        p.yields = {pred};
      } else {
        for (int i = 0; i < plan.nops; ++i) step(true);
        for (size_t y = 0; y < plan.yield_types.size(); ++y) {
          const ValueType& vt = plan.yield_types[y];
          const Meta& req = plan.yield_req[y];
          int v = -1;
          if (plan.kind == 2 && static_cast<int>(y) == plan.counter) {
            v = binary("add", p.params[y], weak_int(1), Meta());
          } else {
            v = find([&](int id) {
              return S(id) == vt.shape && D(id) == vt.dtype && !M(id).taint && (req.exact ? M(id).exact : M(id).exact || M(id).tol <= req.tol);
            });
            if (v < 0 || coin(0.3)) {
              int src = find([&](int id) { return !M(id).taint; });
              int z = src >= 0 ? coerce(src, vt.shape, vt.dtype, req.exact, req.tol) : -1;
              if (z >= 0) v = z;
            }
            if (v < 0) {
              if (plan.kind == 0 || plan.kind == 2) v = p.params[plan.kind == 0 ? y + 1 : y];
              else v = make_value(vt.shape, vt.dtype, req.exact, req.tol);
            }
          }
          p.yields.push_back(v);
          plan.yield_meta.push_back(M(v));
        }
      }
      --depth_;
      scopes_.pop_back();
      cur_ = saved;
      plan.kind = -1;
      std::vector<pl::Value> y;
      for (int id : p.yields) y.push_back(val(id));
      return y;
    }
  }

  // Carries: clean, non-weak values; each keeps its exactness (approximate ones get a
  // tolerance for a few iterations).
  std::vector<int> pick_carries(int n) {
    std::vector<int> c;
    for (int i = 0; i < n; ++i) {
      int x = find([&](int id) { return !M(id).taint && pl::shape_size(S(id)) <= 2048 && std::find(c.begin(), c.end(), id) == c.end(); });
      if (x >= 0) c.push_back(x);
    }
    return c;
  }
  Meta carry_meta(int x) {
    Meta m = M(x);
    m.product = false, m.has_range = false;
    if (!m.exact) m.tol = std::min(cap_tol(D(x)) / 2, m.tol * 2 + 8 * base_tol(D(x)));
    return m;
  }

  int gen_fori() {
    if (depth_ >= 2) return -1;
    std::vector<int> carries = pick_carries(range(0, 3));
    Op op;
    op.k = K::Fori;
    int64_t lo = 0, hi = 0;
    Meta im;
    if (coin(0.3) && !k_.grid.empty()) {
      op.f1 = true;
      int h = index_scalar(4);
      int l = coin(0.5) ? constant(0, DType::I32) : constant(1, DType::I32);
      op.in = {l, h};
      lo = M(l).lo;
      hi = M(h).hi + 1;
      op.p = {0, 0, 1};
      feature("fori:dynamic");
    } else {
      lo = range(0, 1);
      hi = lo + range(0, 4);
      op.p = {lo, hi, coin(0.2) ? 2 : 1};
      if (hi == lo) feature("fori:empty");
    }
    op.in.insert(op.in.end(), carries.begin(), carries.end());
    BodyPlan plan;
    plan.kind = 0;
    plan.nops = range(1, 6);
    Meta im2;
    im2.has_range = true, im2.lo = std::min(lo, hi), im2.hi = std::max(lo, hi - 1);
    im2.may_nan = false;
    plan.param_meta.push_back(im2);
    for (int c : carries) {
      plan.param_meta.push_back(carry_meta(c));
      plan.yield_types.push_back(T(c));
      plan.yield_req.push_back(carry_meta(c));
    }
    op.body.resize(1);
    feature("fori");
    return emit_control(op, {plan}, static_cast<int>(carries.size()));
  }

  int gen_while() {
    if (depth_ >= 2) return -1;
    std::vector<int> carries = pick_carries(range(0, 2));
    int counter = coin(0.5) || k_.grid.empty() ? constant(range(0, 1), DType::I32) : index_scalar(3);
    std::vector<int> init = {counter};
    init.insert(init.end(), carries.begin(), carries.end());
    Op op;
    op.k = K::While;
    op.in = init;
    op.body.resize(2);
    BodyPlan cp, bp;
    cp.kind = 1;
    bp.kind = 2;
    cp.counter = bp.counter = 0;
    cp.bound_hi = range(0, 4);
    Meta cm;
    cm.may_nan = false;
    cm.has_range = false;
    for (int x : init) {
      Meta m = x == counter ? cm : carry_meta(x);
      cp.param_meta.push_back(m);
      bp.param_meta.push_back(m);
      bp.yield_types.push_back(T(x));
      bp.yield_req.push_back(m);
    }
    bp.nops = range(1, 5);
    feature("while");
    return emit_control(op, {cp, bp}, static_cast<int>(init.size()));
  }

  // A scalar predicate (bool, or an integer: true when non-zero), exact.
  int predicate() {
    int r = uni(10);
    if (r < 3) {
      int x = find([&](int id) { return scalar(id) && (D(id) == DType::Bool || pl::is_integer(D(id))) && M(id).exact; });
      if (x >= 0) return x;
    }
    if (r < 6 && !k_.grid.empty()) {
      int a = uni(static_cast<int>(k_.grid.size()));
      return binary(coin(0.5) ? "eq" : "lt", program_id(a), weak_int(range(0, static_cast<int>(k_.grid[static_cast<size_t>(a)]) - 1)), Meta());
    }
    int x = find([&](int id) { return scalar(id) && M(id).exact && !M(id).taint && D(id) != DType::Bool; });
    if (x < 0) {
      int t = find([&](int id) { return !scalar(id) && M(id).exact && !M(id).taint && D(id) != DType::Bool; });
      if (t < 0) return binary("lt", index_scalar(3), weak_int(1), Meta());
      Op op;
      op.k = K::Reduce;
      op.fn = coin(0.5) ? "max" : "min";
      op.in = {t};
      x = emit(op, Meta());
    }
    return binary(coin(0.5) ? "gt" : "le", x, pl::is_float(D(x)) ? weak_float(0.0) : weak_int(1), Meta());
  }

  int gen_cond(bool sw) {
    if (depth_ >= 2) return -1;
    Op op;
    op.k = sw ? K::Switch : K::Cond;
    int pred = sw ? (coin(0.5) ? index_scalar(4) : binary("sub", index_scalar(5), weak_int(1), Meta())) : predicate();
    std::vector<int> operands = pick_carries(range(0, 2));
    op.in = {pred};
    op.in.insert(op.in.end(), operands.begin(), operands.end());
    std::vector<int> results = pick_carries(range(0, 2));
    int nb = sw ? range(2, 3) : 2;
    std::vector<BodyPlan> plans(static_cast<size_t>(nb));
    for (auto& p : plans) {
      p.kind = 3;
      p.nops = range(0, 4);
      for (int x : operands) p.param_meta.push_back(carry_meta(x));
      for (int x : results) {
        p.yield_types.push_back(T(x));
        Meta rq = M(x);
        if (!rq.exact) rq.tol = cap_tol(D(x)) / 2;
        p.yield_req.push_back(rq);
      }
    }
    op.body.resize(static_cast<size_t>(nb));
    feature(sw ? "switch" : "cond");
    return emit_control(op, plans, static_cast<int>(results.size()));
  }

  int gen_when() {
    if (depth_ >= 2) return -1;
    Op op;
    op.k = K::When;
    op.in = {predicate()};
    op.body.resize(1);
    BodyPlan p;
    p.kind = 4;
    p.nops = range(1, 4);
    feature("when");
    return emit_control(op, {p}, 0);
  }

  int emit_control(Op op, std::vector<BodyPlan> plans, int nres) {
    for (int i = 0; i < nres; ++i) op.out.push_back(new_id());
    cur_->ops.push_back(std::move(op));
    Op& o = cur_->ops.back();
    pending_.emplace_back(&o, std::move(plans));
    size_t slot = pending_.size() - 1;
    apply(o);
    std::vector<BodyPlan> done = std::move(pending_[slot].second);
    pending_.erase(pending_.begin() + static_cast<long>(slot));
    // result meta: join of every body's yields (and, for loops, the initial carries)
    for (size_t i = 0; i < o.out.size(); ++i) {
      Meta m;
      bool first = true;
      for (auto& pl_ : done)
        if (i < pl_.yield_meta.size()) m = first ? pl_.yield_meta[i] : join(m, pl_.yield_meta[i]), first = false;
      if (o.k == K::Fori || o.k == K::While) m = join(m, done.back().param_meta[o.k == K::Fori ? i + 1 : i]);
      m.has_range = false, m.product = false, m.usable = true;
      record(o.out[i], m);
    }
    return o.out.empty() ? 0 : o.out[0];
  }

  // ---------------- the kernel ----------------
  // One random action.
  void step(bool nested) {
    int r = uni(100);
    int res = -1;
    for (int tries = 0; tries < 4 && res < 0; ++tries, r = uni(100)) {
      if (r < 14) res = gen_load();
      else if (r < 30) res = gen_unary();
      else if (r < 48) res = gen_binary();
      else if (r < 53) res = gen_where();
      else if (r < 55) res = gen_clamp();
      else if (r < 57) res = gen_intpow();
      else if (r < 61) res = gen_convert();
      else if (r < 62) res = on("bitcast") ? gen_bitcast() : -1;
      else if (r < 67) res = on("shape") ? gen_shape() : -1;
      else if (r < 69) res = gen_iota_full();
      else if (r < 73) res = on("reduce") ? gen_reduce() : -1;
      else if (r < 75) res = on("argreduce") ? gen_argreduce() : -1;
      else if (r < 76) res = on("cumsum") ? gen_cumsum() : -1;
      else if (r < 80) res = on("dot") ? gen_dot() : -1;
      else if (r < 88) res = gen_write() ? 0 : -1;
      else if (r < 91) res = on("fori") ? gen_fori() : -1;
      else if (r < 93) res = on("while") ? gen_while() : -1;
      else if (r < 96) res = on("cond") ? gen_cond(false) : -1;
      else if (r < 97) res = on("switch") ? gen_cond(true) : -1;
      else if (r < 99) res = on("when") ? gen_when() : -1;
      else if (!k_.grid.empty()) {
        int a = uni(static_cast<int>(k_.grid.size()));
        if (coin(0.5)) {
          res = program_id(a);
        } else {
          Op op;
          op.k = K::NumPrograms;
          op.p = {a};
          Meta m;
          m.has_range = true, m.lo = m.hi = k_.grid[static_cast<size_t>(a)];
          res = emit(op, m);
          feature("num_programs");
        }
      }
    }
  }

  // The first write of a Revisit output: only the first program of each group of programs
  // that share its block (program id 0 along the axes its index map ignores) stores.
  void revisit_init(int r) {
    RefState& st = rs(r);
    int pred = -1;
    for (int a : st.ignored_axes) {
      int e = binary("eq", program_id(a), weak_int(0), Meta());
      pred = pred < 0 ? e : binary("bitwise_and", pred, e, Meta());
    }
    int x = value_for(r, view(r));
    Op store;
    store.k = K::Store;
    store.ref = r;
    store.in = {x};
    store.idx.assign(view(r).size(), Idx{});
    Op w;
    w.k = K::When;
    w.in = {pred};
    w.body.resize(1);
    w.body[0].ops.push_back(store);
    cur_->ops.push_back(std::move(w));
    apply(cur_->ops.back());
    st.initialized = true;
    feature("revisit:init");
  }

  // Ends a Revisit output: accumulate into it (read-modify-write or +=).
  void revisit_accumulate(int r) {
    pl::Shape vs = view(r);
    DType t = rdtype(r);
    const RefState& st = rs(r);
    int x = value_for(r, vs);
    if (t != DType::Bool && on("addupdate") && coin(0.5) && (!st.exact || (M(x).exact && !is_wide_float(t)))) {
      Op op;
      op.k = K::AddUpdate;
      op.ref = r;
      op.in = {x};
      op.idx.assign(vs.size(), Idx{});
      emit(op, Meta(), 0);
      feature("revisit:addupdate");
      return;
    }
    // the whole block (an overhanging one with its outside lanes tainted: they are combined
    // lane-wise and stored back to the same lanes)
    Op ld;
    ld.k = K::Load;
    ld.ref = r;
    ld.idx.assign(vs.size(), Idx{});
    Meta lm = content(r);
    if (st.overhang) lm.taint = st.geom;
    int cur = emit(ld, lm);
    std::string fn = t == DType::Bool ? "bitwise_or" : pick(std::vector<std::string>{"maximum", "minimum", "add"});
    Meta m = join(M(cur), M(x));
    bool exact_ok = fn != "add" || !is_wide_float(t) || !(M(x).product || M(cur).product);
    if (!exact_ok) m.exact = false, m.tol = base_tol(t);
    if (!pl::is_float(t)) m.exact = true;
    if (st.exact && !m.exact) fn = "maximum";
    m.exact = m.exact || fn == "maximum";
    int y = binary(fn, cur, x, m);
    if (D(y) != t) y = convert(y, t);
    Op op;
    op.k = K::Store;
    op.ref = r;
    op.in = {y};
    op.idx.assign(vs.size(), Idx{});
    emit(op, Meta(), 0);
    feature("revisit:rmw");
  }

  void kernel(const std::vector<pl::Ref>& r) {
    refs = r;
    cur_ = &k_.body;
    scopes_.emplace_back();
    if (matmul_) return kernel_matmul();
    int n = range(4, o_.max_ops);
    int split = range(1, std::max(1, n / 2));
    for (int i = 0; i < split; ++i) step(false);
    // initialise the outputs (and scratch) that are not aliased
    for (int ref = static_cast<int>(ins_.size()); ref < k_.num_refs(); ++ref) {
      RefState& st = rs(ref);
      if (st.initialized) continue;
      if (st.role == RefState::Revisit) {
        revisit_init(ref);
      } else {
        init_write(ref);
        st.initialized = true;
      }
    }
    for (int i = split; i < n; ++i) step(false);
    // revisited outputs accumulate at the end; the others may get a last full store
    for (int ref = static_cast<int>(ins_.size()); ref < static_cast<int>(ins_.size() + outs_.size()); ++ref) {
      RefState& st = rs(ref);
      if (st.role == RefState::Revisit) revisit_accumulate(ref);
      else if (st.role == RefState::Plain && coin(0.5)) init_write(ref);
      else if (st.role == RefState::SharedAtomic) gen_shared_atomic(ref);
    }
    // output tolerances
    k_.out_tol.clear();
    for (auto& st : outs_) k_.out_tol.push_back(st.exact ? 0.0 : st.tol);
  }

  std::vector<RefState> ins_, outs_, scratch_;

 private:
  const GenOptions& o_;
  std::mt19937_64 rng_;
  std::vector<Meta> meta_;
  std::vector<std::vector<int>> scopes_;
  Program* cur_ = nullptr;
  int depth_ = 0;
  std::map<std::string, int> geoms_;
};

}  // namespace

Generated generate(uint64_t seed, int64_t index, const GenOptions& opts) {
  Generated g;
  Kernel& k = g.kernel;
  k.seed = seed;
  k.index = index;
  auto gen = std::make_shared<Gen>(k, opts, mix(seed, static_cast<uint64_t>(index)));
  gen->setup();
  std::vector<pl::ShapeDtype> ins;
  for (auto& a : k.ins) ins.emplace_back(a.shape, a.dtype);
  bool traced = false;
  try {
    pl::Call c = pl::pallas_call(
        [gen, &traced](const std::vector<pl::Ref>& r) {
          if (traced) throw std::logic_error("fuzz generator: the kernel was traced twice");
          traced = true;
          gen->kernel(r);
        },
        out_shapes(k), call_options(k, pl::Backend::Interpret));
    c.trace(ins);
    g.ir = ir_text(c);
  } catch (const pl::Error& e) {
    g.error = e.what();
  }
  return g;
}

}  // namespace fuzz
