#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "pallas/array.h"
#include "src/runtime/buffer.h"

namespace pallas {

namespace {
DeviceMemoryHooks g_hooks;
bool g_have_hooks = false;
}  // namespace

void set_device_memory_hooks(const DeviceMemoryHooks& h) {
  g_hooks = h;
  g_have_hooks = true;
}
const DeviceMemoryHooks* device_memory_hooks() { return g_have_hooks ? &g_hooks : nullptr; }

Buffer::~Buffer() {
  if (!owned) {
    if (release) release();
    return;
  }
  if (!ptr) return;
  if (device.is_host())
    std::free(ptr);
  else if (g_have_hooks)
    g_hooks.free(device.index, ptr);
}

std::shared_ptr<Buffer> allocate_buffer(size_t bytes, Device device) {
  auto b = std::make_shared<Buffer>();
  b->bytes = bytes;
  b->device = device;
  if (device.is_host()) {
    size_t rounded = (bytes + 63) / 64 * 64;
    b->ptr = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!b->ptr) throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
  } else {
    if (!g_have_hooks)
      throw Error("Array: " + device.str() + " requested but this build has no CUDA backend (or no GPU was found)");
    b->ptr = g_hooks.alloc(device.index, bytes ? bytes : 1);
  }
  return b;
}

std::string Device::str() const { return kind == Kind::Host ? "host" : "cuda:" + std::to_string(index); }

int64_t shape_size(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + (s[i] == -1 ? std::string("None") : std::to_string(s[i]));
  return r + "]";
}
std::string shape_str(const Shape& s, DType t) { return std::string(dtype_name(t)) + shape_str(s); }

Array::Array(Shape shape, DType dtype, Device device) : shape_(std::move(shape)), dtype_(dtype) {
  for (int64_t d : shape_)
    if (d < 0) throw Error("Array: negative dimension in shape " + shape_str(shape_));
  buffer_ = allocate_buffer(nbytes(), device);
}

Device Array::device() const { return buffer_ ? buffer_->device : Device::host(); }

void* Array::data() {
  if (!buffer_) throw Error("Array::data: the array is empty");
  if (!buffer_->device.is_host())
    throw Error("Array::data: the array lives on " + buffer_->device.str() + "; call to_host() first");
  return buffer_->ptr;
}
const void* Array::data() const { return const_cast<Array*>(this)->data(); }
void* Array::raw_data() const { return buffer_ ? buffer_->ptr : nullptr; }

Array Array::zeros(Shape shape, DType dtype) { return full(std::move(shape), 0.0, dtype); }
Array Array::zeros(Shape shape, DType dtype, Device device) {
  if (device.is_host()) return zeros(std::move(shape), dtype);
  const DeviceMemoryHooks* h = device_memory_hooks();
  if (!h || !h->zero) throw Error("Array::zeros on " + device.str() + ": no GPU backend is available");
  Array a(std::move(shape), dtype, device);
  if (size_t n = a.nbytes()) h->zero(device.index, a.raw_data(), n);
  return a;
}
Array Array::full(Shape shape, double value, DType dtype) {
  Array a(std::move(shape), dtype);
  double v = value;
  int64_t n = a.size();
  if (n == 0) return a;
  // convert once, then replicate the element
  std::vector<unsigned char> one(itemsize(dtype));
  convert_elements(DType::F64, &v, dtype, one.data(), 1);
  auto* p = static_cast<unsigned char*>(a.data());
  size_t w = itemsize(dtype);
  for (int64_t i = 0; i < n; ++i) std::memcpy(p + i * w, one.data(), w);
  return a;
}

Array Array::to(Device d) const {
  if (!buffer_) throw Error("Array::to: the array is empty");
  Device from = device();
  if (from == d) return *this;
  Array r(shape_, dtype_, d);
  const DeviceMemoryHooks* h = device_memory_hooks();
  size_t n = nbytes();
  if (n == 0) return r;
  if (from.is_host())
    h->copy_to_device(d.index, r.raw_data(), raw_data(), n);
  else if (d.is_host())
    h->copy_to_host(from.index, r.raw_data(), raw_data(), n);
  else {
    Array tmp = to_host();
    return tmp.to(d);
  }
  return r;
}

void Array::copy_from(const Array& src) const {
  if (!buffer_ || !src.buffer_) throw Error("Array::copy_from: an empty array");
  if (src.shape_ != shape_ || src.dtype_ != dtype_)
    throw Error("Array::copy_from: " + shape_str(src.shape_, src.dtype_) + " into " + shape_str(shape_, dtype_));
  size_t n = nbytes();
  if (n == 0 || raw_data() == src.raw_data()) return;
  Device from = src.device(), to = device();
  const DeviceMemoryHooks* h = device_memory_hooks();
  if (from.is_host() && to.is_host()) std::memcpy(raw_data(), src.raw_data(), n);
  else if (from.is_host()) h->copy_to_device(to.index, raw_data(), src.raw_data(), n);
  else if (to.is_host()) h->copy_to_host(from.index, raw_data(), src.raw_data(), n);
  else if (from == to) h->copy_device(to.index, raw_data(), src.raw_data(), n);
  else copy_from(src.to_host());
}

Array Array::copy() const {
  if (!buffer_) return {};
  Array r(shape_, dtype_, device());
  if (device().is_host())
    std::memcpy(r.raw_data(), raw_data(), nbytes());
  else if (nbytes())
    device_memory_hooks()->copy_device(device().index, r.raw_data(), raw_data(), nbytes());
  return r;
}

Array Array::astype(DType t) const {
  Array h = to_host();
  Array r(shape_, t);
  convert_elements(dtype_, h.data(), t, r.data(), size());
  return device().is_host() ? r : r.to(device());
}

Array Array::view(void* data, Shape shape, DType dtype, Device device, std::vector<int64_t> strides, std::function<void()> release) {
  std::string what = "Array::view of " + shape_str(shape, dtype) + " on " + device.str();
  for (int64_t d : shape)
    if (d < 0) throw Error(what + ": negative dimension");
  if (!data && shape_size(shape) > 0) throw Error(what + ": null data pointer");
  if (!strides.empty()) {
    if (strides.size() != shape.size())
      throw Error(what + ": " + std::to_string(strides.size()) + " strides for " + std::to_string(shape.size()) + " dimensions");
    // Row-major contiguous is all kernels address; a dimension of size 1 may have any stride.
    int64_t expect = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      if (shape[d] != 1 && strides[d] != expect)
        throw Error(what + ": strides " + shape_str(strides) +
                    " are not row-major contiguous; pass a contiguous tensor (e.g. .contiguous() in torch, "
                    "jnp.ascontiguousarray) or copy it");
      expect *= shape[d];
    }
  }
  if (reinterpret_cast<uintptr_t>(data) % itemsize(dtype) != 0)
    throw Error(what + ": the data pointer is not aligned to the element size (" + std::to_string(itemsize(dtype)) + " bytes)");
  auto b = std::make_shared<Buffer>();
  b->ptr = data;
  b->bytes = static_cast<size_t>(shape_size(shape)) * itemsize(dtype);
  b->device = device;
  b->owned = false;
  b->release = std::move(release);
  return Array(std::move(b), std::move(shape), dtype);
}

bool Array::is_view() const { return buffer_ && !buffer_->owned; }

Array Array::reshape(Shape s) const {
  if (shape_size(s) != size()) throw Error("Array::reshape: cannot reshape " + shape_str(shape_) + " to " + shape_str(s));
  return Array(buffer_, std::move(s), dtype_);
}

void Array::copy_to_host_as(DType t, void* out) const {
  if (!buffer_) throw Error("Array::to_vector: the array is empty");
  if (device().is_host()) {
    convert_elements(dtype_, raw_data(), t, out, size());
  } else {
    Array h = to_host();
    convert_elements(dtype_, h.raw_data(), t, out, size());
  }
}

// ---- element conversion ----
namespace {

template <class T>
struct Num {  // how a storage type is read and written as a number
  using calc = std::conditional_t<std::is_floating_point_v<T>, T, std::conditional_t<std::is_same_v<T, bool>, bool, T>>;
};

template <class T>
double to_double(T v) {
  if constexpr (is_packed_float_v<T>) return packed_to_float(v);
  else return static_cast<double>(v);
}

// double -> float rounding to odd: truncate toward zero and set the last bit when inexact.
// A later round-to-nearest to a format of at most 22 significant bits (f16, bf16, f8) then rounds
// as if directly from the double, with no double rounding.
float to_float_odd(double d) {
  float f = static_cast<float>(d);
  if (!std::isfinite(f) || static_cast<double>(f) == d) return f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) --u;  // one step toward zero
  u |= 1u;
  std::memcpy(&f, &u, 4);
  return f;
}

template <class To, class From>
To convert_one(From v) {
  constexpr bool from_float = std::is_floating_point_v<From> || is_packed_float_v<From>;
  if constexpr (std::is_same_v<To, bool>) {
    return to_double(v) != 0.0;
  } else if constexpr (is_packed_float_v<To>) {
    if constexpr (std::is_same_v<From, To>) return v;
    else if constexpr (std::is_same_v<From, double>) return float_to_packed<To>(to_float_odd(v));
    else return float_to_packed<To>(static_cast<float>(to_double(v)));
  } else if constexpr (std::is_floating_point_v<To>) {
    if constexpr (std::is_integral_v<From>) return static_cast<To>(v);
    else return static_cast<To>(to_double(v));
  } else {  // integer target
    if constexpr (from_float) {
      double d = to_double(v);
      if (std::isnan(d)) return To(0);
      if (d <= static_cast<double>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
      if (d >= static_cast<double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
      return static_cast<To>(d);
    } else {
      return static_cast<To>(v);  // integers wrap (two's complement), bool is 0/1
    }
  }
}

template <class From>
void convert_from(const From* s, DType to, void* dst, int64_t n) {
  switch (to) {
#define PALLAS_X(name, type, str)                                             \
  case DType::name: {                                                         \
    auto* d = static_cast<type*>(dst);                                        \
    for (int64_t i = 0; i < n; ++i) d[i] = convert_one<type, From>(s[i]);     \
    return;                                                                   \
  }
    PALLAS_DTYPES(PALLAS_X)
#undef PALLAS_X
  }
}
}  // namespace

void convert_elements(DType from, const void* src, DType to, void* dst, int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(n) * itemsize(from));
    return;
  }
  switch (from) {
#define PALLAS_X(name, type, str) \
  case DType::name: convert_from(static_cast<const type*>(src), to, dst, n); return;
    PALLAS_DTYPES(PALLAS_X)
#undef PALLAS_X
  }
}

}  // namespace pallas
