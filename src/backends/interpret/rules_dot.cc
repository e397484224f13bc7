// Interpreter rule for dot, rounding as the GPU does: 16-bit inputs exact in f32 with f32
// accumulation; f32 at Default/High precision rounded to tf32 first (as the tensor cores'
// cvt.rna.tf32), at Highest exact; i8 accumulates in i32; f64 in f64.
#include <cmath>

#include "src/backends/interpret/value.h"

namespace pallas::interp {
using ir::PrimId;

namespace {

// ---- f32 GEMM: packed operands and a register-tiled micro-kernel ----
//
// C (+)= A @ B with A, B given as rank-2 Vals (contiguous tiles or strided views of refs; f32,
// f16 or bf16; optionally transposed), converted to f32 and rounded to tf32 while packed. Per
// block of up to KC along K: B is packed into panels of NR columns (NR floats per k); then
// MR rows of A at a time are packed (row-major) and multiplied against every B panel by the
// micro-kernel, which keeps an MR x NR tile of C in registers over the whole K block, so C is
// loaded and stored once per block. With AVX-512 the tile is 6 x 64 (24 zmm accumulators,
// 4 B vectors and a broadcast of A per row per k), else 6 x 16 in ymm. Several (A, B) pairs
// summed into one C (a loop's collected dots) are one GEMM over their concatenated K.
#if defined(__AVX512F__)
typedef float vf __attribute__((vector_size(64)));
constexpr int VL = 16, NV = 4;
#else
typedef float vf __attribute__((vector_size(32)));
constexpr int VL = 8, NV = 2;
#endif
typedef uint32_t vu __attribute__((vector_size(sizeof(vf))));
constexpr int MR = 6, NR = VL * NV;
constexpr int64_t KC = 512;

inline uint32_t round_tf32_bits(uint32_t b) {
  uint32_t r = (b + 0x1000u) & 0xffffe000u;
  return (b & 0x7f800000u) == 0x7f800000u ? b : r;  // inf / NaN unchanged
}

// One operand as the GEMM sees it: element (r, c) of op(x) at data + r * rs + c * cs.
struct Operand2 {
  const void* data;
  DType t;
  int64_t rows, cols, rs, cs;
};

struct GemmSegment {
  Operand2 A, B;
};

Operand2 operand(const Val& x, bool trans) {
  int64_t s0 = x.strides.n ? x.strides[0] : x.shape[1], s1 = x.strides.n ? x.strides[1] : 1;
  Operand2 o{x.data, x.dtype, x.shape[0], x.shape[1], s0, s1};
  if (trans) std::swap(o.rows, o.cols), std::swap(o.rs, o.cs);
  return o;
}

// d[0:k] = s[0:k] (f32), rounded to tf32 if asked: whole vectors, then the tail.
template <bool TF32>
inline void copy_round(float* d, const float* s, int64_t k) {
  int64_t q = 0;
  for (; q + VL <= k; q += VL) {
    vu b;
    std::memcpy(&b, s + q, sizeof(vu));
    if constexpr (TF32) {
      vu r = (b + 0x1000u) & 0xffffe000u;
      vu special = (b & 0x7f800000u) == 0x7f800000u;  // all ones where inf / NaN
      b = (b & special) | (r & ~special);
    }
    std::memcpy(d + q, &b, sizeof(vu));
  }
  for (; q < k; ++q) {
    uint32_t b;
    std::memcpy(&b, s + q, 4);
    if constexpr (TF32) b = round_tf32_bits(b);
    std::memcpy(d + q, &b, 4);
  }
}

// dst[i * ld + q] = op(r0 + i, c0 + q) as f32 (rounded to tf32 if asked), i < m, q < k; rows
// from m up to a multiple of `pad_rows` are zero. A is packed this way (rows of A), and B as
// panels of NR rows of B^T.
template <class T, bool TF32>
void pack_rows_t(float* dst, int64_t ld, const T* src, int64_t r0, int64_t m, int64_t c0, int64_t k, int64_t rs, int64_t cs) {
  for (int64_t i = 0; i < m; ++i) {
    const T* s = src + (r0 + i) * rs + c0 * cs;
    float* d = dst + i * ld;
    if constexpr (std::is_same_v<T, float>) {
      if (cs == 1) {
        copy_round<TF32>(d, s, k);
        continue;
      }
    }
    for (int64_t q = 0; q < k; ++q) {
      float v;
      if constexpr (std::is_same_v<T, float>) v = s[q * cs];
      else v = Elem<T>::get(s[q * cs]);
      if constexpr (TF32) {
        uint32_t b;
        std::memcpy(&b, &v, 4);
        b = round_tf32_bits(b);
        std::memcpy(&v, &b, 4);
      }
      d[q] = v;
    }
  }
}

void pack_rows(float* dst, int64_t ld, const Operand2& op, int64_t r0, int64_t m, int64_t c0, int64_t k, bool tf32) {
  if (op.t == DType::F32 && op.cs == 1) {  // the common case, without dispatch
    const float* src = static_cast<const float*>(op.data);
    for (int64_t i = 0; i < m; ++i) {
      if (tf32) copy_round<true>(dst + i * ld, src + (r0 + i) * op.rs + c0, k);
      else copy_round<false>(dst + i * ld, src + (r0 + i) * op.rs + c0, k);
    }
    return;
  }
  dispatch(op.t, [&]<class T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, f16_t> || std::is_same_v<T, bf16_t>) {
      const T* src = static_cast<const T*>(op.data);
      if (tf32) pack_rows_t<T, true>(dst, ld, src, r0, m, c0, k, op.rs, op.cs);
      else pack_rows_t<T, false>(dst, ld, src, r0, m, c0, k, op.rs, op.cs);
    }
  });
}

// B panels: bp[p][koff + q][j] = B(k0 + q, p * NR + j) for q < kc, zero past N; a panel holds
// `ld` rows (the K of the block being packed).
void pack_b(float* bp, int64_t ld, int64_t koff, const Operand2& B, int64_t k0, int64_t kc, bool tf32) {
  int64_t N = B.cols, npan = (N + NR - 1) / NR;
  for (int64_t p = 0; p < npan; ++p) {
    int64_t j0 = p * NR, nj = std::min<int64_t>(NR, N - j0);
    float* d = bp + p * NR * ld + koff * NR;
    // rows of the panel are B's rows k0..k0+kc restricted to columns j0..j0+nj: pack them as
    // "rows" q of an operand whose element (q, j) is B(k0 + q, j0 + j)
    Operand2 rows{B.data, B.t, kc, nj, B.rs, B.cs};
    pack_rows(d, NR, rows, k0, kc, j0, nj, tf32);
    if (nj < NR)
      for (int64_t q = 0; q < kc; ++q) std::memset(d + q * NR + nj, 0, sizeof(float) * static_cast<size_t>(NR - nj));
  }
}

// Prefetch hints (to L2) for rows [r0, r0 + m) x cols [c0, c0 + k) of op, which may lie past
// its end: prefetches never fault. Row-major f32 operands only (the others are packed slowly
// anyway).
void prefetch_rows(const Operand2& op, int64_t r0, int64_t m, int64_t c0, int64_t k) {
  if (op.t != DType::F32 || op.cs != 1) return;
  const char* base = static_cast<const char*>(op.data);
  for (int64_t r = r0; r < r0 + m; ++r) {
    const char* row = base + (r * op.rs + c0) * 4;
    for (int64_t off = 0; off < k * 4; off += 64) __builtin_prefetch(row + off, 0, 2);
  }
}

inline vf loadv(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof(vf));
  return v;
}
inline void storev(float* p, vf v) { std::memcpy(p, &v, sizeof(vf)); }

// c[R x NR] (row stride ldc) = (LOAD ? c : 0) + a[R x k] (row stride lda) @ b-panel. The loops
// over the tile are unrolled so the R x NV accumulators live in registers.
template <int R, bool LOAD>
__attribute__((noinline)) void micro(const float* a, int64_t lda, const float* b, int64_t k, float* c, int64_t ldc,
                                     const float* next_c) {
  if (LOAD)  // the next tile of C arrives while this one computes
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) __builtin_prefetch(next_c + r * ldc + v * VL, 1);
  vf acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = LOAD ? loadv(c + r * ldc + v * VL) : vf{};
  int64_t q = 0;
  do {  // k >= 1 (sgemm returns early for K = 0)
    vf bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) bv[v] = loadv(b + q * NR + v * VL);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      vf av = a[r * lda + q] - vf{};  // broadcast
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] += av * bv[v];
    }
  } while (++q < k);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) storev(c + r * ldc + v * VL, acc[r][v]);
}

using MicroFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, const float*);
template <bool LOAD>
constexpr MicroFn kMicro[MR + 1] = {nullptr, micro<1, LOAD>, micro<2, LOAD>, micro<3, LOAD>,
                                    micro<4, LOAD>, micro<5, LOAD>, micro<6, LOAD>};

// C[M, N] (row stride ldc, f32) = (accumulate ? C : 0) + sum over segments of op(a_s) @ op(b_s),
// summed in order of segments then k, as successive in-place accumulations would. The K range
// of all segments is cut into blocks of up to KC; in each, B is packed into panels (kept in L1
// /L2), then a panel of MR rows of A at a time is packed just before use (so packing overlaps
// the previous panel's arithmetic) and multiplied against every panel of B.
// Whether segment t continues s along K in memory (adjacent slices of the same arrays): then
// the two are one segment, packed and multiplied in one pass.
bool continues(const GemmSegment& s, const GemmSegment& t) {
  size_t w = itemsize(s.A.t);
  return s.A.t == t.A.t && s.B.t == t.B.t && s.A.rs == t.A.rs && s.A.cs == t.A.cs && s.B.rs == t.B.rs &&
         s.B.cs == t.B.cs && s.A.rows == t.A.rows && s.B.cols == t.B.cols &&
         static_cast<const char*>(s.A.data) + s.A.cols * s.A.cs * static_cast<int64_t>(w) == t.A.data &&
         static_cast<const char*>(s.B.data) + s.B.rows * s.B.rs * static_cast<int64_t>(itemsize(s.B.t)) == t.B.data;
}

void sgemm_segments(const GemmSegment* in_segs, size_t in_n, bool tf32, float* C, int64_t ldc, bool accumulate, Ctx& ctx) {
  std::vector<GemmSegment> merged;
  merged.reserve(in_n);
  for (size_t s = 0; s < in_n; ++s) {
    if (!merged.empty() && continues(merged.back(), in_segs[s])) {
      merged.back().A.cols += in_segs[s].A.cols;
      merged.back().B.rows += in_segs[s].B.rows;
    } else {
      merged.push_back(in_segs[s]);
    }
  }
  const GemmSegment* segs = merged.data();
  size_t nseg = merged.size();
  int64_t M = segs[0].A.rows, N = segs[0].B.cols, K = 0;
  for (size_t s = 0; s < nseg; ++s) K += segs[s].A.cols;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::memset(C + i * ldc, 0, sizeof(float) * static_cast<size_t>(N));
    return;
  }
  Arena::Mark m = ctx.arena->mark();
  int64_t npan = (N + NR - 1) / NR;
  int64_t kc_max = std::min(K, KC);
  float* bp = static_cast<float*>(ctx.arena->alloc(sizeof(float) * static_cast<size_t>(npan * NR * kc_max)));
  float* ap = static_cast<float*>(ctx.arena->alloc(sizeof(float) * static_cast<size_t>(MR * kc_max)));
  alignas(64) float edge[MR * NR];
  struct Piece {
    size_t seg;
    int64_t k0, k;
  };
  std::vector<Piece> block;
  bool load = accumulate;
  bool a_f32 = true;
  for (size_t s = 0; s < nseg; ++s) a_f32 = a_f32 && segs[s].A.t == DType::F32 && segs[s].A.cs == 1;
  auto run_block = [&](int64_t kc) {
    const MicroFn* fn = load ? kMicro<true> : kMicro<false>;
    int64_t koff = 0;
    for (const Piece& pc : block) {
      pack_b(bp, kc, koff, segs[pc.seg].B, pc.k0, pc.k, tf32);
      koff += pc.k;
    }
    const Piece& last = block.back();  // a K loop's next slice of B (a hint: prefetches never fault)
    if (nseg == 1) prefetch_rows(segs[last.seg].B, last.k0 + last.k, last.k, 0, N);
    for (int64_t i = 0; i < M; i += MR) {
      int rows = static_cast<int>(std::min<int64_t>(MR, M - i));
      if (a_f32) {  // row by row across the pieces: adjacent slices of a ref are read in address order
        for (int r = 0; r < rows; ++r) {
          float* d = ap + r * kc;
          for (const Piece& pc : block) {
            const Operand2& A = segs[pc.seg].A;
            const float* src = static_cast<const float*>(A.data) + (i + r) * A.rs + pc.k0;
            if (tf32) copy_round<true>(d, src, pc.k);
            else copy_round<false>(d, src, pc.k);
            d += pc.k;
          }
        }
      } else {
        koff = 0;
        for (const Piece& pc : block) {
          pack_rows(ap + koff, kc, segs[pc.seg].A, i, rows, pc.k0, pc.k, tf32);
          koff += pc.k;
        }
      }
      for (const Piece& pc : block) {
        prefetch_rows(segs[pc.seg].A, i + MR, MR, pc.k0, pc.k);  // the next panel's rows
        if (nseg == 1) prefetch_rows(segs[pc.seg].A, i, rows, pc.k0 + pc.k, pc.k);  // these rows' next slice
      }
      float* crow = C + i * ldc;
      for (int64_t jp = 0; jp < npan; ++jp) {
        int64_t j = jp * NR, nj = std::min<int64_t>(NR, N - j);
        const float* b = bp + jp * NR * kc;
        float* c = crow + j;
        const float* next = jp + 1 < npan ? c + NR : (i + MR < M ? C + (i + MR) * ldc : c);
        if (nj == NR) {
          fn[rows](ap, kc, b, kc, c, ldc, next);
        } else {  // a partial panel of columns: through a full-width tile
          if (load)
            for (int r = 0; r < rows; ++r) std::memcpy(edge + r * NR, c + r * ldc, sizeof(float) * static_cast<size_t>(nj));
          fn[rows](ap, kc, b, kc, edge, NR, edge);
          for (int r = 0; r < rows; ++r) std::memcpy(c + r * ldc, edge + r * NR, sizeof(float) * static_cast<size_t>(nj));
        }
      }
    }
    load = true;
  };
  int64_t kb = 0;
  for (size_t s = 0; s < nseg; ++s)
    for (int64_t k0 = 0, ks = segs[s].A.cols; k0 < ks;) {
      int64_t take = std::min(ks - k0, KC - kb);
      block.push_back({s, k0, take});
      kb += take;
      k0 += take;
      if (kb == KC) run_block(kb), block.clear(), kb = 0;
    }
  if (kb) run_block(kb);
  ctx.arena->reset(m);
}

void sgemm(const Operand2& A, const Operand2& B, bool tf32, float* C, int64_t ldc, bool accumulate, Ctx& ctx) {
  GemmSegment s{A, B};
  sgemm_segments(&s, 1, tf32, C, ldc, accumulate, ctx);
}

template <class Acc, class T>
void generic_gemm(const T* A, const T* B, Acc* C, int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; ++i) {
    Acc* c = C + i * N;
    for (int64_t j = 0; j < N; ++j) c[j] = Acc(0);
    for (int64_t k = 0; k < K; ++k) {
      Acc a = static_cast<Acc>(A[i * K + k]);
      const T* b = B + k * N;
      if constexpr (std::is_integral_v<Acc>) {
        for (int64_t j = 0; j < N; ++j)
          c[j] = static_cast<Acc>(static_cast<uint32_t>(c[j]) + static_cast<uint32_t>(a) * static_cast<uint32_t>(b[j]));
      } else {
        for (int64_t j = 0; j < N; ++j) c[j] += a * static_cast<Acc>(b[j]);
      }
    }
  }
}

// Row-major copy of op(x) as Acc (transposed if asked), from a tile or a strided view.
template <class Acc>
Acc* pack_rowmajor(const Val& x, bool trans, Ctx& ctx, int64_t* rows, int64_t* cols) {
  Operand2 o = operand(x, trans);
  *rows = o.rows;
  *cols = o.cols;
  Acc* out = static_cast<Acc*>(ctx.arena->alloc(sizeof(Acc) * static_cast<size_t>(o.rows * o.cols)));
  dispatch(x.dtype, [&]<class T>() {
    const T* p = x.as<T>();
    for (int64_t i = 0; i < o.rows; ++i)
      for (int64_t j = 0; j < o.cols; ++j) {
        T e = p[i * o.rs + j * o.cs];
        if constexpr (std::is_same_v<T, f16_t> || std::is_same_v<T, bf16_t>) out[i * o.cols + j] = static_cast<Acc>(Elem<T>::get(e));
        else if constexpr (std::is_same_v<T, bool>) out[i * o.cols + j] = static_cast<Acc>(e ? 1 : 0);
        else out[i * o.cols + j] = static_cast<Acc>(e);
      }
  });
  return out;
}

bool rounds_to_tf32(const Instr& ins, DType in) { return in == DType::F32 && ins.precision != Precision::Highest; }

void dot_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& a = env[ins.in[0]];
  const Val& b = env[ins.in[1]];
  bool ta = ins.trans_a, tb = ins.trans_b;
  DType out_t = ins.eqn->out[0].aval.dtype;
  int64_t M, K, K2, N;
  Val o;
  if (a.dtype == DType::F64) {
    double* A = pack_rowmajor<double>(a, ta, ctx, &M, &K);
    double* B = pack_rowmajor<double>(b, tb, ctx, &K2, &N);
    double* C = static_cast<double*>(ctx.arena->alloc(sizeof(double) * static_cast<size_t>(M * N)));
    generic_gemm<double>(A, B, C, M, N, K);
    o = ctx.alloc(out_t, Dims(Shape{M, N}));
    convert_elements(DType::F64, C, out_t, o.data, M * N);
  } else if (is_integer(a.dtype)) {
    int32_t* A = pack_rowmajor<int32_t>(a, ta, ctx, &M, &K);
    int32_t* B = pack_rowmajor<int32_t>(b, tb, ctx, &K2, &N);
    int32_t* C = static_cast<int32_t*>(ctx.arena->alloc(sizeof(int32_t) * static_cast<size_t>(M * N)));
    generic_gemm<int32_t>(A, B, C, M, N, K);
    o = ctx.alloc(out_t, Dims(Shape{M, N}));
    convert_elements(DType::I32, C, out_t, o.data, M * N);
  } else {
    Operand2 A = operand(a, ta), B = operand(b, tb);
    M = A.rows, N = B.cols;
    o = ctx.alloc(out_t, Dims(Shape{M, N}));
    if (out_t == DType::F32) {
      sgemm(A, B, rounds_to_tf32(ins, a.dtype), o.as<float>(), N, false, ctx);
    } else {
      Arena::Mark m = ctx.arena->mark();
      float* C = static_cast<float*>(ctx.arena->alloc(sizeof(float) * static_cast<size_t>(M * N)));
      sgemm(A, B, rounds_to_tf32(ins, a.dtype), C, N, false, ctx);
      convert_elements(DType::F32, C, out_t, o.data, M * N);
      ctx.arena->reset(m);
    }
  }
  env[ins.out[0]] = o;
}
}  // namespace

// acc + dot(a, b) for an f32 accumulator this program owns and no longer needs (program.cc):
// the products are accumulated into acc's buffer, which becomes the result. In a deferring
// loop (Program::defer_carry) dots of ref slices into the loop's carry are collected instead,
// up to a K of KC, and run together.
void dot_acc_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& a = env[ins.in[0]];
  const Val& b = env[ins.in[1]];
  const Val& acc = env[ins.in[2]];
  if (DeferredDots* d = ctx.deferred; d && acc.data == d->acc) {
    bool views = !a.is_ref && !b.is_ref && a.strides.n == 2 && b.strides.n == 2;
    if (views && (!d->instr || d->instr == &ins)) {
      d->instr = &ins;
      d->operands.push_back(a);
      d->operands.push_back(b);
      d->k += ins.trans_a ? a.shape[0] : a.shape[1];
      if (d->k >= KC) flush_deferred(*d, ctx);
      env[ins.out[0]] = acc;
      return;
    }
    flush_deferred(*d, ctx);
  }
  Operand2 A = operand(a, ins.trans_a), B = operand(b, ins.trans_b);
  sgemm(A, B, rounds_to_tf32(ins, a.dtype), acc.as<float>(), B.cols, true, ctx);
  env[ins.out[0]] = acc;
}

void flush_deferred(DeferredDots& d, Ctx& ctx) {
  if (d.operands.empty()) return;
  bool ta = d.instr->trans_a, tb = d.instr->trans_b;
  std::vector<GemmSegment> segs;
  for (size_t s = 0; s < d.operands.size(); s += 2) segs.push_back({operand(d.operands[s], ta), operand(d.operands[s + 1], tb)});
  sgemm_segments(segs.data(), segs.size(), rounds_to_tf32(*d.instr, d.operands[0].dtype), static_cast<float*>(d.acc),
                 segs[0].B.cols, true, ctx);
  d.operands.clear();
  d.k = 0;
}

void register_dot_rules() { rule_table_for_registration().set(PrimId::dot, dot_rule); }

}  // namespace pallas::interp
