// The consumer's AOT generator: one kernel, compiled at build time by pallas_add_aot.
#include <pallas/aot.h>
#include <pallas/pallas.h>
namespace pl = pallas;

int main(int argc, char** argv) {
  const int64_t n = 1000;  // not a multiple of the block: an edge block
  auto block = pl::BlockSpec({256}, [](pl::Value i) { return pl::idx(i); });
  pl::Call affine = pl::pallas_call([](pl::Ref x, pl::Ref o) { o[pl::all] = x[pl::all] * 2.f + 1.f; },
                                    pl::ShapeDtype({n}, pl::f32),
                                    {.grid = {(n + 255) / 256}, .in_specs = {block}, .out_specs = {block}, .name = "consumer_affine"});
  return pl::aot::generator_main(argc, argv, {{"affine", affine, {pl::ShapeDtype({n}, pl::f32)}}});
}
