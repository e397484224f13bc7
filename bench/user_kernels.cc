#include "bench/user_kernels.h"

#include <pallas/kernels.h>

namespace bench {

pl::Call add(int64_t n, int64_t block, int warps) {
  auto spec = pl::BlockSpec({block}, [](pl::Value i) { return pl::idx(i); });
  return pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; }, pl::ShapeDtype({n}, pl::f32),
                         {.grid = {n / block}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "add",
                          .compiler_params = {.num_warps = warps}});
}

pl::Call softmax(int64_t R, int64_t C, int warps) {
  auto spec = pl::BlockSpec({1, C}, [](pl::Value i) { return pl::idx(i, 0); });
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref o) {
        pl::Value v = x[pl::all];
        pl::Value e = pl::exp(v - pl::max(v, {1}, true));
        o[pl::all] = e / pl::sum(e, {1}, true);
      },
      pl::ShapeDtype({R, C}, pl::f32),
      {.grid = {R}, .in_specs = {spec}, .out_specs = {spec}, .name = "softmax", .compiler_params = {.num_warps = warps}});
}

pl::Call rms_norm(int64_t R, int64_t C, int64_t rows) {
  auto spec = pl::BlockSpec({rows, C}, [](pl::Value i) { return pl::idx(i, 0); });
  return pl::pallas_call(
      [C](pl::Ref x, pl::Ref w, pl::Ref o) {
        pl::Value v = x[pl::all].astype(pl::f32);
        pl::Value inv = pl::rsqrt(pl::sum(v * v, {1}, true) / static_cast<float>(C) + 1e-6f);
        o[pl::all] = (v * inv * w[pl::all].astype(pl::f32)).astype(pl::bf16);
      },
      pl::ShapeDtype({R, C}, pl::bf16),
      {.grid = {R / rows}, .in_specs = {spec, pl::BlockSpec({1, C}, [](pl::Value) { return pl::idx(0, 0); })}, .out_specs = {spec},
       .name = "rms_norm", .compiler_params = {.num_warps = 8}});
}

pl::Call row_argmax(int64_t R, int64_t C, int64_t rows) {
  return pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = pl::argmax(x[pl::all], 1); }, pl::ShapeDtype({R}, pl::i32),
                         {.grid = {R / rows}, .in_specs = {pl::BlockSpec({rows, C}, [](pl::Value i) { return pl::idx(i, 0); })},
                          .out_specs = {pl::BlockSpec({rows}, [](pl::Value i) { return pl::idx(i); })}, .name = "row_argmax",
                          .compiler_params = {.num_warps = 8}});
}

pl::Call column_sum(int64_t R, int64_t C, int64_t rows, int64_t cols) {
  return pl::pallas_call(
      [cols](pl::Ref x, pl::Ref o) {
        pl::when(pl::program_id(1) == 0, [&] { o[pl::all] = pl::zeros({1, cols}, pl::f32); });
        o[pl::all] += pl::sum(x[pl::all], {0}, true);
      },
      pl::ShapeDtype({1, C}, pl::f32),
      {.grid = {C / cols, R / rows}, .in_specs = {pl::BlockSpec({rows, cols}, [](pl::Value j, pl::Value i) { return pl::idx(i, j); })},
       .out_specs = {pl::BlockSpec({1, cols}, [](pl::Value j, pl::Value) { return pl::idx(0, j); })}, .name = "column_sum",
       .compiler_params = {.num_warps = 8}});  // axis 1 revisits the output block: sequential (inferred)
}

pl::Call layer_norm(int64_t R, int64_t C) {
  auto spec = pl::BlockSpec({1, C}, [](pl::Value i) { return pl::idx(i, 0); });
  return pl::pallas_call(
      [C](pl::Ref x, pl::Ref o) {
        pl::Value v = x[pl::all];
        pl::Value mu = pl::sum(v, {1}, true) / static_cast<float>(C);
        pl::Value d = v - mu;
        o[pl::all] = d * pl::rsqrt(pl::sum(d * d, {1}, true) / static_cast<float>(C) + 1e-5f);
      },
      pl::ShapeDtype({R, C}, pl::f32),
      {.grid = {R}, .in_specs = {spec}, .out_specs = {spec}, .name = "layer_norm", .compiler_params = {.num_warps = 8}});
}

pl::Call gelu_mul(int64_t n, int64_t block) {
  auto spec = pl::BlockSpec({block}, [](pl::Value i) { return pl::idx(i); });
  return pl::pallas_call(
      [](pl::Ref x, pl::Ref y, pl::Ref o) {
        pl::Value v = x[pl::all];
        pl::Value g = 0.5f * v * (1.f + pl::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
        o[pl::all] = g * y[pl::all];
      },
      pl::ShapeDtype({n}, pl::f32),
      {.grid = {n / block}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "gelu_mul", .compiler_params = {.num_warps = 8}});
}

std::string MatmulCase::label() const {
  std::string shape = M == N && N == K ? std::to_string(M) + "^3" : std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
  return std::string(name) + "_" + shape + "_" + std::to_string(bm) + "x" + std::to_string(bn) + (bk ? "x" + std::to_string(bk) : "") +
         (group_m ? "_grouped" + std::to_string(group_m) : "");
}

pl::Call matmul(const MatmulCase& c) {
  const int64_t M = c.M, N = c.N, K = c.K, bm = c.bm, bn = c.bn, bk = c.bk ? c.bk : c.t == pl::f32 ? 32 : 64;
  const bool ta = c.ta, tb = c.tb;
  const Epilogue epi = c.epi;
  const pl::DType acc_t = c.t == pl::i8 ? pl::i32 : pl::f32, out_t = c.t == pl::i8 ? pl::i32 : c.t;
  auto k_loop = [K, bm, bn, bk, ta, tb, acc_t](pl::Ref a, pl::Ref b) {
    return pl::fori_loop(0, int(K / bk), pl::Value(pl::zeros({bm, bn}, acc_t)), [&](pl::Value kk, pl::Value acc) {
      pl::Value x = ta ? a(pl::ds(kk * bk, bk), pl::all) : a(pl::all, pl::ds(kk * bk, bk));
      pl::Value y = tb ? b(pl::all, pl::ds(kk * bk, bk)) : b(pl::ds(kk * bk, bk), pl::all);
      return acc + pl::dot(x, y, {.trans_a = ta, .trans_b = tb});
    });
  };
  // The block (row, column) of a program: the grid's two axes, or with group_m the grouped
  // order of a 1-D grid: group_m block rows at a time, down each column of the group.
  const int64_t rows = (M + bm - 1) / bm, cols = (N + bn - 1) / bn, gm = c.group_m;
  auto spec = [rows, cols, gm](pl::Shape shape, std::function<pl::BlockIndex(pl::Value, pl::Value)> f) {
    if (!gm) return pl::BlockSpec(std::move(shape), [f](pl::Value i, pl::Value j) { return f(i, j); });
    return pl::BlockSpec(std::move(shape), [f, rows, cols, gm](pl::Value pid) {
      pl::Value group = pid / int(gm * cols), first = group * int(gm), in_group = pid % int(gm * cols);
      pl::Value height = pl::minimum(int(rows) - first, pl::Value(int(gm)));
      return f(first + in_group % height, in_group / height);
    });
  };
  std::vector<pl::BlockSpec> in_specs = {
      ta ? spec({K, bm}, [](pl::Value i, pl::Value) { return pl::idx(0, i); })
         : spec({bm, K}, [](pl::Value i, pl::Value) { return pl::idx(i, 0); }),
      tb ? spec({bn, K}, [](pl::Value, pl::Value j) { return pl::idx(j, 0); })
         : spec({K, bn}, [](pl::Value, pl::Value j) { return pl::idx(0, j); })};
  pl::CallOptions opts{.grid = gm ? std::vector<int64_t>{rows * cols} : std::vector<int64_t>{rows, cols},
                       .out_specs = {spec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
                       .name = c.name,
                       .compiler_params = {.num_warps = c.warps, .num_stages = c.stages}};
  if (epi == Epilogue::None) {
    opts.in_specs = in_specs;
    return pl::pallas_call([k_loop, out_t](pl::Ref a, pl::Ref b, pl::Ref o) { o[pl::all] = k_loop(a, b).astype(out_t); },
                           pl::ShapeDtype({M, N}, out_t), opts);
  }
  in_specs.push_back(epi == Epilogue::Residual ? spec({bm, bn}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })
                                               : spec({1, bn}, [](pl::Value, pl::Value j) { return pl::idx(0, j); }));
  opts.in_specs = in_specs;
  return pl::pallas_call(
      [k_loop, epi, out_t](pl::Ref a, pl::Ref b, pl::Ref extra, pl::Ref o) {
        pl::Value acc = k_loop(a, b);
        if (epi == Epilogue::BiasRelu) acc = pl::maximum(acc + extra[pl::all].astype(pl::f32), 0.f);
        if (epi == Epilogue::Residual) acc = acc + extra[pl::all].astype(pl::f32);
        o[pl::all] = acc.astype(out_t);
      },
      pl::ShapeDtype({M, N}, out_t), opts);
}

pl::Call batched_matmul(int64_t B, int64_t M, int64_t N, int64_t K, int64_t bn) {
  const int64_t bm = 128, bk = 64;
  return pl::pallas_call(
      [K, bn](pl::Ref a, pl::Ref b, pl::Ref o) {
        pl::Value acc = pl::fori_loop(0, int(K / bk), pl::Value(pl::zeros({bm, bn}, pl::f32)), [&](pl::Value kk, pl::Value acc) {
          return acc + pl::dot(a(pl::all, pl::ds(kk * bk, bk)), b(pl::ds(kk * bk, bk), pl::all));
        });
        o[pl::all] = acc.astype(pl::bf16);
      },
      pl::ShapeDtype({B, M, N}, pl::bf16),
      {.grid = {B, M / bm, N / bn},
       .in_specs = {pl::BlockSpec({pl::squeezed, bm, K}, [](pl::Value z, pl::Value i, pl::Value) { return pl::idx(z, i, 0); }),
                    pl::BlockSpec({pl::squeezed, K, bn}, [](pl::Value z, pl::Value, pl::Value j) { return pl::idx(z, 0, j); })},
       .out_specs = {pl::BlockSpec({pl::squeezed, bm, bn}, [](pl::Value z, pl::Value i, pl::Value j) { return pl::idx(z, i, j); })},
       .name = "batched_matmul", .compiler_params = {.num_warps = 8}});
}

std::string AttentionCase::label() const {
  auto s = [](int64_t v) { return std::to_string(v); };
  return std::string("bf16_attention") + (causal ? "_causal" : "") + "_B" + s(B) + "H" + s(H) + "S" + s(S) + "D" + s(D) + "_bq" + s(bq) +
         "_bk" + s(bk) + "_w" + s(warps);
}

pl::Call attention(const AttentionCase& c) {
  pl::kernels::AttentionConfig cfg{.block_q = c.bq, .block_k = c.bk, .causal = c.causal};
  cfg.compiler_params.num_warps = c.warps;
  return pl::kernels::flash_attention(c.B, c.H, c.S, c.D, pl::bf16, cfg);
}

}  // namespace bench
