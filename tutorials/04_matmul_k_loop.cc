// Tutorial 04: matmul — output tiles over a 2-D grid, a loop over K inside each program.
//
// What it does: C = A @ B for A: bf16[256, 320], B: bf16[320, 192], C: f32[256, 192].
//
// The Pallas ideas:
//  - Tiling the output: program (i, j) computes the [64, 64] tile C[i, j] on a 4 x 3 grid. It
//    needs the whole row-panel A[i, :] ([64, 320]) and column-panel B[:, j] ([320, 64]), which
//    its BlockSpecs give it: index maps (i, j) -> (i, 0) and (i, j) -> (0, j).
//  - A loop over K inside the kernel: pl::fori_loop(0, 5, acc, body) runs body(k, acc) for
//    k = 0..4, each step multiplying a [64, 64] slice of A by a [64, 64] slice of B with pl::dot
//    and adding it into the carried accumulator. pl::ds(start, size) slices a ref at a traced
//    start (k * 64). On a GPU each step's slices are staged through shared memory into the
//    tensor cores, and the loop is pipelined.
//  - Precision: bf16 inputs, f32 accumulation. pl::dot of two bf16 tiles gives f32 (products of
//    bf16 numbers are exact in f32), and the accumulator starts as pl::zeros({64, 64}), f32.
//    Storing bf16 instead is one .astype(pl::bf16) at the end.
//  - Comparing sums: the reference adds the 320 products in double and in another order than
//    the kernel (and a GPU's order differs again), so the check allows for f32 rounding of the
//    running sum — a tolerance you choose knowing the computation, here 1e-3 absolute on sums
//    of magnitude ~20.
//
// Try next: make K a grid axis instead of a loop (tutorial 05); blocks of {128, 128} and
// bk = 32; output bf16; shapes that are not multiples of the blocks (mask the edge tiles'
// loads, as tutorial 02 does, or pad).
#include <cstdio>

#include <pallas/pallas.h>
#include <pallas/testing.h>

namespace pl = pallas;

int main() {
  if (!pl::testing::backend_available()) return 77;  // PALLAS_BACKEND=cuda without a GPU: skipped

  const int64_t M = 256, N = 192, K = 320, bm = 64, bn = 64, bk = 64;
  pl::Array a = pl::random::normal({M, K}, pl::bf16, /*seed=*/6);
  pl::Array b = pl::random::normal({K, N}, pl::bf16, /*seed=*/7);

  auto kernel = [=](pl::Ref a_ref, pl::Ref b_ref, pl::Ref c_ref) {
    // a_ref is this program's [64, 320] panel of A, b_ref its [320, 64] panel of B.
    pl::Value acc = pl::fori_loop(0, K / bk, pl::zeros({bm, bn}, pl::f32), [&](pl::Value k, pl::Value acc) {
      pl::Value a_tile = a_ref(pl::all, pl::ds(k * bk, bk));  // [64, 64] of A's columns k*64 ..
      pl::Value b_tile = b_ref(pl::ds(k * bk, bk), pl::all);  // [64, 64] of B's rows k*64 ..
      return acc + pl::dot(a_tile, b_tile);
    });
    c_ref[pl::all] = acc;
  };
  pl::Call matmul = pl::pallas_call(
      kernel, pl::ShapeDtype({M, N}, pl::f32),
      {.grid = {M / bm, N / bn},
       .in_specs = {pl::BlockSpec({bm, K}, [](pl::Value i, pl::Value j) { return pl::idx(i, 0); }),
                    pl::BlockSpec({K, bn}, [](pl::Value i, pl::Value j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
       .name = "matmul_k_loop"});
  pl::Array c = matmul(a, b);

  std::vector<double> A = a.to_vector<double>(), B = b.to_vector<double>(), expected(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t p = 0; p < K; ++p)
      for (int64_t j = 0; j < N; ++j) expected[i * N + j] += A[i * K + p] * B[p * N + j];
  auto check = pl::testing::allclose(c, expected, {.rtol = 1e-5, .atol = 1e-3});
  std::printf("%s: %lld x %lld programs, %lld K steps each, on the %s\n%s", matmul.name().c_str(),
              static_cast<long long>(M / bm), static_cast<long long>(N / bn), static_cast<long long>(K / bk),
              matmul.backend_name().c_str(), check.report.c_str());
  return check ? 0 : 1;
}
