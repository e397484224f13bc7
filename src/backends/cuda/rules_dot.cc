// The lowering of pl::dot (docs/design.md, "dot"):
//  - wgmma (sm_90a, 64 rows or more, whole warpgroups): operands in 128-byte-swizzled shared
//    tiles — from the loop pipeliner's stage buffers, a resident tile, or written here from
//    registers — or A from registers when it is held in a compatible accumulator layout;
//  - mma.sync (sm_80 and later, and small dots): bf16/f16 (m16n8k16), f32 rounded to tf32 as
//    the interpreter rounds it (m16n8k8), i8 (m16n8k32, exact), f8e4m3/f8e5m2 (m16n8k32, sm_89
//    and later; wgmma's e4m3/e5m2 kinds, K-major like i8), from K-contiguous shared tiles
//    with a padded row stride (mma_tiles: one conflict-free 32-bit load per register);
//  - SIMT otherwise (f64, other integers, Precision::Highest f32): a rolled K loop per element.
// The result stays in its accumulator fragments, the Mma value layout (value_layout.h); a
// fori carry that only accumulates such dots keeps them for the whole loop
// (plan_fragment_carry). Shapes that do not fill an MMA tile are padded with zeros.
#include "src/backends/cuda/rules.h"

#include <algorithm>
#include <unordered_map>

namespace pallas::cuda {
using ir::PrimId;

namespace {

struct DotShape {
  int64_t M, N, K;
  bool ta, tb;
  std::string xa, xb;  // shared copies of the operands, as written (row-major operand tiles)
  // element (i, k) of A and (k, j) of B in the shared copies
  std::string a(const std::string& i, const std::string& k) const {
    return xa + "[" + (ta ? k + " * " + std::to_string(M) + " + " + i : i + " * " + std::to_string(K) + " + " + k) + "]";
  }
  std::string b(const std::string& k, const std::string& j) const {
    return xb + "[" + (tb ? j + " * " + std::to_string(K) + " + " + k : k + " * " + std::to_string(N) + " + " + j) + "]";
  }
};

void dot_simt(Emitter& E, const ir::Eqn& e, const DotShape& d, DType t, bool tf32) {
  const ir::Var& o = e.out[0];
  std::string acc_t = t == DType::F64 ? "double" : is_float(t) ? "float" : (itemsize(t) <= 4 ? "i32" : "i64");
  E.foreach(o.aval.shape, [&] {
    E.line("{ const int i = e / " + std::to_string(d.N) + ", j = e % " + std::to_string(d.N) + "; " + acc_t + " acc = 0;");
    std::string va = "(" + acc_t + ")ld(" + d.a("i", "kk") + ")", vb = "(" + acc_t + ")ld(" + d.b("kk", "j") + ")";
    if (tf32) va = "tf32(" + va + ")", vb = "tf32(" + vb + ")";
    // the K loop stays rolled: unrolled inside the unrolled loop over this thread's
    // elements, NVRTC took minutes for 128x128 tiles (found by the fuzzer, docs/fuzzing.md)
    E.line("  _Pragma(\"unroll 1\") for (int kk = 0; kk < " + std::to_string(d.K) + "; ++kk) acc = p_add<" + acc_t + ">(acc, p_mul<" +
           acc_t + ">(" + va + ", " + vb + "));");
    E.line("  " + E.elem(o, "k") + " = cv<" + ctype(o.aval.dtype) + ">(acc); }");
  });
}

// Shared operand tiles for the tensor cores: A as [M][KS], B as [N][KS] (K contiguous for
// both, whatever the transposes), so every fragment register is one aligned 32-bit load; the
// row stride KS is padded so that the 8 rows a fragment load touches fall in different banks,
// and the columns K..KP (KP: K rounded up to the instruction's k) hold zeros.
struct MmaTiles {
  int64_t KS = 0, KP = 0;
  size_t a_off = 0, b_off = 0, end = 0;
};

MmaTiles mma_tiles(const DotShape& d, DType t, const MmaKind& m) {
  MmaTiles g;
  int64_t item = static_cast<int64_t>(itemsize(t));
  g.KP = (d.K + m.k - 1) / m.k * m.k;
  int64_t words = (g.KP * item + 3) / 4;
  words = (words + 3) / 4 * 4;
  if ((words / 4) % 2 == 0) words += 4;  // row stride = an odd multiple of 4 words
  g.KS = words * 4 / item;
  auto align = [](size_t x) { return (x + 15) & ~size_t{15}; };
  g.a_off = 0;
  g.b_off = align(static_cast<size_t>(d.M * g.KS * item));
  g.end = align(g.b_off + static_cast<size_t>(d.N * g.KS * item));
  return g;
}

// Writes operand `x` (a tile of shape rows x cols as the program holds it) into a [R][KS] tile:
// element (r, c) of the operand goes to row r, column c, or transposed.
void put_operand(Emitter& E, const ir::Atom& x, const std::string& dst, int64_t KS, bool k_major_rows, DType t) {
  ir::Aval av = ir::atom_aval(x);
  int64_t cols = av.shape[1];
  std::string v = E.elem(x, "k");
  if (t == DType::F32) v = "tf32(" + v + ")";  // rounded once here, as the interpreter rounds
  E.foreach(av.shape, [&] {
    std::string r = "(e / " + std::to_string(cols) + ")", c = "(e % " + std::to_string(cols) + ")";
    std::string at = k_major_rows ? r + " * " + std::to_string(KS) + " + " + c : c + " * " + std::to_string(KS) + " + " + r;
    E.line(dst + "[" + at + "] = " + v + ";");
  });
}

// How the output tiles are spread: MmaGrid (value_layout.h), the dot-kinds pass's choice
// (plan/dot_plans.cc). Each thread keeps its fragments as a flat array, slot (t * NS + s) * 4
// + r (tile t of the worker, n-block s, register r), so they stay in registers (every index is
// a compile-time constant).
const MmaGrid& mma_grid(const Emitter& E, const ir::Eqn& e) { return E.plan.dot(e).grid; }

// Declares this thread's fragments (zero when asked).
void declare_fragments(Emitter& E, const MmaGrid& q, const MmaKind& m, const std::string& name, bool zero) {
  E.line(std::string(m.acc) + " " + name + "[" + std::to_string(q.TPW * q.NS * 4) + "]" + (zero ? " = {};" : ";"));
}

// The value layout of a dot's fragments.
ValueLayout mma_layout(const DotShape& d, const MmaGrid& q) {
  ValueLayout L;
  L.kind = ValueLayout::Mma, L.grid = q, L.M = d.M, L.N = d.N;
  return L;
}

// Emits `for each fragment register of this thread inside M x N` (Emitter::foreach_in: k the
// flat slot, i, j the element, rk the slot of its row in a Rows value).
void foreach_fragment(Emitter& E, const DotShape& d, const MmaGrid& q, const std::function<void()>& body) {
  E.foreach_in(mma_layout(d, q), {d.M, d.N}, body);
}

}  // namespace

// Writes operand x (rows x cols as the program holds it; rows are MN when rows_are_mn) into a
// swizzled tile at `base`. Runs of the blocked layout that lie along the tile's contiguous
// dimension go as 16-byte (or narrower) vector stores, conflict-free thanks to the swizzle.
void put_swizzled(Emitter& E, const ir::Atom& x, const std::string& base, const SwizzledTile& L, bool rows_are_mn, DType t) {
  ir::Aval av = ir::atom_aval(x);
  int64_t cols = av.shape[1];
  std::string T = ctype(t), C = std::to_string(cols);
  auto value = [&](const std::string& k) { return t == DType::F32 ? "tf32(" + E.elem(x, k) + ")" : E.elem(x, k); };
  auto where = [&](const std::string& flat) {
    std::string r = "((" + flat + ") / " + C + ")", c = "((" + flat + ") % " + C + ")";
    return rows_are_mn ? L.at(r, c) : L.at(c, r);
  };
  int64_t V = E.vec;
  bool along = rows_are_mn == L.k_major;  // the program's rows run along the tile's contiguous dim
  if (along && V > 1 && !Emitter::scalar_like(av) && shape_size(av.shape) % V == 0 && cols % V == 0) {
    int64_t ep = std::min<int64_t>(V, 16 / L.item);  // elements per store
    std::string VT = "Vec<" + T + ", " + std::to_string(ep) + ">";
    E.foreach_run(av.shape, [&] {
      for (int64_t p = 0; p < V / ep; ++p) {
        std::string w = E.fresh("w");
        E.line(VT + " " + w + ";");
        for (int64_t i = 0; i < ep; ++i)
          E.line(w + ".v[" + std::to_string(i) + "] = " + value("k0 + " + std::to_string(p * ep + i)) + ";");
        E.line("*(" + VT + "*)(" + base + " + " + where("e + " + std::to_string(p * ep)) + ") = " + w + ";");
      }
    });
    return;
  }
  E.foreach(av.shape, [&] { E.line("*(" + T + "*)(" + base + " + " + where("e") + ") = " + value("k") + ";"); });
}

// The wait asm has no data dependence on the accumulators: each register gets a definition
// after it, so no read moves above it. Without one, ptxas serialises every wgmma of the
// kernel (C7514) when the first use of the accumulators is a conversion to f16/bf16 (a K
// loop whose result is stored as is; the likely cause of the 10–15% drop of such matmuls
// measured on the H200, docs/benchmarks.md), and an empty asm or a mov is not definition
// enough there: x + -0.0 (exact for every value) is, at one FADD a register. When every user
// is float arithmetic (flash attention's scores, scaled and reduced), ptxas keeps the wgmmas
// asynchronous with the empty asm, which costs nothing (checked for C7514 in ptxas' report).
void fence_fragments(Emitter& E, const std::string& frag, int64_t slots, bool is_float, bool arithmetic_users) {
  std::string op = !is_float ? "mov.b32 %0, %0;" : arithmetic_users ? "" : "add.f32 %0, %0, 0f80000000;";
  E.line("#pragma unroll");
  E.line("for (int k = 0; k < " + std::to_string(slots) + "; ++k) asm volatile(\"" + op + "\" : \"+" + (is_float ? "f" : "r") + "\"(" + frag +
         "[k]) :: \"memory\");");
}

namespace {

// Every user of v in the scope being emitted is f32 arithmetic, a reduction or a select (and v
// is not an output of the scope).
bool only_arithmetic_users(const Emitter& E, const ir::Var& v) {
  if (E.scopes.empty()) return false;
  const ir::Jaxpr& j = *E.scopes.back();
  for (const ir::Atom& o : j.outvars)
    if (auto* x = std::get_if<ir::Var>(&o); x && x->id == v.id) return false;
  for (const ir::Eqn& e : j.eqns) {
    bool uses = false;
    for (const ir::Atom& a : e.in)
      if (auto* x = std::get_if<ir::Var>(&a); x && x->id == v.id) uses = true;
    if (!uses) continue;
    switch (e.prim->id) {
      case PrimId::mul: case PrimId::add: case PrimId::sub: case PrimId::max: case PrimId::min: case PrimId::div:
      case PrimId::reduce_max: case PrimId::reduce_min: case PrimId::reduce_sum: case PrimId::select_n:
        if (e.out[0].aval.dtype != DType::F32) return false;
        break;
      default: return false;
    }
  }
  return true;
}

// frag += A B on the tensor cores' asynchronous wgmma (sm_90a): both operands are written to
// swizzled shared tiles (K padding zeroed), then each warpgroup issues its tiles' instructions
// over K and waits for them.
// The two operand tiles of a wgmma dot: K-major, or MN-major for transposed 16-bit inputs
// (only 16-bit inputs may be MN-major in wgmma).
struct WgmmaOperands {
  SwizzledTile a, b;
  bool a_rows_mn, b_rows_mn;  // the program's rows of each operand are the tile's MN
};
WgmmaOperands wgmma_operands(const DotShape& d, DType t, const MmaKind& m, const MmaGrid& q) {
  int64_t item = static_cast<int64_t>(itemsize(t));
  bool narrow = item == 2;
  return {swizzled_tile(!(narrow && d.ta), item, q.TM * 64, d.K, m.k), swizzled_tile(!(narrow && !d.tb), item, q.TN * 8 * q.NS, d.K, m.k), !d.ta, d.tb};
}

void wgmma_accumulate(Emitter& E, const ir::Eqn& e, const DotShape& d, DType t, const MmaKind& m, const MmaGrid& q, const std::string& frag) {
  WgmmaOperands ops = wgmma_operands(d, t, m, q);
  const SwizzledTile &A = ops.a, &B = ops.b;
  bool narrow = itemsize(t) == 2;
  int64_t steps = (d.K + m.k - 1) / m.k, kpad = steps * m.k - d.K;
  // Operands the loop pipeline already put in shared memory are read where they are; the others
  // are written to the exchange region (1024-aligned: the swizzle atoms are).
  // A in the accumulator layout (P of attention) is fed from registers (wgmma_a_from_registers).
  ValueLayout a_layout = E.layout_of(e.in[0]);
  bool a_regs = a_layout.kind == ValueLayout::Mma;
  std::string base[2];
  std::vector<int> put;
  size_t end = 0;
  for (int i = a_regs ? 1 : 0; i < 2; ++i) {
    auto it = E.smem_operands.end();
    if (auto* v = std::get_if<ir::Var>(&e.in[static_cast<size_t>(i)])) it = E.smem_operands.find(v->id);
    if (it != E.smem_operands.end()) {
      base[i] = it->second;
      continue;
    }
    const SwizzledTile& L = i == 0 ? A : B;
    if (put.empty()) {
      std::string w = E.fresh("wx");
      E.line("unsigned char* " + w + " = smem + " + std::to_string(E.xoff) + ";");
      E.line(w + " += (1024 - ((u32)__cvta_generic_to_shared(" + w + ") & 1023)) & 1023;  // the swizzle atoms are 1024-aligned");
      base[i] = w;
    } else {
      base[i] = "(" + base[put[0]] + " + " + std::to_string(end) + ")";
    }
    put.push_back(i);
    end = (end + L.bytes + 1023) & ~size_t{1023};
  }
  if (!put.empty()) E.reserve(0, ir::Aval::array({static_cast<int64_t>(end + 1024)}, DType::U8));
  std::string wa = base[0], wb = base[1];
  for (int i : put) put_swizzled(E, e.in[static_cast<size_t>(i)], base[i], i == 0 ? A : B, i == 0 ? ops.a_rows_mn : ops.b_rows_mn, t);
  if (kpad > 0) {  // K padding inside the last instruction: zeros in both (0 * garbage may be NaN)
    std::string T = ctype(t), P = std::to_string(kpad), K = std::to_string(d.K);
    for (int i : put) {
      const SwizzledTile& L = i == 0 ? A : B;
      E.line("for (int z = threadIdx.x; z < " + std::to_string(L.mn * kpad) + "; z += " + std::to_string(E.nt) + ")");
      E.line("  *(" + T + "*)(" + base[i] + " + " + L.at("z / " + P, K + " + z % " + P) + ") = " + T + "{};");
    }
  }
  if (!put.empty()) {  // st.shared writes, then the tensor cores' async proxy reads
    E.line("fence_proxy_async();");
    E.sync();
  }
  // The dot-operands pass planned these places; the printer put them there.
  const DotPlan& plan = E.plan.dot(e);
  auto written = [&](int i) { return put.end() != std::find(put.begin(), put.end(), i); };
  if (a_regs != (plan.a == DotPlan::Operand::Registers) || (!a_regs && written(0) != (plan.a == DotPlan::Operand::Written)) ||
      written(1) != (plan.b == DotPlan::Operand::Written))
    throw Error(E.what + ": CUDA lowering: a wgmma dot's operands are not where the dot-operands pass planned them (an internal error; run with "
                         "interpret = true meanwhile)");
  std::string n = std::to_string(8 * q.NS);
  std::string ab = t == DType::BF16 ? "bf16" : t == DType::F16 ? "f16" : t == DType::F32 ? "tf32" : t == DType::F8E4M3 ? "e4m3" : t == DType::F8E5M2 ? "e5m2" : "s8";
  std::string instr = "wgmma.mma_async.sync.aligned.m64n" + n + "k" + std::to_string(m.k) + (t == DType::I8 ? ".s32" : ".f32") + "." + ab + "." + ab;
  int64_t regs = 4 * q.NS;
  std::string list, outs;
  for (int64_t i = 0; i < regs; ++i) {
    list += (i ? "," : "") + std::string("%") + std::to_string(i);
    outs += (i ? ", " : "") + std::string(t == DType::I8 ? "\"+r\"(" : "\"+f\"(") + frag + "[t * " + std::to_string(regs) + " + " + std::to_string(i) + "])";
  }
  std::string a_op = "%" + std::to_string(regs), b_op = "%" + std::to_string(regs + 1);
  std::string tail = t == DType::I8 ? ", 1" : narrow ? ", 1, 1, 1, " + std::string(A.k_major ? "0" : "1") + ", " + (B.k_major ? "0" : "1") : ", 1, 1, 1";
  std::string a_in = "\"l\"(da)";
  if (a_regs) {  // packed 16-bit pairs (pack_a_operand)
    a_op = "{%" + std::to_string(regs) + ", %" + std::to_string(regs + 1) + ", %" + std::to_string(regs + 2) + ", %" + std::to_string(regs + 3) + "}";
    b_op = "%" + std::to_string(regs + 4);
    tail = ", 1, 1, 1, " + std::string(B.k_major ? "0" : "1");
    // Packed before the fence: ptxas would otherwise fence every instruction whose A registers
    // were just written. A rotated loop packed them an iteration ago (rotation.h).
    std::string pa;
    if (E.rotation && E.rotation->second == &e) {
      pa = E.rotation->packed_a;
    } else {
      pa = E.fresh("pa");
      E.line("u32 " + pa + "[" + std::to_string(packed_a_words(E, e)) + "];");
      pack_a_operand(E, e, pa);
    }
    auto reg = [&](int h) { return "\"r\"(" + pa + "[(t * " + std::to_string(steps) + " + ks) * 4 + " + std::to_string(h) + "])"; };
    a_in = reg(0) + ", " + reg(1) + ", " + reg(2) + ", " + reg(3);
  }
  if (E.rotation && E.rotation->first == &e && E.rotation->before_first) E.rotation->before_first();
  E.line("asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");");
  E.line("#pragma unroll");
  E.line("for (int t = 0; t < " + std::to_string(q.TPW) + "; ++t) {");
  // No branch around the wgmmas (ptxas serialises wgmma in a path it cannot prove uniform): a
  // warpgroup with no tile left redoes the last one into fragments nobody reads.
  E.line("  const int tile = min((int)(threadIdx.x >> 7) + t * " + std::to_string(q.W) + ", " + std::to_string(q.TM * q.TN - 1) + ");");
  E.line("  const int m0 = (tile / " + std::to_string(q.TN) + ") * 64, n0 = (tile % " + std::to_string(q.TN) + ") * " + n + ";");
  E.line("  #pragma unroll");
  E.line("  for (int ks = 0; ks < " + std::to_string(steps) + "; ++ks) {");
  if (!a_regs) E.line("    const u64 da = wg_desc(" + wa + " + " + A.start("m0", "ks", m.k) + ", " + std::to_string(A.lbo()) + ", 1024);");
  E.line("    const u64 db = wg_desc(" + wb + " + " + B.start("n0", "ks", m.k) + ", " + std::to_string(B.lbo()) + ", 1024);");
  E.line("    asm volatile(\"" + instr + " {" + list + "}, " + a_op + ", " + b_op + tail + ";\" : " + outs + " : " + a_in + ", \"l\"(db));");
  E.line("  }");
  E.line("}");
  E.line("asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");");
  if (E.wgmma_in_flight == &e) {  // the loop's next iteration (or its end) waits for it
    if (E.rotation && E.rotation->second == &e && E.rotation->after_second) E.rotation->after_second();
    E.line("asm volatile(\"wgmma.wait_group.sync.aligned 1;\" ::: \"memory\");");
    return;
  }
  if (E.rotation && E.rotation->first == &e)  // the previous iteration's second dot goes behind this one
    E.rotation->between();                     // and waits for this one (all groups but its own)
  else
    E.line("asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");");
  // (a fragment carry is read only after the loop, past its last wait: no fence needed)
  if (!E.dot_into_fragments.count(&e)) fence_fragments(E, frag, q.TPW * q.NS * 4, t != DType::I8, only_arithmetic_users(E, e.out[0]));
  if (!put.empty() || !E.operand_tiles_fenced) E.sync();  // the operand tiles are read until here
}

// frag += A B for this dot's operands (written to the shared tiles first).
void mma_accumulate(Emitter& E, const ir::Eqn& e, const DotShape& d, DType t, const MmaKind& m, const MmaGrid& q, const std::string& frag) {
  if (q.wg) {
    wgmma_accumulate(E, e, d, t, m, q, frag);
    return;
  }
  MmaTiles g = mma_tiles(d, t, m);
  std::string T = ctype(t), M = std::to_string(d.M), N = std::to_string(d.N), KS = std::to_string(g.KS);
  // Operands the loop keeps in shared memory (a pipelined stage, a resident tile: swizzled, as
  // the dot-operands pass planned) are read where they are; the others are written to the
  // padded K-contiguous tiles of the exchange region.
  std::string in_smem[2];
  for (int i = 0; i < 2; ++i)
    if (auto* v = std::get_if<ir::Var>(&e.in[static_cast<size_t>(i)]))
      if (auto it = E.smem_operands.find(v->id); it != E.smem_operands.end()) in_smem[i] = it->second;
  const DotPlan& plan = E.plan.dot(e);
  if (in_smem[0].empty() != (plan.a == DotPlan::Operand::Written) || in_smem[1].empty() != (plan.b == DotPlan::Operand::Written))
    throw Error(E.what + ": CUDA lowering: an mma.sync dot's operands are not where the dot-operands pass planned them (an internal error; run "
                         "with interpret = true meanwhile)");
  bool wrote = in_smem[0].empty() || in_smem[1].empty();
  std::string xa = E.fresh("xa"), xb = E.fresh("xb");
  if (wrote) {
    E.reserve(0, ir::Aval::array({static_cast<int64_t>(g.end)}, DType::U8));
    E.line(T + "* " + xa + " = (" + T + "*)(smem + " + std::to_string(E.xoff + g.a_off) + ");");
    E.line(T + "* " + xb + " = (" + T + "*)(smem + " + std::to_string(E.xoff + g.b_off) + ");");
    // A (M x K, or K x M when transposed) to rows of K; B (K x N, or N x K) to rows of K
    if (in_smem[0].empty()) put_operand(E, e.in[0], xa, g.KS, !d.ta, t);
    if (in_smem[1].empty()) put_operand(E, e.in[1], xb, g.KS, d.tb, t);
    if (g.KP > d.K) {  // zero columns K..KP of every row of both tiles
      std::string pad = std::to_string(g.KP - d.K);
      E.line("for (int z = threadIdx.x; z < " + std::to_string((d.M + d.N) * (g.KP - d.K)) + "; z += " + std::to_string(E.nt) + ") {");
      E.line("  const int row = z / " + pad + ", col = " + std::to_string(d.K) + " + z % " + pad + ";");
      E.line("  if (row < " + M + ") " + xa + "[row * " + KS + " + col] = " + T + "{}; else " + xb + "[(row - " + M + ") * " + KS + " + col] = " + T + "{};");
      E.line("}");
    }
    E.sync();
  }
  {
    Emitter::Block scope = E.block("{");
    E.line("const int g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;");
    if (wrote) E.line("const u32* wa = (const u32*)" + xa + "; const u32* wb = (const u32*)" + xb + ";");
    std::string ks_words = std::to_string(g.KS * static_cast<int64_t>(itemsize(t)) / 4);
    int per = m.per_reg, half_words = m.k / 2 / per;  // words between the two k halves of a fragment
    // Word w (of `per` elements along K) of row r of operand i, wherever it is.
    std::optional<SwizzledTile> smem_tile[2];
    for (int i = 0; i < 2; ++i) {
      bool rows_mn = false;
      int64_t kpad = 0;
      if (!in_smem[i].empty()) smem_tile[i] = mma_sync_operand_tile(E.plan, e, i, &rows_mn, &kpad);
    }
    auto word = [&](int i, const std::string& r, const std::string& w) {
      if (in_smem[i].empty()) return std::string(i == 0 ? "wa" : "wb") + "[" + r + " * " + ks_words + " + " + w + "]";
      const SwizzledTile& L = *smem_tile[i];
      const std::string& base = in_smem[i];
      std::string k = "((" + w + ") * " + std::to_string(per) + ")";
      if (L.k_major) return "*(const u32*)(" + base + " + " + L.at(r, k) + ")";
      // MN-major (16-bit): the word's two elements are in consecutive rows of K
      return "((u32)*(const u16*)(" + base + " + " + L.at(r, k) + ") | ((u32)*(const u16*)(" + base + " + " + L.at(r, k + " + 1") + ") << 16))";
    };
    E.line("#pragma unroll");
    Emitter::Block tiles = E.block("for (int t = 0; t < " + std::to_string(q.TPW) + "; ++t) {");
    E.line("const int tile = (threadIdx.x >> 5) + t * " + std::to_string(q.W) + ";");
    E.line("if (tile >= " + std::to_string(q.TM * q.TN) + ") break;");
    E.line("const int m0 = (tile / " + std::to_string(q.TN) + ") * 16, n0 = (tile % " + std::to_string(q.TN) + ") * " + std::to_string(8 * q.NS) + ";");
    E.line("const int ra = m0 + g, rb = m0 + g + 8;");
    Emitter::Block steps = E.block("_Pragma(\"unroll 1\") for (int kw = 0; kw < " + std::to_string(g.KP / per) + "; kw += " + std::to_string(m.k / per) + ") {");
    // A register r: row g + 8 (r % 2), words q + half (r / 2); B register r: words q + half r, column g
    E.line("u32 a[4], b[2];");
    std::string hw = std::to_string(half_words);
    E.line("a[0] = ra < " + M + " ? " + word(0, "ra", "kw + q") + " : 0u;");
    E.line("a[1] = rb < " + M + " ? " + word(0, "rb", "kw + q") + " : 0u;");
    E.line("a[2] = ra < " + M + " ? " + word(0, "ra", "kw + q + " + hw) + " : 0u;");
    E.line("a[3] = rb < " + M + " ? " + word(0, "rb", "kw + q + " + hw) + " : 0u;");
    E.line("#pragma unroll");
    Emitter::Block blocks = E.block("for (int s = 0; s < " + std::to_string(q.NS) + "; ++s) {");
    E.line("const int col = n0 + s * 8 + g;");
    E.line("b[0] = col < " + N + " ? " + word(1, "col", "kw + q") + " : 0u;");
    E.line("b[1] = col < " + N + " ? " + word(1, "col", "kw + q + " + hw) + " : 0u;");
    std::string cr = std::string(m.acc) == "float" ? "f" : "r";
    auto c = [&](int r) { return frag + "[(t * " + std::to_string(q.NS) + " + s) * 4 + " + std::to_string(r) + "]"; };
    E.line("asm volatile(\"" + std::string(m.instr) + " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\" : \"+" + cr + "\"(" + c(0) + "), \"+" + cr +
           "\"(" + c(1) + "), \"+" + cr + "\"(" + c(2) + "), \"+" + cr + "\"(" + c(3) + ") : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));");
  }
  if (wrote || !E.operand_tiles_fenced) E.sync();  // the operand tiles are read until here
}

// Fragments -> a tile in the blocked layout, through an M x N tile in the exchange region
// (at its start: the operand tiles there are dead once mma_accumulate has synced). Only for a
// dot whose result the value-layout pass left blocked (Emitter::as_layout converts the others).
std::string exchange_tile(Emitter& E, const DotShape& d, const MmaKind& m) {
  E.reserve(0, ir::Aval::array({d.M, d.N}, DType::F32));
  std::string xc = E.fresh("xc");
  E.line(std::string(m.acc) + "* " + xc + " = (" + m.acc + "*)(smem + " + std::to_string(E.xoff) + ");");
  return xc;
}
void fragments_to_tile(Emitter& E, const DotShape& d, const MmaGrid& q, const MmaKind& m, const std::string& frag, const ir::Var& out) {
  std::string xc = exchange_tile(E, d, m);
  foreach_fragment(E, d, q, [&] { E.line(xc + "[i * " + std::to_string(d.N) + " + j] = " + frag + "[k];"); });
  E.sync();
  E.foreach(out.aval.shape, [&] { E.line(E.elem(out, "k") + " = cv<" + ctype(out.aval.dtype) + ">(" + xc + "[e]);"); });
  E.sync();
}
// The dot's extents and transposes, as the dot-kinds pass read them.
DotShape dot_shape(const KernelPlan& P, const ir::Eqn& e) {
  const DotPlan& p = P.dot(e);
  DotShape d;
  d.M = p.M, d.N = p.N, d.K = p.K, d.ta = p.ta, d.tb = p.tb;
  return d;
}
const MmaKind* mma_kind_of(const Emitter& E, const ir::Eqn& e) { return E.plan.dot(e).mma; }

void dot(Emitter& E, const ir::Eqn& e) {
  const ir::Var& o = e.out[0];
  DotShape d = dot_shape(E.plan, e);
  DType t = ir::atom_aval(e.in[0]).dtype;
  const MmaKind* m = mma_kind_of(E, e);
  if (auto it = E.dot_into_fragments.find(&e); it != E.dot_into_fragments.end()) {  // a loop carry's fragments (fori)
    MmaGrid q = mma_grid(E, e);
    // a rotated loop scales the carry at the top of the iteration, before any wgmma is in flight
    if (!(E.rotation && E.rotation->second == &e && E.rotation->carry_scaled)) scale_fragment_carry(E, e);
    mma_accumulate(E, e, d, t, *m, q, it->second);
    return;
  }
  E.declare(o);
  if (m) {
    MmaGrid q = mma_grid(E, e);
    if (E.layout_of(o).kind == ValueLayout::Mma) {  // the result stays in its fragments (value_layout.h)
      E.line("for (int k = 0; k < " + std::to_string(E.slots(o)) + "; ++k) " + E.name(o) + "[k] = 0;");
      mma_accumulate(E, e, d, t, *m, q, E.name(o));
      return;
    }
    std::string frag = E.fresh("frag");
    declare_fragments(E, q, *m, frag, /*zero=*/true);
    mma_accumulate(E, e, d, t, *m, q, frag);
    fragments_to_tile(E, d, q, *m, frag, o);
    return;
  }
  int prec = e.params.has("precision") ? static_cast<int>(e.params.get_int("precision")) : 0;
  size_t off = E.reserve(0, ir::atom_aval(e.in[0]));
  E.reserve(off, ir::atom_aval(e.in[1]));
  d.xa = E.put_shared(e.in[0], 0);
  d.xb = E.put_shared(e.in[1], off);
  E.sync();
  dot_simt(E, e, d, t, t == DType::F32 && prec != 2);
  E.sync();
}

}  // namespace

void scale_fragment_carry(Emitter& E, const ir::Eqn& e) {
  auto it = E.dot_into_fragments.find(&e);
  auto sc = E.scale_fragments_by_rows.find(&e);
  if (it == E.dot_into_fragments.end() || sc == E.scale_fragments_by_rows.end()) return;
  DotShape d = dot_shape(E.plan, e);
  MmaGrid q = mma_grid(E, e);
  // each thread multiplies its fragments by the r of their rows, held in its registers when r
  // is in the rows layout of these fragments, else read from shared memory
  if (E.layout_of(sc->second).rows_match(mma_layout(d, q))) {
    std::string r = E.name(sc->second);
    foreach_fragment(E, d, q, [&] { E.line(it->second + "[k] *= " + r + "[rk];"); });
  } else {
    E.reserve(0, ir::atom_aval(sc->second));
    std::string xr = E.put_shared(sc->second, 0);
    E.sync();
    foreach_fragment(E, d, q, [&] { E.line(it->second + "[k] *= " + xr + "[i];"); });
    E.sync();
  }
}

SwizzledTile swizzled_tile(bool k_major, int64_t item, int64_t mn, int64_t k, int64_t kinstr) {
  SwizzledTile t;
  t.k_major = k_major;
  t.item = item;
  t.mn = (mn + 63) / 64 * 64;
  int64_t kq = k_major ? t.per_row() : kinstr;
  t.kp = (k + kq - 1) / kq * kq;
  t.bytes = static_cast<size_t>(t.mn * t.kp * item);
  return t;
}

void register_dot_rules(ir::RuleTable<LowerRule>& t) { t.set(PrimId::dot, dot); }

// k16 step ks of A is n-blocks 2 ks and 2 ks + 1 of its fragments: register 0 holds row g,
// columns 2q, 2q + 1 of the first (slots r = 0, 1), register 1 row g + 8 (r = 2, 3),
// registers 2 and 3 the same of the second — the A layout of m16n8k16 and of wgmma alike.
int64_t packed_a_words(const Emitter& E, const ir::Eqn& dot) {
  DotShape d = dot_shape(E.plan, dot);
  const MmaKind& m = *mma_kind_of(E, dot);
  return mma_grid(E, dot).TPW * ((d.K + m.k - 1) / m.k) * 4;
}
void pack_a_operand(Emitter& E, const ir::Eqn& dot, const std::string& dst) {
  DotShape d = dot_shape(E.plan, dot);
  const MmaKind& m = *mma_kind_of(E, dot);
  MmaGrid q = mma_grid(E, dot);
  int64_t steps = (d.K + m.k - 1) / m.k;
  ValueLayout a_layout = E.layout_of(dot.in[0]);
  std::string P = E.name(dot.in[0]), NA = std::to_string(a_layout.grid.NS), S = std::to_string(steps);
  E.line("#pragma unroll");
  E.line("for (int t = 0; t < " + std::to_string(q.TPW) + "; ++t)");
  E.line("  #pragma unroll");
  E.line("  for (int ks = 0; ks < " + S + "; ++ks)");
  E.line("    #pragma unroll");
  E.line("    for (int h = 0; h < 4; ++h)");
  E.line("      " + dst + "[(t * " + S + " + ks) * 4 + h] = pk2(" + P + "[(t * " + NA + " + 2 * ks + h / 2) * 4 + 2 * (h % 2)], " + P + "[(t * " + NA +
         " + 2 * ks + h / 2) * 4 + 2 * (h % 2) + 1]);");
}

std::optional<SwizzledTile> wgmma_operand_tile(const KernelPlan& P, const ir::Eqn& dot, int operand, bool* rows_are_mn, int64_t* k_padding) {
  const DotPlan& p = P.dot(dot);
  if (p.kind != DotPlan::Kind::Wgmma) return std::nullopt;
  DotShape d = dot_shape(P, dot);
  WgmmaOperands ops = wgmma_operands(d, ir::atom_aval(dot.in[0]).dtype, *p.mma, p.grid);
  *rows_are_mn = operand == 0 ? ops.a_rows_mn : ops.b_rows_mn;
  *k_padding = (d.K + p.mma->k - 1) / p.mma->k * p.mma->k - d.K;
  return operand == 0 ? ops.a : ops.b;
}

// An mma.sync dot reads an operand that the loop keeps in shared memory (a pipelined load, a
// resident value) from the same kind of swizzled tile, laid out as the program holds it: K-major
// when its rows are MN (any dtype but f32, which must be rounded to tf32 first), MN-major for
// 16-bit operands whose rows are K (each register then packs two 16-bit reads); 8-bit operands
// whose rows are K are not taken (their bytes would need a transposing landing). MN is rounded
// to one swizzle atom (8 rows), not to wgmma's 64.
std::optional<SwizzledTile> mma_sync_operand_tile(const KernelPlan& P, const ir::Eqn& dot, int operand, bool* rows_are_mn, int64_t* k_padding) {
  const DotPlan& p = P.dot(dot);
  if (p.kind != DotPlan::Kind::MmaSync) return std::nullopt;
  DotShape d = dot_shape(P, dot);
  DType t = ir::atom_aval(dot.in[static_cast<size_t>(operand)]).dtype;
  int64_t item = static_cast<int64_t>(itemsize(t));
  if (t == DType::F32 || item > 2) return std::nullopt;
  bool mn_rows = operand == 0 ? !d.ta : d.tb;
  if (!mn_rows && item != 2) return std::nullopt;
  *rows_are_mn = mn_rows;
  *k_padding = (d.K + p.mma->k - 1) / p.mma->k * p.mma->k - d.K;
  SwizzledTile tile = swizzled_tile(mn_rows, item, operand == 0 ? d.M : d.N, d.K, p.mma->k);
  if (mn_rows) {
    tile.mn = ((operand == 0 ? d.M : d.N) + 7) / 8 * 8;
    tile.bytes = static_cast<size_t>(tile.mn * tile.kp * item);
  }
  return tile;
}

std::optional<SwizzledTile> dot_operand_tile(const KernelPlan& P, const ir::Eqn& dot, int operand, bool* rows_are_mn, int64_t* k_padding) {
  if (auto t = wgmma_operand_tile(P, dot, operand, rows_are_mn, k_padding)) return t;
  return mma_sync_operand_tile(P, dot, operand, rows_are_mn, k_padding);
}

// wgmma reads A from registers in the accumulator's own register layout (16-bit inputs): the
// value must be this dot's A untransposed, with the dot's rows on the same warpgroups (same
// M tiling, tiles spanning all columns in both), and whole k16 steps.
bool wgmma_a_from_registers(const KernelPlan& P, const ir::Eqn& dot, const ValueLayout& a) {
  const DotPlan& p = P.dot(dot);
  if (!p.mma || a.kind != ValueLayout::Mma || p.mma->k != 16) return false;
  const MmaGrid& q = p.grid;
  return q.wg && a.grid.wg && !p.ta && a.M == p.M && a.N == p.K && p.K % 16 == 0 && a.grid.TN == 1 && q.TN == 1 && a.grid.W == q.W &&
         a.grid.TM == q.TM;
}

// A fori_loop carry that only accumulates tensor-core dots, `acc = acc + dot(a, b)` (the
// usual K loop): the carry lives in MMA fragments for the whole loop instead of going to the
// blocked layout and back through shared memory every iteration (layouts on values, in the
// one place where it matters most so far). Conditions: the add and the dot are in the body
// itself, each is the other's only user of the values involved, the dot takes the tensor
// cores and its result has the carry's dtype (f32, or i32 for i8).
std::optional<FragmentCarry> plan_fragment_carry(const KernelPlan& P, const ir::Jaxpr& body, size_t c) {
  const ir::Var& in = body.invars[1 + c];
  const auto* outv = std::get_if<ir::Var>(&body.outvars[c]);
  if (!outv || in.aval.shape.size() != 2) return std::nullopt;
  BodyUses bu(body);
  auto& def = bu.def;
  auto& uses = bu.uses;
  auto it = def.find(outv->id);
  if (it == def.end() || it->second->prim->id != PrimId::add || uses[outv->id] != 1 || uses[in.id] != 1) return std::nullopt;
  const ir::Eqn& add = *it->second;
  const ir::Var* other = nullptr;
  for (int k = 0; k < 2; ++k) {
    auto* v = std::get_if<ir::Var>(&add.in[static_cast<size_t>(k)]);
    auto* w = std::get_if<ir::Var>(&add.in[static_cast<size_t>(1 - k)]);
    if (v && w && v->id == in.id) other = w;
  }
  FragmentCarry fc;
  if (!other) {  // acc * broadcast(r) + dot: the scaled carry
    for (int k = 0; k < 2 && !other; ++k) {
      auto* x = std::get_if<ir::Var>(&add.in[static_cast<size_t>(k)]);
      auto* w = std::get_if<ir::Var>(&add.in[static_cast<size_t>(1 - k)]);
      auto xd = x ? def.find(x->id) : def.end();
      if (!w || xd == def.end() || xd->second->prim->id != PrimId::mul || uses[x->id] != 1) continue;
      const ir::Eqn& mul = *xd->second;
      for (int h = 0; h < 2; ++h) {
        auto* c = std::get_if<ir::Var>(&mul.in[static_cast<size_t>(h)]);
        auto* b = std::get_if<ir::Var>(&mul.in[static_cast<size_t>(1 - h)]);
        auto bdef = b ? def.find(b->id) : def.end();
        if (!c || c->id != in.id || bdef == def.end() || bdef->second->prim->id != PrimId::broadcast_in_dim || uses[b->id] != 1) continue;
        const ir::Eqn& bc = *bdef->second;
        ir::Aval src = ir::atom_aval(bc.in[0]);
        auto bd = bc.params.get<std::vector<int64_t>>("broadcast_dimensions");
        int64_t rows = in.aval.shape[0];
        // r varies along the rows only: [M] -> dim 0, or [M, 1] -> dims (0, 1)
        bool per_row = src.size() == rows && src.dtype == in.aval.dtype && !bd.empty() && bd[0] == 0 && src.shape[0] == rows;
        if (!per_row) continue;
        // r must exist when the dot runs: step back over reshapes (free, same order of
        // elements) emitted after it, to a value computed before it or outside the loop
        ir::Atom r = bc.in[0];
        for (;;) {
          auto* rv = std::get_if<ir::Var>(&r);
          auto rd = rv ? def.find(rv->id) : def.end();
          if (rd == def.end()) break;
          const ir::Eqn& q = *rd->second;
          if (q.prim->id != PrimId::reshape && q.prim->id != PrimId::squeeze) break;
          r = q.in[0];
        }
        auto* rv = std::get_if<ir::Var>(&r);
        auto rd = rv ? def.find(rv->id) : def.end();
        auto wd = def.find(w->id);
        if (wd == def.end() || (rd != def.end() && rd->second > wd->second)) continue;  // body eqns are in order
        fc.scale_mul = &mul, fc.scale_bcast = &bc, fc.scale_rows = r;
        other = w;
        break;
      }
    }
  }
  if (!other || uses[other->id] != 1) return std::nullopt;
  auto dt = def.find(other->id);
  if (dt == def.end() || dt->second->prim->id != PrimId::dot) return std::nullopt;
  const ir::Eqn& dot = *dt->second;
  const MmaKind* m = P.dot(dot).mma;
  if (!m) return std::nullopt;
  // An 8-bit float dot at Precision::Highest is added into the carry in f32 on the CUDA cores
  // after each step: the fp8 tensor cores of sm_90 keep fewer accumulator bits than f32, so a
  // carry they accumulate over a whole K loop drifts (docs/dtypes.md); each dot accumulates
  // only its own K in them.
  if (is_float8(ir::atom_aval(dot.in[0]).dtype) && dot.params.has("precision") &&
      static_cast<Precision>(dot.params.get_int("precision")) == Precision::Highest)
    return std::nullopt;
  DType acc = std::string(m->acc) == "float" ? DType::F32 : DType::I32;
  if (dot.out[0].aval.dtype != acc || in.aval.dtype != acc || outv->aval.dtype != acc || dot.out[0].aval.shape != in.aval.shape)
    return std::nullopt;
  fc.dot = &dot, fc.add = &add;
  return fc;
}

// The carry's fragments are the loop output's storage (its layout is the dot's, value_layout.h);
// `init` names the initial value in that layout (or a scalar).
void begin_fragment_carry(Emitter& E, const FragmentCarry& fc, const std::string& init, bool scalar) {
  E.line("for (int k = 0; k < " + std::to_string(E.plan.dot(*fc.dot).result->slots()) + "; ++k) " + fc.frag + "[k] = " +
         (scalar ? init : init + "[k]") + ";");
  E.dot_into_fragments[fc.dot] = fc.frag;
  E.absorbed.insert(fc.add);
  if (fc.scale_mul) {
    E.scale_fragments_by_rows[fc.dot] = fc.scale_rows;
    E.absorbed.insert(fc.scale_mul);
    E.absorbed.insert(fc.scale_bcast);
  }
}

void end_fragment_carry(Emitter& E, const FragmentCarry& fc) {
  E.dot_into_fragments.erase(fc.dot);
  E.absorbed.erase(fc.add);
  E.scale_fragments_by_rows.erase(fc.dot);
  E.absorbed.erase(fc.scale_mul);
  E.absorbed.erase(fc.scale_bcast);
}

}  // namespace pallas::cuda
