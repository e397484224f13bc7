// The dot-kinds pass: how each dot of the kernel (in loops and branches too) runs, before any
// code is written, so the value layouts, the loop plans and the dot rule agree on it.
//  - wgmma (sm_90a, 64 rows or more, whole warpgroups), the output in tiles of 64 rows by up to
//    256 columns per warpgroup;
//  - mma.sync (sm_80 and later, and small dots: less padding), tiles of 16 rows by up to 32
//    columns per warp;
//  - SIMT otherwise (f64, other integers, Precision::Highest f32, 8-bit floats before sm_89,
//    threads not whole warps).
#include <algorithm>
#include <sstream>

#include "src/backends/cuda/plan/passes.h"

namespace pallas::cuda {

const MmaKind* mma_kind(DType t, bool highest, bool fp8) {
  static const MmaKind bf16{"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 16, 2, "float"};
  static const MmaKind f16{"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 16, 2, "float"};
  static const MmaKind tf32{"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 8, 1, "float"};
  static const MmaKind s8{"mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", 32, 4, "i32"};
  static const MmaKind e4m3{"mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", 32, 4, "float"};
  static const MmaKind e5m2{"mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32", 32, 4, "float"};
  switch (t) {
    case DType::BF16: return &bf16;
    case DType::F16: return &f16;
    case DType::F32: return highest ? nullptr : &tf32;
    case DType::I8: return &s8;
    case DType::F8E4M3: return fp8 ? &e4m3 : nullptr;
    case DType::F8E5M2: return fp8 ? &e5m2 : nullptr;
    default: return nullptr;
  }
}

std::string DotPlan::str() const {
  std::ostringstream o;
  o << (kind == Kind::Wgmma     ? "wgmma"
        : kind == Kind::MmaSync ? "mma.sync"
                                : "simt")
    << " " << M << "x" << N << "x" << K << (ta ? " ta" : "") << (tb ? " tb" : "");
  if (mma) {
    o << ", " << grid.W << (grid.wg ? " warpgroups" : " warps") << ", tiles " << grid.TM << "x" << grid.TN << " of " << grid.rows() << "x"
      << 8 * grid.NS << ", " << grid.TPW << " per worker";
    o << (result ? ", result in fragments" : ", result converted to blocked");
  }
  if (!why.empty()) o << " (" << why << ")";
  return o.str();
}

const DotPlan& KernelPlan::dot(const ir::Eqn& e) const {
  auto it = dots.find(&e);
  if (it == dots.end()) throw Error("CUDA lowering: a dot without a plan (the dot-kinds pass did not see it)");
  return it->second;
}

namespace {

// Columns a tile takes, in eights (`ns`, a multiple of min_ns), when `tm` rows of tiles over
// `cols8` eights of columns leave some of `workers` (warps or warpgroups) without a tile:
// narrower tiles, so that each worker takes one; `ns` otherwise.
int64_t spread_columns(int64_t cols8, int64_t tm, int64_t workers, int64_t ns, int64_t min_ns) {
  if (tm * ((cols8 + ns - 1) / ns) >= workers) return ns;
  const int64_t want_tn = (workers + tm - 1) / tm;
  const int64_t n = ((cols8 + want_tn - 1) / want_tn + min_ns - 1) / min_ns * min_ns;
  return std::min(n, ns);
}

DotPlan plan_dot(const KernelPlan& P, const ir::Eqn& e) {
  DotPlan d;
  ir::Aval a = ir::atom_aval(e.in[0]);
  const ir::Var& o = e.out[0];
  d.ta = e.params.get_bool("trans_a");
  d.tb = e.params.get_bool("trans_b");
  d.M = o.aval.shape[0];
  d.N = o.aval.shape[1];
  d.K = d.ta ? a.shape[0] : a.shape[1];
  int prec = e.params.has("precision") ? static_cast<int>(e.params.get_int("precision")) : 0;
  d.mma = P.threads % 32 == 0 ? mma_kind(a.dtype, prec == 2, P.fp8_mma) : nullptr;
  if (!d.mma) {
    d.why = P.threads % 32          ? "threads are not whole warps"
            : a.dtype == DType::F32 ? "Precision::Highest f32 (tf32 would round it)"
            : is_float8(a.dtype)    ? "no 8-bit float tensor cores on " + (P.target.arch.empty() ? std::string("this target") : P.target.arch)
                                    : std::string("no tensor-core instruction for ") + dtype_name(a.dtype);
    return d;
  }
  MmaGrid& q = d.grid;
  // wgmma for dots of 64 or more rows on sm_90a with whole warpgroups; mma.sync otherwise
  // (small dots waste less, and other GPUs have nothing else).
  q.wg = P.wgmma && P.threads % 128 == 0 && d.M >= 64;
  if (q.wg) {
    q.W = P.threads / 128;
    q.TM = (d.M + 63) / 64;
    int64_t step = d.mma->k == 32 ? 16 : 8;  // wgmma's n: multiples of 8 (of 16 for 8-bit inputs)
    int64_t np = (d.N + step - 1) / step * step;
    // Up to n256, the widest wgmma. (Two n128 tiles instead cost NVRTC and ptxas 8-17% less
    // time on a 128x256 matmul but run 3-8% slower: docs/benchmarks.md, twelfth session.) One
    // instruction's accumulators take n/2 registers a thread, and with more than 256 threads
    // a thread has at most 65536 / threads of them: n128 up to 512 threads, n64 beyond (an
    // n256 wgmma in a 16-warp kernel failed in ptxas: "insufficient registers (128)").
    const int64_t widest = P.threads <= 256 ? 256 : P.threads <= 512 ? 128 : 64;
    q.NS = (np <= widest ? np : std::min<int64_t>(128, widest)) / 8;
    // Fewer tiles than warpgroups (a 64-row block on 8+ warps): split the columns so that every
    // warpgroup takes a tile, as Triton spreads its warps over N once M is covered. Otherwise the
    // idle warpgroups still hold the whole accumulator's registers (a [64, 256] f32 carry is 128
    // a thread) and wait out every dot.
    q.NS = spread_columns(np / 8, q.TM, q.W, q.NS, step / 8);
  } else {
    q.W = P.threads / 32;
    q.TM = (d.M + 15) / 16;
    q.NS = std::min<int64_t>(4, (d.N + 7) / 8);
    // PALLAS_SPREAD_SMALL_DOTS (experimental): fewer 16 x 32 tiles than warps (decode's
    // [4, 32] scores on 4 warps: one warp issues all 32 of the dot's instructions while three
    // wait) take narrower tiles, down to 16 x 8, so that every warp has one. The price: a row
    // is then spread over several warps, and its reductions go through shared memory.
    if (P.target.spread_small_dots) q.NS = spread_columns((d.N + 7) / 8, q.TM, q.W, q.NS, 1);
    if (!P.wgmma)
      d.why = "no wgmma on " + (P.target.arch.empty() ? std::string("this target") : P.target.arch);
    else if (P.threads % 128)
      d.why = "threads are not whole warpgroups";
    else
      d.why = "fewer than 64 rows";
  }
  q.TN = (d.N + 8 * q.NS - 1) / (8 * q.NS);
  q.TPW = (q.TM * q.TN + q.W - 1) / q.W;
  d.kind = q.wg ? DotPlan::Kind::Wgmma : DotPlan::Kind::MmaSync;
  DType acc = std::string(d.mma->acc) == "float" ? DType::F32 : DType::I32;
  if (o.aval.dtype == acc) {
    ValueLayout L;
    L.kind = ValueLayout::Mma, L.grid = q, L.M = d.M, L.N = d.N;
    d.result = L;
  }
  return d;
}

}  // namespace

void plan_dot_kinds(const core::PallasCall& call, KernelPlan& P) {
  std::ostringstream text;
  int n = 0;
  ir::for_each_eqn(*call.kernel, [&](const ir::Eqn& e) {
    if (e.prim->id != ir::PrimId::dot) return;
    DotPlan d = plan_dot(P, e);
    text << "dot " << n++ << ": " << d.str() << "\n";
    P.dots[&e] = std::move(d);
  });
  P.sections.push_back({"dot-kinds", text.str()});
}

}  // namespace pallas::cuda
