// Interpreter rule for dot, rounding as the GPU does: 16-bit inputs exact in f32 with f32
// accumulation; f32 at Default/High precision rounded to tf32 first (as the tensor cores'
// cvt.rna.tf32), at Highest exact; i8 accumulates in i32; f64 in f64.
#include <cmath>

#include "src/backends/interpret/sgemm.h"
#include "src/backends/interpret/value.h"

namespace pallas::interp {
using ir::PrimId;

namespace {

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
        if constexpr (is_packed_float_v<T>) out[i * o.cols + j] = static_cast<Acc>(Elem<T>::get(e));
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
// up to a K of kGemmKC, and run together.
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
      if (d->k >= kGemmKC) flush_deferred(*d, ctx);
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
