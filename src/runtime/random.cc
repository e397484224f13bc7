// Counter-based random arrays: element i depends only on (seed, i).
#include <cmath>

#include "pallas/array.h"

namespace pallas::random {
namespace {
uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double unit(uint64_t seed, uint64_t i) {  // in (0, 1)
  uint64_t r = splitmix(splitmix(seed) ^ (i * 0xd1b54a32d192ed03ull));
  return (static_cast<double>(r >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
Array from_doubles(const std::vector<double>& v, const Shape& shape, DType dtype) {
  Array a(shape, dtype);
  convert_elements(DType::F64, v.data(), dtype, a.data(), static_cast<int64_t>(v.size()));
  return a;
}
}  // namespace

Array normal(Shape shape, DType dtype, uint64_t seed, double mean, double stddev) {
  int64_t n = shape_size(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double u1 = unit(seed, 2 * static_cast<uint64_t>(i)), u2 = unit(seed, 2 * static_cast<uint64_t>(i) + 1);
    v[i] = mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  return from_doubles(v, shape, dtype);
}

Array uniform(Shape shape, DType dtype, uint64_t seed, double lo, double hi) {
  int64_t n = shape_size(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * unit(seed, static_cast<uint64_t>(i));
  if (is_integer(dtype) || dtype == DType::Bool)
    for (auto& x : v) x = std::floor(x);
  return from_doubles(v, shape, dtype);
}

Array randint(Shape shape, DType dtype, uint64_t seed, int64_t lo, int64_t hi) {
  if (hi <= lo) throw Error("random::randint: empty range [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
  int64_t n = shape_size(shape);
  std::vector<int64_t> v(static_cast<size_t>(n));
  uint64_t span = static_cast<uint64_t>(hi - lo);
  for (int64_t i = 0; i < n; ++i) v[i] = lo + static_cast<int64_t>(splitmix(splitmix(seed + 1) ^ static_cast<uint64_t>(i)) % span);
  Array a(shape, dtype);
  convert_elements(DType::I64, v.data(), dtype, a.data(), n);
  return a;
}

}  // namespace pallas::random
