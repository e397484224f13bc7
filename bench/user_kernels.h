// The benchmarks' kernels, written as a user writes them from the README and docs/ops.md (not
// from kernels/): memory-bound kernels, matmuls with epilogues, flash attention. One place
// defines them, so the GPU timings (cuda_bench) and the compile times (compile_bench, which
// runs on a machine without a GPU) measure the same kernels.
#pragma once

#include <cstdint>
#include <string>

#include <pallas/pallas.h>

namespace bench {

namespace pl = pallas;

pl::Call add(int64_t n, int64_t block, int warps);          // f32 o = x + y
pl::Call softmax(int64_t R, int64_t C, int warps);          // f32, one row per program
pl::Call rms_norm(int64_t R, int64_t C, int64_t rows);      // bf16 in and out, f32 inside
pl::Call row_argmax(int64_t R, int64_t C, int64_t rows);    // f32 -> i32 per row
pl::Call column_sum(int64_t R, int64_t C, int64_t rows, int64_t cols);  // over a sequential grid axis
pl::Call layer_norm(int64_t R, int64_t C);                  // f32, one row per program
pl::Call gelu_mul(int64_t n, int64_t block);                // f32 gelu(x) * y, tanh form

// A K loop of pl::dot over (bm, bk) x (bk, bn) slices of whole-K blocks, f32 accumulation (i32
// for i8), then the epilogue. Inputs a, b and, with an epilogue, extra (the bias row [1, N] or
// the residual [M, N]); the output has the inputs' dtype (i32 for i8).
enum class Epilogue { None, BiasRelu, Residual };
struct MatmulCase {
  const char* name;
  pl::DType t;
  bool ta, tb;  // A stored K x M (trans_a), B stored N x K (trans_b, x W^T)
  Epilogue epi;
  int64_t M, N, K;
  int64_t bn = 128;  // the block's columns (bm = 128); 256 is the tile cuBLAS and Triton's best configs take
  int64_t bm = 128;
  int64_t bk = 0;             // 0: 64, 32 for f32
  int warps = 8, stages = 0;  // stages 0: the default
  // > 0: a 1-D grid in groups of group_m block rows (Triton's and Pallas' "grouped" program
  // order, written in the index maps), so programs running together share A and B blocks in L2.
  int64_t group_m = 0;
  std::string label() const;  // name_shape_bmxbn[xbk]
};
pl::Call matmul(const MatmulCase& c);
pl::Call batched_matmul(int64_t B, int64_t M, int64_t N, int64_t K, int64_t bn = 128);  // bf16, the batch a grid axis

struct AttentionCase {
  int64_t B, H, S, D, bq, bk;
  int warps;
  bool causal = false;
  std::string label() const;
};
pl::Call attention(const AttentionCase& c);  // the library's flash_attention (written as a user writes it)

}  // namespace bench
