// Interpreter rule for dot, rounding as the GPU does: 16-bit inputs exact in f32 with f32
// accumulation; f32 at Default/High precision rounded to tf32 first (as the tensor cores'
// cvt.rna.tf32), at Highest exact; i8 accumulates in i32; f64 in f64.
#include <cmath>

#include "src/backends/interpret/value.h"

namespace pallas::interp {
using ir::PrimId;

namespace {

typedef float v8f __attribute__((vector_size(32)));

float round_tf32(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7f800000u) == 0x7f800000u) return x;  // inf / NaN unchanged
  b += 0x1000u;                                     // round to nearest, ties away from zero
  b &= 0xffffe000u;
  float r;
  std::memcpy(&r, &b, 4);
  return r;
}

// C[R rows at i] = A @ B for columns [j, j+32): R x 32 accumulators live in registers
// (R = 6 uses 24 vector registers, the best ratio of FMAs to loads on AVX2/AVX-512).
template <int R>
void sgemm_tile(const float* A, const float* B, float* C, int64_t i, int64_t j, int64_t N, int64_t K) {
  v8f c[R][4] = {};
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * N + j;
    v8f b0, b1, b2, b3;
    std::memcpy(&b0, b, 32);
    std::memcpy(&b1, b + 8, 32);
    std::memcpy(&b2, b + 16, 32);
    std::memcpy(&b3, b + 24, 32);
    for (int r = 0; r < R; ++r) {
      float a = A[(i + r) * K + k];
      v8f av = {a, a, a, a, a, a, a, a};
      c[r][0] += av * b0;
      c[r][1] += av * b1;
      c[r][2] += av * b2;
      c[r][3] += av * b3;
    }
  }
  for (int r = 0; r < R; ++r) std::memcpy(C + (i + r) * N + j, c[r], 128);
}

// C[M,N] = A[M,K] @ B[K,N], all row-major f32.
void sgemm(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  int64_t n32 = N / 32 * 32;
  for (int64_t j = 0; j < n32; j += 32) {
    int64_t i = 0;
    for (; i + 6 <= M; i += 6) sgemm_tile<6>(A, B, C, i, j, N, K);
    for (; i < M; ++i) sgemm_tile<1>(A, B, C, i, j, N, K);
  }
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = n32; j < N; ++j) {
      float s = 0;
      for (int64_t k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
      C[i * N + j] = s;
    }
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

// Row-major copy of op(x) as Acc (transposed if asked, rounded to tf32 if asked).
template <class Acc>
Acc* pack(const Val& x, bool trans, bool tf32, Ctx& ctx, int64_t* rows, int64_t* cols) {
  int64_t r = x.shape[0], c = x.shape[1];
  *rows = trans ? c : r;
  *cols = trans ? r : c;
  Acc* out = static_cast<Acc*>(ctx.arena->alloc(sizeof(Acc) * static_cast<size_t>(r * c)));
  dispatch(x.dtype, [&]<class T>() {
    const T* p = x.as<T>();
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) {
        Acc v;
        if constexpr (std::is_same_v<T, f16_t> || std::is_same_v<T, bf16_t>) v = static_cast<Acc>(Elem<T>::get(p[i * c + j]));
        else if constexpr (std::is_same_v<T, bool>) v = static_cast<Acc>(p[i * c + j] ? 1 : 0);
        else v = static_cast<Acc>(p[i * c + j]);
        if constexpr (std::is_same_v<Acc, float>)
          if (tf32) v = round_tf32(v);
        out[trans ? j * r + i : i * c + j] = v;
      }
  });
  return out;
}

void dot_rule(const Instr& ins, Val* env, Ctx& ctx) {
  const Val& a = env[ins.in[0]];
  const Val& b = env[ins.in[1]];
  const auto& p = ins.eqn->params;
  bool ta = p.get_bool("trans_a"), tb = p.get_bool("trans_b");
  auto prec = p.has("precision") ? static_cast<Precision>(p.get_int("precision")) : Precision::Default;
  DType out_t = ins.eqn->out[0].aval.dtype;
  int64_t M, K, K2, N;
  Val o;
  if (a.dtype == DType::F64) {
    double* A = pack<double>(a, ta, false, ctx, &M, &K);
    double* B = pack<double>(b, tb, false, ctx, &K2, &N);
    double* C = static_cast<double*>(ctx.arena->alloc(sizeof(double) * static_cast<size_t>(M * N)));
    generic_gemm<double>(A, B, C, M, N, K);
    o = ctx.alloc(out_t, Dims(Shape{M, N}));
    convert_elements(DType::F64, C, out_t, o.data, M * N);
  } else if (is_integer(a.dtype)) {
    int32_t* A = pack<int32_t>(a, ta, false, ctx, &M, &K);
    int32_t* B = pack<int32_t>(b, tb, false, ctx, &K2, &N);
    int32_t* C = static_cast<int32_t*>(ctx.arena->alloc(sizeof(int32_t) * static_cast<size_t>(M * N)));
    generic_gemm<int32_t>(A, B, C, M, N, K);
    o = ctx.alloc(out_t, Dims(Shape{M, N}));
    convert_elements(DType::I32, C, out_t, o.data, M * N);
  } else {
    bool tf32 = a.dtype == DType::F32 && prec != Precision::Highest;
    float* A = pack<float>(a, ta, tf32, ctx, &M, &K);
    float* B = pack<float>(b, tb, tf32, ctx, &K2, &N);
    float* C = static_cast<float*>(ctx.arena->alloc(sizeof(float) * static_cast<size_t>(M * N)));
    sgemm(A, B, C, M, N, K);
    o = ctx.alloc(out_t, Dims(Shape{M, N}));
    convert_elements(DType::F32, C, out_t, o.data, M * N);
  }
  env[ins.out[0]] = o;
}
}  // namespace

void register_dot_rules() { rule_table_for_registration().set(PrimId::dot, dot_rule); }

}  // namespace pallas::interp
