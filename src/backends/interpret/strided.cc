#include "src/backends/interpret/strided.h"

namespace pallas::interp {
namespace {
template <class B>
void copy_rec(B* dst, const Dims& ds, const B* src, const Dims& ss, const Dims& shape, int d) {
  int64_t n = shape[d];
  if (d == shape.n - 1) {
    int64_t a = ds[d], b = ss[d];
    if (a == 1 && b == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(B));
    } else if (a == 1 && b == 0) {
      B v = *src;
      for (int64_t i = 0; i < n; ++i) dst[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i * a] = src[i * b];
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) copy_rec(dst + i * ds[d], ds, src + i * ss[d], ss, shape, d + 1);
}
}  // namespace

void strided_copy(void* dst, const Dims& ds, const void* src, const Dims& ss, const Dims& shape, size_t width) {
  if (shape.size() == 0) return;
  if (shape.n == 0) {
    std::memcpy(dst, src, width);
    return;
  }
  // Merge trailing dims that are contiguous in both, so whole rows move with one memcpy.
  Dims sh = shape, a = ds, b = ss;
  while (sh.n >= 2) {
    int k = sh.n - 1;
    if (a[k - 1] == a[k] * sh[k] && b[k - 1] == b[k] * sh[k]) {
      sh[k - 1] *= sh[k];
      a[k - 1] = a[k];
      b[k - 1] = b[k];
      sh.n--;
      a.n--;
      b.n--;
    } else {
      break;
    }
  }
  switch (width) {
    case 1: copy_rec(static_cast<uint8_t*>(dst), a, static_cast<const uint8_t*>(src), b, sh, 0); break;
    case 2: copy_rec(static_cast<uint16_t*>(dst), a, static_cast<const uint16_t*>(src), b, sh, 0); break;
    case 4: copy_rec(static_cast<uint32_t*>(dst), a, static_cast<const uint32_t*>(src), b, sh, 0); break;
    default: copy_rec(static_cast<uint64_t*>(dst), a, static_cast<const uint64_t*>(src), b, sh, 0); break;
  }
}
}  // namespace pallas::interp
