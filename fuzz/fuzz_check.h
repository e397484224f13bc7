// What the differential fuzzer and the regression tests it prints share: deterministic random
// inputs (never all zeros; edge values mixed in), the comparison of two backends' outputs
// (bit-exact, or within a relative tolerance), and a helper that runs a kernel on the
// interpreter and, where a GPU is present, on the GPU and compares them.
//
// Header-only and public API only, so a printed regression test needs nothing else.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <pallas/pallas.h>

namespace fuzz {
namespace pl = pallas;

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t s = a * 0x9e3779b97f4a7c15ull + b;
  return splitmix(s);
}

inline double float_max_of(pl::DType t) {
  switch (t) {
    case pl::DType::F16: return 65504.0;
    case pl::DType::BF16: return 3.3895313892515355e38;
    case pl::DType::F32: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}
inline double float_tiny_of(pl::DType t) {  // smallest positive normal
  switch (t) {
    case pl::DType::F16: return std::ldexp(1.0, -14);
    case pl::DType::F64: return std::numeric_limits<double>::min();
    default: return std::ldexp(1.0, -126);
  }
}

// A deterministic random array. Floats: mostly normal(0, 2), some small integers; with edges
// (edges = 1, or -1 and the seed says so), about 6% edge values (NaN, ±inf, ±0, ±max,
// subnormal). Integers: random bits, small values and the extremes. Bools: random.
inline pl::Array input(const pl::Shape& shape, pl::DType t, uint64_t seed, int edges_ = -1) {
  pl::Array a(shape, t);
  int64_t n = a.size();
  uint64_t s = mix(seed, 0x5eed);
  bool edges = splitmix(s) % 2 == 0;
  if (edges_ >= 0) edges = edges_ != 0;
  auto next_double = [&] { return static_cast<double>(splitmix(s) >> 11) * 0x1.0p-53; };
  auto normal = [&] {
    double u = std::max(next_double(), 1e-300), v = next_double();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  };
  if (pl::is_float(t)) {
    const double inf = std::numeric_limits<double>::infinity();
    const double mx = float_max_of(t), tiny = float_tiny_of(t);
    const double edge[] = {std::numeric_limits<double>::quiet_NaN(), inf, -inf, 0.0, -0.0, mx, -mx, tiny / 4, -tiny, 1.0, -1.0, 0.5};
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& x : v) {
      uint64_t r = splitmix(s) % 100;
      if (edges && r < 6)
        x = edge[splitmix(s) % (sizeof edge / sizeof edge[0])];
      else if (r < 20)
        x = static_cast<double>(static_cast<int64_t>(splitmix(s) % 9) - 4);
      else
        x = 2.0 * normal();
    }
    return pl::Array::from_vector(v, shape).astype(t);
  }
  if (t == pl::DType::Bool) {
    auto* p = static_cast<bool*>(a.data());
    for (int64_t i = 0; i < n; ++i) p[i] = splitmix(s) & 1;
    return a;
  }
  int bits = pl::bit_width(t);
  bool sgn = pl::is_signed_int(t);
  auto* p = static_cast<unsigned char*>(a.data());
  for (int64_t i = 0; i < n; ++i) {
    uint64_t r = splitmix(s), x;
    uint64_t k = r % 100;
    uint64_t lo_mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    if (k < 8) {  // extremes: min, max, 0, -1 (all ones)
      uint64_t sign_bit = 1ull << (bits - 1);
      const uint64_t e[] = {sgn ? sign_bit : 0, sgn ? sign_bit - 1 : lo_mask, 0, lo_mask, 1};
      x = e[splitmix(s) % 5];
    } else if (k < 50) {
      int64_t v = sgn ? static_cast<int64_t>(splitmix(s) % 41) - 20 : static_cast<int64_t>(splitmix(s) % 41);
      x = static_cast<uint64_t>(v);
    } else {
      x = splitmix(s);
    }
    x &= lo_mask;
    std::memcpy(p + i * static_cast<int64_t>(pl::itemsize(t)), &x, pl::itemsize(t));  // little-endian
  }
  return a;
}

// ---- comparison ----
namespace detail {
inline std::string index_text(int64_t flat, const pl::Shape& shape) {
  std::vector<int64_t> ix(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    ix[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (size_t d = 0; d < ix.size(); ++d) s += (d ? "," : "") + std::to_string(ix[d]);
  return s + "]";
}
inline std::string num_text(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}
}  // namespace detail

// Compares b (backend B) with a (backend A, the reference): empty when they agree, else the
// first differing elements. tol == 0: bit for bit (NaNs compare equal whatever their payload).
// tol > 0 (floats): NaN against NaN, an infinity against the same infinity (or a finite value
// beyond half the format's range, the overflow boundary), else
// |a-b| <= tol*(max(|a|,|b|) + rms(a)) + the smallest normal (underflow in a different order).
inline std::string compare(const pl::Array& a_in, const pl::Array& b_in, double tol, int max_report = 8) {
  pl::Array a = a_in.device().is_host() ? a_in : a_in.to_host();
  pl::Array b = b_in.device().is_host() ? b_in : b_in.to_host();
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    return "shape/dtype differ: " + a.shape_dtype().str() + " vs " + b.shape_dtype().str();
  pl::DType t = a.dtype();
  int64_t n = a.size();
  std::string out;
  int64_t bad = 0;
  auto report = [&](int64_t i, const std::string& what) {
    if (bad++ < max_report) out += "    at " + detail::index_text(i, a.shape()) + ": " + what + "\n";
  };
  if (!pl::is_float(t)) {
    size_t w = pl::itemsize(t);
    auto* pa = static_cast<const unsigned char*>(a.data());
    auto* pb = static_cast<const unsigned char*>(b.data());
    std::vector<double> da = a.to_vector<double>(), db = b.to_vector<double>();
    std::vector<int64_t> ia, ib;
    bool wide = t == pl::DType::I64 || t == pl::DType::U64;
    if (wide) ia = a.to_vector<int64_t>(), ib = b.to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      if (std::memcmp(pa + i * static_cast<int64_t>(w), pb + i * static_cast<int64_t>(w), w) != 0)
        report(i, wide ? std::to_string(ia[static_cast<size_t>(i)]) + " vs " + std::to_string(ib[static_cast<size_t>(i)])
                       : detail::num_text(da[static_cast<size_t>(i)]) + " vs " + detail::num_text(db[static_cast<size_t>(i)]));
  } else {
    std::vector<double> da = a.to_vector<double>(), db = b.to_vector<double>();
    double ss = 0;
    int64_t cnt = 0;
    for (double x : da)
      if (std::isfinite(x)) ss += x * x, ++cnt;
    double rms = cnt ? std::sqrt(ss / static_cast<double>(cnt)) : 0.0;
    double half_range = float_max_of(t) / 2;
    for (int64_t i = 0; i < n; ++i) {
      double x = da[static_cast<size_t>(i)], y = db[static_cast<size_t>(i)];
      bool ok;
      if (std::isnan(x) || std::isnan(y)) {
        ok = std::isnan(x) && std::isnan(y);
      } else if (tol == 0) {
        ok = x == y && std::signbit(x) == std::signbit(y);  // exact: the sign of zero counts
      } else if (std::isinf(x) || std::isinf(y)) {
        ok = x == y || (std::signbit(x) == std::signbit(y) && std::fabs(std::isinf(x) ? y : x) >= half_range);
      } else {
        ok = std::fabs(x - y) <= tol * (std::max(std::fabs(x), std::fabs(y)) + rms) + float_tiny_of(t);
      }
      if (!ok) report(i, detail::num_text(x) + " vs " + detail::num_text(y));
    }
  }
  if (bad > max_report) out += "    ... " + std::to_string(bad - max_report) + " more\n";
  if (bad) out = "  " + std::to_string(bad) + " of " + std::to_string(n) + " elements differ" + (tol > 0 ? " (tolerance " + detail::num_text(tol) + ")" : " (exact)") + ":\n" + out;
  return out;
}

// Runs the kernel on the interpreter and, when a GPU is usable, on the GPU, and compares
// every output (tols[k] for output k: 0 exact). Returns "" when they agree or when there is
// no GPU (then the interpreter run, and under PALLAS_CUDA_COMPILE_CHECK=1 the sm_90a
// compile, are the test). A printed regression test calls this.
template <class F>
std::string run_and_compare(F kernel, const std::vector<pl::ShapeDtype>& out_shapes, pl::CallOptions opts,
                            const std::vector<pl::Array>& ins, const std::vector<double>& tols) {
  opts.backend = pl::Backend::Interpret;
  auto ref = pl::pallas_call(kernel, out_shapes, opts)(ins);
  if (!pl::cuda_available()) return "";
  opts.backend = pl::Backend::Cuda;
  auto got = pl::pallas_call(kernel, out_shapes, opts)(ins);
  std::string r;
  for (size_t k = 0; k < ref.size(); ++k) {
    std::string d = compare(ref[k], got[k], k < tols.size() ? tols[k] : 0.0);
    if (!d.empty()) r += "output " + std::to_string(k) + ":\n" + d;
  }
  return r;
}

// A hash of a call's traced text without its first line (which names the source location):
// the emitted-test check compares the printed kernel's IR with the fuzzer's.
inline uint64_t text_hash(const std::string& t) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : t) h = (h ^ c) * 1099511628211ull;
  return h;
}
inline std::string ir_without_location(const std::string& t) {
  size_t nl = t.find('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}
template <class F>
uint64_t ir_hash(F kernel, const std::vector<pl::ShapeDtype>& out_shapes, pl::CallOptions opts, const std::vector<pl::Array>& ins) {
  opts.backend = pl::Backend::Interpret;
  auto c = pl::pallas_call(kernel, out_shapes, opts);
  std::vector<pl::ShapeDtype> s;
  size_t nd = 0;  // dynamic grid sizes come first
  for (int64_t g : opts.grid) nd += g < 0;
  for (size_t i = nd; i < ins.size(); ++i) s.push_back(ins[i].shape_dtype());
  c.trace(s);
  return text_hash(ir_without_location(c.jaxpr_text()));
}

}  // namespace fuzz
