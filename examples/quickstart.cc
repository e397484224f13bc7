// The README's quickstart, kept compiling and correct.
#include <cstdio>

#include <pallas/pallas.h>
namespace pl = pallas;

void add_kernel(pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; }

int main() {
  pl::Array x = pl::Array::from_vector(std::vector<float>(1024, 1.f), {1024});
  pl::Array y = pl::random::normal({1024}, pl::f32, /*seed=*/0);
  auto block = pl::BlockSpec({128}, [](pl::Value i) { return pl::idx(i); });
  auto add = pl::pallas_call(add_kernel, pl::ShapeDtype({1024}, pl::f32),
                             {.grid = {8}, .in_specs = {block, block}, .out_specs = {block}});
  pl::Array out = add(x, y);  // program i adds block i
  std::vector<float> host = out.to_vector<float>();
  std::vector<float> yv = y.to_vector<float>();
  for (int i = 0; i < 1024; ++i)
    if (host[i] != 1.f + yv[i]) {
      std::printf("quickstart: wrong result at %d\n", i);
      return 1;
    }
  std::printf("quickstart: ok\n%s", add.jaxpr_text().c_str());
  return 0;
}
