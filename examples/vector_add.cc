// Vector add: the first Pallas kernel. Eight programs, each adding one block of 128.
#include "examples/examples.h"

namespace pl = pallas;

namespace examples {

void add_kernel(pl::Ref x, pl::Ref y, pl::Ref o) { o[pl::all] = x[pl::all] + y[pl::all]; }

bool vector_add() {
  const int64_t n = 1 << 20, block = 1024;
  pl::Array x = pl::random::normal({n}, pl::f32, 1);
  pl::Array y = pl::random::normal({n}, pl::f32, 2);
  auto spec = pl::BlockSpec({block}, [](pl::Value i) { return pl::idx(i); });
  auto add = pl::pallas_call(add_kernel, pl::ShapeDtype({n}, pl::f32),
                             {.grid = {n / block}, .in_specs = {spec, spec}, .out_specs = {spec}, .name = "add"});
  pl::Array out;
  double ms = time_ms([&] { out = add(x, y); });
  auto o = out.to_vector<double>(), a = x.to_vector<double>(), b = y.to_vector<double>();
  std::vector<double> ref(a.size());
  for (size_t i = 0; i < a.size(); ++i) ref[i] = static_cast<double>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
  return report("vector_add f32[2^20]", add, rel_error(o, ref), 1e-7, ms);
}

}  // namespace examples
