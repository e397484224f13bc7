// The lowering of pl::dot. Both operands go to the shared-memory exchange region (transposes
// are read in place). Then:
//  - tensor cores (mma.sync, sm_80 and later): bf16 and f16 (m16n8k16, f32 accumulate), f32
//    rounded to tf32 as the interpreter rounds it (m16n8k8), i8 (m16n8k32, i32 accumulate,
//    exact). Each warp takes output tiles of 16 rows x 8*NS columns in turn, accumulates them
//    in MMA fragments over K, and writes them to a shared f32/i32 tile, which the blocked
//    layout reads back. Shapes that do not fill an MMA tile are padded with zeros.
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

void dot_mma(Emitter& E, const ir::Eqn& e, const DotShape& d, DType t, const MmaKind& m, size_t c_off) {
  const ir::Var& o = e.out[0];
  int W = E.nt / 32;
  int64_t TM = (d.M + 15) / 16;
  int64_t NS = std::min<int64_t>(4, (d.N + 7) / 8);  // n8 sub-tiles per warp tile
  int64_t TN = (d.N + 8 * NS - 1) / (8 * NS);
  int64_t KP = (d.K + m.k - 1) / m.k * m.k;
  std::string T = ctype(t), M = std::to_string(d.M), N = std::to_string(d.N), K = std::to_string(d.K);
  std::string xc = E.fresh("xc");
  E.line(std::string(m.acc) + "* " + xc + " = (" + m.acc + "*)(smem + " + std::to_string(E.xoff + c_off) + ");");
  E.line("{");
  ++E.depth;
  E.line("const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;");
  // one packed operand register: elements (i, k..k+per_reg-1) of A or (k..., j) of B, zero outside
  auto pack = [&](bool is_a, const std::string& rc, const std::string& k) {
    std::string s;
    for (int p = 0; p < m.per_reg; ++p) {
      std::string kp = "(" + k + " + " + std::to_string(p) + ")";
      std::string in = "(" + rc + " < " + (is_a ? M : N) + " && " + kp + " < " + K + ")";
      std::string v = is_a ? d.a(rc, kp) : d.b(kp, rc);
      std::string bits;
      if (t == DType::F32) bits = "(" + in + " ? __float_as_uint(tf32(" + v + ")) : 0u)";
      else if (t == DType::I8) bits = "((u32)(" + in + " ? (u8)" + v + " : (u8)0) << " + std::to_string(8 * p) + ")";
      else bits = "((u32)(" + in + " ? " + v + ".b : (u16)0) << " + std::to_string(16 * p) + ")";
      s += (p ? " | " : "") + bits;
    }
    return s;
  };
  E.line("_Pragma(\"unroll 1\") for (int tile = threadIdx.x >> 5; tile < " + std::to_string(TM * TN) + "; tile += " + std::to_string(W) + ") {");
  ++E.depth;
  E.line("const int m0 = (tile / " + std::to_string(TN) + ") * 16, n0 = (tile % " + std::to_string(TN) + ") * " + std::to_string(8 * NS) + ";");
  E.line(std::string(m.acc) + " c[" + std::to_string(NS) + "][4] = {};");
  E.line("_Pragma(\"unroll 1\") for (int k0 = 0; k0 < " + std::to_string(KP) + "; k0 += " + std::to_string(m.k) + ") {");
  ++E.depth;
  // A registers r: row g + 8 (r % 2), k = per_reg * q + (k / 2) (r / 2); B registers r: k = per_reg * q + (k / 2) r, column g
  int half = m.k / 2;
  E.line("u32 a[4], b[2];");
  for (int r = 0; r < 4; ++r)
    E.line("a[" + std::to_string(r) + "] = " + pack(true, "(m0 + g + " + std::to_string(8 * (r % 2)) + ")",
                                                    "(k0 + " + std::to_string(m.per_reg) + " * q + " + std::to_string(half * (r / 2)) + ")") + ";");
  E.line("#pragma unroll");
  E.line("for (int s = 0; s < " + std::to_string(NS) + "; ++s) {");
  ++E.depth;
  for (int r = 0; r < 2; ++r)
    E.line("b[" + std::to_string(r) + "] = " + pack(false, "(n0 + s * 8 + g)", "(k0 + " + std::to_string(m.per_reg) + " * q + " + std::to_string(half * r) + ")") + ";");
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
  size_t off = E.reserve(0, a);
  size_t c_off = E.reserve(off, b);
  d.xa = E.put_shared(e.in[0], 0);
  d.xb = E.put_shared(e.in[1], off);
  E.sync();
  const MmaKind* m = E.nt % 32 == 0 ? mma_kind(t, prec == 2) : nullptr;
  if (m) {
    E.reserve(c_off, ir::Aval::array({d.M, d.N}, DType::F32));
    dot_mma(E, e, d, t, *m, c_off);
  } else {
    dot_simt(E, e, d, t, t == DType::F32 && prec != 2);
  }
  E.sync();
}

}  // namespace

void register_dot_rules(ir::RuleTable<LowerRule>& t) { t.set(PrimId::dot, dot); }

}  // namespace pallas::cuda
