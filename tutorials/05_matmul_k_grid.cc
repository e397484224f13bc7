// Tutorial 05: matmul with K as a grid axis — accumulating into an output block across programs.
//
// What it does: C = A @ B as in tutorial 04 (bf16[256, 320] @ bf16[320, 192] -> f32), but the
// loop over K is the third grid axis: a 4 x 3 x 5 grid of programs, each multiplying one
// [64, 64] tile of A by one of B.
//
// The Pallas ideas:
//  - Every operand is blocked by the grid, K included: program (i, j, k) sees A's block (i, k)
//    and B's block (k, j), so only [64, 64] tiles arrive in its refs (JAX Pallas on TPU streams
//    K through its pipeline this way).
//  - Revisiting an output block: C's index map (i, j, k) -> (i, j) ignores k, so the five
//    programs (i, j, 0..4) all see the same output block and accumulate into it. The first one
//    zeroes it (pl::when(pl::program_id(2) == 0, ...): an output block starts uninitialised),
//    each then adds its product: `c_ref[pl::all] += pl::dot(...)`.
//  - This is only correct if those programs run one after another, in order, each seeing the
//    previous one's writes. A grid axis along which an output block is revisited is therefore
//    *sequential*; the other axes are *parallel* (their programs run in any order, at once).
//    Pallas C++ infers this from the output index maps — printed in the IR as
//    dimension_semantics=(parallel, parallel, sequential) — or you declare it with
//    .dimension_semantics = {pl::parallel, pl::parallel, pl::sequential} (pl::arbitrary is
//    Pallas TPU's name for sequential). On a GPU the sequential axis becomes a loop inside one
//    thread block: the five K steps of a tile run there in order, as tutorial 04's loop does.
//  - Declaring the K axis parallel while programs share an output block would make them race;
//    interpret mode's race check finds that (tutorial 08).
//
// Try next: print matmul.jaxpr_text() whole; declare the semantics explicitly; accumulate in an
// f32 output and cast later, or store bf16 — then why must the accumulation stay f32?
#include <cstdio>
#include <string>

#include <pallas/pallas.h>
#include <pallas/testing.h>

namespace pl = pallas;

int main() {
  if (!pl::testing::backend_available()) return 77;  // PALLAS_BACKEND=cuda without a GPU: skipped

  const int64_t M = 256, N = 192, K = 320, bm = 64, bn = 64, bk = 64;
  pl::Array a = pl::random::normal({M, K}, pl::bf16, /*seed=*/6);
  pl::Array b = pl::random::normal({K, N}, pl::bf16, /*seed=*/7);

  auto kernel = [=](pl::Ref a_ref, pl::Ref b_ref, pl::Ref c_ref) {
    pl::when(pl::program_id(2) == 0, [&] { c_ref[pl::all] = pl::zeros({bm, bn}, pl::f32); });
    c_ref[pl::all] += pl::dot(a_ref[pl::all], b_ref[pl::all]);
  };
  using V = pl::Value;
  pl::Call matmul = pl::pallas_call(
      kernel, pl::ShapeDtype({M, N}, pl::f32),
      {.grid = {M / bm, N / bn, K / bk},
       .in_specs = {pl::BlockSpec({bm, bk}, [](V i, V j, V k) { return pl::idx(i, k); }),
                    pl::BlockSpec({bk, bn}, [](V i, V j, V k) { return pl::idx(k, j); })},
       .out_specs = {pl::BlockSpec({bm, bn}, [](V i, V j, V k) { return pl::idx(i, j); })},  // ignores k
       .name = "matmul_k_grid"});
  pl::Array c = matmul(a, b);

  // The inferred semantics, from the IR that debug = true would print.
  std::string ir = matmul.jaxpr_text();
  size_t at = ir.find("dimension_semantics=");
  std::string semantics = at == std::string::npos ? "(not printed)" : ir.substr(at, ir.find(')', at) + 1 - at);
  std::printf("%s: inferred %s\n", matmul.name().c_str(), semantics.c_str());

  std::vector<double> A = a.to_vector<double>(), B = b.to_vector<double>(), expected(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t p = 0; p < K; ++p)
      for (int64_t j = 0; j < N; ++j) expected[i * N + j] += A[i * K + p] * B[p * N + j];
  auto check = pl::testing::allclose(c, expected, {.rtol = 1e-5, .atol = 1e-3});  // as in tutorial 04
  std::printf("%lld programs on the %s\n%s", static_cast<long long>((M / bm) * (N / bn) * (K / bk)),
              matmul.backend_name().c_str(), check.report.c_str());
  bool sequential_k = semantics == "dimension_semantics=(parallel, parallel, sequential)";
  if (!sequential_k) std::printf("expected the K axis to be inferred sequential\n");
  return check && sequential_k ? 0 : 1;
}
