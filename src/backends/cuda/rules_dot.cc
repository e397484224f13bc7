// The lowering of pl::dot. Both operands go to the shared-memory exchange region (transposes
// are read in place). Then:
//  - tensor cores (mma.sync, sm_80 and later): bf16 and f16 (m16n8k16, f32 accumulate), f32
//    rounded to tf32 as the interpreter rounds it (m16n8k8), i8 (m16n8k32, i32 accumulate,
//    exact). The operands are written to shared tiles with K contiguous and a padded row
//    stride (mma_tiles), so each fragment register is one 32-bit load without bank conflicts.
//    Each warp takes output tiles of 16 rows x 8*NS columns in turn, accumulates them in MMA
//    fragments over K, and writes them to a shared f32/i32 tile, which the blocked layout
//    reads back. Shapes that do not fill an MMA tile are padded with zeros.
//  - SIMT otherwise (f64, other integers, Precision::Highest f32): each thread computes the
//    output elements it holds with a rolled K loop.
// Not built yet (issue 8): wgmma, ldmatrix and swizzled operands, accumulators that stay in
// MMA fragments across a loop, pipelining.
#include "src/backends/cuda/rules.h"

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

struct MmaKind {
  const char* instr;  // the mma.sync variant
  int k;              // K per instruction
  int per_reg;        // operand elements packed in one 32-bit register
  const char* acc;    // accumulator type
};

// The tensor-core instruction for a dot of this input dtype and precision, if any.
const MmaKind* mma_kind(DType t, bool highest) {
  static const MmaKind bf16{"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 16, 2, "float"};
  static const MmaKind f16{"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 16, 2, "float"};
  static const MmaKind tf32{"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 8, 1, "float"};
  static const MmaKind s8{"mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", 32, 4, "i32"};
  switch (t) {
    case DType::BF16: return &bf16;
    case DType::F16: return &f16;
    case DType::F32: return highest ? nullptr : &tf32;
    case DType::I8: return &s8;
    default: return nullptr;
  }
}

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
  size_t a_off = 0, b_off = 0, c_off = 0, end = 0;
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
  g.c_off = align(g.b_off + static_cast<size_t>(d.N * g.KS * item));
  g.end = align(g.c_off + static_cast<size_t>(d.M * d.N * 4));
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

void dot_mma(Emitter& E, const ir::Eqn& e, const DotShape& d, DType t, const MmaKind& m) {
  const ir::Var& o = e.out[0];
  int W = E.nt / 32;
  MmaTiles g = mma_tiles(d, t, m);
  E.reserve(0, ir::Aval::array({static_cast<int64_t>(g.end)}, DType::U8));
  int64_t TM = (d.M + 15) / 16;
  int64_t NS = std::min<int64_t>(4, (d.N + 7) / 8);  // n8 sub-tiles per warp tile
  int64_t TN = (d.N + 8 * NS - 1) / (8 * NS);
  std::string T = ctype(t), M = std::to_string(d.M), N = std::to_string(d.N), KS = std::to_string(g.KS);
  std::string xa = E.fresh("xa"), xb = E.fresh("xb"), xc = E.fresh("xc");
  auto ptr = [&](const std::string& n, const std::string& type, size_t off) {
    E.line(type + "* " + n + " = (" + type + "*)(smem + " + std::to_string(E.xoff + off) + ");");
  };
  ptr(xa, T, g.a_off);
  ptr(xb, T, g.b_off);
  ptr(xc, m.acc, g.c_off);
  // A (M x K, or K x M when transposed) to rows of K; B (K x N, or N x K) to rows of K
  put_operand(E, e.in[0], xa, g.KS, !d.ta, t);
  put_operand(E, e.in[1], xb, g.KS, d.tb, t);
  if (g.KP > d.K) {  // zero columns K..KP of every row of both tiles
    std::string pad = std::to_string(g.KP - d.K);
    E.line("for (int z = threadIdx.x; z < " + std::to_string((d.M + d.N) * (g.KP - d.K)) + "; z += " + std::to_string(E.nt) + ") {");
    E.line("  const int row = z / " + pad + ", col = " + std::to_string(d.K) + " + z % " + pad + ";");
    E.line("  if (row < " + M + ") " + xa + "[row * " + KS + " + col] = " + T + "{}; else " + xb + "[(row - " + M + ") * " + KS + " + col] = " + T + "{};");
    E.line("}");
  }
  E.sync();
  E.line("{");
  ++E.depth;
  E.line("const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;");
  E.line("const u32* wa = (const u32*)" + xa + "; const u32* wb = (const u32*)" + xb + ";");
  std::string ks_words = std::to_string(g.KS * static_cast<int64_t>(itemsize(t)) / 4);
  int per = m.per_reg, half_words = m.k / 2 / per;  // words between the two k halves of a fragment
  E.line("_Pragma(\"unroll 1\") for (int tile = threadIdx.x >> 5; tile < " + std::to_string(TM * TN) + "; tile += " + std::to_string(W) + ") {");
  ++E.depth;
  E.line("const int m0 = (tile / " + std::to_string(TN) + ") * 16, n0 = (tile % " + std::to_string(TN) + ") * " + std::to_string(8 * NS) + ";");
  E.line(std::string(m.acc) + " c[" + std::to_string(NS) + "][4] = {};");
  E.line("const int ra = m0 + g, rb = m0 + g + 8;");
  E.line("_Pragma(\"unroll 1\") for (int kw = 0; kw < " + std::to_string(g.KP / per) + "; kw += " + std::to_string(m.k / per) + ") {");
  ++E.depth;
  // A register r: row g + 8 (r % 2), words q + half (r / 2); B register r: words q + half r, column g
  E.line("u32 a[4], b[2];");
  E.line("a[0] = ra < " + M + " ? wa[ra * " + ks_words + " + kw + q] : 0u;");
  E.line("a[1] = rb < " + M + " ? wa[rb * " + ks_words + " + kw + q] : 0u;");
  E.line("a[2] = ra < " + M + " ? wa[ra * " + ks_words + " + kw + q + " + std::to_string(half_words) + "] : 0u;");
  E.line("a[3] = rb < " + M + " ? wa[rb * " + ks_words + " + kw + q + " + std::to_string(half_words) + "] : 0u;");
  E.line("#pragma unroll");
  E.line("for (int s = 0; s < " + std::to_string(NS) + "; ++s) {");
  ++E.depth;
  E.line("const int col = n0 + s * 8 + g;");
  E.line("b[0] = col < " + N + " ? wb[col * " + ks_words + " + kw + q] : 0u;");
  E.line("b[1] = col < " + N + " ? wb[col * " + ks_words + " + kw + q + " + std::to_string(half_words) + "] : 0u;");
  std::string cr = std::string(m.acc) == "float" ? "f" : "r";
  E.line("asm volatile(\"" + std::string(m.instr) + " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\" : \"+" + cr + "\"(c[s][0]), \"+" + cr +
         "\"(c[s][1]), \"+" + cr + "\"(c[s][2]), \"+" + cr + "\"(c[s][3]) : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));");
  --E.depth;
  E.line("}");
  --E.depth;
  E.line("}");
  // accumulator r: row g + 8 (r / 2), column 2 q + r % 2
  E.line("#pragma unroll");
  E.line("for (int s = 0; s < " + std::to_string(NS) + "; ++s)");
  E.line("  #pragma unroll");
  E.line("  for (int r = 0; r < 4; ++r) {");
  E.line("    const int i = m0 + g + 8 * (r / 2), j = n0 + s * 8 + 2 * q + r % 2;");
  E.line("    if (i < " + M + " && j < " + N + ") " + xc + "[i * " + N + " + j] = c[s][r];");
  E.line("  }");
  --E.depth;
  E.line("}");
  --E.depth;
  E.line("}");
  E.sync();
  E.foreach(o.aval.shape, [&] { E.line(E.elem(o, "k") + " = cv<" + ctype(o.aval.dtype) + ">(" + xc + "[e]);"); });
}

void dot(Emitter& E, const ir::Eqn& e) {
  ir::Aval a = ir::atom_aval(e.in[0]), b = ir::atom_aval(e.in[1]);
  const ir::Var& o = e.out[0];
  DotShape d;
  d.ta = e.params.get_bool("trans_a");
  d.tb = e.params.get_bool("trans_b");
  d.M = o.aval.shape[0];
  d.N = o.aval.shape[1];
  d.K = d.ta ? a.shape[0] : a.shape[1];
  int prec = e.params.has("precision") ? static_cast<int>(e.params.get_int("precision")) : 0;
  DType t = a.dtype;
  E.declare(o);
  if (const MmaKind* m = E.nt % 32 == 0 ? mma_kind(t, prec == 2) : nullptr) {
    dot_mma(E, e, d, t, *m);
  } else {
    size_t off = E.reserve(0, a);
    E.reserve(off, b);
    d.xa = E.put_shared(e.in[0], 0);
    d.xb = E.put_shared(e.in[1], off);
    E.sync();
    dot_simt(E, e, d, t, t == DType::F32 && prec != 2);
  }
  E.sync();
}

}  // namespace

void register_dot_rules(ir::RuleTable<LowerRule>& t) { t.set(PrimId::dot, dot); }

}  // namespace pallas::cuda
