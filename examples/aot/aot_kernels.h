// The kernels the AOT example compiles ahead of time; the JIT test builds the same calls.
#pragma once
#include <pallas/aot.h>
#include <pallas/pallas.h>

namespace aot_example {
namespace pl = pallas;

// out = x + 2 y, blocks of 1024.
inline pl::Call add(int64_t n) {
  auto spec = pl::BlockSpec({1024}, [](pl::Value i) { return pl::idx(i); });
  return pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + 2.f * y[pl::all]; }, pl::ShapeDtype({n}, pl::f32),
                         {.grid = {(n + 1023) / 1024}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "aot_add"});
}

// x <- x * s[0] in place (output 0 aliased to input 0), scalar s read from a block of one.
inline pl::Call scale_in_place(int64_t n) {
  auto spec = pl::BlockSpec({1024}, [](pl::Value i) { return pl::idx(i); });
  return pl::pallas_call([](pl::Ref x, pl::Ref s, pl::Ref o) { o[pl::all] = x[pl::all] * s[0]; }, pl::ShapeDtype({n}, pl::f32),
                         {.grid = {(n + 1023) / 1024},
                          .in_specs = {spec, pl::BlockSpec({1}, [](pl::Value) { return pl::idx(0); })},
                          .out_specs = {spec}, .input_output_aliases = {{0, 0}}, .name = "aot_scale"});
}

// bf16 C = relu(A B) with f32 accumulation: a K loop of tensor-core dots, 128 x 128 blocks.
inline pl::Call matmul_relu(int64_t n) {
  int64_t bm = 128, bn = 128, bk = 64;
  return pl::pallas_call(
      [n, bm, bn, bk](pl::Ref a, pl::Ref b, pl::Ref o) {
        pl::Value acc = pl::fori_loop(0, int(n / bk), pl::zeros({bm, bn}, pl::f32), [&](pl::Value k, pl::Value acc) {
          return acc + pl::dot(a(pl::all, pl::ds(k * bk, bk)), b(pl::ds(k * bk, bk), pl::all));
        });
        o[pl::all] = pl::maximum(acc, 0.f).astype(pl::bf16);
      },
      pl::ShapeDtype({n, n}, pl::bf16),
      {.grid = {n / bm, n / bn},
       .in_specs = {pl::BlockSpec({bm, n}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
                    pl::BlockSpec({n, bn}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })},
       .out_specs = {pl::BlockSpec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
       .name = "aot_matmul_relu", .compiler_params = {.num_warps = 8}});
}

constexpr int64_t kN = 5000, kM = 256;  // vector length (an edge block), matmul size

inline std::vector<pl::aot::Entry> entries() {
  return {{"add", add(kN), {pl::ShapeDtype({kN}, pl::f32), pl::ShapeDtype({kN}, pl::f32)}},
          {"scale_in_place", scale_in_place(kN), {pl::ShapeDtype({kN}, pl::f32), pl::ShapeDtype({1}, pl::f32)}},
          {"matmul_relu", matmul_relu(kM), {pl::ShapeDtype({kM, kM}, pl::bf16), pl::ShapeDtype({kM, kM}, pl::bf16)}}};
}

}  // namespace aot_example
