// The CUDA backend's lowering: every kernel here is lowered and compiled by NVRTC to an
// sm_90a cubin (no GPU needed). Where a GPU is present the kernel also runs on it and is
// compared with the interpreter on the same random inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>

#include <pallas/pallas.h>

#include "src/core/pallas_call.h"
#ifdef PALLAS_TEST_HAVE_CUDA
#include "src/backends/cuda/compile.h"
#endif

namespace pl = pallas;

namespace {

using Factory = std::function<pl::Call(pl::Backend)>;

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    double d = a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Compiles for sm_90a and runs in the interpreter; on a GPU also runs there and compares.
void check(const Factory& make, const std::vector<pl::Array>& args, double tol = 1e-5) {
  pl::Call gpu = make(pl::cuda_available() ? pl::Backend::Cuda : pl::Backend::Auto);  // not PALLAS_BACKEND
  std::vector<pl::ShapeDtype> shapes;
  for (auto& a : args) shapes.push_back(a.shape_dtype());
  gpu.trace(shapes);
#ifdef PALLAS_TEST_HAVE_CUDA
  auto t0 = std::chrono::steady_clock::now();
  auto c = pl::cuda::compile_call(gpu.state()->get_traced(), "sm_90a");
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(c->cubin.empty());
  ::testing::Test::RecordProperty("compile_ms", std::to_string(ms));
#endif
  auto want = make(pl::Backend::Interpret)(args);  // without a GPU: at least the kernel runs
  if (!pl::cuda_available()) return;
  auto got = gpu(args);
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_FALSE(got[k].device().is_host()) << "the output should stay on the GPU";
    auto w = want[k].to_vector<double>(), g = got[k].to_vector<double>();
    EXPECT_LE(rel_err(g, w), tol) << "output " << k;
  }
}

pl::BlockSpec row(int64_t b) { return pl::BlockSpec({b}, [](pl::Value i) { return pl::idx(i); }); }

}  // namespace

TEST(CudaLowering, VectorAddWithEdgeBlock) {
  int64_t n = 1000;  // the last block overhangs
  auto x = pl::random::normal({n}, pl::f32, 1), y = pl::random::normal({n}, pl::f32, 2);
  check([&](pl::Backend b) {
    return pl::pallas_call([](pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; },
                           pl::ShapeDtype({n}, pl::f32),
                           {.grid = {8}, .in_specs = {row(128), row(128)}, .out_specs = {row(128)}, .name = "add", .backend = b,
                            .interpret_params = {.detect_out_of_bounds = false}});  // it reads the padding
  }, {x, y});
}

TEST(CudaLowering, UnaryOps) {
  auto x = pl::random::uniform({256}, pl::f32, 3);
  using F = pl::Value (*)(const pl::Value&);
  std::vector<F> ops = {pl::neg, pl::abs, pl::sign, pl::ceil, pl::floor, pl::round, pl::exp, pl::exp2, pl::expm1,
                        pl::log, pl::log1p, pl::sqrt, pl::cbrt, pl::rsqrt, pl::sin, pl::cos, pl::tan, pl::asin,
                        pl::acos, pl::atan, pl::sinh, pl::cosh, pl::tanh, pl::asinh, pl::atanh, pl::logistic,
                        pl::erf, pl::erf_inv};
  for (F op : ops)
    check([&](pl::Backend b) {
      return pl::pallas_call([op](pl::Ref x, pl::Ref o) { o[pl::all] = op(x[pl::all]); }, pl::ShapeDtype({256}, pl::f32),
                             {.backend = b});
    }, {x}, 1e-5);
}

TEST(CudaLowering, IntegerOpsAndSemantics) {
  std::vector<int32_t> a(256), d(256);
  for (int i = 0; i < 256; ++i) a[i] = i * 7919 - 900000, d[i] = (i % 5) - 2;  // includes division by zero
  auto A = pl::Array::from_vector(a, {256}), D = pl::Array::from_vector(d, {256});
  check([&](pl::Backend b) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref y, pl::Ref o) {
          pl::Value u = x[pl::all], v = y[pl::all];
          o[pl::all] = u / v + u % v + (u << (v + 30)) + (u >> v) + (u & v) + (u | 3) + pl::population_count(u) + pl::clz(u) +
                       pl::maximum(u, v) * pl::minimum(u, v) + pl::where(u > v, u, v) + pl::integer_pow(v, 3);
        },
        pl::ShapeDtype({256}, pl::i32), {.backend = b});
  }, {A, D}, 0);
}

TEST(CudaLowering, Bf16AndConversions) {
  auto x = pl::random::normal({512}, pl::f32, 4);
  check([&](pl::Backend b) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref o, pl::Ref p) {
          pl::Value v = x[pl::all].astype(pl::bf16);
          o[pl::all] = (v * v + v).astype(pl::f32);
          p[pl::all] = (x[pl::all] * 1000.f).astype(pl::i32).astype(pl::f16).astype(pl::f32);
        },
        std::vector<pl::ShapeDtype>{pl::ShapeDtype({512}, pl::f32), pl::ShapeDtype({512}, pl::f32)}, {.backend = b});
  }, {x}, 1e-2);
}

TEST(CudaLowering, SoftmaxRows) {
  auto x = pl::random::normal({64, 256}, pl::f32, 5);
  check([&](pl::Backend b) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref o) {
          pl::Value v = x[pl::all];
          pl::Value m = pl::max(v, {1}, true);
          pl::Value e = pl::exp(v - m);
          o[pl::all] = e / pl::sum(e, {1}, true);
        },
        pl::ShapeDtype({64, 256}, pl::f32),
        {.grid = {16},
         .in_specs = {pl::BlockSpec({4, 256}, [](pl::Value i) { return pl::idx(i, 0); })},
         .out_specs = {pl::BlockSpec({4, 256}, [](pl::Value i) { return pl::idx(i, 0); })},
         .backend = b});
  }, {x});
}

TEST(CudaLowering, FullReductionAndArgmaxCumsum) {
  auto x = pl::random::normal({32, 16}, pl::f32, 6);
  check([&](pl::Backend b) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref s, pl::Ref a, pl::Ref c) {
          pl::Value v = x[pl::all];
          s[pl::all] = pl::broadcast_to(pl::sum(v), {1});
          a[pl::all] = pl::argmax(v, 1);
          c[pl::all] = pl::cumsum(v, 0) + pl::transpose(pl::transpose(v));
        },
        std::vector<pl::ShapeDtype>{pl::ShapeDtype({1}, pl::f32), pl::ShapeDtype({32}, pl::i32), pl::ShapeDtype({32, 16}, pl::f32)},
        {.backend = b});
  }, {x}, 1e-5);
}

TEST(CudaLowering, MatmulLoopOverK) {
  int64_t M = 64, N = 64, K = 128;
  auto a = pl::random::normal({M, K}, pl::bf16, 7), bb = pl::random::normal({K, N}, pl::bf16, 8);
  check([&](pl::Backend be) {
    return pl::pallas_call(
        [K](pl::Ref a, pl::Ref b, pl::Ref o) {
          pl::Value acc = pl::fori_loop(0, int(K / 32), pl::Value(pl::zeros({32, 32}, pl::f32)), [&](pl::Value k, pl::Value acc) {
            return acc + pl::dot(a(pl::all, pl::ds(k * 32, 32)), b(pl::ds(k * 32, 32), pl::all));
          });
          o[pl::all] = acc;
        },
        pl::ShapeDtype({M, N}, pl::f32),
        {.grid = {2, 2},
         .in_specs = {pl::BlockSpec({32, K}, [](pl::Value i, pl::Value j) { return pl::idx(i, 0); }),
                      pl::BlockSpec({K, 32}, [](pl::Value i, pl::Value j) { return pl::idx(0, j); })},
         .out_specs = {pl::BlockSpec({32, 32}, [](pl::Value i, pl::Value j) { return pl::idx(i, j); })},
         .name = "matmul",
         .backend = be});
  }, {a, bb}, 1e-4);
}

TEST(CudaLowering, MaskedLoadStoreAtomicsAndControl) {
  auto x = pl::random::normal({100}, pl::f32, 9);
  auto acc0 = pl::Array::from_vector(std::vector<float>{0.5f}, {1});
  check([&](pl::Backend b) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref, pl::Ref o, pl::Ref s) {
          pl::Value i = pl::program_id(0);
          pl::Value idx = pl::arange(64) + i * 64;
          pl::Value m = idx < 100;
          pl::Value v = pl::load(x, {pl::ds(i * 64, 64)}, {.mask = m, .other = 0.f});
          pl::store(o, {pl::ds(i * 64, 64)}, v * 2.f, {.mask = m});
          pl::Value t = pl::cond(i == 0, [&] { return pl::sum(v); }, [&] { return pl::sum(v) * 0.f; });
          pl::Value w = pl::while_loop(pl::Value(t), [](pl::Value c) { return c > 1000.f; }, [](pl::Value c) { return c - 1.f; });
          pl::atomic_add(s, {0}, w);
        },
        std::vector<pl::ShapeDtype>{pl::ShapeDtype({100}, pl::f32), pl::ShapeDtype({1}, pl::f32)},
        {.grid = {2},
         .in_specs = {pl::BlockSpec({100}, [](pl::Value) { return pl::idx(0); }), pl::BlockSpec({1}, [](pl::Value) { return pl::idx(0); })},
         .out_specs = {pl::BlockSpec({100}, [](pl::Value) { return pl::idx(0); }), pl::BlockSpec({1}, [](pl::Value) { return pl::idx(0); })},
         .input_output_aliases = {{1, 1}},
         .backend = b});
    // Output 1 is a sum of 64 normal values that partly cancel; the GPU sums them as a tree,
    // the interpreter in order, so the relative error of the result is ~1e-5 (2.4e-5 seen on the H200).
  }, {x, acc0}, 1e-4);
}

TEST(CudaLowering, ScratchPrefetchAndHighRankGrid) {
  auto x = pl::random::normal({2, 3, 4, 5, 32}, pl::f32, 10);
  std::vector<int32_t> perm = {1, 0};
  auto P = pl::Array::from_vector(perm, {2});
  check([&](pl::Backend b) {
    return pl::pallas_call(
        [](pl::Ref p, pl::Ref x, pl::Ref o, pl::Ref scratch) {
          scratch[pl::all] = x[pl::all] * 3.f;
          o[pl::all] = scratch[pl::all] + pl::program_id(3).astype(pl::f32);
        },
        pl::ShapeDtype({2, 3, 4, 5, 32}, pl::f32),
        {.grid = {2, 3, 4, 5},
         .in_specs = {pl::BlockSpec({pl::squeezed, pl::squeezed, pl::squeezed, pl::squeezed, 32},
                                    [](pl::Value a, pl::Value b2, pl::Value c, pl::Value d, pl::Value p) {
                                      return pl::idx(pl::Ref(p)[a], b2, c, d, 0);
                                    })},
         .out_specs = {pl::BlockSpec({pl::squeezed, pl::squeezed, pl::squeezed, pl::squeezed, 32},
                                     [](pl::Value a, pl::Value b2, pl::Value c, pl::Value d, pl::Value) { return pl::idx(a, b2, c, d, 0); })},
         .scratch_shapes = {pl::ShapeDtype({32}, pl::f32)},
         .num_scalar_prefetch = 1,
         .backend = b});
  }, {P, x});
}

#ifdef PALLAS_TEST_HAVE_CUDA
#include "src/backends/cuda/lower.h"
#include "src/ir/primitive.h"

TEST(CudaLowering, EveryPrimitiveHasARule) {
  for (const pallas::ir::Primitive* p : pallas::ir::all_primitives())
    EXPECT_TRUE(pallas::cuda::lowering_rules().has(p->id)) << "no CUDA lowering rule for " << p->name;
}

TEST(CudaLowering, SmallKernelCompilesFast) {
  setenv("PALLAS_NO_DISK_CACHE", "1", 1);
  auto k = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.f + 1.f; }, pl::ShapeDtype({4096}, pl::f32),
                           {.grid = {4}, .in_specs = {row(1024)}, .out_specs = {row(1024)}, .name = "fast_compile"});
  k.trace({pl::ShapeDtype({4096}, pl::f32)});
  auto c = pl::cuda::compile_call(k.state()->get_traced(), "sm_90a");
  unsetenv("PALLAS_NO_DISK_CACHE");
  std::printf("NVRTC compile of a small kernel: %.1f ms, %zu bytes of source\n", c->compile_ms, c->lowered.source.size());
  EXPECT_LT(c->compile_ms, 250.0);  // loaded CI machines; ~30-40 ms when idle
}

TEST(CudaLowering, CacheHitsInMemory) {
  auto make = [] {
    return pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] - 3.f; }, pl::ShapeDtype({256}, pl::f32), {.name = "cached"});
  };
  auto a = make(), b = make();
  a.trace({pl::ShapeDtype({256}, pl::f32)});
  b.trace({pl::ShapeDtype({256}, pl::f32)});
  auto ca = pl::cuda::compile_call(a.state()->get_traced(), "sm_90a");
  auto cb = pl::cuda::compile_call(b.state()->get_traced(), "sm_90a");
  EXPECT_EQ(ca.get(), cb.get());
}
#endif

// Regressions found by compiling the op suites of the tests branch for sm_90a: iota into a
// 16-bit float, a negative iota dimension, and generated names that shadowed the prelude's
// type names (i8/i16/i32/i64).
TEST(CudaLowering, IotaF16NegativeDimAndManyIndices) {
  auto x = pl::random::normal({2, 5, 7}, pl::f32, 11);
  check([&](pl::Backend b) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref o) {
          pl::Value v = x[pl::all];
          for (int r = 0; r < 12; ++r) v = pl::transpose(pl::transpose(v, {2, 1, 0}), {2, 1, 0}) + pl::iota(pl::f16, {2, 5, 7}, -1).astype(pl::f32);
          o[pl::all] = v;
        },
        pl::ShapeDtype({2, 5, 7}, pl::f32), {.backend = b});
  }, {x});
}

// Memory semantics the GPU must share with the interpreter (tests/memory_semantics_test.cc
// checks them against references in interpret mode).

// Pallas' softmax idiom: ds(0, 128) over a row of 125 with a mask; mask-true lanes outside
// the row read poison (output 1) and drop their writes, per dimension (output 2 keeps row 2).
TEST(CudaLowering, MaskedStaticSlicePastTheRef) {
  auto x = pl::random::normal({6, 125}, pl::f32, 21);
  check([&](pl::Backend b) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref o, pl::Ref raw, pl::Ref w) {
          pl::Value m = pl::arange(128) < 125;
          pl::Value row = pl::load(x, {pl::ds(0, 128)}, {.mask = m, .other = -INFINITY});
          pl::Value e = pl::exp(row - pl::max(row));
          pl::store(o, {pl::ds(0, 128)}, e / pl::sum(e), {.mask = m});
          raw[pl::all] = pl::load(x, {pl::ds(0, 128)}, {.mask = pl::arange(128) >= 0});
          w[pl::all] = pl::zeros({2, 125});
          pl::store(w, {0, pl::ds(-3, 256, 1)}, pl::full({256}, 1.0), {.mask = pl::arange(256) % 2 == 0});
        },
        std::vector<pl::ShapeDtype>{pl::ShapeDtype({6, 125}, pl::f32), pl::ShapeDtype({6, 128}, pl::f32),
                                    pl::ShapeDtype({6, 2, 125}, pl::f32)},
        {.grid = {6},
         .in_specs = {pl::BlockSpec({pl::squeezed, 125}, [](pl::Value i) { return pl::idx(i, 0); })},
         .out_specs = {pl::BlockSpec({pl::squeezed, 125}, [](pl::Value i) { return pl::idx(i, 0); }),
                       pl::BlockSpec({pl::squeezed, 128}, [](pl::Value i) { return pl::idx(i, 0); }),
                       pl::BlockSpec({pl::squeezed, 2, 125}, [](pl::Value i) { return pl::idx(i, 0, 0); })},
         .name = "masked_past",
         .backend = b,
         .interpret_params = {.detect_out_of_bounds = false}});
  }, {x}, 1e-5);
}

// Index arrays [16,1] and [1,32] with negative entries broadcast to [16,32]; an integer
// apart from an index array puts the index dims first; a scatter with distinct indices;
// addupdate with duplicate indices adds every contribution (atomics on the GPU), in i32,
// f32 (integer values: exact in any order), f16, bf16 and i8 (CAS loops).
TEST(CudaLowering, AdvancedIndexingAndScatterAdd) {
  std::vector<int32_t> r(16), c(32), dup(256);
  for (int k = 0; k < 16; ++k) r[k] = (k * 5) % 16 - (k % 3 == 0 ? 16 : 0);
  for (int k = 0; k < 32; ++k) c[k] = (k * 7) % 32 - (k % 4 == 0 ? 32 : 0);
  for (int k = 0; k < 256; ++k) dup[k] = (k * 13) % 40 - 20;  // -20..19 on a dim of 24: each twice or more
  auto X = pl::random::normal({16, 32}, pl::f32, 22);
  auto R = pl::Array::from_vector(r, {16, 1}), C = pl::Array::from_vector(c, {1, 32}), D = pl::Array::from_vector(dup, {256});
  std::vector<double> vals(256);
  for (int k = 0; k < 256; ++k) vals[k] = (k % 7) - 3;
  auto V = pl::Array::from_vector(vals, {256});
  check([&](pl::Backend b) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref r, pl::Ref c, pl::Ref d, pl::Ref v, pl::Ref g, pl::Ref h, pl::Ref s, pl::Ref a32, pl::Ref af,
           pl::Ref a16, pl::Ref ab16, pl::Ref a8) {
          pl::Value ri = r[pl::all], ci = c[pl::all], di = d[pl::all], vv = v[pl::all];
          g[pl::all] = x(ri, ci);                                   // [16, 32]
          h[pl::all] = x(pl::ds(2, 8), ci.reshape({32}));           // [8, 32]
          s[pl::all] = pl::zeros({16, 32});
          pl::store(s, {ri, ci}, x(ri, ci).get() * 2.0);           // a permutation: distinct targets
          a32[pl::all] = pl::zeros({24}, pl::i32);
          a32.at({di}) += vv.astype(pl::i32);
          af[pl::all] = pl::zeros({3, 24});
          af.at({1, di}) += vv.astype(pl::f32);
          a16[pl::all] = pl::zeros({24}, pl::f16);
          a16.at({di}) += vv.astype(pl::f16);
          ab16[pl::all] = pl::zeros({24}, pl::bf16);
          ab16.at({di}) += vv.astype(pl::bf16);
          a8[pl::all] = pl::zeros({24}, pl::i8);
          a8.at({di}) += vv.astype(pl::i8);
        },
        std::vector<pl::ShapeDtype>{pl::ShapeDtype({16, 32}, pl::f32), pl::ShapeDtype({8, 32}, pl::f32),
                                    pl::ShapeDtype({16, 32}, pl::f32), pl::ShapeDtype({24}, pl::i32),
                                    pl::ShapeDtype({3, 24}, pl::f32), pl::ShapeDtype({24}, pl::f16),
                                    pl::ShapeDtype({24}, pl::bf16), pl::ShapeDtype({24}, pl::i8)},
        {.name = "adv_index", .backend = b});
  }, {X, R, C, D, V}, 0);
}

// Masked swap returns the operand where the mask is false; a call with no outputs runs.
TEST(CudaLowering, MaskedSwapAndNoOutputs) {
  auto x = pl::random::normal({200}, pl::f32, 23), y = pl::random::normal({200}, pl::f32, 24);
  check([&](pl::Backend b) {
    return pl::pallas_call(
        [](pl::Ref x, pl::Ref y, pl::Ref o, pl::Ref old) {
          pl::Value m = pl::arange(256) % 3 != 0;
          o[pl::all] = x[pl::all];
          old[pl::all] = pl::swap(o, {pl::ds(0, 256)}, pl::load(y, {pl::ds(0, 256)}, {.mask = m, .other = 7.0}), {.mask = m});
        },
        std::vector<pl::ShapeDtype>{pl::ShapeDtype({200}, pl::f32), pl::ShapeDtype({256}, pl::f32)},
        {.name = "mswap", .backend = b, .interpret_params = {.detect_out_of_bounds = false}});  // lanes past the ref
  }, {x, y}, 0);
  check([&](pl::Backend b) {
    return pl::pallas_call([](pl::Ref x) { pl::debug_print("{}", {pl::sum(x[pl::all])}); }, std::vector<pl::ShapeDtype>{},
                           {.grid = {2}, .in_specs = {row(100)}, .name = "noout", .backend = b});
  }, {x});
}

// Reductions over trailing axes in each case of the shuffle lowering (rules_shape.cc,
// reduce_rows): rows longer than a repeat of the layout, rows of a few threads, rows of
// several warps, an odd number of warps, 64-bit and integer types, and the general path.
TEST(CudaLowering, RowReductionsInEveryLayout) {
  struct Case {
    pl::Shape block;
    pl::DType t;
    int warps;
  };
  const Case cases[] = {{{8, 4096}, pl::f32, 4}, {{8, 512}, pl::f32, 4},  {{16, 64}, pl::f32, 4}, {{32, 8}, pl::f32, 4},
                        {{4, 2048}, pl::bf16, 8}, {{6, 256}, pl::f32, 3}, {{8, 128}, pl::f64, 4}, {{8, 1024}, pl::i32, 2},
                        {{8, 100}, pl::f32, 4},   {{2, 4, 64}, pl::f32, 4}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << pl::dtype_name(c.t) << " block " << c.block[0] << "x" << c.block[1] << " warps " << c.warps);
    pl::Shape arr = c.block;
    arr[0] *= 2;
    pl::Array x = pl::random::normal(arr, pl::f32, 11).astype(c.t);
    if (c.t == pl::i32) x = pl::random::randint(arr, pl::i32, 12, -1000, 1000);
    size_t rank = c.block.size();
    int last = static_cast<int>(rank) - 1;
    auto spec = pl::BlockSpec(c.block, [rank](pl::Value i) {
      std::vector<pl::Value> ix{i};
      for (size_t d = 1; d < rank; ++d) ix.push_back(pl::Value(int64_t{0}));
      return ix;
    });
    pl::Shape kept(c.block.begin(), c.block.end() - 1);
    kept.push_back(1);
    pl::Shape out_arr = arr;
    out_arr.back() = 1;
    auto out_spec = pl::BlockSpec(kept, [rank](pl::Value i) {
      std::vector<pl::Value> ix{i};
      for (size_t d = 1; d < rank; ++d) ix.push_back(pl::Value(int64_t{0}));
      return ix;
    });
    check([&](pl::Backend b) {
      return pl::pallas_call(
          [last](pl::Ref x, pl::Ref s, pl::Ref m, pl::Ref n) {
            pl::Value v = x[pl::all];
            s[pl::all] = pl::sum(v, last, true);
            m[pl::all] = pl::max(v, last, true);
            n[pl::all] = pl::min(v, last, true);
          },
          std::vector<pl::ShapeDtype>{pl::ShapeDtype(out_arr, c.t), pl::ShapeDtype(out_arr, c.t), pl::ShapeDtype(out_arr, c.t)},
          {.grid = {2}, .in_specs = {spec}, .out_specs = {out_spec, out_spec, out_spec}, .compiler_params = {.num_warps = c.warps},
           .backend = b});
    }, {x}, c.t == pl::bf16 ? 1e-2 : 1e-5);
  }
}

// K loops of dots on the tensor cores (rules_dot.cc): the accumulator stays in MMA fragments
// across the loop when the body only adds dots into it. Every dtype that takes the tensor
// cores, shapes that do not fill an MMA tile, transposed operands, an accumulator that does
// not start at zero, 3 and 8 warps, and a body that also reads the accumulator (which then
// stays in the blocked layout).
TEST(CudaLowering, DotLoopsOnTensorCores) {
  struct Case {
    pl::DType t;
    int64_t M, N, K, bk;
    bool ta, tb, reads_acc;
    int warps;
  };
  const Case cases[] = {
      {pl::bf16, 64, 64, 128, 32, false, false, false, 4}, {pl::f16, 40, 24, 80, 40, false, true, false, 3},
      {pl::f32, 48, 32, 64, 16, true, false, false, 8},    {pl::i8, 32, 48, 128, 64, true, true, false, 4},
      {pl::bf16, 32, 32, 64, 32, false, false, true, 4},
      // 64 rows or more on whole warpgroups: wgmma on sm_90a (swizzled operand tiles, MN-major
      // for transposed 16-bit inputs; padding rows, K padding inside an instruction, n tiles)
      {pl::bf16, 128, 128, 128, 64, false, false, false, 8}, {pl::f16, 96, 40, 80, 40, true, false, false, 4},
      {pl::bf16, 64, 320, 64, 32, false, true, false, 4},   {pl::f32, 128, 72, 48, 24, true, true, false, 8},
      {pl::i8, 64, 40, 96, 48, false, true, false, 4},      {pl::i8, 80, 32, 64, 64, true, false, false, 8},
      {pl::bf16, 128, 64, 64, 32, false, false, true, 4},   {pl::f16, 64, 8, 16, 16, true, true, false, 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << pl::dtype_name(c.t) << " " << c.M << "x" << c.N << "x" << c.K << " ta " << c.ta << " tb " << c.tb
                                      << " reads_acc " << c.reads_acc << " warps " << c.warps);
    pl::Shape as = c.ta ? pl::Shape{c.K, c.M} : pl::Shape{c.M, c.K}, bs = c.tb ? pl::Shape{c.N, c.K} : pl::Shape{c.K, c.N};
    pl::Array a = c.t == pl::i8 ? pl::random::randint(as, pl::i8, 21, -100, 100) : pl::random::normal(as, c.t, 21);
    pl::Array b = c.t == pl::i8 ? pl::random::randint(bs, pl::i8, 22, -100, 100) : pl::random::normal(bs, c.t, 22);
    pl::DType acc_t = c.t == pl::i8 ? pl::i32 : pl::f32;
    check([&](pl::Backend be) {
      return pl::pallas_call(
          [c, acc_t](pl::Ref a, pl::Ref b, pl::Ref o) {
            pl::Value init = pl::full({c.M, c.N}, 3, acc_t);
            pl::Value acc = pl::fori_loop(0, int(c.K / c.bk), init, [&](pl::Value k, pl::Value acc) {
              pl::Value x = c.ta ? a(pl::ds(k * c.bk, c.bk), pl::all) : a(pl::all, pl::ds(k * c.bk, c.bk));
              pl::Value y = c.tb ? b(pl::all, pl::ds(k * c.bk, c.bk)) : b(pl::ds(k * c.bk, c.bk), pl::all);
              pl::Value d = pl::dot(x, y, {.trans_a = c.ta, .trans_b = c.tb, .preferred_type = acc_t});
              return c.reads_acc ? acc * 0.5f + d : acc + d;
            });
            o[pl::all] = acc;
          },
          pl::ShapeDtype({c.M, c.N}, acc_t), {.compiler_params = {.num_warps = c.warps}, .backend = be});
    }, {a, b}, c.t == pl::f32 ? 1e-3 : 1e-4);
  }
}
